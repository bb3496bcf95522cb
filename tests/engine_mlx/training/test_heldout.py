"""The held-out prompt set loads, and no training text can share a run of words with it."""

from __future__ import annotations

import json
import random

import pytest

from engine_mlx.errors import EngineError
from engine_mlx.training.chat_questions import chat_question
from engine_mlx.training.heldout import SHINGLE, HeldOutGuard, load_heldout, shingles
from engine_mlx.training.math_problems import math_problem
from engine_mlx.training.prompts import PromptBuilder, TextPool

FILLER = "The river ran past the mill and the miller counted sacks of grain by lamplight.\n"


def test_the_shipped_set_covers_the_categories_and_ends_with_a_user_turn():
    prompts = load_heldout()
    assert len(prompts) >= 20
    assert {p.category for p in prompts} == {"code", "math", "prose", "multi"}
    assert all(p.messages[-1]["role"] == "user" for p in prompts)
    assert all(len(p.messages) >= 3 for p in prompts if p.category == "multi")


def test_generated_training_questions_never_overlap_the_held_out_set():
    """The templates themselves, before any redraw: a guard that had to redraw would mean a
    template writes held-out text."""
    guard = HeldOutGuard.default()
    rng = random.Random(0)
    written = [chat_question(rng) for _ in range(3000)] + [math_problem(rng) for _ in range(3000)]
    assert not [text for text in written if guard.overlaps(text)]


def _corpus_with_heldout(tmp_path):
    held = [m["content"] for p in load_heldout() for m in p.messages]
    lines = [FILLER * 12 + text + "\n" for text in held] * 3
    path = tmp_path / "corpus.txt"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_corpus_excerpts_that_quote_a_held_out_message_are_drawn_again(tmp_path):
    path = _corpus_with_heldout(tmp_path)
    guard = HeldOutGuard.default()
    unguarded = TextPool([path], "all")
    rng = random.Random(1)
    assert sum(guard.overlaps(unguarded.excerpt(rng, 300)) for _ in range(50)) > 10  # teeth
    guarded = TextPool([path], "all", guard)
    rng = random.Random(1)
    assert not any(guard.overlaps(guarded.excerpt(rng, 300)) for _ in range(50))


def test_a_corpus_made_only_of_held_out_text_is_refused(tmp_path):
    held = [m["content"] for p in load_heldout() for m in p.messages if len(m["content"]) > 100]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(held * 10), encoding="utf-8")
    with pytest.raises(ValueError, match="overlap the held-out prompts"):
        TextPool([path], "all", HeldOutGuard.default()).excerpt(random.Random(0), 200)


def test_training_builders_are_guarded_and_evaluation_builders_are_not(tiny_target, tmp_path):
    tokenizer = tiny_target("llama").tokenizer
    path = tmp_path / "prose.txt"
    path.write_text(FILLER * 400)
    train = PromptBuilder(tokenizer, {"prose": [path]}, "train")
    assert train.guard is not None and train.guard.overlaps(
        load_heldout()[0].messages[0]["content"]
    )
    assert PromptBuilder(tokenizer, {"prose": [path]}, "eval").guard is None


def test_shingles_are_word_runs_and_short_texts_count_whole():
    assert shingles("Hello, World!") == {("hello", "world")}
    assert len(shingles(" ".join(str(i) for i in range(SHINGLE + 2)))) == 3
    guard = HeldOutGuard.default()
    assert not guard.overlaps("Write a Python function that reverses a list.")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{not json", "line 1"),
        ('{"id": "a", "category": "x"}', "messages"),
        ('{"id": "a", "category": "x", "messages": [{"role": "bot", "content": "hi"}]}', "role"),
        (
            '{"id": "a", "category": "x", "messages": [{"role": "assistant", "content": "hi"}]}',
            "user's",
        ),
    ],
)
def test_a_bad_prompt_file_gets_a_message_naming_the_line(tmp_path, line, says):
    path = tmp_path / "prompts.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(EngineError, match=says):
        load_heldout(path)


def test_a_repeated_id_is_refused(tmp_path):
    record = {"id": "a", "category": "x", "messages": [{"role": "user", "content": "hi"}]}
    path = tmp_path / "prompts.jsonl"
    path.write_text((json.dumps(record) + "\n") * 2)
    with pytest.raises(EngineError, match="line 2: the id 'a' is repeated"):
        load_heldout(path)
