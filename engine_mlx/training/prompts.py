"""Training and evaluation prompts by category (math / chat / code / prose), as token ids.

Prompts go to the target in batches without padding (padding would shift positions and need
masks in every layer), so a batch's prompts must have exactly the same token length: prose and
code prompts are cut to an exact length by choosing how many excerpt tokens sit between the
chat template's fixed prefix and suffix; math and chat prompts are short, generated, and are
grouped by length.
Each text file is split 90/10 by position: training draws from the first part, evaluation
from the rest, so the benchmark's prompts are never trained on. Training prompts are also
drawn again whenever they share a run of words with the held-out prompt set
(``training.heldout``).
"""

from __future__ import annotations

import random
import sysconfig
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine_mlx.training.chat_questions import chat_question
from engine_mlx.training.heldout import HeldOutGuard
from engine_mlx.training.math_problems import math_problem

CATEGORIES = ("math", "chat", "code", "prose")
GENERATED = ("math", "chat")  # written from templates; the others are corpus excerpts
TRAIN_FRACTION = 0.9
DRAWS = 200  # attempts at a text clear of the held-out set before a source is called unusable
_MARK = "\u2063EXCERPT\u2063"

_INSTRUCTIONS = {
    "prose": [
        "Continue this text in the same style:",
        "Summarize the following passage:",
        "Rewrite this passage in plain modern English:",
        "What is the main point of this text? Explain it.",
    ],
    "math": [
        "Here are some practice problems. Solve the last one step by step:",
        "Solve the final problem in this list and explain your answer:",
    ],
    "code": [
        "Explain what this code does:",
        "Continue this code:",
        "Write documentation for this code:",
        "Review this code and suggest improvements:",
    ],
}
_CONTINUE = {"prose": "Continue this text in the same style:", "code": "Continue this code:"}


@dataclass(frozen=True)
class Prompt:
    category: str
    ids: tuple[int, ...]
    prompt_length: int = -1  # a teacher-forced sequence: where its corpus reply starts


