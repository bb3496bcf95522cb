"""Candidate building (metal_kernels/candidates.metal) and its MLX reference.

``topk``: the drafter's top-k tokens and softmax probabilities per block position, most
likely first (what ``DFlashDrafter.propose`` computes with a full softmax, an argpartition
and a sort). ``path_scores``: the selector's calibrated acceptance estimate for every
candidate, a = (hits + w p) / (trials + w) in the calibration cell (depth, probability bin)
of ``AcceptanceCalibrator``, and the score of the path that follows the top candidate up to
the position before and then takes this one — the scores the best-first tree builder starts
from, computed next to the drafter's logits without a read-back per candidate.
"""

from __future__ import annotations

import math

import mlx.core as mx

from engine_mlx.kernels import self_check
from engine_mlx.kernels.launch import Executor, Launch, dispatch

TOPK = "fc_topk"
PATH_SCORES = "fc_path_scores"
KMAX = 8  # the widest draft (width 1..8)
DTYPES = (mx.float16, mx.bfloat16, mx.float32)
MAX_THREADS = 256


def reference_topk(logits: mx.array, k: int) -> tuple[mx.array, mx.array]:
    """logits [P, V] -> (tokens [P, k] int32, probs [P, k] float32), ties to the lowest id."""
    x = logits.astype(mx.float32)
    k = max(1, min(k, x.shape[-1]))
    order = mx.argsort(-x, axis=-1)[:, :k]
    probs = mx.take_along_axis(mx.softmax(x, axis=-1), order, axis=-1)
    return order.astype(mx.int32), probs


def kernel_topk(
    logits: mx.array, k: int, executor: Executor, *, threads: int = MAX_THREADS
) -> tuple[mx.array, mx.array]:
    """``reference_topk`` through the kernel, on ``executor``."""
    rows, vocab = logits.shape
    k = max(1, min(k, vocab))
    if k > KMAX:
        raise ValueError(f"top-k kernel takes k <= {KMAX}")
    if logits.dtype not in DTYPES:
        logits = logits.astype(mx.float32)
    if rows == 0:
        return mx.zeros((0, k), dtype=mx.int32), mx.zeros((0, k), dtype=mx.float32)
    width = max(32, min(threads, 32 * math.ceil(vocab / 32)))
    tokens, probs = executor(
        Launch(
            TOPK,
            inputs=[logits, mx.array([rows, vocab, k], dtype=mx.int32)],
            output_shapes=[(rows, k), (rows, k)],
            output_dtypes=[mx.int32, mx.float32],
            grid=(width, rows, 1),
            threadgroup=(width, 1, 1),
            template=[("T", logits.dtype), ("KMAX", KMAX)],
        )
    )
    return tokens, probs


def reference_path_scores(
    probs: mx.array, hits: mx.array, trials: mx.array, prior_weight: float
) -> tuple[mx.array, mx.array]:
    """probs [P, K]; hits, trials [max_depth + 1, bins] -> (accept [P, K], score [P, K])."""
    rows = probs.shape[0]
    max_depth, bins = hits.shape[0] - 1, hits.shape[1]
    p = probs.astype(mx.float32)
    depth = mx.minimum(mx.arange(1, rows + 1), max_depth)[:, None]
    b = mx.clip((p * bins).astype(mx.int32), 0, bins - 1)
    w = mx.array(prior_weight, dtype=mx.float32)
    accept = (hits.astype(mx.float32)[depth, b] + w * p) / (trials.astype(mx.float32)[depth, b] + w)
    before = mx.concatenate([mx.ones((1,), dtype=mx.float32), accept[:-1, 0]])
    return accept, mx.cumprod(before)[:, None] * accept


def kernel_path_scores(
    probs: mx.array, hits: mx.array, trials: mx.array, prior_weight: float, executor: Executor
) -> tuple[mx.array, mx.array]:
    """``reference_path_scores`` through the kernel, on ``executor``."""
    rows, k = probs.shape
    max_depth, bins = hits.shape[0] - 1, hits.shape[1]
    if rows == 0:
        empty = mx.zeros((0, k), dtype=mx.float32)
        return empty, empty
    width = min(256, 32 * math.ceil(rows * k / 32))
    accept, score = executor(
        Launch(
            PATH_SCORES,
            inputs=[
                probs.astype(mx.float32),
                hits.astype(mx.float32).reshape(-1),
                trials.astype(mx.float32).reshape(-1),
                mx.array([rows, k, bins, max_depth], dtype=mx.int32),
                mx.array([prior_weight], dtype=mx.float32),
            ],
            output_shapes=[(rows, k), (rows, k)],
            output_dtypes=[mx.float32, mx.float32],
            grid=(width, 1, 1),
            threadgroup=(width, 1, 1),
        )
    )
    return accept, score


def topk(logits: mx.array, k: int) -> tuple[mx.array, mx.array]:
    """The kernel where its backend is live; else the reference."""
    return dispatch(
        "candidate_topk",
        lambda executor: kernel_topk(logits, k, executor),
        lambda: reference_topk(logits, k),
        lambda got, want: self_check.exact(got[0], want[0]) and self_check.close(got[1], want[1]),
        takes=min(k, logits.shape[-1]) <= KMAX,
    )


def path_scores(
    probs: mx.array, hits: mx.array, trials: mx.array, prior_weight: float
) -> tuple[mx.array, mx.array]:
    """The kernel where its backend is live; else the reference."""
    return dispatch(
        "path_scores",
        lambda executor: kernel_path_scores(probs, hits, trials, prior_weight, executor),
        lambda: reference_path_scores(probs, hits, trials, prior_weight),
        self_check.close,
    )
