"""DFlash checkpoints: z-lab's layout loads unchanged, ours round-trips, misfits are refused."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import pytest

from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.errors import ModelLoadError
from engine_mlx.models.dflash import (
    DrafterMismatchError,
    default_target_layer_ids,
    load_dflash,
    save_dflash,
)
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session
from tests.support.drafters import random_dflash
from tests.support.tiny_models import build_tiny_model


def _write_zlab_checkpoint(folder: Path, hidden: int, vocab: int, n_target: int, **dflash) -> None:
    """Exactly z-lab's names and config keys (no `model.` prefix, no embedding, no head)."""
    folder.mkdir(parents=True)
    heads, kv, hd, inter, layers = 4, 2, 16, 96, 2
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "block_size": 4,
        "num_target_layers": n_target,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hd,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "tie_word_embeddings": True,
        "layer_types": ["full_attention"] * layers,
        "dflash_config": dflash,
    }
    (folder / "config.json").write_text(json.dumps(config))
    n_ids = len(dflash.get("target_layer_ids") or default_target_layer_ids(n_target, layers))
    w = {
        "fc.weight": (hidden, n_ids * hidden),
        "hidden_norm.weight": (hidden,),
        "norm.weight": (hidden,),
    }
    for i in range(layers):
        p = f"layers.{i}."
        w |= {
            p + "self_attn.q_proj.weight": (heads * hd, hidden),
            p + "self_attn.k_proj.weight": (kv * hd, hidden),
            p + "self_attn.v_proj.weight": (kv * hd, hidden),
            p + "self_attn.o_proj.weight": (hidden, heads * hd),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (inter, hidden),
            p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
        }
    mx.random.seed(5)
    weights = {k: 0.05 * mx.random.normal(s) + (1.0 if len(s) == 1 else 0.0) for k, s in w.items()}
    mx.save_safetensors(str(folder / "model.safetensors"), weights)


def test_zlab_checkpoint_loads_and_runs(tiny_target, tmp_path):
    target = tiny_target("llama")  # 3 layers, hidden 64
    spec = target.spec
    folder = tmp_path / "zlab"
    _write_zlab_checkpoint(
        folder,
        spec.hidden_size,
        spec.vocab_size,
        spec.num_layers,
        mask_token_id=0,
        target_layer_ids=[0, 2],
    )
    model = load_dflash(folder)
    assert model.config.target_layer_ids == (0, 2) and model.config.local_conv_kernel == 0
    drafter = DFlashDrafter(model, target)
    ids = target.tokenizer.encode("Hello world")
    plain = list(Session(target).generate(ids, GenerationConfig(max_tokens=12)))[-1].tokens
    spec_out = list(
        Session(target, drafter).generate(ids, GenerationConfig(max_tokens=12, mode="dflash2"))
    )[-1]
    assert spec_out.tokens == plain
    assert spec_out.stats.drafted > 0


def test_old_zlab_drafts_without_ids_or_mask(tmp_path):
    """Layer ids spaced evenly 1..n-3; mask token = first id past the tokenizer (the
    embedding is padded past the tokenizer, as Qwen's is)."""
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    target = TargetModel.load(build_tiny_model("qwen3_5", tmp_path / "padded", vocab_size=336))
    folder = tmp_path / "old"
    _write_zlab_checkpoint(folder, target.spec.hidden_size, target.spec.vocab_size, 4)
    drafter = DFlashDrafter(load_dflash(folder), target)
    assert drafter.capture_layers == (1, 1)  # 4 target layers: 1 .. 4-3
    assert drafter.mask_id == len(target.tokenizer.get_vocab()) == 320


def test_save_load_round_trip_and_v1_export(tiny_target, tmp_path):
    target = tiny_target("qwen3")
    model = random_dflash(target, conv=3)
    save_dflash(model, tmp_path / "ours")
    again = load_dflash(tmp_path / "ours")
    assert again.config == model.config
    drafter_a, drafter_b = DFlashDrafter(model, target), DFlashDrafter(again, target)
    ids = target.tokenizer.encode("The quick brown fox")
    feats = target.forward(mx.array(ids), target.make_cache(), capture=drafter_a.capture_layers)
    for d in (drafter_a, drafter_b):
        d.observe(ids, feats.features)
    assert mx.array_equal(drafter_a.block_logits(5, 4), drafter_b.block_logits(5, 4))
    save_dflash(model, tmp_path / "v1", v1=True)
    cfg = json.loads((tmp_path / "v1" / "config.json").read_text())
    assert "local_conv_kernel" not in cfg["dflash_config"]
    assert not any(".local_conv." in k for k in mx.load(str(tmp_path / "v1" / "model.safetensors")))
    assert load_dflash(tmp_path / "v1").config.local_conv_kernel == 0


def test_mismatched_drafters_are_refused(tiny_target, tmp_path):
    target = tiny_target("llama")
    spec = target.spec
    cases = {
        "hidden": (dict(hidden=32, vocab=spec.vocab_size), "hidden size 32, target 64"),
        "vocab": (dict(hidden=64, vocab=151936), f"vocabulary 151936, target {spec.vocab_size}"),
        "layers": (dict(hidden=64, vocab=spec.vocab_size, ids=[0, 7]), "layers [7]"),
    }
    for name, (kw, message) in cases.items():
        folder = tmp_path / name
        _write_zlab_checkpoint(
            folder,
            kw["hidden"],
            kw["vocab"],
            spec.num_layers,
            mask_token_id=0,
            target_layer_ids=kw.get("ids", [0, 1]),
        )
        with pytest.raises(DrafterMismatchError, match=message.replace("[", r"\[")):
            DFlashDrafter(load_dflash(folder), target)


def test_missing_mask_token_is_refused(tiny_target, tmp_path):
    target = tiny_target("llama")  # its tokenizer fills the whole vocabulary
    folder = tmp_path / "nomask"
    _write_zlab_checkpoint(folder, 64, target.spec.vocab_size, 3, target_layer_ids=[0, 1])
    with pytest.raises(DrafterMismatchError, match="mask_token_id"):
        DFlashDrafter(load_dflash(folder), target)


def test_broken_drafter_folders(tmp_path):
    with pytest.raises(ModelLoadError, match=r"config\.json is missing"):
        load_dflash(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ModelLoadError, match="not a DFlash drafter config"):
        load_dflash(tmp_path)


def test_catch_up_equals_observing_as_you_go(tiny_target):
    """Features deferred while the drafter sat idle give the same context as observing."""
    target = tiny_target("llama")
    model = random_dflash(target, conv=4)
    live, idle = DFlashDrafter(model, target), DFlashDrafter(model, target)
    ids = target.tokenizer.encode("The quick brown fox jumps over the lazy dog")
    cache = target.make_cache()
    chunks = [ids[:5], ids[5:6], ids[6:9], ids[9:]]
    for i, chunk in enumerate(chunks):
        feats = target.forward(mx.array(chunk), cache, capture=live.capture_layers).features
        live.observe(chunk, feats)
        (idle.observe if i == 0 else idle.defer)(chunk, feats)
    assert idle.context_length == 5  # the rest deferred
    assert mx.allclose(live.block_logits(7, 3), idle.block_logits(7, 3), atol=1e-5)
    assert idle.context_length == live.context_length == len(ids)
