"""The engine's attention where plain decoding and verification must agree to the bit.

With activations rounded to int8 (``cpu/quant_gemm.c``), the last-bit differences between a
fused attention kernel over one query and over a tree of eight (measured: up to 1.5e-8 in the
first layer's output of the 4-bit demo) become different int8 values and then different
tokens: speculative output parted from plain decoding in 70% of the suite's cells. So for such
targets every row that decoding or verification computes goes through
``cpu/exact_attention.c``, which takes each row's keys in position order and computes it
alone; prefill chunks (more than ``EXACT_ROWS`` rows and no tree) keep the fast paths, as
their rows are computed the same way in every mode.
"""

from __future__ import annotations

import functools
from typing import Any

import mlx.core as mx
import numpy as np

from engine_mlx import blas
from engine_mlx.cpu.exact_attention import ExactAttention
from engine_mlx.cpu.small_gemm import BuildError

THREADS = 64  # as many as the shared pool has
EXACT_ROWS = 65  # a hybrid target's replay of an accepted block (64 drafts + its root) at most


@functools.cache
def kernel() -> ExactAttention | None:
    """The compiled kernel, on the float32 product's threads; None where it cannot build."""
    try:
        exact = ExactAttention()
    except (BuildError, OSError):
        return None
    small = blas.small_gemm()
    if small is not None:
        exact.use_pool(small.library)
    return exact


def allowed_keys(mask: Any, rows: int, slots: int) -> list[np.ndarray] | None:
    """Each query row's cache slots, ascending; None for a mask this cannot read (a bias
    that is not 0 / -inf)."""
    if mask is None or (isinstance(mask, str) and mask == "causal"):
        return [np.arange(slots - rows + r + 1, dtype=np.int32) for r in range(rows)]
    values = getattr(mask, "values", mask)  # attention.AdditiveMask, or an MLX array
    grid = np.asarray(values)
    grid = grid.reshape(grid.shape[-2:]) if grid.ndim > 2 else grid
    if grid.shape != (rows, slots):
        return None
    if grid.dtype == np.bool_:
        allowed = grid
    elif np.all((grid == 0) | np.isneginf(grid)):
        allowed = grid == 0
    else:
        return None
    return [np.flatnonzero(row).astype(np.int32) for row in allowed]


def attend(queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: Any):
    """``queries`` [1, heads, rows, d] over the cache's ``keys``/``values`` [1, kv, slots, d]
    row by row, or None where the exact kernel cannot take it (the caller's path then)."""
    exact = kernel()
    rows, slots, d = queries.shape[2], keys.shape[2], queries.shape[3]
    if exact is None or queries.shape[0] != 1 or not exact.takes(d):
        return None
    allowed = allowed_keys(mask, rows, slots)
    if allowed is None:
        return None
    q = np.asarray(queries)[0].transpose(1, 0, 2)
    out = exact.attend(q, np.asarray(keys)[0], np.asarray(values)[0], allowed, scale, THREADS)
    return mx.array(out.transpose(1, 0, 2)[None])
