"""MTP training runs end to end on a tiny model, lowers the loss, resumes, and the trained
head drafts losslessly."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np

from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.draft_vocab import continuation_counts
from engine_mlx.decoding.mtp_drafter import MTPDrafter
from engine_mlx.models.mtp import load_mtp
from engine_mlx.session import Session
from engine_mlx.training.dataset import load_fields
from engine_mlx.training.mtp import MTPTrainConfig, starting_head, train_mtp


def test_training_lowers_loss_and_resumes(tiny_dataset, tiny_target, tmp_path):
    target = tiny_target("llama")
    out = tmp_path / "mtp.safetensors"
    config = MTPTrainConfig(steps=40, positions=64, lr=3e-3, checkpoint_every=20)
    history = train_mtp(target, tiny_dataset, out, config, log=lambda _: None)
    losses = [h["loss"] for h in history]
    assert len(losses) == 40
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5])  # KL: no entropy floor
    saved = json.loads(out.with_suffix(".json").read_text())
    assert len(saved["history"]) == 40
    # resuming continues from step 40, not from scratch
    more = train_mtp(
        target,
        tiny_dataset,
        out,
        MTPTrainConfig(**{**config.__dict__, "steps": 45}),
        log=lambda _: None,
    )
    assert len(more) == 45 and more[:40] == history
    ids = target.tokenizer.encode("The quick brown")
    session = Session(target, mtp=MTPDrafter(load_mtp(target, out), target, steps=3))
    cfg = GenerationConfig(max_tokens=24, mode="mtp", ignore_eos=True)
    spec = list(session.generate(ids, cfg))[-1]
    plain = list(Session(target).generate(ids, GenerationConfig(max_tokens=24, ignore_eos=True)))
    assert spec.tokens == plain[-1].tokens


def test_starting_head_layer_is_the_identity(tiny_target):
    """A new head's layer adds nothing at step 0: its output projections are zero."""
    target = tiny_target("llama")
    head = starting_head(target)
    x = mx.random.normal((1, 5, target.spec.hidden_size))
    assert mx.allclose(head.layers[0](x, "causal", None), x).item()


def test_trained_head_carries_the_dataset_s_frequent_tokens(tiny_dataset, tiny_target, tmp_path):
    """The head's file lists the tokens the target generated most in the dataset, which it
    then drafts from; a draft vocabulary as large as the model's is left out."""
    target = tiny_target("llama")
    config = MTPTrainConfig(steps=1, positions=64, draft_vocab=40)
    train_mtp(target, tiny_dataset, tmp_path / "a.safetensors", config, log=lambda _: None)
    vocab = load_mtp(target, tmp_path / "a.safetensors").draft_vocab
    assert vocab is not None and len(vocab) == 40
    counts = continuation_counts(load_fields(tiny_dataset, ("tokens", "lengths")), 320)
    assert counts[vocab].min() >= np.sort(counts)[-40]  # the 40 most generated
    whole = MTPTrainConfig(steps=1, positions=64, draft_vocab=320)
    train_mtp(target, tiny_dataset, tmp_path / "b.safetensors", whole, log=lambda _: None)
    assert load_mtp(target, tmp_path / "b.safetensors").draft_vocab is None
