"""K/V compaction of the accepted path: kernel == MLX reference == TargetModel.compact."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.kernels import EmulatorExecutor, kv_compact, launch


@pytest.mark.parametrize(
    ("kv_heads", "capacity", "dim", "dtype", "start", "keep"),
    [
        (2, 40, 64, mx.float32, 20, [0, 3, 5]),
        (3, 23, 128, mx.bfloat16, 1, [0, 1, 4, 9, 12]),
        (1, 8, 64, mx.float16, 0, [0]),  # a cache of one token: the root alone
    ],
    ids=["f32", "bf16-d128", "f16-root-only"],
)
def test_kernel_equals_reference(executor, kv_heads, capacity, dim, dtype, start, keep):
    rng = np.random.default_rng(capacity)
    buf_k = mx.array(rng.standard_normal((1, kv_heads, capacity, dim), dtype=np.float32))
    buf_v = mx.array(rng.standard_normal((1, kv_heads, capacity, dim), dtype=np.float32))
    used = start + max(keep) + 1
    keys, values = buf_k.astype(dtype)[..., :used, :], buf_v.astype(dtype)[..., :used, :]
    idx = mx.array(keep, dtype=mx.int32)
    k_rows, v_rows = kv_compact.kernel(keys, values, start, idx, executor)
    ref_k, ref_v = kv_compact.reference(keys, values, start, idx)
    assert k_rows.shape == ref_k.shape == (1, kv_heads, len(keep), dim)
    assert mx.array_equal(k_rows, ref_k).item() and mx.array_equal(v_rows, ref_v).item()


def test_empty_keep(executor):
    keys = mx.zeros((1, 2, 10, 64))
    k_rows, v_rows = kv_compact.kernel(keys, keys, 3, mx.zeros((0,), dtype=mx.int32), executor)
    assert k_rows.shape == v_rows.shape == (1, 2, 0, 64)


def test_compact_moves_the_accepted_rows_as_the_target_does(monkeypatch):
    """compact() through the kernel leaves the cache TargetModel.compact would leave."""
    rng = np.random.default_rng(3)
    keys = mx.array(rng.standard_normal((1, 2, 30, 64), dtype=np.float32))
    values = mx.array(rng.standard_normal((1, 2, 30, 64), dtype=np.float32))
    start, keep = 12, [0, 2, 6, 7]
    idx = mx.array([start + i for i in keep])
    want_k, want_v = mx.array(keys), mx.array(values)
    want_k[..., start : start + 4, :] = mx.take(keys, idx, axis=2)
    want_v[..., start : start + 4, :] = mx.take(values, idx, axis=2)
    monkeypatch.setattr(launch, "live_executor", EmulatorExecutor)  # every op's dispatch
    got_k, got_v = kv_compact.compact(mx.array(keys), mx.array(values), start, keep)
    assert mx.array_equal(got_k, want_k).item() and mx.array_equal(got_v, want_v).item()
