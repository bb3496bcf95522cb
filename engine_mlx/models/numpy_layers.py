"""A quantized target's decoding and verification rows, layer by layer outside MLX's graph.

On the CPU, every return to MLX's graph is an evaluation, and an evaluation hands work to MLX's
stream thread and waits for it: ~20 us on the 2-core Xeon, 80-100 us on the 2-core EPYC VM,
whose idle virtual cores wake slowly. A 4-bit forward through mlx-lm's layers left the graph
about 240 times (each product, rotation, attention and norm between them): on the EPYC, a
third of the forward. The layers of the usual dense architectures (llama, qwen2, qwen3) are
short enough to write once more: few rows (decoding, verification, short prefill chunks) go
through ``cpu/quant_layer.c``, two calls a layer around the row-by-row attention
(``cpu/exact_attention``), which replaced ~15 numpy operations and 7 product calls a layer
(the 4-bit demo at depth 0 on the EPYC: 37 -> 48 tok/s); prefill's many rows go through the
same layer in numpy, their products to the BLAS on dequantized weights
(``quantized.multiply_rows``). MLX runs only the embedding, the caches' growth (their rows go
straight into MLX's buffers: ``InPlaceKVCache``) and the head.

Every step is computed row by row (norms along each row, the product's rows independent,
attention row by row in position order), so a token's bits are the same decoded alone or
verified among a tree's: what ``exact_attention`` guarantees for the attention, this keeps
for the whole layer.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.cache import KVCache

from engine_mlx.cpu.exact_attention import Slots
from engine_mlx.cpu.quant_layer import LayerShape, LayerWeights, QuantLayer
from engine_mlx.cpu.quantized_product import product
from engine_mlx.models import attention, exact_attention
from engine_mlx.models.inplace_kv_cache import InPlaceKVCache
from engine_mlx.models.numpy_rope import NumpyRoPE
from engine_mlx.models.quantized import (
    PREFILL_ROWS,
    THREADS,
    CpuQuantizedLinear,
    CpuQuantizedMLP,
    engine_product,
    multiply_rows,
)


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
        self.native = self._native()

    def _native(self) -> QuantLayer | None:
        """The layer's few-row work in C (``cpu/quant_layer.c``), where the build has it."""
        gemm = product()
        if gemm is None:
            return None
        mlp = self.mlp
        names = {"q": self.q, "k": self.k, "v": self.v, "o": self.o, "gate": mlp.gate_proj,
                 "up": mlp.up_proj, "down": mlp.down_proj}  # fmt: skip
        weights = LayerWeights(
            input_norm=self.input_norm, mlp_norm=self.mlp_norm, q_norm=self.q_norm,
            k_norm=self.k_norm, matrices={name: p._matrix for name, p in names.items()},
            biases={name: names[name]._bias for name in ("q", "k", "v", "o")},
        )  # fmt: skip
        shape = LayerShape(
            self.heads, self.kv_heads, self.head_dim, self.rope.dims, self.rope.traditional
        )
        return QuantLayer(gemm, shape, weights)

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
            engine_product(p) and ("bias" not in p or p._bias is not None) for p in linears
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

    def __call__(self, h: np.ndarray, cache: KVCache, rows: ForwardRows) -> np.ndarray:
        """``h`` [L, hidden] -> the layer's output rows; ``cache`` gains the rows' keys and
        values."""
        if self.native is not None and rows.few:
            cos, sin = rows.tables(self.rope)
            int8 = self.q._int8
            q, k, v = self.native.inputs(h, cos, sin, threads=THREADS, int8=int8)
            out = self._attend(q, k, v, cache, rows.slots)
            return self.native.outputs(h, out.reshape(len(h), -1), threads=THREADS, int8=int8)
        return self._numpy_call(h, cache, rows)

    def _numpy_call(self, h: np.ndarray, cache: KVCache, rows: ForwardRows) -> np.ndarray:
        """The same layer in numpy (prefill's many rows: their products go to the BLAS)."""
        count, d = h.shape[0], self.head_dim
        x = rms_norm(h, self.input_norm)
        q = _linear(self.q, x).reshape(count, self.heads, d)
        k = _linear(self.k, x).reshape(count, self.kv_heads, d)
        v = _linear(self.v, x).reshape(count, self.kv_heads, d)
        if self.q_norm is not None:
            q = rms_norm(q, self.q_norm)
        if self.k_norm is not None:
            k = rms_norm(k, self.k_norm)
        q = self.rope(q.transpose(1, 0, 2), rows.positions)  # [heads, L, d]
        k = self.rope(k.transpose(1, 0, 2), rows.positions)  # [kv_heads, L, d]
        v = np.ascontiguousarray(v.transpose(1, 0, 2))
        out = self._attend(q.transpose(1, 0, 2), k, v, cache, rows.slots)
        h = h + _linear(self.o, out.reshape(count, self.heads * d))
        return h + self.mlp.numpy_forward(rms_norm(h, self.mlp_norm))

    def _attend(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, cache: KVCache, allowed: Slots
    ) -> np.ndarray:
        """Attention over the cache's slots and the new rows, read where they are: the cache
        takes the rows in place (``InPlaceKVCache``), or lazily, evaluated once after the last
        layer (``settle``), not here."""
        split, in_place, buffers = cache.offset, isinstance(cache, InPlaceKVCache), None
        if cache.keys is None:
            old_k, old_v = k, v  # nothing below the split
        else:
            buffers = (
                cache.buffers() if in_place else (np.asarray(cache.keys), np.asarray(cache.values))
            )
            old_k, old_v = buffers[0][0], buffers[1][0]
        if not (in_place and cache.write_rows(k, v, buffers)):
            cache.update_and_fetch(mx.array(k[None]), mx.array(v[None]))
        return exact_attention.kernel().attend(
            q, old_k, old_v, allowed, self.scale, exact_attention.THREADS, new=(k, v, split)
        )


class ForwardRows:
    """What every layer of one forward shares: the rows' positions, their allowed cache slots,
    the rotation's tables, and whether the rows are few enough for the C layer (decoding and
    verification always are: their rows must be the same bits)."""

    def __init__(self, positions: np.ndarray, allowed: list[np.ndarray]) -> None:
        self.positions = positions
        self.slots = Slots.of(allowed)
        self.few = len(positions) < PREFILL_ROWS or attention.verifying()
        self._tables: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def tables(self, rope: NumpyRoPE) -> tuple[np.ndarray, np.ndarray]:
        if rope.key not in self._tables:
            self._tables[rope.key] = rope.tables(self.positions)
        return self._tables[rope.key]


def settle(caches: list[KVCache]) -> None:
    """Evaluate the caches' updates of a forward through the numpy layers, all at once (an
    in-place cache's only where MLX updated it)."""
    pending = [
        array
        for c in caches
        for array in (c.settle() if isinstance(c, InPlaceKVCache) else (c.keys, c.values))
    ]
    if pending:
        mx.eval(pending)


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
    return all(type(c) in (KVCache, InPlaceKVCache) for c in caches)
