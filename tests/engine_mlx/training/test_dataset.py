"""The recorded dataset holds exactly what the target computes, and generation resumes."""

from __future__ import annotations

import contextlib
import random
import shutil

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.training import dataset
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
    shutil.rmtree(last)
    builder = PromptBuilder(target.tokenizer, text_sources(tmp_path / "text"), "train")
    build_dataset(target, builder, copy, DATASET, log=lambda _: None)
    assert {p: p.stat().st_mtime_ns for p in shard_paths(copy)[:-1]} == kept
    np.testing.assert_array_equal(
        Shard.load(last).tokens, Shard.load(tiny_dataset / last.name).tokens
    )
    other = DATASET.__class__(**{**DATASET.__dict__, "new_tokens": 7})
    with pytest.raises(ValueError, match="other settings"):
        build_dataset(target, builder, copy, other, log=lambda _: None)


def test_chunked_prefill_records_what_one_forward_does(tiny_target, tmp_path, monkeypatch):
    target = tiny_target("llama")
    builder = PromptBuilder(target.tokenizer, text_sources(tmp_path / "text"), "train")
    prompts = next(prompt_batches(builder, batch=2, lengths=(100,), mix={"prose": 1}, seed=5))
    args = ([p.ids for p in prompts], [p.category for p in prompts], DATASET, 0.0, mx.random.key(0))
    whole = dataset.generate_shard(target, *args)
    monkeypatch.setattr(dataset, "PREFILL_TOKENS", 2 * 16)  # chunks of 16 prompt tokens
    chunked = dataset.generate_shard(target, *args)
    np.testing.assert_array_equal(chunked.tokens, whole.tokens)
    np.testing.assert_allclose(
        chunked.features.astype(np.float32), whole.features.astype(np.float32), atol=2e-3
    )
    np.testing.assert_array_equal(chunked.top_ids[:, 99:, 0], whole.top_ids[:, 99:, 0])


def test_rows_that_end_leave_the_batch_without_changing_the_others(tiny_target, tmp_path):
    """Each row of a batch whose rows end at different steps is what it is generated alone."""
    target = tiny_target("llama")
    builder = PromptBuilder(target.tokenizer, text_sources(tmp_path / "text"), "train")
    prompts = next(prompt_batches(builder, batch=4, lengths=(100,), mix={"prose": 1}, seed=2))
    ids, cats = [p.ids for p in prompts], [p.category for p in prompts]
    free = dataset.generate_shard(target, ids, cats, DATASET, 0.0, mx.random.key(0))
    # Pretend a token the rows generate at different steps ends a reply.
    firsts = {}
    for row in range(4):
        for step, token in enumerate(free.tokens[row, 100:]):
            firsts.setdefault(int(token), {}).setdefault(row, step)
    stop = max(firsts, key=lambda t: (len(set(firsts[t].values())), len(firsts[t])))
    with _eos(target, stop):
        batch = dataset.generate_shard(target, ids, cats, DATASET, 0.0, mx.random.key(0))
        alone = [
            dataset.generate_shard(target, ids[r : r + 1], cats[:1], DATASET, 0.0, mx.random.key(0))
            for r in range(4)
        ]
    assert len(set(batch.lengths.tolist())) > 1  # rows did end at different steps
    for row in range(4):
        n = int(batch.lengths[row])
        assert n == int(alone[row].lengths[0])
        np.testing.assert_array_equal(batch.tokens[row], alone[row].tokens[0])
        np.testing.assert_allclose(
            batch.features[row, :n].astype(np.float32),
            alone[row].features[0, :n].astype(np.float32),
            atol=2e-3,
        )
        np.testing.assert_array_equal(
            batch.top_ids[row, 99 : n - 1], alone[row].top_ids[0, 99 : n - 1]
        )
        assert not batch.features[row, n:].any()


@contextlib.contextmanager
def _eos(target, token: int):
    tokenizer = target.tokenizer
    before = tokenizer.eos_token_ids
    tokenizer.eos_token_ids = {token}
    try:
        yield
    finally:
        tokenizer.eos_token_ids = before


TEACHER = DATASET.__class__(**{**DATASET.__dict__, "teacher_forced": True, "new_tokens": 30})


def test_teacher_forced_shards_hold_the_corpus_reply_and_the_targets_view_of_it(
    tiny_target, tmp_path, monkeypatch
):
    """The reply is the corpus text after the prompt's excerpt; features, hidden state and
    the teacher at every position are a fresh forward's, also when the forward is chunked."""
    target = tiny_target("llama")
    builder = PromptBuilder(target.tokenizer, text_sources(tmp_path / "text"), "train")
    monkeypatch.setattr(dataset, "TEACHER_LOGITS", 4 * 9 * target.spec.vocab_size)  # chunks of 9
    out = build_dataset(target, builder, tmp_path / "data", TEACHER, log=lambda _: None)
    shards = [Shard.load(p) for p in shard_paths(out)]
    assert len(shards) == TEACHER.shards
    for shard in shards:
        first, total = shard.prompt_length, shard.tokens.shape[1]
        assert total == first + TEACHER.new_tokens and (shard.lengths == total).all()
        assert set(shard.categories) <= {"prose", "code"}
        row = shard.tokens[0]
        forward = target.forward(mx.array(row[None]), target.make_cache(), capture=(0, 1, 2))
        features = np.array(mx.concatenate(forward.features[:2], axis=-1)[0])
        np.testing.assert_allclose(shard.features[0], features, atol=2e-2, rtol=2e-2)
        top = np.array(mx.argmax(forward.logits[0], axis=-1))
        np.testing.assert_array_equal(shard.top_ids[0, first - 1 :, 0], top[first - 1 :])
        assert not shard.top_ids[0, : first - 1].any()  # the prompt is not taught
        reply = target.tokenizer.decode(list(row[first:]))
        corpus = (tmp_path / "text" / f"{shard.categories[0]}.txt").read_text()
        assert reply.strip()[:20] in corpus  # the corpus wrote it, not the target


def test_a_drafter_trains_on_teacher_forced_shards(tiny_target, tmp_path):
    from engine_mlx.training.dflash import DrafterTrainConfig, train_drafter

    target = tiny_target("llama")
    builder = PromptBuilder(target.tokenizer, text_sources(tmp_path / "text"), "train")
    data = build_dataset(target, builder, tmp_path / "data", TEACHER, log=lambda _: None)
    config = DrafterTrainConfig(steps=6, layers=1, block=4, sequences=2, anchors=2, draft_vocab=0)
    history = []
    train_drafter(target, data, tmp_path / "drafter", config, log=history.append)
    assert history and all(np.isfinite(h["loss"]) for h in history if "loss" in h)


def test_the_teacher_is_the_top_k_of_the_log_softmax_most_likely_first():
    logits = mx.random.normal((3, 5, 1000), key=mx.random.key(4)) * 4
    ids, logp = dataset._top_k(logits, 7)
    full = np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
    expected = np.argsort(-full, axis=-1)[..., :7]
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_allclose(logp, np.take_along_axis(full, expected, -1), atol=1e-5)
