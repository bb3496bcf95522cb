"""export-pair: a trained drafter and MTP head become the shipped layout (fp16, no optimizer
state, histories beside them, the hand-written model card kept), and the engine loads them."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.companions import MTP_FILE
from engine_mlx.models.dflash import load_dflash
from engine_mlx.models.mtp import load_mtp
from engine_mlx.training.dflash import DrafterTrainConfig, train_drafter
from engine_mlx.training.export import DRAFTER_HISTORY, MTP_HISTORY, export_pair
from engine_mlx.training.mtp import MTPTrainConfig, train_mtp


def test_export_writes_a_half_precision_pair_the_engine_loads(tiny_dataset, tiny_target, tmp_path):
    target = tiny_target("llama")
    drafter, mtp = tmp_path / "drafter", tmp_path / "mtp.safetensors"
    config = DrafterTrainConfig(steps=2, layers=1, block=4, sequences=2, anchors=2, warmup=1)
    train_drafter(target, tiny_dataset, drafter, config, log=lambda _: None)
    train_mtp(target, tiny_dataset, mtp, MTPTrainConfig(steps=2, positions=32), lambda _: None)
    out = tmp_path / "companions" / "Tiny"
    out.mkdir(parents=True)
    (out / "MODEL_CARD.md").write_text("# card")
    (out / "stale.safetensors").write_bytes(b"old")

    assert export_pair("Tiny", drafter, mtp, out, mtp_steps=1) == out
    shipped = out / "Tiny-DFlash2"
    # no optimizer state or history in the drafter's folder (a tiny vocabulary needs no
    # draft vocabulary, so there is none here)
    assert sorted(p.name for p in shipped.iterdir()) == ["config.json", "model.safetensors"]
    weights = mx.load(str(shipped / "model.safetensors"))
    assert {v.dtype for v in weights.values()} == {mx.float16}
    trained = mx.load(str(drafter / "model.safetensors"))
    for key, value in trained.items():
        np.testing.assert_allclose(np.array(weights[key]), np.array(value), rtol=1e-3, atol=1e-3)
    assert load_dflash(shipped).config.block_size == 4
    head = load_mtp(target, out / MTP_FILE)
    assert head.reads == "pre" and head.draft_steps == 1  # the measured best length recorded
    for name in (DRAFTER_HISTORY, MTP_HISTORY, "MODEL_CARD.md"):
        assert (out / name).is_file(), name
    assert not (out / "stale.safetensors").exists()

    # drafter only (an MTP head that does not pay yet is left out): the shipped head goes
    assert export_pair("Tiny", drafter, None, out) == out
    assert not (out / MTP_FILE).exists() and not (out / MTP_HISTORY).exists()
    assert load_dflash(out / "Tiny-DFlash2").config.block_size == 4
    assert (out / "MODEL_CARD.md").read_text() == "# card"


def test_export_refuses_an_untrained_drafter_and_keeps_the_shipped_pair(tmp_path):
    out = tmp_path / "Tiny"
    out.mkdir()
    (out / MTP_FILE).write_bytes(b"shipped")
    with pytest.raises(FileNotFoundError, match="train it first"):
        export_pair("Tiny", tmp_path / "nothing", tmp_path / "mtp.safetensors", out)
    assert (out / MTP_FILE).read_bytes() == b"shipped"
