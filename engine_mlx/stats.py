"""Statistics, defined once for the app, the CLI, the bench and the tests.

- step: one target verification forward (the prefill forward that yields the first token
  counts as the first step).
- tau: tokens committed per step, bonus token included (plain decoding: 1.0).
- acceptance rate: accepted draft tokens / draft tokens tested, where tested counts the draft
  positions on the path the verifier walked, up to and including the first rejection.
  Undefined (None) when nothing was drafted.
- decode tok/s: tokens after the first / seconds since the first token.
- live tok/s: tokens committed in the last ``window_s`` seconds / the span they cover.
- prefill tok/s: prompt tokens / prefill seconds; TTFT: start to first token.
- context depth: tokens in the target's cache that belong to the conversation.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from engine_mlx.modes import Mode


@dataclass(frozen=True)
class StepStats:
    mode: Mode
    committed: int
    drafted: int = 0
    tested: int = 0
    accepted: int = 0
    width: int = 0
    seconds: float = 0.0
    draft_s: float = 0.0  # proposing candidates (drafter forward, top-k, tree building)
    verify_s: float = 0.0  # the target's verification forward, its picks and the walk
    commit_s: float = 0.0  # cache compaction / rollback, drafter update
    # What the auto policy expected of this step before verifying it (0: no prediction).
    predicted_tokens: float = 0.0
    predicted_s: float = 0.0


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int
    generated_tokens: int
    steps: int
    tau: float
    acceptance_rate: float | None
    decode_tps: float
    prefill_tps: float
    ttft_s: float
    total_s: float
    context_depth: int
    max_context: int
    drafted: int
    tested: int
    accepted: int
    modes: dict[str, int] = field(default_factory=dict)
    reused_prompt_tokens: int = 0  # prompt tokens whose prefill was kept from before
    # Which kernel path ran and the calls per kernel op ({"path": "emulated", "calls": {...}});
    # a silent fallback to a reference shows as "fallbacks", a kernel that failed its first-use
    # check as "switched_off" (op -> why; ``kernels.self_check``).
    kernels: dict[str, Any] = field(default_factory=dict)
    # Where the decode time went (``TimeSplit``): seconds per part, auto's bookkeeping too.
    time_split: dict[str, float] = field(default_factory=dict)
    # A thinking model's reply, per part ({"reasoning": {...}, "answer": {...}}: tokens,
    # steps, tau, acceptance_rate, seconds); empty for a model that does not think.
    segments: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


TIME_PARTS = ("plain", "draft", "verify", "looks", "policy", "switch", "output")
"""Where a reply's decode time goes: ``plain`` steps (plain decoding's forwards, in any mode);
``draft`` and ``verify`` of the steps that verified a draft (verify: forward, acceptance and
commit); ``looks``, drafts auto made and never verified (a drafter catching up included);
``policy``, auto's own bookkeeping (choosing, pricing, judging drafts against the text); and
``switch``, the first step after a change of mode (a drafter catching up, a pipeline
refilling); ``output``, the rest of the decode time, the same in every mode (detokenising,
the events, whoever reads them). Kept in every ``bench`` report, so that a cost auto adds
cannot hide in its tok/s."""


class TimeSplit:
    """Seconds per ``TIME_PARTS`` part over one reply's decode steps."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(TIME_PARTS, 0.0)

    def add(self, part: str, seconds: float) -> None:
        self.seconds[part] += seconds

    def add_step(self, step: StepStats, seconds: float, switched: bool) -> None:
        """One step's wall time (its own bookkeeping already taken out): a step that verified
        a draft splits into draft and verify, any other is a plain step."""
        if switched:
            self.add("switch", seconds)
        elif step.drafted > 0:
            draft = min(step.draft_s, seconds)
            self.add("draft", draft)
            self.add("verify", seconds - draft)
        else:
            self.add("plain", seconds)

    def as_dict(self, decode_s: float) -> dict[str, float]:
        """The parts, ``output`` what ``decode_s`` (the reply's decode time) leaves."""
        parts = dict(self.seconds)
        parts["output"] = max(0.0, decode_s - sum(parts.values()))
        return parts


@dataclass(frozen=True)
class LiveStats:
    """The running numbers after one step, as the live panel shows them."""

    tps: float  # live tok/s
    tau: float
    acceptance_rate: float | None
    context_depth: int


class LiveRate:
    """Tokens per second over a sliding time window: bursty multi-token commits would make a
    per-chunk rate spike, a window does not."""

    def __init__(self, window_s: float = 1.5) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, int]] = deque()

    def add(self, n: int, now: float) -> float:
        self._events.append((now, n))
        while len(self._events) > 2 and now - self._events[1][0] > self.window_s:
            self._events.popleft()
        return self.rate()

    def rate(self) -> float:
        if len(self._events) < 2:
            return 0.0
        span = self._events[-1][0] - self._events[0][0]
        tokens = sum(n for _, n in list(self._events)[1:])
        return tokens / span if span > 0 else 0.0


class StatsTracker:
    """Accumulates the numbers above during one generation."""

    def __init__(self, prompt_tokens: int, max_context: int, clock=time.perf_counter) -> None:
        self.clock = clock
        self.prompt_tokens = prompt_tokens
        self.reused_prompt_tokens = 0
        self.max_context = max_context
        self.t_start = clock()
        self.t_prefill_done: float | None = None
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.tokens = 0
        self.steps = 0
        self.drafted = self.tested = self.accepted = 0
        self.modes: dict[Mode, int] = {}
        self.context_depth = prompt_tokens
        self.live = LiveRate()

    def prefill_done(self) -> None:
        self.t_prefill_done = self.clock()

    def record(self, step: StepStats, context_depth: int) -> LiveStats:
        """Add one step; returns the running numbers."""
        now = self.clock()
        if self.t_first is None:
            self.t_first = now
        self.t_last = now
        self.tokens += step.committed
        self.steps += 1
        self.drafted += step.drafted
        self.tested += step.tested
        self.accepted += step.accepted
        self.modes[step.mode] = self.modes.get(step.mode, 0) + 1
        self.context_depth = context_depth
        return LiveStats(
            tps=self.live.add(step.committed, now),
            tau=self.tokens / self.steps,
            acceptance_rate=self.accepted / self.tested if self.tested else None,
            context_depth=context_depth,
        )

    def decode_seconds(self) -> float:
        """From the first token to the last (decode tok/s's denominator)."""
        if self.t_first is None or self.t_last is None:
            return 0.0
        return self.t_last - self.t_first

    def summary(self) -> GenerationStats:
        end = self.t_last if self.t_last is not None else self.clock()
        first = self.t_first
        decode_s = (end - first) if first is not None else 0.0
        prefill_s = (self.t_prefill_done or end) - self.t_start
        return GenerationStats(
            prompt_tokens=self.prompt_tokens,
            generated_tokens=self.tokens,
            steps=self.steps,
            tau=self.tokens / self.steps if self.steps else 0.0,
            acceptance_rate=self.accepted / self.tested if self.tested else None,
            decode_tps=(self.tokens - 1) / decode_s if decode_s > 0 and self.tokens > 1 else 0.0,
            prefill_tps=(self.prompt_tokens - self.reused_prompt_tokens) / prefill_s
            if prefill_s > 0
            else 0.0,
            ttft_s=(first - self.t_start) if first is not None else 0.0,
            total_s=self.clock() - self.t_start,
            context_depth=self.context_depth,
            max_context=self.max_context,
            drafted=self.drafted,
            tested=self.tested,
            accepted=self.accepted,
            modes=dict(self.modes),
            reused_prompt_tokens=self.reused_prompt_tokens,
        )
