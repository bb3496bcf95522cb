"""The auto-toggle: which decoding mode the next step uses, and why, in words.

Two policies share one interface (``choose(depth, current) -> Choice``, ``observe(...)``):

- ``ThresholdPolicy`` — the rule other local apps use: above N context tokens switch to the
  long-context mode.
- ``CostModelPolicy`` (the default) — per mode, expected rate = tokens per step / seconds
  per step, the two learned separately because they vary for different reasons. Step time
  depends on the machine and the context depth, not on the text: it is kept per octave-wide
  depth bucket for the whole session and interpolated (or extrapolated along the last two
  buckets) where a depth was not measured. Tokens per step depends on the text: it restarts
  with every generation (plain decoding: always one). A mode is probed for a few steps only
  while its rate here is unknown and could plausibly beat the current mode (a drafter may do
  ``optimism`` times better on new text than last time), or when its estimate went stale;
  switches need the measured gain to clear a hysteresis margin (no flapping at a crossing).
  A forced mode overrides everything.

Rates, not tau alone, because a mode's step time grows differently with depth (a wide tree
verification pays attention over the whole context once per node).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from engine_mlx.modes import Mode
from engine_mlx.modes import mode_phrase as mode_name


@dataclass(frozen=True)
class Choice:
    mode: Mode
    reason: str = ""  # non-empty when this choice is a switch


class ThresholdPolicy:
    """Short contexts use ``short_mode``, from ``threshold`` tokens on ``long_mode``."""

    def __init__(self, threshold: int, short_mode: Mode, long_mode: Mode) -> None:
        self.threshold, self.short_mode, self.long_mode = threshold, short_mode, long_mode
        self.forced: Mode | None = None

    def observe(
        self, mode: Mode, depth: int, committed: int, seconds: float, stats: object = None
    ) -> None:
        pass

    def choose(self, depth: int, current: Mode | None) -> Choice:
        if self.forced:
            return Choice(self.forced, _switch_reason(current, self.forced, "forced by the user"))
        mode = self.long_mode if depth >= self.threshold else self.short_mode
        why = f"context {depth:,} tokens, threshold {self.threshold:,}"
        return Choice(mode, why if current not in (None, mode) else "")


@dataclass
class _Estimate:
    """One mode in one depth bucket. Step time is a property of the machine and the depth;
    tokens per step is a property of the text, so it restarts with every generation."""

    seconds: float = 0.0  # smoothed seconds per step
    depth: float = 0.0  # smoothed depth the seconds were measured at
    timed: int = 0  # steps whose time was measured (not the first after a switch)
    committed: float = 0.0  # smoothed tokens per step, this generation (else the last one's)
    samples: int = 0
    last_step: int = 0  # policy step count when last observed
    generation: int = -1  # the generation ``committed`` belongs to
    generation_samples: int = 0


@dataclass
class CostModelPolicy:
    modes: list[Mode]
    preferred: Mode
    smoothing: float = 0.25
    hysteresis: float = 0.15
    probe_steps: int = 3  # steps spent in a probed mode
    probe_interval: int = 48  # steps between re-measurements of stale estimates
    stale_after: int = 200  # steps after which an estimate is re-measured
    settle: int = 3  # steps of a generation before anything is probed
    optimism: float = 2.0  # how much better than last time a drafter may do on new text
    min_samples: int = 3  # steps before a mode's tokens per step count as measured
    min_timed: int = 2  # timed steps before its step time does
    forced: Mode | None = None
    _table: dict[tuple[Mode, int], _Estimate] = field(default_factory=dict)
    _steps: int = 0
    _generation: int = 0
    _generation_start: int = 0
    _last_probe: int = 0
    _probing: Mode | None = None
    _probe_left: int = 0
    _previous: Mode | None = None  # the mode of the last observed step

    @staticmethod
    def bucket(depth: int) -> int:
        """Octaves of context: <512, <1k, <2k, <4k, ..."""
        return max(0, math.ceil(math.log2(max(depth, 1) / 512))) if depth >= 512 else 0

    def observe(
        self, mode: Mode, depth: int, committed: int, seconds: float, stats: object = None
    ) -> None:
        """One step's outcome. The first step after a switch is not timed: it carries the
        switch's own work (the drafter catching up, the pipeline refilling), which would make
        every probed mode look slower than it is."""
        self._steps += 1
        est = self._table.setdefault((mode, self.bucket(depth)), _Estimate())
        stale = self._steps - est.last_step > self.stale_after
        if mode == self._previous:
            a = 1.0 if not est.timed or stale else self.smoothing
            est.seconds += a * (seconds - est.seconds)
            est.depth += a * (depth - est.depth)
            est.timed += 1
        self._previous = mode
        if est.generation != self._generation:
            est.generation, est.generation_samples = self._generation, 0
        a = self.smoothing if est.generation_samples else 1.0
        est.committed += a * (committed - est.committed)
        est.samples += 1
        est.generation_samples += 1
        est.last_step = self._steps

    def _recent(self, est: _Estimate) -> bool:
        return self._steps - est.last_step <= self.stale_after

    def _seconds(self, mode: Mode, depth: int) -> tuple[float | None, bool]:
        """Step time at ``depth`` and whether it was measured there: else interpolated
        between the depths measured, or extrapolated along the last two."""
        own = self._table.get((mode, self.bucket(depth)))
        if own is not None and own.timed >= self.min_timed and self._recent(own):
            return own.seconds, True
        points = sorted(
            (e.depth, e.seconds)
            for (m, _), e in self._table.items()
            if m == mode and e.timed >= self.min_timed
        )
        if not points:
            return None, False
        if depth <= points[0][0] or len(points) == 1:
            return (points[0][1] if depth <= points[0][0] else points[-1][1]), False
        for (d0, s0), (d1, s1) in itertools.pairwise(points):
            if depth <= d1:
                return s0 + (s1 - s0) * (depth - d0) / max(d1 - d0, 1.0), False
        (d0, s0), (d1, s1) = points[-2], points[-1]
        slope = max(0.0, (s1 - s0) / max(d1 - d0, 1.0))
        return s1 + slope * (depth - d1), False

    def _tokens(self, mode: Mode, depth: int) -> tuple[float | None, bool]:
        """Tokens per step and whether measured on this generation's text at this depth
        (plain decoding: always one); else the nearest measurement, from any text."""
        if mode == Mode.AR:
            return 1.0, True
        b = self.bucket(depth)
        own = self._table.get((mode, b))
        if (
            own is not None
            and own.generation == self._generation
            and own.generation_samples >= self.min_samples
            and self._recent(own)
        ):
            return own.committed, True
        near = [(abs(bb - b), bb > b, e) for (m, bb), e in self._table.items() if m == mode]
        if not near:
            return None, False
        return min(near, key=lambda c: (c[0], c[1]))[2].committed, False

    def rate(self, mode: Mode, depth: int) -> float | None:
        """Expected tokens/s of ``mode`` at ``depth`` (None: never measured)."""
        tokens, _ = self._tokens(mode, depth)
        seconds, _ = self._seconds(mode, depth)
        if tokens is None or seconds is None or seconds <= 0:
            return None
        return tokens / seconds

    def _known(self, mode: Mode, depth: int) -> bool:
        return self._tokens(mode, depth)[1] and self._seconds(mode, depth)[1]

    def _worth_probing(self, mode: Mode, depth: int, current_rate: float) -> float | None:
        """How fast ``mode`` might be here, if that is not known yet and could beat the
        current mode; None when a probe would only cost time."""
        tokens, tokens_known = self._tokens(mode, depth)
        seconds, seconds_known = self._seconds(mode, depth)
        own = self._table.get((mode, self.bucket(depth)))
        stale = own is not None and not self._recent(own)
        if tokens_known and seconds_known:
            return None
        if tokens is None or seconds is None or seconds <= 0:
            return math.inf
        best = tokens if tokens_known else tokens * self.optimism
        could = best / seconds
        if could > current_rate * (1 + self.hysteresis):
            return could
        if stale and self._steps - self._last_probe >= self.probe_interval:
            return could
        return None

    def _start(self, depth: int) -> Mode:
        """A new generation starts in the mode expected fastest, else the preferred one."""
        self._generation += 1
        self._generation_start = self._steps
        self._probing = None
        rates = {m: self.rate(m, depth) for m in self.modes}
        known = {m: r for m, r in rates.items() if r is not None}
        first = self.preferred if self.preferred not in known else max(known, key=known.get)
        self._previous = first
        return first

    def choose(self, depth: int, current: Mode | None) -> Choice:
        if self.forced:
            return Choice(self.forced, _switch_reason(current, self.forced, "forced by the user"))
        if current is None:
            return Choice(self._start(depth))
        if self._probing:
            if self._probe_left > 0:
                self._probe_left -= 1
                return Choice(self._probing)
            self._probing = None
        here = self.rate(current, depth)
        settled = self._steps - self._generation_start >= self.settle
        if here is not None and settled and self._known(current, depth):
            hopes = {m: self._worth_probing(m, depth, here) for m in self.modes if m != current}
            hopes = {m: h for m, h in hopes.items() if h is not None}
            if hopes:
                probe = max(hopes, key=hopes.__getitem__)
                self._probing, self._probe_left = probe, self.probe_steps - 1
                self._last_probe = self._steps
                return Choice(
                    probe,
                    f"context {depth:,} tokens: re-measuring {mode_name(probe)} "
                    f"({self.probe_steps} steps); its speed here is not known yet",
                )
        rates = {m: self.rate(m, depth) for m in self.modes}
        known = {m: r for m, r in rates.items() if r is not None}
        if not known:
            return Choice(current)
        best = max(known, key=known.__getitem__)
        if here is None:
            return Choice(
                best, _rates_reason(depth, best, current, known) if best != current else ""
            )
        if best != current and known[best] > here * (1 + self.hysteresis):
            return Choice(best, _rates_reason(depth, best, current, known))
        return Choice(current)


def _rates_reason(depth: int, to: Mode, frm: Mode | None, rates: dict[Mode, float]) -> str:
    parts = [f"{mode_name(to)} measured {rates[to]:.1f} tok/s"]
    if frm in rates:
        parts.append(f"{mode_name(frm)} {rates[frm]:.1f}")
    return f"context {depth:,} tokens: " + ", ".join(parts)


def _switch_reason(current: Mode | None, forced: Mode, why: str) -> str:
    return "" if current in (None, forced) else f"{mode_name(forced)} {why}"
