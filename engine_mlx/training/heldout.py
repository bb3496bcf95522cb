"""The held-out prompt set, and the guard that keeps it out of every training set.

Speed is judged on conversations no drafter was trained or tuned on
(``resources/bench/heldout.jsonl``: coding questions, word problems, writing tasks and
multi-turn chats, written for this project). Training text reaches the target through two
doors, corpus excerpts and generated questions; both ask ``HeldOutGuard.overlaps`` and draw
again when a text shares a run of ``SHINGLE`` words with any held-out message, so neither a
held-out prompt nor the assistant turns written into the multi-turn ones can be trained on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from engine_mlx.chat import Message, check_messages
from engine_mlx.errors import EngineError

HELDOUT_FILE = Path(__file__).resolve().parents[2] / "resources" / "bench" / "heldout.jsonl"
SHINGLE = 8  # words: long enough that ordinary phrases ("write a python function that") pass
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class HeldOutPrompt:
    id: str
    category: str
    messages: tuple[Message, ...]


def load_heldout(path: Path = HELDOUT_FILE) -> list[HeldOutPrompt]:
    """The prompts of a JSONL file (one ``{"id", "category", "messages"}`` object a line);
    EngineError naming the line when one is malformed."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise EngineError(f"cannot read the prompt set {path}: {exc.strerror or exc}") from exc
    prompts, seen = [], set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            prompt = HeldOutPrompt(
                id=str(record["id"]),
                category=str(record["category"]),
                messages=tuple(check_messages(record["messages"])),
            )
        except (json.JSONDecodeError, KeyError, TypeError, EngineError) as exc:
            raise EngineError(
                f"{Path(path).name}, line {n}: expected an object with id, category and "
                f"messages ({exc})"
            ) from exc
        if not prompt.messages or prompt.messages[-1]["role"] != "user":
            raise EngineError(f"{Path(path).name}, line {n}: the last message must be the user's")
        if prompt.id in seen:
            raise EngineError(f"{Path(path).name}, line {n}: the id {prompt.id!r} is repeated")
        seen.add(prompt.id)
        prompts.append(prompt)
    if not prompts:
        raise EngineError(f"the prompt set {path} holds no prompts")
    return prompts


def shingles(text: str) -> set[tuple[str, ...]]:
    """Every run of ``SHINGLE`` consecutive words (lower case, punctuation dropped); a text
    shorter than that is one shingle of all its words."""
    words = _WORD.findall(text.lower())
    if len(words) <= SHINGLE:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)}


class HeldOutGuard:
    """Answers whether a training text shares a shingle with a held-out message."""

    def __init__(self, prompts: list[HeldOutPrompt]) -> None:
        self.short: set[tuple[str, ...]] = set()
        self.long: set[tuple[str, ...]] = set()
        for prompt in prompts:
            for message in prompt.messages:
                for s in shingles(message["content"]):
                    (self.long if len(s) == SHINGLE else self.short).add(s)

    @classmethod
    def default(cls) -> HeldOutGuard:
        """The project's held-out set (an empty guard where the file is not shipped)."""
        return cls(load_heldout() if HELDOUT_FILE.exists() else [])

    def overlaps(self, text: str) -> bool:
        if not self.long and not self.short:
            return False
        words = _WORD.findall(text.lower())
        windows = {tuple(words[i : i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)}
        if windows & self.long:
            return True
        joined = f" {' '.join(words)} "
        return any(f" {' '.join(s)} " in joined for s in self.short)
