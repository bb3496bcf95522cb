"""The DFlash2 local convolution: kernel == MLX reference == the drafter's LocalConv."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.kernels import local_conv
from engine_mlx.models.dflash import LocalConv

TOLERANCE = {mx.float32: 1e-6, mx.float16: 1e-3, mx.bfloat16: 8e-3}


@pytest.mark.parametrize(
    ("batch", "length", "hidden", "k", "dtype", "bias"),
    [
        (2, 16, 100, 4, mx.float32, True),
        (1, 15, 64, 3, mx.float16, False),
        (3, 1, 33, 4, mx.bfloat16, True),  # a block of one: only the last tap sees data
        (1, 5, 70, 1, mx.float32, False),  # kernel size 1: a per-channel scale
    ],
    ids=["f32-bias", "f16-k3", "bf16-length1", "k1"],
)
def test_kernel_equals_reference(executor, batch, length, hidden, k, dtype, bias):
    rng = np.random.default_rng(hidden)
    x = mx.array(rng.standard_normal((batch, length, hidden), dtype=np.float32)).astype(dtype)
    w = mx.array(rng.standard_normal((hidden, k), dtype=np.float32)).astype(dtype)
    b = mx.array(rng.standard_normal(hidden, dtype=np.float32)).astype(dtype) if bias else None
    ours = local_conv.kernel(x, w, b, executor)
    ref = local_conv.reference(x, w, b)
    assert ours.shape == x.shape and ours.dtype == dtype
    err = mx.abs(ours.astype(mx.float32) - ref.astype(mx.float32)).max().item()
    assert err <= TOLERANCE[dtype] * max(1.0, mx.abs(ref).max().item()), err


@pytest.mark.parametrize("bias", [False, True])
def test_reference_is_the_drafters_local_conv(bias):
    rng = np.random.default_rng(1)
    conv = LocalConv(48, 4, bias=bias)
    conv.weight = mx.array(rng.standard_normal((48, 4), dtype=np.float32))
    if bias:
        conv.bias = mx.array(rng.standard_normal(48, dtype=np.float32))
    x = mx.array(rng.standard_normal((2, 9, 48), dtype=np.float32))
    ref = local_conv.reference(x, conv.weight, conv.bias if bias else None)
    assert mx.allclose(ref, conv(x), atol=1e-5).item()
