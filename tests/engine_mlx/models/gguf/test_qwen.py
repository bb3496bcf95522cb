"""qwen2 and qwen3 GGUFs: biases and Q/K norms carried over, no Q/K un-permutation (the Qwens
use the NeoX rotation, which is HF's own row order), configs mlx-lm loads strictly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from engine_mlx.models.gguf import import_gguf
from engine_mlx.models.target import TargetModel
from tests.engine_mlx.models.gguf.synthetic import (
    FFN,
    HEADS,
    HIDDEN,
    KV_HEADS,
    LAYERS,
    load_weights,
    read_json,
    write_gguf,
)

QWEN3_HEAD_DIM = 32  # != HIDDEN // HEADS: the head size must come from attention.key_length


def qwen_checkpoint(arch: str, vocab: int, seed: int = 0) -> dict[str, tuple[str, np.ndarray]]:
    """HF name -> (GGUF name, float32 tensor) for a tiny qwen2 / qwen3 model."""
    rng = np.random.default_rng(seed)
    hd = QWEN3_HEAD_DIM if arch == "qwen3" else HIDDEN // HEADS
    q, kv = HEADS * hd, KV_HEADS * hd
    spec: list[tuple[str, str, tuple[int, ...]]] = [
        ("token_embd.weight", "model.embed_tokens.weight", (vocab, HIDDEN)),
        ("output_norm.weight", "model.norm.weight", (HIDDEN,)),
        ("output.weight", "lm_head.weight", (vocab, HIDDEN)),
    ]
    for i in range(LAYERS):
        b, m = f"blk.{i}.", f"model.layers.{i}."
        spec += [
            (b + "attn_norm.weight", m + "input_layernorm.weight", (HIDDEN,)),
            (b + "attn_q.weight", m + "self_attn.q_proj.weight", (q, HIDDEN)),
            (b + "attn_k.weight", m + "self_attn.k_proj.weight", (kv, HIDDEN)),
            (b + "attn_v.weight", m + "self_attn.v_proj.weight", (kv, HIDDEN)),
            (b + "attn_output.weight", m + "self_attn.o_proj.weight", (HIDDEN, q)),
            (b + "ffn_norm.weight", m + "post_attention_layernorm.weight", (HIDDEN,)),
            (b + "ffn_gate.weight", m + "mlp.gate_proj.weight", (FFN, HIDDEN)),
            (b + "ffn_up.weight", m + "mlp.up_proj.weight", (FFN, HIDDEN)),
            (b + "ffn_down.weight", m + "mlp.down_proj.weight", (HIDDEN, FFN)),
        ]
        if arch == "qwen2":
            spec += [
                (b + "attn_q.bias", m + "self_attn.q_proj.bias", (q,)),
                (b + "attn_k.bias", m + "self_attn.k_proj.bias", (kv,)),
                (b + "attn_v.bias", m + "self_attn.v_proj.bias", (kv,)),
            ]
        else:
            spec += [
                (b + "attn_q_norm.weight", m + "self_attn.q_norm.weight", (hd,)),
                (b + "attn_k_norm.weight", m + "self_attn.k_norm.weight", (hd,)),
            ]
    out = {}
    for gname, hname, shape in spec:
        scale, base = (0.1, 1.0) if gname.endswith("norm.weight") else (0.1, 0.0)
        out[hname] = (gname, (base + scale * rng.standard_normal(shape)).astype(np.float32))
    return out


def write_qwen_gguf(path: Path, arch: str, vocab: dict[str, Any]) -> dict[str, np.ndarray]:
    """The GGUF llama.cpp's converter writes for the checkpoint; returns the HF tensors."""
    checkpoint = qwen_checkpoint(arch, len(vocab["tokens"]))
    payloads = {g: (w, T.F32) for g, w in checkpoint.values()}
    extra = (lambda w: w.add_key_length(QWEN3_HEAD_DIM)) if arch == "qwen3" else None
    drop = ("rope_dims",) if arch == "qwen3" else ()
    write_gguf(path, vocab, payloads, arch=arch, pre="qwen2", extra=extra, drop_meta=drop)
    return {h: w for h, (_g, w) in checkpoint.items()}


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_qwen_gguf_imports_every_tensor_unpermuted(
    arch: str, tiny_vocab: dict[str, Any], tmp_path: Path
) -> None:
    expected = write_qwen_gguf(tmp_path / f"{arch}.gguf", arch, tiny_vocab)
    folder = import_gguf(tmp_path / f"{arch}.gguf", tmp_path / arch, dtype="float32")
    got = load_weights(folder)
    assert sorted(got) == sorted(expected)
    for name, weight in expected.items():
        assert np.array_equal(got[name], weight), name  # F32: bit-exact, rows in HF order

    config = read_json(folder / "config.json")
    assert config["model_type"] == arch
    assert config["attention_bias"] is (arch == "qwen2")
    assert config["head_dim"] == (QWEN3_HEAD_DIM if arch == "qwen3" else HIDDEN // HEADS)
    assert config["tie_word_embeddings"] is False

    target = TargetModel.load(folder)  # mlx-lm's qwen2/qwen3 classes, loaded strictly
    out = target.forward(mx.array([3, 4, 5, 6]), target.make_cache())
    assert out.logits.shape[-1] == len(tiny_vocab["tokens"])
    assert bool(mx.all(mx.isfinite(out.logits)))
    if arch == "qwen2":
        bias = target.inner.layers[0].self_attn.q_proj.bias
        assert np.array_equal(np.array(bias), expected["model.layers.0.self_attn.q_proj.bias"])
