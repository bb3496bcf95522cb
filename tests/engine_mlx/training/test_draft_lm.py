"""The standalone draft LM (mlx-lm baseline) trains end to end on a tiny model, lowers the
loss, resumes, and drives mlx-lm's own speculative loop to the target's greedy output."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.bench.mlx_lm import mlx_lm_runner
from engine_mlx.training.dataset import Shard, shard_paths
from engine_mlx.training.draft_lm import (
    HISTORY_FILE,
    DraftLMTrainConfig,
    kept_layers,
    train_draft_lm,
)


def test_kept_layers_are_the_first_and_the_last():
    assert kept_layers(30, 2) == [0, 29]
    assert kept_layers(30, 3) == [0, 28, 29]
    assert kept_layers(4, 1) == [0]
    with pytest.raises(ValueError, match=r"1\.\.4 layers"):
        kept_layers(4, 5)


def test_training_lowers_loss_resumes_and_drafts_for_mlx_lm(tiny_dataset, tiny_target, tmp_path):
    target = tiny_target("llama")
    out = tmp_path / "draft-lm"
    config = DraftLMTrainConfig(steps=40, layers=1, lr=3e-3, sequences=4, checkpoint_every=20)
    history = train_draft_lm(target, tiny_dataset, out, config, log=lambda _: None)
    losses = [h["loss"] for h in history]
    assert len(losses) == 40
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5])
    saved = json.loads((out / "config.json").read_text())
    assert saved["num_hidden_layers"] == 1
    assert saved["flashchat_draft_lm"]["target_layers"] == [0]
    assert len(json.loads((out / HISTORY_FILE).read_text())["history"]) == 40
    more_config = DraftLMTrainConfig(**{**config.__dict__, "steps": 45})
    more = train_draft_lm(target, tiny_dataset, out, more_config, log=lambda _: None)
    assert len(more) == 45 and more[:40] == history

    shard = Shard.load(shard_paths(tiny_dataset)[0])  # text it was trained on
    prompt = [int(t) for t in shard.tokens[0, : shard.prompt_length]]
    plain = mlx_lm_runner(target.spec.path, mx.float32)(prompt, 24)
    speculative = mlx_lm_runner(target.spec.path, mx.float32, draft=out)(prompt, 24)
    assert speculative["output"] == plain["output"]
    assert speculative["tau"] > 1.0  # the trained draft model's tokens were accepted
