"""The DFlash2 drafter's local convolution (metal_kernels/local_conv.metal), MLX reference.

Same semantics as ``models.dflash.LocalConv``: depthwise, causal along the block axis,
``out[:, t] = bias + sum_i x[:, t - (k-1) + i] * weight[:, i]``. The kernel accumulates in
fp32 and rounds once; the reference computes in fp32 too.
"""

from __future__ import annotations

import math

import mlx.core as mx

from engine_mlx.kernels import self_check
from engine_mlx.kernels.launch import Executor, Launch, dispatch

KERNEL = "fc_local_conv"
DTYPES = (mx.float16, mx.bfloat16, mx.float32)
THREADS = 64


def reference(x: mx.array, weight: mx.array, bias: mx.array | None = None) -> mx.array:
    """x [B, L, H], weight [H, k], bias [H] -> [B, L, H] in x's dtype."""
    k = weight.shape[1]
    length = x.shape[1]
    xf = mx.pad(x.astype(mx.float32), [(0, 0), (k - 1, 0), (0, 0)])
    w = weight.astype(mx.float32)
    out = mx.zeros(x.shape, dtype=mx.float32) if bias is None else bias.astype(mx.float32)
    for i in range(k):
        out = out + xf[:, i : i + length] * w[:, i]
    return mx.broadcast_to(out, x.shape).astype(x.dtype)


def kernel(x: mx.array, weight: mx.array, bias: mx.array | None, executor: Executor) -> mx.array:
    """``reference``'s result through the kernel, on ``executor``."""
    batch, length, hidden = x.shape
    k = weight.shape[1]
    if weight.shape != (hidden, k) or (bias is not None and bias.shape != (hidden,)):
        raise ValueError("local conv: weight [H, k], bias [H]")
    if x.dtype not in DTYPES:
        x = x.astype(mx.float32)
    if batch == 0 or length == 0:
        return mx.zeros(x.shape, dtype=x.dtype)
    shift = mx.zeros((hidden,), dtype=x.dtype) if bias is None else bias.astype(x.dtype)
    (out,) = executor(
        Launch(
            KERNEL,
            inputs=[x, weight.astype(x.dtype), shift, mx.array([batch, length, hidden], mx.int32)],
            output_shapes=[x.shape],
            output_dtypes=[x.dtype],
            grid=(THREADS * math.ceil(hidden / THREADS), batch, 1),
            threadgroup=(THREADS, 1, 1),
            template=[("T", x.dtype), ("K", k)],
        )
    )
    return out


def run(x: mx.array, weight: mx.array, bias: mx.array | None = None) -> mx.array:
    """The kernel where its backend is live; else the reference."""
    return dispatch(
        "local_conv",
        lambda executor: kernel(x, weight, bias, executor),
        lambda: reference(x, weight, bias),
        self_check.close,
    )
