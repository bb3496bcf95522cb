"""The recorded dataset holds exactly what the target computes, and generation resumes."""

from __future__ import annotations

import random
import shutil

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.training.dataset import Shard, build_dataset, shard_paths
from engine_mlx.training.prompts import PromptBuilder, prompt_batches
from tests.engine_mlx.training.conftest import DATASET, text_sources


def test_shards_match_a_fresh_forward(tiny_dataset, tiny_target):
    target = tiny_target("llama")
    shards = [Shard.load(p) for p in shard_paths(tiny_dataset)]
    assert len(shards) == DATASET.shards
    for shard in shards:
        first = shard.prompt_length
        row = 0
        length = int(shard.lengths[row])
        assert first < length <= first + DATASET.new_tokens
        out = target.forward(
            mx.array(shard.tokens[row : row + 1, :length]), target.make_cache(), capture=(0, 1, 2)
        )
        features = np.array(mx.concatenate(out.features[:2], axis=-1)[0])
        np.testing.assert_allclose(shard.features[row, :length], features, atol=2e-2, rtol=2e-2)
        np.testing.assert_allclose(
            shard.hidden[row, :length], np.array(out.features[2][0]), atol=2e-2, rtol=2e-2
        )
        logp = np.array(out.logits[0].astype(mx.float32))
        logp -= np.log(
            np.exp(logp - logp.max(-1, keepdims=True)).sum(-1, keepdims=True)
        ) + logp.max(-1, keepdims=True)
        for i in range(first - 1, length - 1):
            np.testing.assert_array_equal(shard.top_ids[row, i, 0], logp[i].argmax())
            expected = np.sort(logp[i])[::-1][: DATASET.teacher_top_k]
            np.testing.assert_allclose(
                shard.top_logp[row, i].astype(np.float32), expected, atol=1e-2
            )


def test_greedy_shards_follow_the_teacher(tiny_dataset):
    greedy_seen = False
    for path in shard_paths(tiny_dataset):
        shard = Shard.load(path)
        first = shard.prompt_length
        follows = all(
            (
                shard.top_ids[r, first - 1 : shard.lengths[r] - 1, 0]
                == shard.tokens[r, first : shard.lengths[r]]
            ).all()
            for r in range(len(shard.lengths))
        )
        greedy_seen |= follows
    assert greedy_seen  # sampled shards need not follow the argmax, greedy ones must


def test_prompts_in_a_batch_share_one_length(tiny_target, tmp_path):
    target = tiny_target("llama")
    builder = PromptBuilder(target.tokenizer, text_sources(tmp_path), "train")
    batches = prompt_batches(builder, batch=3, lengths=(100, 140), mix=DATASET.mix, seed=1)
    for _ in range(6):
        batch = next(batches)
        assert len({len(p.ids) for p in batch}) == 1
        assert len({p.category for p in batch}) == 1


def test_train_and_eval_splits_do_not_overlap(tiny_target, tmp_path):
    target = tiny_target("llama")
    (tmp_path / "a.txt").write_text("".join(f"line {i}\n" for i in range(3000)))
    train = PromptBuilder(target.tokenizer, {"prose": [tmp_path / "a.txt"]}, "train")
    held = PromptBuilder(target.tokenizer, {"prose": [tmp_path / "a.txt"]}, "eval")
    rng = random.Random(0)
    train_lines = {
        int(x.split()[1])
        for x in train.pools["prose"].excerpt(rng, 4000).split("\n")[:-1]
        if x.startswith("line ")
    }
    held_lines = {
        int(x.split()[1])
        for x in held.pools["prose"].excerpt(rng, 2000).split("\n")[:-1]
        if x.startswith("line ")
    }
    assert max(train_lines) < min(held_lines)


def test_generation_resumes_and_refuses_other_settings(tiny_dataset, tiny_target, tmp_path):
    target = tiny_target("llama")
    copy = shutil.copytree(tiny_dataset, tmp_path / "data")
    last = shard_paths(copy)[-1]
    kept = {p: p.stat().st_mtime_ns for p in shard_paths(copy)[:-1]}
    last.unlink()
    builder = PromptBuilder(target.tokenizer, text_sources(tmp_path / "text"), "train")
    build_dataset(target, builder, copy, DATASET, log=lambda _: None)
    assert {p: p.stat().st_mtime_ns for p in shard_paths(copy)[:-1]} == kept
    np.testing.assert_array_equal(
        Shard.load(last).tokens, Shard.load(tiny_dataset / last.name).tokens
    )
    other = DATASET.__class__(**{**DATASET.__dict__, "new_tokens": 7})
    with pytest.raises(ValueError, match="other settings"):
        build_dataset(target, builder, copy, other, log=lambda _: None)
