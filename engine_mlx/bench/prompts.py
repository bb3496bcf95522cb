"""The benchmark's prompts: one per category (math / code / prose) and context depth.

Drawn from held-out text only (the evaluation split of ``training.prompts``): prose from the
State of the Union excerpt shipped in ``resources/bench/prose.txt`` (public domain), code from
this Python's standard library, math generated with a seed the training data never uses. At
depth 0 the prompt is a short question; at depth d it is an excerpt of about d tokens with the
category's instruction, so the drafter works on long contexts of the same kind of text.
"""

from __future__ import annotations

import random
from pathlib import Path

from engine_mlx.models.target import TargetModel
from engine_mlx.training.math_problems import math_problem
from engine_mlx.training.prompts import PromptBuilder, default_sources

PROSE_FILE = Path(__file__).resolve().parents[2] / "resources" / "bench" / "prose.txt"
EVAL_SEED = 1_000_003
SHORT_PROMPT = 160  # tokens of a depth-0 code or prose prompt


def math_text(problems: int = 3000) -> str:
    rng = random.Random(EVAL_SEED)
    return "\n".join(math_problem(rng) for _ in range(problems))


class BenchPrompts:
    def __init__(self, target: TargetModel, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        math_file = workdir / "math.txt"
        math_file.write_text(math_text(), encoding="utf-8")
        sources = {"code": default_sources(None)["code"], "math": [math_file]}
        if PROSE_FILE.exists():
            sources["prose"] = [PROSE_FILE]
        self.builders = {
            "prose": PromptBuilder(target.tokenizer, {"prose": sources["prose"]}, "all")
            if "prose" in sources
            else None,
            "other": PromptBuilder(
                target.tokenizer, {"code": sources["code"], "math": sources["math"]}, "eval"
            ),
        }
        self.max_context = target.spec.max_context

    @property
    def categories(self) -> list[str]:
        return ["math", "code"] + (["prose"] if self.builders["prose"] else [])

    def prompt(self, category: str, depth: int) -> list[int]:
        rng = random.Random(f"{category}/{depth}")
        builder = self.builders["prose" if category == "prose" else "other"]
        if depth == 0 and category == "math":
            return list(builder.math_prompt(rng).ids)
        return list(builder.excerpt_prompt(category, max(depth, SHORT_PROMPT), rng).ids)