class TextPool:
    """Random excerpts from a set of text files (one split of each: ``train``, ``eval``, or
    ``all`` for a file that is held out as a whole). With a guard, no excerpt shares a run of
    words with the held-out prompt set."""

    def __init__(
        self, files: Sequence[Path], split: str, guard: HeldOutGuard | None = None
    ) -> None:
        self.guard = guard
        self.texts = []
        for file in files:
            text = Path(file).read_text(encoding="utf-8", errors="replace")
            cut = int(len(text) * TRAIN_FRACTION)
            part = {"train": text[:cut], "eval": text[cut:], "all": text}[split]
            if len(part) > 2000:
                self.texts.append(part)
        if not self.texts:
            raise ValueError(f"no usable text among {len(files)} files for the {split} split")

    def excerpt(self, rng: random.Random, chars: int) -> str:
        for _ in range(DRAWS):
            text = rng.choice(self.texts)
            start = rng.randrange(0, max(1, len(text) - chars))
            newline = text.find("\n", start, start + chars // 4)
            start = newline + 1 if newline >= 0 else start
            excerpt = text[start : start + chars]
            if self.guard is None or not self.guard.overlaps(excerpt):
                return excerpt
        raise ValueError(f"{DRAWS} excerpts in a row overlap the held-out prompts")


def default_sources(corpora: Path | None) -> dict[str, list[Path]]:
    """Prose from the offline corpora folder (``prose/*.txt``); code from this Python's own
    standard library plus ``code/*.txt`` there."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size > 8000)
    prose: list[Path] = []
    if corpora is not None:
        prose = sorted((corpora / "prose").glob("*.txt"))
        code += sorted((corpora / "code").glob("*.txt"))
    return {"code": code, "prose": prose}


class PromptBuilder:
    """Chat-formatted prompts of exact token lengths for one tokenizer. Training prompts
    (split ``train``) never overlap the held-out prompt set."""

    def __init__(
        self,
        tokenizer: Any,
        sources: dict[str, list[Path]],
        split: str,
        guard: HeldOutGuard | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.split = split
        if guard is None and split == "train":
            guard = HeldOutGuard.default()
        self.guard = guard
        self.pools = {cat: TextPool(files, split, guard) for cat, files in sources.items() if files}

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _template(self, content: str) -> str:
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )

    def excerpt_prompt(self, category: str, length: int, rng: random.Random) -> Prompt:
        """A prompt of exactly ``length`` tokens: instruction + excerpt in the template."""
        instruction = rng.choice(_INSTRUCTIONS[category])
        fence = "```\n" if category == "code" else ""
        close = "\n```" if category == "code" else ""
        prefix, suffix = self._template(f"{instruction}\n\n{fence}{_MARK}{close}").split(_MARK)
        head, tail = self._encode(prefix), self._encode(suffix)
        room = length - len(head) - len(tail)
        if room < 8:
            raise ValueError(f"prompt length {length} leaves no room for an excerpt")
        body = self._encode(self.pools[category].excerpt(rng, chars=room * 6))
        while len(body) < room:
            body += self._encode("\n" + self.pools[category].excerpt(rng, chars=room * 6))
        return Prompt(category, tuple(head + body[:room] + tail))

    def _clear(self, write: Callable[[random.Random], str], rng: random.Random) -> str:
        """A generated text that shares no run of words with the held-out set."""
        for _ in range(DRAWS):
            text = write(rng)
            if self.guard is None or not self.guard.overlaps(text):
                return text
        raise ValueError(f"{DRAWS} generated prompts in a row overlap the held-out prompts")

    def continuation(self, category: str, length: int, reply: int, rng: random.Random) -> Prompt:
        """A teacher-forced sequence: a ``length``-token "continue this" prompt around the
        start of an excerpt, then the excerpt's next ``reply`` tokens as the reply (the
        corpus, not the target, writes it; the target's distribution over it is the
        teacher). ``Prompt.ids`` holds both; its first ``length`` are the prompt."""
        fence, close = ("```\n", "\n```") if category == "code" else ("", "")
        text = f"{_CONTINUE[category]}\n\n{fence}{_MARK}{close}"
        prefix, suffix = self._template(text).split(_MARK)
        head, tail = self._encode(prefix), self._encode(suffix)
        room = length - len(head) - len(tail)
        if room < 8:
            raise ValueError(f"prompt length {length} leaves no room for an excerpt")
        body = self._encode(self.pools[category].excerpt(rng, chars=(room + reply) * 6))
        while len(body) < room + reply:
            body += self._encode("\n" + self.pools[category].excerpt(rng, chars=reply * 6))
        ids = tuple(head + body[:room] + tail + body[room : room + reply])
        return Prompt(category, ids, prompt_length=length)

    def math_prompt(self, rng: random.Random) -> Prompt:
        ids = self._encode(self._template(self._clear(math_problem, rng)))
        return Prompt("math", tuple(ids))

    def chat_prompt(self, rng: random.Random) -> Prompt:
        ids = self._encode(self._template(self._clear(chat_question, rng)))
        return Prompt("chat", tuple(ids))

    def generated_prompt(self, category: str, rng: random.Random) -> Prompt:
        return self.math_prompt(rng) if category == "math" else self.chat_prompt(rng)


def continuation_batches(
    builder: PromptBuilder,
    *,
    batch: int,
    lengths: Sequence[int],
    reply: int,
    mix: dict[str, float],
    seed: int,
) -> Iterator[list[Prompt]]:
    """Endless batches of teacher-forced sequences (``PromptBuilder.continuation``), one
    corpus category per batch (drawn by ``mix`` among prose and code)."""
    rng = random.Random(seed)
    categories = [c for c in mix if c in _CONTINUE and c in builder.pools]
    if not categories:
        raise ValueError("teacher forcing needs prose or code text (--corpora)")
    weights = [mix[c] for c in categories]
    turn = 0
    while True:
        category = rng.choices(categories, weights)[0]
        length = lengths[turn % len(lengths)]
        turn += 1
        yield [builder.continuation(category, length, reply, rng) for _ in range(batch)]


def prompt_batches(
    builder: PromptBuilder,
    *,
    batch: int,
    lengths: Sequence[int],
    mix: dict[str, float],
    seed: int,
) -> Iterator[list[Prompt]]:
    """Endless batches of equal-length prompts, one category per batch (drawn by ``mix``);
    excerpt categories cycle through ``lengths``, generated ones batch prompts that happen to
    share a length."""
    rng = random.Random(seed)
    categories = [c for c in mix if c in GENERATED or c in builder.pools]
    weights = [mix[c] for c in categories]
    pools: dict[str, dict[int, list[Prompt]]] = {c: defaultdict(list) for c in GENERATED}
    turn = 0
    while True:
        category = rng.choices(categories, weights)[0]
        if category in GENERATED:
            pool = pools[category]
            while not any(len(v) >= batch for v in pool.values()):
                p = builder.generated_prompt(category, rng)
                pool[len(p.ids)].append(p)
            size = next(k for k, v in pool.items() if len(v) >= batch)
            yield [pool[size].pop() for _ in range(batch)]
            continue
        length = lengths[turn % len(lengths)]
        turn += 1
        yield [builder.excerpt_prompt(category, length, rng) for _ in range(batch)]
