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
from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx

from engine_mlx.kernels.launch import Executor, Launch, dispatch

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


def walk_host(
    choice: Sequence[int], tokens: Sequence[int], parents: Sequence[int]
) -> tuple[list[int], int, int]:
    """The walk itself, the one definition the engine and the kernel are held to: from the
    root, descend to the child carrying the node's pick while there is one. Returns the
    accepted node ids (root excluded), the bonus token and the walked nodes that have
    children."""
    children: list[dict[int, int]] = [{} for _ in tokens]
    for node in range(1, len(tokens)):
        children[int(parents[node])][int(tokens[node])] = node
    node, path, tested = 0, [], 0
    while True:
        pick = int(choice[node])
        if children[node]:
            tested += 1
        child = children[node].get(pick)
        if child is None:
            return path, pick, tested
        path.append(child)
        node = child


def reference(
    scores: mx.array, tokens: mx.array, parents: mx.array, uniforms: mx.array | None = None
) -> WalkResult:
    """scores [L, V] logits (greedy) or probabilities (with ``uniforms`` [L])."""
    choice = reference_choice(scores, uniforms).tolist()
    path, bonus, tested = walk_host(choice, tokens.tolist(), parents.tolist())
    padded = path + [-1] * (tokens.shape[0] - len(path))
    return WalkResult(
        mx.array(padded, dtype=mx.int32),
        mx.array(len(path), dtype=mx.int32),
        mx.array(bonus, dtype=mx.int32),
        mx.array(tested, dtype=mx.int32),
    )


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
    return dispatch(
        "acceptance",
        lambda executor: kernel(scores, tokens, parents, uniforms, executor),
        lambda: reference(scores, tokens, parents, uniforms),
    )
