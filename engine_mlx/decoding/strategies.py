"""Decoding strategies behind one small protocol.

A strategy turns the target's state into committed tokens, one step (one target forward) at a
time. Autoregressive decoding is the degenerate case: no draft, one token per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx

from engine_mlx.decoding.sampling import Sampler
from engine_mlx.models.target import TargetModel
from engine_mlx.stats import StepStats


@dataclass(frozen=True)
class StepOutcome:
    tokens: list[int]
    from_draft: list[bool]
    stats: StepStats


class Strategy(Protocol):
    name: str

    def begin(self, first_token: mx.array) -> None:
        """Take over after prefill; ``first_token`` (lazy) came from the prompt's logits."""

    def step(self, schedule_next: bool = True) -> StepOutcome:
        """Commit the next tokens. ``schedule_next=False`` when no further step will be
        asked for (saves a wasted forward at max_tokens)."""


class Autoregressive:
    """One token per step, pipelined like mlx-lm's ``generate_step``: the forward that
    feeds token n is queued (``async_eval``) before token n's value is read on the host, so
    Python overhead overlaps the computation. The queued token enters the cache only when
    it is fed; so the cache never holds a token that was not committed."""

    name = "ar"

    def __init__(self, target: TargetModel, cache: list[Any], sampler: Sampler) -> None:
        self.target = target
        self.cache = cache
        self.sampler = sampler
        self._pending: mx.array | None = None

    def begin(self, first_token: mx.array) -> None:
        self._pending = first_token
        mx.async_eval(first_token)

    def step(self, schedule_next: bool = True) -> StepOutcome:
        token = self._pending
        if token is None:
            raise RuntimeError("begin() was not called")
        if schedule_next:
            logits = self.target.forward(token.reshape(1), self.cache).logits
            self._pending = self.sampler.sample(logits[0, -1])
            mx.async_eval(self._pending)
        else:
            self._pending = None
        return StepOutcome(
            [int(token.item())], [False], StepStats(mode=self.name, committed=1, width=1)
        )
