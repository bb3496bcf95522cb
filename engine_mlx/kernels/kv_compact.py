"""K/V compaction of the accepted path (metal_kernels/kv_compact.metal), MLX reference.

After a tree verification appended the tree's rows at ``start``, the accepted path's rows
(tree nodes ``keep``, root first) move to ``start, start+1, ...``: what
``TargetModel.compact`` does with ``mx.take`` per array. The kernel gathers keys and values
in one pass, reading the cache buffers in place; ``compact`` writes them back with MLX's
slice update (a kernel's outputs are new arrays).
"""

from __future__ import annotations

import mlx.core as mx

from engine_mlx.kernels.launch import Executor, Launch, dispatch

KERNEL = "fc_kv_compact"


def reference(
    keys: mx.array, values: mx.array, start: int, keep: mx.array
) -> tuple[mx.array, mx.array]:
    """keys, values [..., C, D]; keep [n] -> the rows start + keep, [..., n, D] each."""
    idx = keep.astype(mx.int32) + start
    return mx.take(keys, idx, axis=-2), mx.take(values, idx, axis=-2)


def kernel(
    keys: mx.array, values: mx.array, start: int, keep: mx.array, executor: Executor
) -> tuple[mx.array, mx.array]:
    """``reference``'s result through the kernel, on ``executor``."""
    if keys.shape != values.shape or keys.dtype != values.dtype:
        raise ValueError("keys and values must match")
    lead, (cap, d) = keys.shape[:-2], keys.shape[-2:]
    n = keep.shape[0]
    rows = 1
    for s in lead:
        rows *= s
    if n == 0 or rows == 0:
        empty = mx.zeros((*lead, n, d), dtype=keys.dtype)
        return empty, empty
    k3, v3 = keys.reshape(rows, cap, d), values.reshape(rows, cap, d)
    width = 32 * -(-d // 32)
    k_rows, v_rows = executor(
        Launch(
            KERNEL,
            inputs=[
                k3,
                v3,
                keep.astype(mx.int32),
                mx.array([rows, d, start, n], dtype=mx.int32),
            ],
            output_shapes=[(rows, n, d), (rows, n, d)],
            output_dtypes=[keys.dtype, keys.dtype],
            grid=(width, n, rows),
            threadgroup=(32, 1, 1),
            template=[("T", keys.dtype)],
        )
    )
    return k_rows.reshape(*lead, n, d), v_rows.reshape(*lead, n, d)


def gather(
    keys: mx.array, values: mx.array, start: int, keep: mx.array
) -> tuple[mx.array, mx.array]:
    """The kernel where its backend is live; else the reference."""
    return dispatch(
        "kv_compact",
        lambda executor: kernel(keys, values, start, keep, executor),
        lambda: reference(keys, values, start, keep),
    )


def compact(
    keys: mx.array, values: mx.array, start: int, keep: list[int]
) -> tuple[mx.array, mx.array]:
    """The cache arrays with the accepted rows moved to ``start, start + 1, ...``."""
    n = len(keep)
    if n == 0 or keep == list(range(n)):
        return keys, values
    k_rows, v_rows = gather(keys, values, start, mx.array(keep, dtype=mx.int32))
    keys[..., start : start + n, :] = k_rows
    values[..., start : start + n, :] = v_rows
    return keys, values
