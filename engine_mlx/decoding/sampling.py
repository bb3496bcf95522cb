"""Logits -> next tokens: repetition penalty, temperature, top-k, top-p, min-p, with a seeded
RNG.

mlx-lm's ``make_sampler`` builds a closure over the global MLX RNG; FlashChat needs the
filtered *distribution* too (the sampled acceptance rule compares against it) and its own
key per generation so a seed reproduces a reply whatever else runs in the process. mlx-lm's
repetition penalty looks back over a window of the tokens it has generated; verification needs
the penalty of every tree node from its own path (``Sampler.context``), over the whole
context as Hugging Face applies it (the Qwen demo's recommended settings assume that).

One definition, two implementations: MLX ops (``filters``, lazy) on a GPU, and on the CPU the
C filters (``cpu/sampler.c``): MLX's CPU ops took ~6 ms of a ~19 ms step for the vocabulary's
dozen passes, the C one pass. A sampled token is drawn among the survivors, never from a
vocabulary-sized array; ``logprobs`` builds that distribution for the callers that read it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import mlx.core as mx
import numpy as np

from engine_mlx import compute_path
from engine_mlx.cpu.sampler import Filtered, Filters, HostSampler, host_sampler
from engine_mlx.decoding import filters


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
    """Log-probabilities over the last axis after temperature and the three filters (no
    penalty); removed tokens get -inf."""
    return Sampler(params).logprobs(logits)


def penalise(logits: mx.array, seen: mx.array, penalty: float) -> mx.array:
    """Hugging Face's repetition penalty: the logit of every token marked in ``seen`` (a 0/1
    mask broadcastable to ``logits``) is divided by ``penalty`` when positive and multiplied
    by it when not, once however often the token occurred."""
    x = logits.astype(mx.float32)
    return mx.where(seen > 0, mx.where(x > 0, x / penalty, x * penalty), x)


def penalise_ids(logits: mx.array, ids: mx.array, penalty: float) -> mx.array:
    """``penalise`` for the tokens ``ids`` [..., n] (each row's, repeats allowed): only their
    logits are read and written, not a vocabulary-sized mask per row."""
    x = logits.astype(mx.float32)
    values = mx.take_along_axis(x, ids, axis=-1)
    return mx.put_along_axis(x, ids, penalise(values, mx.array(1.0), penalty), axis=-1)


class ForcingRule(Protocol):
    """A rule that, from a context, may call for one token (``thinking.ThinkingBudget``)."""

    def remember(self, tokens: Sequence[int]) -> None: ...

    def forced(self, pending: Sequence[int]) -> int | None: ...


@dataclass(frozen=True)
class Context:
    """What each row's distribution counts besides its logits and the committed context."""

    extra: mx.array | None  # [..., n]: tokens before the row, not committed (penalised)
    forced: list[int | None] | None  # per row, the one token a forcing rule calls for


class Sampler:
    """Draws tokens with its own key stream: one seed -> one reproducible sequence. With a
    repetition penalty it also keeps the set of tokens in the context, which the generation
    extends as tokens are committed (``remember``). With a forcing rule (``forcing``, the
    thinking budget) a row whose context calls for a token gets that token alone.
    ``native=False`` keeps to the MLX ops on the CPU too (the bench and the tests)."""

    def __init__(
        self, params: SamplingParams, forcing: ForcingRule | None = None, *, native: bool = True
    ) -> None:
        self.params = params
        self.forcing = forcing
        self.native = native
        seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(4), "little")
        self.seed = seed
        self._key = mx.random.key(seed)
        self._rng = np.random.default_rng(seed)  # the C filters' uniforms
        self._seen: set[int] = set()
        self._pending: list[int] = []  # remembered, not yet in ``_seen``
        self._mask: np.ndarray | None = None  # [vocab] uint8 of ``_seen``, for the C filters
        self._ids: mx.array | None = None  # ``_seen`` as ids, for the MLX ops

    @property
    def penalises(self) -> bool:
        return self.params.repetition_penalty != 1.0

    def remember(self, tokens: Sequence[int]) -> None:
        """Tokens now in the context (the prompt, then every committed token)."""
        if self.penalises:
            self._pending.extend(int(t) for t in tokens)
        if self.forcing is not None:
            self.forcing.remember([int(t) for t in tokens])

    def _flush(self, vocab: int) -> None:
        fresh = [t for t in dict.fromkeys(self._pending) if t not in self._seen and 0 <= t < vocab]
        self._pending = []
        if not fresh:
            return
        self._seen.update(fresh)
        if self._mask is not None:
            self._mask[fresh] = 1  # read on the host, where called: no step queued reads it
        if self._ids is not None:  # a new array: a step queued earlier keeps the set it had
            self._ids = mx.concatenate([self._ids, mx.array(fresh, dtype=mx.int32)])

    def _seen_mask(self, vocab: int) -> np.ndarray:
        self._flush(vocab)
        if self._mask is None or self._mask.shape != (vocab,):
            self._mask = np.zeros(vocab, dtype=np.uint8)
            self._mask[list(self._seen)] = 1
        return self._mask

    def _seen_ids(self, vocab: int) -> mx.array:
        self._flush(vocab)
        if self._ids is None:
            self._ids = mx.array(sorted(self._seen), dtype=mx.int32)
        return self._ids

    def context(
        self,
        logits: mx.array,
        extra: mx.array | None = None,
        rows: Sequence[Sequence[int]] | None = None,
    ) -> Context:
        """Per row of ``logits`` [..., vocab]: the ``extra`` [..., k] token ids that precede it
        but are not committed yet (a tree node's path; the plain pipeline's newest token),
        penalised with the context's tokens; and, with a forcing rule, the token its context
        forces. ``rows``: per row, in order, the tokens after the remembered context (the
        rule reads them; a 1-D ``logits`` is one row)."""
        forced = None
        if self.forcing is not None:
            count = 1 if logits.ndim == 1 else logits.shape[0]
            forced = [self.forcing.forced(row) for row in (rows or [[]] * count)]
            forced = None if all(f is None for f in forced) else forced
        extra = extra.astype(mx.int32) if extra is not None and self.penalises else None
        return Context(extra, forced)

    def adjusted(
        self,
        logits: mx.array,
        extra: mx.array | None = None,
        rows: Sequence[Sequence[int]] | None = None,
    ) -> mx.array:
        """``logits`` with the repetition penalty over the context's tokens and each row's
        ``extra``, then every row whose context forces a token reduced to that token (lazy;
        arguments as for ``context``). Unchanged without a penalty or a rule."""
        return self._adjusted(logits, self.context(logits, extra, rows))

    def _adjusted(self, logits: mx.array, context: Context) -> mx.array:
        if self.penalises:
            ids = self._seen_ids(logits.shape[-1])
            ids = mx.broadcast_to(ids, (*logits.shape[:-1], ids.size))
            if context.extra is not None:
                ids = mx.concatenate([ids, context.extra], axis=-1)
            if ids.shape[-1]:
                logits = penalise_ids(logits, ids, self.params.repetition_penalty)
        if context.forced is None:
            return logits
        target = mx.array([-1 if f is None else f for f in context.forced], dtype=mx.int32)
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
        """The log-distribution each row's token is drawn from (arguments as for
        ``context``): the one definition that plain decoding, verification on the host and
        on the device, and the exact losslessness test all use. Greedy: 0 at the argmax (the
        lowest id on ties), -inf elsewhere."""
        context = self.context(logits, extra, rows)
        if self.params.greedy:
            top = mx.argmax(self._adjusted(logits, context), axis=-1, keepdims=True)
            hit = mx.arange(logits.shape[-1]) == top
            return mx.where(hit, 0.0, -mx.inf).astype(mx.float32)
        host = self._host()
        if host is not None:
            dense = self._on_host(host, logits, context, draw=False).dense
            return mx.array(dense.reshape(logits.shape))
        return filters.filtered_logprobs(self._adjusted(logits, context), self.params)

    def sample(
        self,
        logits: mx.array,
        extra: mx.array | None = None,
        rows: Sequence[Sequence[int]] | None = None,
    ) -> mx.array:
        """``logits`` [..., vocab] -> token ids [...], drawn from ``logprobs``'s distribution
        (arguments as for ``context``). Lazy where the MLX ops run (a GPU: plain decoding
        queues its next forward behind it); the C filters evaluate ``logits`` here."""
        context = self.context(logits, extra, rows)
        if self.params.greedy:  # the argmax itself, without building the one-hot rows
            return mx.argmax(self._adjusted(logits, context), axis=-1)
        host = self._host()
        if host is not None:
            tokens = self._on_host(host, logits, context, draw=True).tokens
            return mx.array(tokens.reshape(logits.shape[:-1]))
        ids, logprobs = filters.candidates(self._adjusted(logits, context), self.params)
        choice = mx.random.categorical(logprobs, key=self.next_key())
        if ids is None:
            return choice
        return mx.take_along_axis(ids, choice[..., None].astype(mx.int32), axis=-1)[..., 0]

    def picks(
        self,
        logits: mx.array,
        extra: mx.array | None = None,
        rows: Sequence[Sequence[int]] | None = None,
    ) -> Sequence[int]:
        """Each row's token, drawn as ``sample`` draws it but only when read: a verification
        walk reads the rows on its path (its accepted tokens and one more), so where the C
        filters run the other rows are never filtered. Each row's draw is independent, so
        which rows are drawn changes nothing of the distribution of those that are."""
        host = self._host()
        if host is None or self.params.greedy:
            return self.sample(logits, extra, rows).tolist()
        return _DrawnOnRead(self, host, logits, self.context(logits, extra, rows))

    def _host(self) -> HostSampler | None:
        """The C filters where they run: asked for, on the CPU, and built."""
        return host_sampler() if self.native and compute_path.cpu_path() else None

    def _on_host(
        self, host: HostSampler, logits: mx.array, context: Context, *, draw: bool
    ) -> Filtered:
        """The C filters over ``logits`` (evaluated here): a drawn token per row, or the
        distribution over the vocabulary."""
        request = self._host_request(logits, context)
        uniforms = self._rng.random(len(request.logits), dtype=np.float32) if draw else None
        return host.run(
            request.logits,
            request.filters,
            seen=request.seen,
            extra=request.extra,
            forced=request.forced,
            uniforms=uniforms,
            dense=not draw,
        )

    def _host_request(self, logits: mx.array, context: Context) -> _HostRequest:
        """The C filters' arguments for ``logits`` [..., vocab] (evaluated here) as rows."""
        vocab = logits.shape[-1]
        x = np.asarray(logits.astype(mx.float32)).reshape(-1, vocab)
        p = self.params
        top_k = p.top_k if 0 < p.top_k < vocab else 0
        asked = Filters(max(p.temperature, 1e-6), top_k, p.top_p, p.min_p, p.repetition_penalty)
        seen = self._seen_mask(vocab) if self.penalises and (self._pending or self._seen) else None
        extra = None if context.extra is None else np.asarray(context.extra).reshape(len(x), -1)
        forced = None
        if context.forced is not None:
            forced = np.array([-1 if f is None else f for f in context.forced], dtype=np.int32)
        return _HostRequest(x, asked, seen, extra, forced)


@dataclass(frozen=True)
class _HostRequest:
    logits: np.ndarray  # [rows, vocab] float32
    filters: Filters
    seen: np.ndarray | None
    extra: np.ndarray | None  # [rows, n]
    forced: np.ndarray | None  # [rows]


class _DrawnOnRead(Sequence[int]):
    """``Sampler.picks`` on the C filters: row i is filtered and drawn when first read."""

    def __init__(self, sampler: Sampler, host: HostSampler, logits: mx.array, context: Context):
        self._sampler, self._host = sampler, host
        self._request = sampler._host_request(logits, context)
        self._drawn: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._request.logits)

    def __getitem__(self, index):  # type: ignore[override]
        if not isinstance(index, int):
            return [self[i] for i in range(len(self))[index]]
        index = range(len(self))[index]
        if index not in self._drawn:
            r, one = self._request, slice(index, index + 1)
            self._drawn[index] = int(
                self._host.run(
                    r.logits[one],
                    r.filters,
                    seen=r.seen,
                    extra=None if r.extra is None else r.extra[one],
                    forced=None if r.forced is None else r.forced[one],
                    uniforms=self._sampler._rng.random(1, dtype=np.float32),
                ).tokens[0]
            )
        return self._drawn[index]
