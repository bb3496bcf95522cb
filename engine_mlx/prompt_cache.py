"""The last prompt's prefill, kept so the next generation with that prompt (or one that
extends it) skips recomputing it: regenerating an answer, and the benchmark, which runs many
modes on one long prompt (an 8k-token prefill takes about a minute on a small CPU).

A prompt that only shares a beginning with the kept one reuses that common prefix where the
cache can be cut back (attention-only targets): a thinking model's next turn is rendered
without the reasoning the kept prompt ended in (Qwen3.5's template opens ``<think>`` in the
generation prompt, and drops earlier reasoning from the history), so the kept prompt is no
longer a prefix of it, yet all but its last few tokens are.

What is kept: the target's cache state after the prompt (MLX arrays are immutable, so holding
them costs no copy, and a restored cache writes into new buffers), the last position's logits,
and the captured layer features per prefill chunk, replayed to a drafter the first time it
meets the prompt, then its evaluated context, restored from then on (projecting a 4k-token
prompt again took the Qwen demo's drafter ~420 ms a reply). Features are captured for every
drafter the session has, so a prompt prefilled in one mode serves the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

import mlx.core as mx


@dataclass
class PrefilledPrompt:
    ids: tuple[int, ...]
    capture: tuple[int, ...]
    cache_state: list[tuple[type, Any, Any]]
    logits: mx.array
    chunks: list[tuple[list[int], list[mx.array]]] = field(default_factory=list)
    # Each drafter's evaluated context after the prompt (``Drafter.context_state``): the
    # features replayed, a drafter still had to project them all again in every reply.
    drafters: WeakKeyDictionary[Any, object] = field(default_factory=WeakKeyDictionary)

    def serves(self, prompt: Sequence[int], capture: tuple[int, ...]) -> bool:
        """True if ``prompt`` starts with this one and the features needed were captured."""
        n = len(self.ids)
        return (
            n <= len(prompt) and tuple(prompt[:n]) == self.ids and set(capture) <= set(self.capture)
        )

    def common_prefix(self, prompt: Sequence[int], capture: tuple[int, ...]) -> int:
        """How many leading tokens of ``prompt`` this prefill holds, leaving at least one
        token of ``prompt`` to feed (its logits are the first token's); 0 when the features
        needed were not captured."""
        if not set(capture) <= set(self.capture):
            return 0
        n = 0
        for a, b in zip(self.ids, prompt, strict=False):
            if a != b:
                break
            n += 1
        return min(n, len(prompt) - 1)

    def chunks_until(self, n: int) -> list[tuple[list[int], list[mx.array]]]:
        """The chunks of the first ``n`` tokens, the last one cut."""
        out, done = [], 0
        for ids, feats in self.chunks:
            if done >= n:
                break
            take = min(len(ids), n - done)
            out.append((ids[:take], [f[:, :take] for f in feats]))
            done += take
        return out

    def restore_cache(self) -> list[Any]:
        return restore_cache(self.cache_state)

    def features_for(self, capture: tuple[int, ...]) -> list[tuple[list[int], list[mx.array]]]:
        """Chunks with the features of ``capture`` only, in its order."""
        index = [self.capture.index(lid) for lid in capture]
        return [(ids, [feats[i] for i in index]) for ids, feats in self.chunks]


def snapshot_cache(cache: list[Any]) -> list[tuple[type, Any, Any]]:
    out = []
    for c in cache:
        meta = getattr(c, "meta_state", None)
        out.append((type(c), _detached(c.state), meta if meta not in ("", ()) else None))
    return out


def restore_cache(cache_state: list[tuple[type, Any, Any]]) -> list[Any]:
    """New caches from ``snapshot_cache``'s state, which stays as it was."""
    caches = []
    for cls, state, meta in cache_state:
        cache = cls.from_state(_detached(state))
        if meta is not None:
            cache.meta_state = meta
        caches.append(cache)
    return caches


def _detached(state: Any) -> Any:
    """A new container around the same arrays: recurrent caches hand out (and adopt) their
    own list, which they then update in place."""
    if isinstance(state, list):
        return [_detached(x) for x in state]
    if isinstance(state, tuple):
        return tuple(_detached(x) for x in state)
    return state


def kv_until_offset(cache: Any) -> tuple[mx.array, mx.array, int]:
    """A key-value cache's state up to its offset, to keep: restored, the next token goes to
    a new buffer, and the kept arrays are never written (mlx-lm's cache writes into its spare
    room in place)."""
    n = cache.offset
    return cache.keys[..., :n, :], cache.values[..., :n, :], n


@dataclass
class PrefillSlot:
    """Where a session keeps its last prefill for the next reply, and the layers every one of
    its drafters reads (so a kept prefill serves them all). A generation fills it."""

    capture: tuple[int, ...]
    prefilled: PrefilledPrompt | None = None
