"""The decoder architectures: GGUF metadata and tensor names -> HF ``config.json`` and weights.

llama, qwen2 and qwen3 GGUFs share llama.cpp's naming and differ in a few places, all of them
here: qwen2 adds q/k/v biases, qwen3 adds per-head Q/K RMSNorms (and a head size of its own),
and only llama's Q/K rows are permuted for llama.cpp's RoPE (the Qwens use the "NeoX" rotation,
which is HF's own layout), so only llama's are un-permuted. Which hyper-parameters to read, how
RoPE scaling is written in each format and which llama.cpp tensor becomes which HF tensor are
the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import mlx.core as mx
import numpy as np
from gguf import GGMLQuantizationType

from engine_mlx.errors import GGUFImportError
from engine_mlx.models.gguf.reader import (
    GGUFFile,
    meta,
    numpy_can_dequantize,
    read_tensor_numpy,
    require_tensor,
)

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3")

_IGNORED_TENSORS = frozenset({"rope_freqs.weight"})  # folded into config.json's rope_scaling


@dataclass(frozen=True)
class DecoderSpec:
    arch: str
    n_layers: int
    hidden: int
    ffn: int
    n_head: int
    n_kv_head: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    context_length: int
    vocab_size: int  # rows of the embedding matrix
    tied: bool
    rope_scaling: dict[str, Any] | None

    @property
    def qkv_bias(self) -> bool:
        return self.arch == "qwen2"

    @property
    def qk_norm(self) -> bool:
        return self.arch == "qwen3"

    @property
    def permuted_qk(self) -> bool:
        """llama.cpp stores llama's Q/K rows in its own RoPE order (never the Qwens')."""
        return self.arch == "llama"


def _clean_float(value: float) -> float:
    """float32 metadata as the short decimal a person wrote (1e-05, not 9.99999974e-06)."""
    return float(str(np.float32(value)))


def decoder_spec(g: GGUFFile) -> DecoderSpec:
    """The model's hyper-parameters, after checking every tensor the import will need."""
    name = g.path.name
    arch = meta(g, "general.architecture", str, "the model architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise GGUFImportError(
            f"{name} has architecture '{arch}', which cannot be imported "
            f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    p = arch + "."
    experts = meta(g, p + "expert_count", int, "number of experts", 0)
    if experts:
        raise GGUFImportError(
            f"{name} is a mixture-of-experts model ({experts} experts), which cannot be imported"
        )
    n_layers = meta(g, p + "block_count", int, "number of layers")
    hidden = meta(g, p + "embedding_length", int, "hidden size")
    ffn = meta(g, p + "feed_forward_length", int, "MLP size")
    n_head = meta(g, p + "attention.head_count", int, "number of attention heads")
    n_kv = meta(g, p + "attention.head_count_kv", int, "number of KV heads", n_head)
    if min(n_layers, hidden, ffn, n_head, n_kv) <= 0 or n_head % n_kv:
        raise GGUFImportError(f"{name} has inconsistent attention/layer sizes in its metadata")
    head_dim = meta(g, p + "attention.key_length", int, "head size", hidden // n_head)
    v_dim = meta(g, p + "attention.value_length", int, "value head size", head_dim)
    rope_dims = meta(g, p + "rope.dimension_count", int, "RoPE dimensions", head_dim)
    if v_dim != head_dim or rope_dims != head_dim or head_dim % 2:
        raise GGUFImportError(
            f"{name} uses a head layout (key {head_dim}, value {v_dim}, rotary {rope_dims}) "
            f"that the {arch} format cannot express"
        )
    eps = meta(g, p + "attention.layer_norm_rms_epsilon", float, "RMSNorm epsilon")
    theta = meta(g, p + "rope.freq_base", float, "RoPE base", 10000.0)
    ctx = meta(g, p + "context_length", int, "context length")

    embd = require_tensor(g, "token_embd.weight")
    if len(embd.shape) != 2 or embd.shape[1] != hidden:
        raise GGUFImportError(
            f"{name}: tensor 'token_embd.weight' has shape {list(embd.shape)}, "
            f"expected [vocab, {hidden}]"
        )
    vocab_size = embd.shape[0]
    meta_vocab = meta(g, p + "vocab_size", int, "vocabulary size", vocab_size)
    if meta_vocab != vocab_size:
        raise GGUFImportError(
            f"{name}: {p}vocab_size is {meta_vocab} but token_embd.weight has {vocab_size} rows"
        )

    spec = DecoderSpec(
        arch=arch,
        n_layers=n_layers,
        hidden=hidden,
        ffn=ffn,
        n_head=n_head,
        n_kv_head=n_kv,
        head_dim=head_dim,
        rms_eps=_clean_float(eps),
        rope_theta=_clean_float(theta),
        context_length=ctx,
        vocab_size=vocab_size,
        tied="output.weight" not in g.tensors,
        rope_scaling=None,
    )
    spec = replace(spec, rope_scaling=_rope_scaling(g, spec, p))
    _check_tensors(g, spec)
    return spec


def _rope_scaling(g: GGUFFile, spec: DecoderSpec, p: str) -> dict[str, Any] | None:
    """Translate GGUF RoPE scaling into HF's ``rope_scaling`` (linear, or Llama 3's table)."""
    name = g.path.name
    scaling: dict[str, Any] | None = None
    kind = meta(g, p + "rope.scaling.type", str, "RoPE scaling type", "none")
    if kind == "linear":
        factor = meta(g, p + "rope.scaling.factor", float, "RoPE scaling factor")
        scaling = {
            "rope_type": "linear",
            "type": "linear",
            "factor": _clean_float(factor),
        }
    elif kind not in ("none", ""):
        raise GGUFImportError(f"{name} uses RoPE scaling '{kind}', which is unsupported")

    if "rope_freqs.weight" in g.tensors:
        info = g.tensors["rope_freqs.weight"]
        if info.qtype != GGMLQuantizationType.F32 or info.shape != (spec.head_dim // 2,):
            raise GGUFImportError(f"{name}: tensor 'rope_freqs.weight' has an unexpected layout")
        factors = read_tensor_numpy(g, info)
        original = meta(
            g, p + "rope.scaling.original_context_length", int, "original context", 8192
        )
        if np.allclose(factors, 1.0):  # a table that scales nothing
            return scaling
        scaling = _llama3_scaling(factors, spec, original)
        if scaling is None:
            raise GGUFImportError(
                f"{name} has a RoPE frequency table (rope_freqs.weight) that does not match "
                "Llama 3 scaling, so it cannot be expressed in config.json"
            )
    return scaling


def _llama3_scaling(factors: np.ndarray, spec: DecoderSpec, original: int) -> dict | None:
    """Recover Llama 3 rope_scaling parameters from the per-frequency factor table.

    llama.cpp stores the table instead of the parameters; we try the parameters every Llama 3.x
    release uses and accept them only if they reproduce the table.
    """
    factor = float(factors.max())
    dims = spec.head_dim
    wavelens = 2 * math.pi * spec.rope_theta ** (np.arange(0, dims, 2, dtype=np.float64) / dims)
    for low, high in ((1.0, 4.0), (1.0, 2.0), (2.0, 4.0)):
        low_wl, high_wl = original / low, original / high
        smooth = (original / wavelens - low) / (high - low)
        expected = np.where(
            wavelens < high_wl,
            1.0,
            np.where(wavelens > low_wl, factor, 1.0 / ((1 - smooth) / factor + smooth)),
        )
        if np.allclose(expected, factors, rtol=1e-3, atol=1e-4):
            return {
                "rope_type": "llama3",
                "factor": _clean_float(factor),
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": original,
            }
    return None


def tensor_plan(spec: DecoderSpec) -> Iterator[tuple[str, str, tuple[int, ...], int]]:
    """(gguf name, HF name, HF shape, heads to un-permute or 0) for every weight, in order."""
    h, q, kv = spec.hidden, spec.n_head * spec.head_dim, spec.n_kv_head * spec.head_dim
    yield "token_embd.weight", "model.embed_tokens.weight", (spec.vocab_size, h), 0
    for i in range(spec.n_layers):
        b, m = f"blk.{i}.", f"model.layers.{i}."
        yield b + "attn_norm.weight", m + "input_layernorm.weight", (h,), 0
        q_heads, k_heads = (spec.n_head, spec.n_kv_head) if spec.permuted_qk else (0, 0)
        yield b + "attn_q.weight", m + "self_attn.q_proj.weight", (q, h), q_heads
        yield b + "attn_k.weight", m + "self_attn.k_proj.weight", (kv, h), k_heads
        yield b + "attn_v.weight", m + "self_attn.v_proj.weight", (kv, h), 0
        if spec.qkv_bias:
            yield b + "attn_q.bias", m + "self_attn.q_proj.bias", (q,), 0
            yield b + "attn_k.bias", m + "self_attn.k_proj.bias", (kv,), 0
            yield b + "attn_v.bias", m + "self_attn.v_proj.bias", (kv,), 0
        if spec.qk_norm:
            yield b + "attn_q_norm.weight", m + "self_attn.q_norm.weight", (spec.head_dim,), 0
            yield b + "attn_k_norm.weight", m + "self_attn.k_norm.weight", (spec.head_dim,), 0
        yield b + "attn_output.weight", m + "self_attn.o_proj.weight", (h, q), 0
        yield b + "ffn_norm.weight", m + "post_attention_layernorm.weight", (h,), 0
        yield b + "ffn_gate.weight", m + "mlp.gate_proj.weight", (spec.ffn, h), 0
        yield b + "ffn_up.weight", m + "mlp.up_proj.weight", (spec.ffn, h), 0
        yield b + "ffn_down.weight", m + "mlp.down_proj.weight", (h, spec.ffn), 0
    yield "output_norm.weight", "model.norm.weight", (h,), 0
    if not spec.tied:
        yield "output.weight", "lm_head.weight", (spec.vocab_size, h), 0


def _check_tensors(g: GGUFFile, spec: DecoderSpec) -> None:
    """Every needed tensor present, with the right shape and a type we can dequantize."""
    name = g.path.name
    wanted = set()
    for gname, _hf, shape, _heads in tensor_plan(spec):
        wanted.add(gname)
        info = require_tensor(g, gname)
        if info.shape != shape:
            raise GGUFImportError(
                f"{name}: tensor '{gname}' has shape {list(info.shape)}, expected {list(shape)}"
            )
        if info.nbytes < 0 or not numpy_can_dequantize(info.qtype):
            raise GGUFImportError(
                f"{name}: tensor '{gname}' has type {info.type_name}, which cannot be imported "
                "(supported: F32, F16, BF16 and the block formats Q4_0, Q4_1, Q5_0, Q5_1, "
                "Q8_0, K-quants and IQ-quants)"
            )
    extra = sorted(set(g.tensors) - wanted - _IGNORED_TENSORS)
    if extra:
        shown = ", ".join(f"'{t}'" for t in extra[:5]) + (" ..." if len(extra) > 5 else "")
        raise GGUFImportError(
            f"{name} has tensors the {spec.arch} format has no place for ({shown}); "
            "it is probably a different architecture"
        )


def unpermute_qk(w: mx.array, n_heads: int) -> mx.array:
    """Undo llama.cpp's Q/K row permutation.

    convert_hf_to_gguf reorders each head's rows from HF's "first half / second half" RoPE
    layout to llama.cpp's interleaved pairs: GGUF row (head h, pair i, member j) holds HF row
    (head h, half j, index i).  Viewing rows as (heads, head_dim/2, 2) and swapping the last two
    axes puts every row back where HF expects it.
    """
    rows, cols = w.shape
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, cols).swapaxes(1, 2).reshape(rows, cols)


_HF_CLASSES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}


def hf_config(spec: DecoderSpec, dtype: str, generation: dict[str, Any]) -> dict[str, Any]:
    """config.json in the shape transformers' configs and mlx_lm's ``ModelArgs`` read.

    The special token ids are repeated from generation_config.json because mlx_lm takes its
    stop tokens from config.json's eos_token_id.
    """
    ids = ("bos_token_id", "eos_token_id", "pad_token_id")
    config: dict[str, Any] = {
        "architectures": [_HF_CLASSES[spec.arch]],
        "model_type": spec.arch,
        "hidden_size": spec.hidden,
        "intermediate_size": spec.ffn,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_kv_head,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": spec.rms_eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": spec.rope_scaling,
        "max_position_embeddings": spec.context_length,
        "vocab_size": spec.vocab_size,
        "tie_word_embeddings": spec.tied,
        "attention_bias": spec.qkv_bias,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": dtype,
        **{key: generation[key] for key in ids if key in generation},
    }
    if spec.arch == "llama":
        config["mlp_bias"] = False
    else:  # the Qwens' configs name their (unused here) sliding window
        config.update(
            use_sliding_window=False,
            sliding_window=spec.context_length,
            max_window_layers=spec.n_layers,
        )
    return config
