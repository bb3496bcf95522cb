"""Logits -> next tokens: repetition penalty, temperature, top-k, top-p, min-p, with a seeded
RNG.

mlx-lm's ``make_sampler`` builds a closure over the global MLX RNG; FlashChat needs the
filtered *distribution* too (the sampled acceptance rule compares against it) and its own
key per generation so a seed reproduces a reply whatever else runs in the process. mlx-lm's
repetition penalty looks back over a window of the tokens it has generated; verification needs
the penalty of every tree node from its own path (``Sampler.adjusted``), over the whole
context as Hugging Face applies it (the Qwen demo's recommended settings assume that).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import mlx.core as mx


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy; 0 / 1.0 / 0.0 / 1.0 disable top-k / top-p / min-p /
    the repetition penalty."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.top_k < 0:
            raise ValueError("top-k must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top-p must be in (0, 1]")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError("min-p must be in [0, 1)")
        if not 0.0 < self.repetition_penalty <= 10.0:
            raise ValueError("the repetition penalty must be in (0, 10] (1 is off)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def filtered_logprobs(logits: mx.array, params: SamplingParams) -> mx.array:
    """Log-probabilities over the last axis after temperature and the three filters;
    removed tokens get -inf. Order as in Hugging Face: temperature, top-k, top-p, min-p.

    With top-k, the k best are found by partition and the other filters run on those k
    alone: sorting the whole vocabulary cost 37 ms a position for Qwen's 151,936 logits on a
    2-core CPU (400 ms for an 8-node verification, which sampled speculation then never
    repaid). Every rule here is a function of the values alone, never of the order an
    algorithm happens to visit them in, so one row and a many-row verification (or a CPU and
    a GPU) keep the same tokens: see ``top_k_indices`` and ``_top_p_min_p``."""
    x = logits.astype(mx.float32) / max(params.temperature, 1e-6)
    vocab = x.shape[-1]
    if not 0 < params.top_k < vocab:
        return _top_p_min_p(x - mx.logsumexp(x, axis=-1, keepdims=True), params)
    idx = top_k_indices(x, params.top_k)
    best = mx.take_along_axis(x, idx, axis=-1)
    kept = _top_p_min_p(best - mx.logsumexp(best, axis=-1, keepdims=True), params)
    out = mx.full(x.shape, -mx.inf, dtype=mx.float32)
    return mx.put_along_axis(out, idx, kept, axis=-1)


def top_k_indices(x: mx.array, k: int) -> mx.array:
    """The ids of the ``k`` largest values on the last axis (in no particular order). Where
    the k-th value is tied, the lowest ids among the tied tokens are kept: a partition alone
    breaks such ties by where its algorithm happens to meet them, which a one-row and a
    many-row evaluation need not share."""
    vocab = x.shape[-1]
    kth = mx.partition(x, vocab - k, axis=-1)[..., vocab - k : vocab - k + 1]
    above = x > kth
    tied = x == kth
    room = k - mx.sum(above, axis=-1, keepdims=True)
    keep = above | (tied & (mx.cumsum(tied.astype(mx.int32), axis=-1) <= room))
    return mx.argpartition(-keep.astype(mx.int32), k - 1, axis=-1)[..., :k]


def _top_p_min_p(logprobs: mx.array, params: SamplingParams) -> mx.array:
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


def penalise(logits: mx.array, seen: mx.array, penalty: float) -> mx.array:
    """Hugging Face's repetition penalty: the logit of every token marked in ``seen`` (a 0/1
    mask broadcastable to ``logits``) is divided by ``penalty`` when positive and multiplied
    by it when not, once however often the token occurred."""
    x = logits.astype(mx.float32)
    return mx.where(seen > 0, mx.where(x > 0, x / penalty, x * penalty), x)


class ForcingRule(Protocol):
    """A rule that, from a context, may call for one token (``thinking.ThinkingBudget``)."""

    def remember(self, tokens: Sequence[int]) -> None: ...

    def forced(self, pending: Sequence[int]) -> int | None: ...


class Sampler:
    """Draws tokens with its own key stream: one seed -> one reproducible sequence. With a
    repetition penalty it also keeps the set of tokens in the context, which the generation
    extends as tokens are committed (``remember``). With a forcing rule (``forcing``, the
    thinking budget) a row whose context calls for a token gets that token alone."""

    def __init__(self, params: SamplingParams, forcing: ForcingRule | None = None) -> None:
        self.params = params
        self.forcing = forcing
        seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(4), "little")
        self.seed = seed
        self._key = mx.random.key(seed)
        self._seen: mx.array | None = None  # [vocab] 0/1, made at the first penalised logits
        self._pending: list[int] = []  # remembered, not yet in ``_seen``

    @property
    def penalises(self) -> bool:
        return self.params.repetition_penalty != 1.0

    def remember(self, tokens: Sequence[int]) -> None:
        """Tokens now in the context (the prompt, then every committed token)."""
        if self.penalises:
            self._pending.extend(int(t) for t in tokens)
        if self.forcing is not None:
            self.forcing.remember([int(t) for t in tokens])

    def _seen_mask(self, vocab: int) -> mx.array:
        if self._seen is None:
            self._seen = mx.zeros((vocab,), dtype=mx.float32)
        if self._pending:  # a new array: a step queued earlier keeps the set it was built on
            idx = mx.array(self._pending, dtype=mx.int32)
            ones = mx.ones(idx.shape, dtype=mx.float32)
            self._seen = mx.put_along_axis(self._seen, idx, ones, axis=0)
            self._pending = []
        return self._seen

    def adjusted(
        self,
        logits: mx.array,
        extra: mx.array | None = None,
        rows: Sequence[Sequence[int]] | None = None,
    ) -> mx.array:
        """``logits`` [..., vocab] with the repetition penalty over the context's tokens and,
        per row, the ``extra`` [..., k] token ids that precede that row but are not committed
        yet (a tree node's path; the plain pipeline's newest token); then, with a forcing
        rule, every row whose context forces a token reduced to that token. ``rows``: per
        row, in order, the tokens after the remembered context (the rule reads them; a
        1-D ``logits`` is one row). Unchanged without a penalty or a rule."""
        if self.penalises:
            seen = self._seen_mask(logits.shape[-1])
            if extra is not None:
                extra = extra.astype(mx.int32)
                seen = mx.broadcast_to(seen, (*extra.shape[:-1], logits.shape[-1]))
                seen = mx.put_along_axis(seen, extra, mx.ones(extra.shape, mx.float32), axis=-1)
            logits = penalise(logits, seen, self.params.repetition_penalty)
        if self.forcing is None:
            return logits
        pending = rows if rows is not None else [[]] * (1 if logits.ndim == 1 else logits.shape[0])
        forced = [self.forcing.forced(row) for row in pending]
        if all(f is None for f in forced):
            return logits
        target = mx.array([-1 if f is None else f for f in forced], dtype=mx.int32)
        target = target.reshape(()) if logits.ndim == 1 else target[:, None]
        hit = mx.arange(logits.shape[-1]) == target
        x = logits.astype(mx.float32)
        return mx.where(target < 0, x, mx.where(hit, 0.0, -mx.inf))

    def next_key(self) -> mx.array:
        self._key, sub = mx.random.split(self._key)
        return sub

    def logprobs(
        self,
        logits: mx.array,
        extra: mx.array | None = None,
        rows: Sequence[Sequence[int]] | None = None,
    ) -> mx.array:
        """The log-distribution each row's token is drawn from (``extra`` and ``rows`` as for
        ``adjusted``): the one definition that plain decoding, verification on the host and
        on the device, and the exact losslessness test all use. Greedy: 0 at the argmax (the
        lowest id on ties), -inf elsewhere."""
        logits = self.adjusted(logits, extra, rows)
        if self.params.greedy:
            top = mx.argmax(logits, axis=-1, keepdims=True)
            hit = mx.arange(logits.shape[-1]) == top
            return mx.where(hit, 0.0, -mx.inf).astype(mx.float32)
        return filtered_logprobs(logits, self.params)

    def draw(self, logprobs: mx.array) -> mx.array:
        """One token per row of ``logprobs`` (from ``logprobs``), with this sampler's next
        key (lazy)."""
        return mx.random.categorical(logprobs, key=self.next_key())

    def sample(
        self,
        logits: mx.array,
        extra: mx.array | None = None,
        rows: Sequence[Sequence[int]] | None = None,
    ) -> mx.array:
        """``logits`` [..., vocab] -> token ids [...] (lazy: no evaluation happens here),
        drawn from ``logprobs``; ``extra`` and ``rows`` as for ``adjusted``."""
        if self.params.greedy:  # the argmax itself, without building the one-hot rows
            return mx.argmax(self.adjusted(logits, extra, rows), axis=-1)
        return self.draw(self.logprobs(logits, extra, rows))
