"""Tree-verify attention (metal_kernels/tree_attention.metal) and its MLX reference.

Queries are the candidate tree's nodes; keys are the cache followed by the tree's own keys.
A node attends to the whole cache and, within the tree, to its ancestors and itself (rows of
``tree_mask``). Grouped-query heads share their KV head. The kernel splits long caches into
chunks across threadgroups and merges the chunks' partial softmaxes in a second kernel; within
a chunk, each key tile is read once for all query rows of its KV head (up to 64 rows — 8 SIMD
groups of 8 rows — per threadgroup; more rows take further passes).
"""

from __future__ import annotations

import math

import mlx.core as mx

from engine_mlx.kernels import self_check
from engine_mlx.kernels.launch import Executor, Launch, dispatch

PARTIAL = "fc_tree_attention_partial"
COMBINE = "fc_tree_attention_combine"
HEAD_DIMS = (64, 128)
DTYPES = (mx.float16, mx.bfloat16, mx.float32)
TILE = 32  # keys per tile (one per SIMD lane)
ROWS_PER_SIMD = 8
MAX_SIMDS = 8  # threadgroup of up to 256 threads


def _unbatch(x: mx.array, what: str) -> mx.array:
    if x.ndim == 4:
        if x.shape[0] != 1:
            raise ValueError(f"{what}: batch size 1 only")
        return x[0]
    if x.ndim != 3:
        raise ValueError(f"{what}: expected [H, L, D] or [1, H, L, D]")
    return x


def reference(q: mx.array, k: mx.array, v: mx.array, tree_mask: mx.array, scale: float) -> mx.array:
    """q [H, L, D] (or [1, H, L, D]); k, v [KV, N, D] (or [1, KV, N, D]), the cache's N - L
    tokens then the tree's L; tree_mask bool [L, L] (True = may attend). Computed in fp32,
    returned in q's dtype and rank."""
    batched = q.ndim == 4
    q, k, v = _unbatch(q, "q"), _unbatch(k, "k"), _unbatch(v, "v")
    h, length, d = q.shape
    kv, n = k.shape[0], k.shape[1]
    rep = h // kv
    prefix = n - length
    allowed = mx.concatenate(
        [mx.ones((length, prefix), dtype=mx.bool_), tree_mask.astype(mx.bool_)], axis=1
    )
    qf = q.astype(mx.float32).reshape(kv, rep * length, d) * scale
    scores = (qf @ k.astype(mx.float32).swapaxes(-1, -2)).reshape(kv, rep, length, n)
    scores = mx.where(allowed, scores, -mx.inf)
    probs = mx.softmax(scores, axis=-1).reshape(kv, rep * length, n)
    out = (probs @ v.astype(mx.float32)).reshape(h, length, d).astype(q.dtype)
    return out[None] if batched else out


def supported(q: mx.array) -> bool:
    return q.shape[-1] in HEAD_DIMS and q.dtype in DTYPES


def default_chunk(n_keys: int) -> int:
    """Keys per threadgroup: about 512, so a 32k cache spreads over 64 threadgroups per KV
    head; a whole number of tiles."""
    chunks = min(64, max(1, n_keys // 512))
    return max(TILE, math.ceil(math.ceil(n_keys / chunks) / TILE) * TILE)


def kernel(
    q: mx.array,
    k: mx.array,
    v: mx.array,
    tree_mask: mx.array,
    scale: float,
    executor: Executor,
    *,
    chunk: int | None = None,
    max_simds: int = MAX_SIMDS,
) -> mx.array:
    """``reference``'s result through the kernels, on ``executor``."""
    batched = q.ndim == 4
    q, k, v = _unbatch(q, "q"), _unbatch(k, "k"), _unbatch(v, "v")
    h, length, d = q.shape
    kv, n = k.shape[0], k.shape[1]
    if d not in HEAD_DIMS or q.dtype not in DTYPES:
        raise ValueError(f"head_dim {d} / {q.dtype}: the kernel takes {HEAD_DIMS} / {DTYPES}")
    if h % kv or k.shape != v.shape or n < length or tree_mask.shape != (length, length):
        raise ValueError("inconsistent shapes for tree attention")
    if length == 0:
        out = mx.zeros((h, 0, d), dtype=q.dtype)
        return out[None] if batched else out
    k, v = k.astype(q.dtype), v.astype(q.dtype)
    chunk = default_chunk(n) if chunk is None else math.ceil(chunk / TILE) * TILE
    chunks = math.ceil(n / chunk)
    rows = (h // kv) * length
    simds = max(1, min(max_simds, math.ceil(rows / ROWS_PER_SIMD)))
    query_blocks = math.ceil(rows / (simds * ROWS_PER_SIMD))
    params = mx.array([h, kv, length, n, chunk, query_blocks], dtype=mx.int32)
    o_part, ml_part = executor(
        Launch(
            PARTIAL,
            inputs=[
                q,
                k,
                v,
                tree_mask.astype(mx.uint8),
                params,
                mx.array([scale], dtype=mx.float32),
            ],
            output_shapes=[(chunks, h, length, d), (chunks, h, length, 2)],
            output_dtypes=[mx.float32, mx.float32],
            grid=(32 * simds, kv * query_blocks, chunks),
            threadgroup=(32 * simds, 1, 1),
            template=[("T", q.dtype), ("D", d)],
        )
    )
    (out,) = executor(
        Launch(
            COMBINE,
            inputs=[o_part, ml_part, mx.array([chunks, h * length, d], dtype=mx.int32)],
            output_shapes=[(h, length, d)],
            output_dtypes=[q.dtype],
            grid=(d, h * length, 1),
            threadgroup=(32, 1, 1),
            template=[("T", q.dtype)],
        )
    )
    return out[None] if batched else out


def run(q: mx.array, k: mx.array, v: mx.array, tree_mask: mx.array, scale: float) -> mx.array:
    """The kernel where its backend is live and it takes these shapes; else the reference."""
    return dispatch(
        "tree_attention",
        lambda executor: kernel(q, k, v, tree_mask, scale, executor),
        lambda: reference(q, k, v, tree_mask, scale),
        self_check.close,
        takes=supported(q),
    )
