"""A quantized target's decoding and verification rows, layer by layer in numpy.

On the CPU, every return to MLX's graph is an evaluation, and an evaluation hands work to MLX's
stream thread and waits for it: ~20 us on the 2-core Xeon, 80-100 us on the 2-core EPYC VM,
whose idle virtual cores wake slowly. A 4-bit forward through mlx-lm's layers left the graph
about 240 times (each product, rotation, attention and norm between them): on the EPYC, a
third of the forward. The layers of the usual dense architectures (llama, qwen2, qwen3) are
short enough to write once more over numpy arrays, calling the engine's product
(``cpu/quant_gemm``) and row-by-row attention (``cpu/exact_attention``) directly; MLX then
runs only the embedding, the cache's update (one evaluation a layer) and the head.

Every step is computed row by row (norms along each row, the product's rows independent,
attention row by row in position order), so a token's bits are the same decoded alone or
verified among a tree's: what ``exact_attention`` guarantees for the attention, this keeps
for the whole layer. Prefill takes them too: its many rows go to the BLAS on dequantized
weights (``quantized.multiply_rows``), its attention row by row.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.cache import KVCache

from engine_mlx.models import exact_attention
from engine_mlx.models.numpy_rope import NumpyRoPE
from engine_mlx.models.quantized import CpuQuantizedLinear, CpuQuantizedMLP, multiply_rows


def _norm_weights(norm: Any) -> tuple[np.ndarray, float] | None:
    if type(norm) is not nn.RMSNorm or norm.weight.dtype != mx.float32:
        return None
    return np.asarray(norm.weight), float(norm.eps)


def rms_norm(x: np.ndarray, weights: tuple[np.ndarray, float]) -> np.ndarray:
    """``mx.fast.rms_norm`` along the last axis, each row on its own."""
    weight, eps = weights
    mean_square = np.mean(np.square(x), axis=-1, keepdims=True)
    return x * (np.float32(1.0) / np.sqrt(mean_square + np.float32(eps))) * weight


def _linear(layer: CpuQuantizedLinear, rows: np.ndarray) -> np.ndarray:
    y = multiply_rows(layer._matrix, rows, layer._int8)
    if layer._bias is not None:
        y += layer._bias
    return y


class NumpyLayer:
    """One decoder layer (attention then gated MLP, pre-norm) over numpy rows."""

    def __init__(self, layer: nn.Module) -> None:
        attn = layer.self_attn
        self.input_norm = _norm_weights(layer.input_layernorm)
        self.mlp_norm = _norm_weights(layer.post_attention_layernorm)
        self.q, self.k, self.v, self.o = attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj
        self.heads, self.kv_heads, self.scale = attn.n_heads, attn.n_kv_heads, float(attn.scale)
        self.head_dim = self.q._matrix.n // self.heads
        self.q_norm = _norm_weights(attn.q_norm) if hasattr(attn, "q_norm") else None
        self.k_norm = _norm_weights(attn.k_norm) if hasattr(attn, "k_norm") else None
        self.rope: NumpyRoPE = attn.rope._numpy
        self.mlp: CpuQuantizedMLP = layer.mlp

    @staticmethod
    def takes(layer: nn.Module) -> bool:
        """A pre-norm block of this shape whose every product is the engine's."""
        from mlx_lm.models import llama, qwen2, qwen3

        attn = getattr(layer, "self_attn", None)
        blocks = (llama.TransformerBlock, qwen2.TransformerBlock, qwen3.TransformerBlock)
        if type(layer) not in blocks or attn is None:
            return False
        linears = [getattr(attn, name, None) for name in ("q_proj", "k_proj", "v_proj", "o_proj")]
        plain_bias = all(
            type(p) is CpuQuantizedLinear and ("bias" not in p or p._bias is not None)
            for p in linears
        )
        norms = [layer.input_layernorm, layer.post_attention_layernorm]
        norms += [getattr(attn, n) for n in ("q_norm", "k_norm") if hasattr(attn, n)]
        return (
            plain_bias
            and type(layer.mlp) is CpuQuantizedMLP
            and layer.mlp.numpy_ready()
            and all(_norm_weights(n) is not None for n in norms)
            and getattr(attn.rope, "_numpy", None) is not None
            and exact_attention.kernel() is not None
            and exact_attention.kernel().takes(linears[0]._matrix.n // attn.n_heads)
        )

    def __call__(
        self, h: np.ndarray, cache: KVCache, positions: np.ndarray, allowed: list[np.ndarray]
    ) -> np.ndarray:
        """``h`` [L, hidden] -> the layer's output rows; ``cache`` gains the rows' keys and
        values; ``allowed[r]``: the cache slots row r attends to, ascending."""
        rows, d = h.shape[0], self.head_dim
        x = rms_norm(h, self.input_norm)
        q = _linear(self.q, x).reshape(rows, self.heads, d)
        k = _linear(self.k, x).reshape(rows, self.kv_heads, d)
        v = _linear(self.v, x).reshape(rows, self.kv_heads, d)
        if self.q_norm is not None:
            q = rms_norm(q, self.q_norm)
        if self.k_norm is not None:
            k = rms_norm(k, self.k_norm)
        q = self.rope(q.transpose(1, 0, 2), positions)  # [heads, L, d]
        k = self.rope(k.transpose(1, 0, 2), positions)  # [kv_heads, L, d]
        v = np.ascontiguousarray(v.transpose(1, 0, 2))
        out = self._attend(q.transpose(1, 0, 2), k, v, cache, allowed)
        h = h + _linear(self.o, out.reshape(rows, self.heads * d))
        return h + self.mlp.numpy_forward(rms_norm(h, self.mlp_norm))

    def _attend(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, cache: KVCache, allowed: list
    ) -> np.ndarray:
        """Attention over the cache's slots and the new rows, read where they are: the cache
        takes the rows lazily, evaluated once after the last layer (``settle``), not here."""
        split = cache.offset
        if cache.keys is None:
            old_k, old_v = k, v  # nothing below the split
        else:
            old_k, old_v = np.asarray(cache.keys)[0], np.asarray(cache.values)[0]
        cache.update_and_fetch(mx.array(k[None]), mx.array(v[None]))
        return exact_attention.kernel().attend(
            q, old_k, old_v, allowed, self.scale, exact_attention.THREADS, new=(k, v, split)
        )


def settle(caches: list[KVCache]) -> None:
    """Evaluate the caches' updates of a forward through the numpy layers, all at once."""
    mx.eval([array for c in caches for array in (c.keys, c.values)])


def numpy_layers(model: nn.Module) -> list[NumpyLayer] | None:
    """Every layer of ``model`` in numpy, or None when any one of them cannot be."""
    layers = list(model.layers)
    if not layers or not all(NumpyLayer.takes(layer) for layer in layers):
        return None
    return [NumpyLayer(layer) for layer in layers]


def runs(caches: list[Any]) -> bool:
    """Whether a forward goes through the numpy layers: over plain KV caches, any rows
    (prefill's too: row by row attention measured faster than MLX's fused kernel and numpy's
    softmax on the EPYC, 95 ms against 311 and 182 for 512 queries over 2,048 keys)."""
    return all(type(c) is KVCache for c in caches)
