"""Drafter training: packed training blocks are exactly the blocks drafting computes; a few
steps lower the loss; training resumes; the trained drafter drafts losslessly."""

from __future__ import annotations

import json
import shutil

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.models.dflash import load_dflash
from engine_mlx.session import Session
from engine_mlx.training.dflash import (
    BlockSampler,
    DrafterTrainConfig,
    drafter_logits,
    drafter_loss,
    new_drafter,
    train_drafter,
)

CONFIG = DrafterTrainConfig(
    steps=30,
    layers=2,
    block=5,
    conv=3,
    lr=3e-3,
    warmup=3,
    sequences=3,
    anchors=4,
    checkpoint_every=10,
)


def test_packed_blocks_equal_single_block_drafting(tiny_dataset, tiny_target):
    target = tiny_target("llama")
    model = new_drafter(target, CONFIG, (0, 1))
    sampler = BlockSampler(tiny_dataset, CONFIG.block)
    mask_id = int(model.config.mask_token_id)
    batch = sampler.sample(np.random.default_rng(0), 2, 3)
    packed = np.array(drafter_logits(model, target, batch, mask_id))
    anchors = np.array(batch.anchors)
    for i in range(len(anchors)):
        seq, a = i // 3, int(anchors[i])
        ctx = model.project_context([batch.features[seq : seq + 1, :a]])
        ctx_kv = [layer.self_attn.context_kv(ctx, model.rope, 0) for layer in model.layers]
        block = mx.array([[int(batch.roots[i])] + [mask_id] * (CONFIG.block - 1)])
        single = target.head(model(target.embed(block), ctx_kv, a)[:, 1:])
        np.testing.assert_allclose(packed[i], np.array(single[0]), atol=2e-4, rtol=2e-4)


def test_training_lowers_loss_resumes_and_stays_lossless(tiny_dataset, tiny_target, tmp_path):
    target = tiny_target("llama")
    out = tmp_path / "drafter"
    sampler = BlockSampler(tiny_dataset, CONFIG.block)
    held = sampler.sample(np.random.default_rng(12345), 4, 6)

    def held_loss(model) -> float:
        mask_id = int(model.config.mask_token_id)
        return float(drafter_loss(model, target, held, mask_id, CONFIG.decay)[0])

    before = held_loss(new_drafter(target, CONFIG, (0, 1)))
    history = train_drafter(target, tiny_dataset, out, CONFIG, log=lambda _: None)
    assert len(history) == CONFIG.steps
    after = held_loss(load_dflash(out))
    assert after < 0.75 * before  # KL: no entropy floor
    saved = json.loads((out / "train_state.json").read_text())["history"]
    assert saved == history
    longer = DrafterTrainConfig(**{**CONFIG.__dict__, "steps": CONFIG.steps + 4})
    more = train_drafter(target, tiny_dataset, out, longer, log=lambda _: None)
    assert len(more) == CONFIG.steps + 4 and more[: CONFIG.steps] == history
    drafter = DFlashDrafter(load_dflash(out), target)
    ids = target.tokenizer.encode("The quick brown")
    plain = list(Session(target).generate(ids, GenerationConfig(max_tokens=24, ignore_eos=True)))
    spec_cfg = GenerationConfig(max_tokens=24, ignore_eos=True, mode="dflash2", width=2)
    spec = list(Session(target, drafter).generate(ids, spec_cfg))
    assert spec[-1].tokens == plain[-1].tokens


def test_a_narrower_mlp_starts_from_the_leading_block_of_the_targets(tiny_target):
    from dataclasses import replace

    target = tiny_target("llama")  # MLP width 128
    model = new_drafter(target, replace(CONFIG, mlp=48), (0, 1))
    first = len(target.layers) - len(model.layers)
    mine, theirs = model.layers[0].mlp, target.layers[first].mlp
    assert mine.gate_proj.weight.shape == (48, target.spec.hidden_size)
    assert mx.array_equal(mine.gate_proj.weight, theirs.gate_proj.weight[:48]).item()
    assert mx.array_equal(mine.up_proj.weight, theirs.up_proj.weight[:48]).item()
    assert mx.array_equal(mine.down_proj.weight, theirs.down_proj.weight[:, :48]).item()
    attention = model.layers[0].self_attn.q_proj.weight
    assert mx.array_equal(attention, target.layers[first].self_attn.q_proj.weight).item()


def test_own_path_counts_a_position_only_after_the_teachers_own_choices():
    from engine_mlx.training.dflash import own_path

    text = np.array([5, 6, 7, 8, 9])
    assert own_path(text, np.array([5, 6, 7, 8, 0])).tolist() == [True] * 5
    assert own_path(text, np.array([5, 1, 7, 8, 9])).tolist() == [True, True, False, False, False]
    assert own_path(text, np.array([0, 6, 7, 8, 9])).tolist() == [True] + [False] * 4


def test_teacher_forced_blocks_are_taught_along_the_targets_own_path(tiny_target, tmp_path):
    from engine_mlx.training.dataset import build_dataset
    from engine_mlx.training.prompts import PromptBuilder
    from tests.engine_mlx.training.conftest import text_sources
    from tests.engine_mlx.training.test_dataset import TEACHER

    target = tiny_target("llama")
    builder = PromptBuilder(target.tokenizer, text_sources(tmp_path / "text"), "train")
    data = build_dataset(target, builder, tmp_path / "data", TEACHER, log=lambda _: None)
    sampler = BlockSampler(data, CONFIG.block)
    assert sampler.teacher_forced
    batch = sampler.sample(np.random.default_rng(0), 2, 8, (target.spec.vocab_size, 0))
    weights, features = np.array(batch.weights), np.array(batch.features)
    per_seq = len(weights) // len(features)
    for i, a in enumerate(np.array(batch.anchors)):
        shard = next(
            sh for sh in sampler.shards
            if any(np.array_equal(features[i // per_seq], f) for f in sh["features"])
        )  # fmt: skip
        row = next(
            r for r, f in enumerate(shard["features"]) if np.array_equal(features[i // per_seq], f)
        )
        tokens, choices = shard["tokens"][row], shard["top_ids"][row, :, 0]
        last = int(shard["lengths"][row]) - 1
        for j in range(1, CONFIG.block):  # block position j predicts the token at a + j
            taught = all(tokens[a + k] == choices[a + k - 1] for k in range(1, j))
            assert weights[i, j - 1] == float(taught and a + j <= last)
    assert weights[:, 0].all() and 0 < weights.sum() < weights.size


def test_a_warm_start_from_a_shipped_float16_drafter_trains_in_float32(
    tiny_dataset, tiny_target, tmp_path
):
    """A shipped drafter is float16 (export_pair); trained on as it was, the Qwen demo's went
    NaN at its second step."""
    target = tiny_target("llama")
    trained = tmp_path / "trained"
    train_drafter(target, tiny_dataset, trained, CONFIG, log=lambda _: None)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    shutil.copy(trained / "config.json", shipped / "config.json")
    weights = mx.load(str(trained / "model.safetensors"))
    mx.save_safetensors(
        str(shipped / "model.safetensors"), {k: v.astype(mx.float16) for k, v in weights.items()}
    )
    warm = DrafterTrainConfig(**{**CONFIG.__dict__, "steps": 6, "warm_start": str(shipped)})
    start = new_drafter(target, warm, (0, 1))
    assert {v.dtype for _, v in tree_flatten(start.parameters())} == {mx.float32}
    history = train_drafter(target, tiny_dataset, tmp_path / "more", warm, log=lambda _: None)
    assert all(np.isfinite(h["loss"]) for h in history)
