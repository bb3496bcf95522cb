"""The acceptance walk on the device (metal_kernels/acceptance.metal) and its MLX reference.

The rule is ``decoding.acceptance.walk``'s: at each node the target picks a token (argmax of
its logits when greedy; a sample of its filtered distribution otherwise); if a child of the
node carries it, accept and descend, else it is the bonus token. Here the picks are made
with given uniform randoms (inverse CDF: the first token whose cumulative probability exceeds
u times the total), so the whole step — picks, walk, path, bonus — stays on the device with
one read-back at the end instead of one per position. Sampling by inverse CDF draws exactly
from the distribution, so the walk stays lossless; it uses another random stream than
``mx.random.categorical``. Sibling tokens are distinct (``CandidateTree`` guarantees it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx

from engine_mlx.kernels.launch import Executor, Launch, live_executor

CHOICE = "fc_accept_choice"
WALK = "fc_accept_walk"
DTYPES = (mx.float16, mx.bfloat16, mx.float32)
MAX_THREADS = 256


@dataclass(frozen=True)
class WalkResult:
    path: mx.array  # [L] int32: accepted node ids (root excluded), then -1
    accepted: mx.array  # int32 scalar: accepted draft tokens
    bonus: mx.array  # int32 scalar: the target's token after the last accepted node
    tested: mx.array  # int32 scalar: walked nodes that have children


def reference_choice(scores: mx.array, uniforms: mx.array | None) -> mx.array:
    """Greedy (``uniforms`` None): argmax, first on ties. Sampled: ``scores`` are
    probabilities [L, V]; the first token whose cumulative probability exceeds u * total."""
    if uniforms is None:
        return mx.argmax(scores, axis=-1).astype(mx.int32)
    cdf = mx.cumsum(scores.astype(mx.float32), axis=-1)
    target = uniforms.astype(mx.float32) * cdf[:, -1]
    picks = mx.sum(cdf <= target[:, None], axis=-1)
    return mx.minimum(picks, scores.shape[-1] - 1).astype(mx.int32)


def ancestors(parents: mx.array) -> mx.array:
    """bool [L, L]: row i marks i and its ancestors (MLX ops, by walking up L times)."""
    n = parents.shape[0]
    idx = mx.arange(n)
    mask = idx[:, None] == idx[None, :]
    current = parents.astype(mx.int32)
    for _ in range(max(0, n - 1)):
        valid = current >= 0
        mask = mask | (valid[:, None] & (idx[None, :] == current[:, None]))
        current = mx.where(valid, parents[mx.maximum(current, 0)], -1)
    return mask


def reference_walk(choice: mx.array, tokens: mx.array, parents: mx.array) -> WalkResult:
    """The walk as array ops: a node is accepted iff every node from the root down to it
    carries its parent's pick; the accepted nodes form one path (distinct sibling tokens)."""
    n = tokens.shape[0]
    idx = mx.arange(n)
    parent = parents.astype(mx.int32)
    ok = (parent < 0) | (tokens == choice[mx.maximum(parent, 0)])
    anc = ancestors(parent)
    on_path = mx.all(mx.where(anc, ok[None, :], True), axis=1)
    depth = mx.sum(anc, axis=1) - 1
    accepted = (mx.sum(on_path) - 1).astype(mx.int32)
    order = mx.argsort(mx.where(on_path, depth, n + idx)).astype(mx.int32)
    path = mx.where(idx[: n - 1] < accepted, order[1:], -1) if n > 1 else mx.zeros((0,))
    path = mx.concatenate([path.astype(mx.int32), mx.array([-1], dtype=mx.int32)])
    last = mx.argmax(mx.where(on_path, depth, -1))
    has_child = mx.any(parent[None, :] == idx[:, None], axis=1)
    tested = mx.sum(on_path & has_child).astype(mx.int32)
    return WalkResult(path, accepted, choice[last].astype(mx.int32), tested)


def reference(
    scores: mx.array, tokens: mx.array, parents: mx.array, uniforms: mx.array | None = None
) -> WalkResult:
    """scores [L, V] logits (greedy) or probabilities (with ``uniforms`` [L])."""
    return reference_walk(reference_choice(scores, uniforms), tokens, parents)


def kernel(
    scores: mx.array,
    tokens: mx.array,
    parents: mx.array,
    uniforms: mx.array | None,
    executor: Executor,
    *,
    threads: int = MAX_THREADS,
) -> WalkResult:
    """``reference``'s result through the kernels, on ``executor``."""
    n, vocab = scores.shape
    if n == 0 or tokens.shape != (n,) or parents.shape != (n,):
        raise ValueError("a tree has at least its root; tokens and parents are [L]")
    if scores.dtype not in DTYPES:
        scores = scores.astype(mx.float32)
    sampled = uniforms is not None
    width = max(32, min(threads, 32 * math.ceil(vocab / 32)))
    (choice,) = executor(
        Launch(
            CHOICE,
            inputs=[
                scores,
                uniforms.astype(mx.float32) if sampled else mx.zeros((n,), dtype=mx.float32),
                mx.array([n, vocab], dtype=mx.int32),
            ],
            output_shapes=[(n,)],
            output_dtypes=[mx.int32],
            grid=(width, n, 1),
            threadgroup=(width, 1, 1),
            template=[("T", scores.dtype), ("SAMPLED", sampled)],
        )
    )
    path, result = executor(
        Launch(
            WALK,
            inputs=[
                choice,
                tokens.astype(mx.int32),
                parents.astype(mx.int32),
                mx.array([n], dtype=mx.int32),
            ],
            output_shapes=[(n,), (3,)],
            output_dtypes=[mx.int32, mx.int32],
            grid=(32, 1, 1),
            threadgroup=(32, 1, 1),
        )
    )
    return WalkResult(path, result[0], result[1], result[2])


def run(
    scores: mx.array, tokens: mx.array, parents: mx.array, uniforms: mx.array | None = None
) -> WalkResult:
    """The kernels where their backend is live; else the reference."""
    executor = live_executor()
    if executor is None:
        return reference(scores, tokens, parents, uniforms)
    return kernel(scores, tokens, parents, uniforms, executor)
