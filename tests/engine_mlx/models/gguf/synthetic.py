"""Synthetic GGUFs written with gguf-py exactly the way llama.cpp's converter would.

Q/K rows are permuted for llama.cpp's RoPE and tensors quantized with gguf.quants, so every
imported tensor can be compared with the reference dequantization bit for bit.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from gguf import GGML_QUANT_SIZES, GGUFWriter, quants
from gguf import GGMLQuantizationType as T

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 64, 256, 2, 4, 2
HEAD_DIM = HIDDEN // HEADS
CONTEXT = 512
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BOS, EOS, UNK, PAD = 1, 2, 0, 2
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TRAINING_TEXT = """
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs!
In 1969, 12 people walked on the Moon; by 2024 the count was still 12.
Naïve café owners serve crème brûlée, smörgåsbord and jalapeño piñatas — ünïcödé everywhere.
def hello(world): return f"Hello, {world}!"  # code, too: [1, 2, 3] + {'a': 4}
Hello world, hello again. What is the capital of France? The capital of France is Paris.
"""
SAMPLES = [
    "Hello, world! 1234 ünïcödé",
    "  leading spaces and trailing   ",
    "The capital of France is Paris.\n\nNew paragraph\ttab",
    "<|im_start|>user\nHi<|im_end|>\n",
    "emoji 🙂 and 漢字 and 0.5e-3",
]

# (gguf name, HF name, heads whose rows llama.cpp permuted or 0)
NAMES: list[tuple[str, str, int]] = [("token_embd.weight", "model.embed_tokens.weight", 0)]
for _i in range(LAYERS):
    _b, _m = f"blk.{_i}.", f"model.layers.{_i}."
    NAMES += [
        (_b + "attn_norm.weight", _m + "input_layernorm.weight", 0),
        (_b + "attn_q.weight", _m + "self_attn.q_proj.weight", HEADS),
        (_b + "attn_k.weight", _m + "self_attn.k_proj.weight", KV_HEADS),
        (_b + "attn_v.weight", _m + "self_attn.v_proj.weight", 0),
        (_b + "attn_output.weight", _m + "self_attn.o_proj.weight", 0),
        (_b + "ffn_norm.weight", _m + "post_attention_layernorm.weight", 0),
        (_b + "ffn_gate.weight", _m + "mlp.gate_proj.weight", 0),
        (_b + "ffn_up.weight", _m + "mlp.up_proj.weight", 0),
        (_b + "ffn_down.weight", _m + "mlp.down_proj.weight", 0),
    ]
NAMES += [("output_norm.weight", "model.norm.weight", 0), ("output.weight", "lm_head.weight", 0)]

# Every type mx.load handles natively, on permuted and plain tensors alike.
MLX_TYPES: dict[str, T] = {
    "token_embd.weight": T.Q8_0,
    "blk.0.attn_norm.weight": T.F32,
    "blk.0.attn_q.weight": T.F32,  # the bit-exact permutation check
    "blk.0.attn_k.weight": T.F16,
    "blk.0.attn_v.weight": T.Q4_0,
    "blk.0.attn_output.weight": T.Q4_1,
    "blk.0.ffn_norm.weight": T.F16,
    "blk.0.ffn_gate.weight": T.Q8_0,
    "blk.0.ffn_up.weight": T.Q4_0,
    "blk.0.ffn_down.weight": T.Q4_1,
    "blk.1.attn_norm.weight": T.F32,
    "blk.1.attn_q.weight": T.Q4_1,
    "blk.1.attn_k.weight": T.Q4_0,
    "blk.1.attn_v.weight": T.F16,
    "blk.1.attn_output.weight": T.Q8_0,
    "blk.1.ffn_norm.weight": T.F32,
    "blk.1.ffn_gate.weight": T.Q4_1,
    "blk.1.ffn_up.weight": T.F16,
    "blk.1.ffn_down.weight": T.Q4_0,
    "output_norm.weight": T.F32,
    "output.weight": T.Q8_0,
}
# Types mx.load cannot dequantize exactly: the whole file goes through gguf-py's numpy path.
# Tied embeddings (no output.weight) and a Llama 3 RoPE table come along in this variant.
NUMPY_TYPES: dict[str, T] = {
    **{k: v for k, v in MLX_TYPES.items() if k != "output.weight"},
    "blk.0.attn_k.weight": T.BF16,
    "blk.0.ffn_down.weight": T.Q4_K,
    "blk.1.ffn_down.weight": T.Q6_K,
    "blk.1.attn_v.weight": T.Q5_0,
    "blk.1.ffn_up.weight": T.Q5_1,
    "blk.1.attn_q.weight": T.Q8_0,
}
RANDOM_BLOCK_TYPES = {T.Q4_K, T.Q6_K}  # gguf-py can dequantize but not quantize these
VARIANTS = {"mlx": MLX_TYPES, "numpy": NUMPY_TYPES}
LLAMA3_ROPE = {"factor": 8.0, "low": 1.0, "high": 4.0, "original": 8192}

# ------------------------------------------------------------------------------------------
# Building GGUFs the way llama.cpp's converter does
# ------------------------------------------------------------------------------------------


def llama_cpp_row_order(rows: int, heads: int) -> np.ndarray:
    """Index map of convert_hf_to_gguf's Q/K permutation: gguf_rows = hf_rows[order].

    Written as an explicit index formula (not a reshape) so it checks the importer's inverse
    independently: GGUF row (head h, pair i, member j) comes from HF row (head h, half j, i).
    """
    head_dim = rows // heads
    half = head_dim // 2
    order = np.empty(rows, dtype=np.int64)
    for g in range(rows):
        h, r = divmod(g, head_dim)
        i, j = divmod(r, 2)
        order[g] = h * head_dim + j * half + i
    return order


def llama3_rope_factors(head_dim: int, theta: float, p: dict[str, Any]) -> np.ndarray:
    """The rope_freqs.weight table llama.cpp's converter writes for Llama 3.x scaling."""
    out = []
    low_wl, high_wl = p["original"] / p["low"], p["original"] / p["high"]
    for i in range(0, head_dim, 2):
        wavelen = 2 * np.pi / (1.0 / theta ** (i / head_dim))
        if wavelen < high_wl:
            out.append(1.0)
        elif wavelen > low_wl:
            out.append(p["factor"])
        else:
            smooth = (p["original"] / wavelen - p["low"]) / (p["high"] - p["low"])
            out.append(1 / ((1 - smooth) / p["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def random_blocks(rng: np.random.Generator, shape: tuple[int, int], qtype: T) -> np.ndarray:
    """Valid K-quant bytes: random payload, small float16 super-block scales."""
    block, size = GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    scale = np.frombuffer(np.float16(0.002).tobytes(), dtype=np.uint8)
    if qtype == T.Q4_K:  # d, dmin, scales[12], qs[128]
        raw[..., 0:2] = scale
        raw[..., 2:4] = scale
    elif qtype == T.Q6_K:  # ql[128], qh[64], scales[16], d
        raw[..., -2:] = scale
    else:
        raise AssertionError(qtype)
    return raw.reshape(rows, -1)


def encode_tensors(
    hf: dict[str, np.ndarray], types: dict[str, T], seed: int = 1
) -> tuple[dict[str, tuple[np.ndarray, T]], dict[str, np.ndarray]]:
    """GGUF tensor payloads and, per HF name, the float32 tensor the import must produce."""
    rng = np.random.default_rng(seed)
    payloads: dict[str, tuple[np.ndarray, T]] = {}
    expected: dict[str, np.ndarray] = {}
    for gname, hfname, heads in NAMES:
        if gname not in types:
            continue
        qtype = types[gname]
        source = hf[hfname]
        order = llama_cpp_row_order(source.shape[0], heads) if heads else None
        if order is not None:
            source = source[order]
        if qtype in RANDOM_BLOCK_TYPES:
            data = random_blocks(rng, source.shape, qtype)
            ref = quants.dequantize(data, qtype)
        elif qtype == T.F32:
            data = ref = source.astype(np.float32)
        elif qtype == T.F16:
            data = source.astype(np.float16)
            ref = data.astype(np.float32)
        else:
            data = quants.quantize(source, qtype)
            ref = quants.dequantize(data, qtype).astype(np.float32)
        payloads[gname] = (data, qtype)
        expected[hfname] = ref[np.argsort(order)] if order is not None else ref
    return payloads, expected


def write_gguf(
    path: Path,
    vocab: dict[str, Any],
    payloads: dict[str, tuple[np.ndarray, T]],
    *,
    arch: str = "llama",
    drop_meta: tuple[str, ...] = (),
    tokenizer_model: str = "gpt2",
    pre: str = "smollm",
    extra: Callable[[GGUFWriter], None] | None = None,
) -> Path:
    writer = GGUFWriter(str(path), arch)
    meta: list[tuple[str, Callable[[Any], None], Any]] = [
        ("block_count", writer.add_block_count, LAYERS),
        ("context_length", writer.add_context_length, CONTEXT),
        ("embedding_length", writer.add_embedding_length, HIDDEN),
        ("feed_forward_length", writer.add_feed_forward_length, FFN),
        ("head_count", writer.add_head_count, HEADS),
        ("head_count_kv", writer.add_head_count_kv, KV_HEADS),
        ("rope_freq_base", writer.add_rope_freq_base, 10000.0),
        ("rms_eps", writer.add_layer_norm_rms_eps, 1e-5),
        ("vocab_size", writer.add_vocab_size, len(vocab["tokens"])),
        ("rope_dims", writer.add_rope_dimension_count, HEAD_DIM),
        ("tokenizer_model", writer.add_tokenizer_model, tokenizer_model),
        ("pre", writer.add_tokenizer_pre, pre),
        ("tokens", writer.add_token_list, vocab["tokens"]),
        ("token_types", writer.add_token_types, vocab["types"]),
        ("merges", writer.add_token_merges, vocab["merges"]),
        ("bos", writer.add_bos_token_id, BOS),
        ("eos", writer.add_eos_token_id, EOS),
        ("unk", writer.add_unk_token_id, UNK),
        ("pad", writer.add_pad_token_id, PAD),
        ("add_bos", writer.add_add_bos_token, False),
        ("chat_template", writer.add_chat_template, CHAT_TEMPLATE),
    ]
    for key, add, value in meta:
        if key not in drop_meta:
            add(value)
    if extra is not None:
        extra(writer)
    for name, (data, qtype) in payloads.items():
        if qtype in (T.F32, T.F16):
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def add_llama3_rope(writer: GGUFWriter) -> None:
    writer.add_tensor("rope_freqs.weight", llama3_rope_factors(HEAD_DIM, 10000.0, LLAMA3_ROPE))


# ------------------------------------------------------------------------------------------
# Reading an import back
# ------------------------------------------------------------------------------------------


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def load_weights(folder: Path) -> dict[str, np.ndarray]:
    arrays: dict[str, mx.array] = {}
    for f in sorted(folder.glob("model*.safetensors")):
        arrays |= mx.load(str(f))  # type: ignore[arg-type]
    return {k: np.array(v.astype(mx.float32)) for k, v in arrays.items()}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))
