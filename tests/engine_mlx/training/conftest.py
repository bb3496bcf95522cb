"""A small training dataset recorded from the tiny llama target, shared by the module's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_mlx.training.dataset import DatasetConfig, build_dataset
from engine_mlx.training.prompts import PromptBuilder

PROSE = (
    "Speculative decoding drafts several tokens and the target verifies them in one pass. "
    "The quick brown fox jumps over the lazy dog, and the dog does not mind at all.\n"
)
CODE = "def add(a, b):\n    return a + b\n\nclass Point:\n    x: int = 0\n    y: int = 0\n"

DATASET = DatasetConfig(
    shards=3,
    batch=4,
    new_tokens=20,
    prompt_lengths=(100, 130),
    mix={"math": 0.3, "code": 0.3, "prose": 0.4},
    sampled_fraction=0.4,
    teacher_top_k=8,
    capture=(0, 1),
    seed=3,
)


def text_sources(folder: Path) -> dict[str, list[Path]]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prose.txt").write_text(PROSE * 60)
    (folder / "code.txt").write_text(CODE * 60)
    return {"prose": [folder / "prose.txt"], "code": [folder / "code.txt"]}


@pytest.fixture(scope="session")
def tiny_dataset(tiny_target, tmp_path_factory) -> Path:
    target = tiny_target("llama")
    root = tmp_path_factory.mktemp("dataset")
    builder = PromptBuilder(target.tokenizer, text_sources(root / "text"), "train")
    return build_dataset(target, builder, root / "data", DATASET, log=lambda _: None)
