"""The sampling filters in MLX ops, lazy: temperature, top-k, top-p and min-p. The definitions
``Sampler`` holds every path to; on a GPU they are the path (a lazily built step keeps plain
decoding's next forward queued), on the CPU the C filters (``cpu/sampler.c``) compute the same
in one pass a row.

Every rule here is a function of the values alone, never of the order an algorithm happens to
visit them in, so one row and a many-row verification (or a CPU and a GPU) keep the same
tokens: see ``top_k_indices`` and ``_top_p_min_p``.
"""

from __future__ import annotations

from typing import Protocol

import mlx.core as mx

BLOCK = 128  # tokens per block of the two-level top-k


class Params(Protocol):
    temperature: float
    top_k: int
    top_p: float
    min_p: float


def candidates(logits: mx.array, params: Params) -> tuple[mx.array | None, mx.array]:
    """Log-probabilities after temperature and the three filters, in Hugging Face's order
    (temperature, top-k, top-p, min-p): with top-k, ``(ids, logprobs)`` of the k survivors
    [..., k] (removed ones -inf); without, ``(None, logprobs)`` over the vocabulary.

    Top-p and min-p run on the k survivors alone: a positive temperature does not change
    which k survive, and sorting a whole vocabulary cost 37 ms a row on a 2-core CPU."""
    x = logits.astype(mx.float32) / max(params.temperature, 1e-6)
    vocab = x.shape[-1]
    if not 0 < params.top_k < vocab:
        return None, _top_p_min_p(x - mx.logsumexp(x, axis=-1, keepdims=True), params)
    ids = top_k_indices(x, params.top_k)
    best = mx.take_along_axis(x, ids, axis=-1)
    return ids, _top_p_min_p(best - mx.logsumexp(best, axis=-1, keepdims=True), params)


def dense(ids: mx.array | None, logprobs: mx.array, vocab: int) -> mx.array:
    """``candidates``' result over the whole vocabulary: -inf for every token not kept."""
    if ids is None:
        return logprobs
    out = mx.full((*logprobs.shape[:-1], vocab), -mx.inf, dtype=mx.float32)
    return mx.put_along_axis(out, ids, logprobs, axis=-1)


def filtered_logprobs(logits: mx.array, params: Params) -> mx.array:
    ids, logprobs = candidates(logits, params)
    return dense(ids, logprobs, logits.shape[-1])


def top_k_indices(x: mx.array, k: int) -> mx.array:
    """The ids of the ``k`` largest values on the last axis (in no particular order); where
    the k-th value is tied, the lowest ids among the tied tokens.

    Two levels, each a small search: the k blocks of ``BLOCK`` tokens with the largest maxima
    (ties: the lower block), then the k best among their tokens. The k best tokens lie in
    those blocks: a block outside them has k blocks ranked above it, each holding a token at
    least as good as any of its own (and, when equal, of a lower id)."""
    vocab = x.shape[-1]
    blocks = -(-vocab // BLOCK)
    if blocks < 4 * k:  # a small vocabulary: one search over all of it
        return _exact_top_k(x, k)
    if blocks * BLOCK != vocab:  # -inf tokens past the end: never above a real one
        pad = mx.full((*x.shape[:-1], blocks * BLOCK - vocab), -mx.inf, dtype=x.dtype)
        x = mx.concatenate([x, pad], axis=-1)
    grouped = x.reshape(*x.shape[:-1], blocks, BLOCK)
    chosen = mx.sort(_exact_top_k(mx.max(grouped, axis=-1), k), axis=-1)  # ascending ids
    inside = mx.take_along_axis(grouped, chosen[..., None], axis=-2)
    local = _exact_top_k(inside.reshape(*x.shape[:-1], k * BLOCK), k)
    return mx.take_along_axis(chosen, local // BLOCK, axis=-1) * BLOCK + local % BLOCK


def _exact_top_k(x: mx.array, k: int) -> mx.array:
    """``top_k_indices`` by one search: a partition alone breaks ties at the k-th value by
    where its algorithm happens to meet them, which a one-row and a many-row evaluation need
    not share, so the tied are counted in order."""
    n = x.shape[-1]
    kth = mx.partition(x, n - k, axis=-1)[..., n - k : n - k + 1]
    above = x > kth
    tied = x == kth
    room = k - mx.sum(above, axis=-1, keepdims=True)
    keep = above | (tied & (mx.cumsum(tied.astype(mx.int32), axis=-1) <= room))
    return mx.argpartition(-keep.astype(mx.int32), k - 1, axis=-1)[..., :k]


def _top_p_min_p(logprobs: mx.array, params: Params) -> mx.array:
    """Top-p then min-p over the candidates on the last axis, renormalised. Top-p keeps a
    token when the tokens strictly more likely than it hold less than ``top_p``: a group of
    equally likely tokens at the boundary is kept or dropped whole, whatever order a sort
    leaves them in (the first token is always kept)."""
    if params.top_p < 1.0:
        order = mx.argsort(-logprobs, axis=-1)
        sorted_lp = mx.take_along_axis(logprobs, order, axis=-1)
        mass_before = mx.cumsum(mx.exp(sorted_lp), axis=-1) - mx.exp(sorted_lp)
        first = mx.ones((*sorted_lp.shape[:-1], 1), dtype=mx.bool_)
        starts = mx.concatenate([first, sorted_lp[..., 1:] != sorted_lp[..., :-1]], axis=-1)
        mass_above = mx.cummax(mx.where(starts, mass_before, -mx.inf), axis=-1)
        keep_sorted = mass_above < params.top_p
        keep = mx.put_along_axis(mx.zeros_like(keep_sorted), order, keep_sorted, axis=-1)
        logprobs = mx.where(keep, logprobs, -mx.inf)
    if params.min_p > 0.0:
        top = mx.max(logprobs, axis=-1, keepdims=True)
        logprobs = mx.where(logprobs < top + mx.log(params.min_p), -mx.inf, logprobs)
    return logprobs - mx.logsumexp(logprobs, axis=-1, keepdims=True)
