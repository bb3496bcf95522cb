"""The auto-toggle: which decoding mode the next step uses, and why, in words.

Two policies share one interface (``choose(depth, current) -> Choice``, ``observe(...)``):

- ``ThresholdPolicy`` — the rule other local apps use: above N context tokens switch to the
  long-context mode.
- ``CostModelPolicy`` (the default) — per mode, the measured decode rate (tokens committed per
  second of step time, smoothed) as a function of context depth, in octave-wide depth buckets.
  It picks the mode with the best expected rate, switches only when the gain clears a
  hysteresis margin (no flapping at a crossing), and re-probes a mode whose estimate for the
  current depth is missing or stale, a few steps at a time, so one bad early measurement
  cannot lock a mode out. A forced mode overrides everything.

Rates, not tau alone, because a mode's step time grows differently with depth (a wide tree
verification pays attention over the whole context once per node).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MODE_NAMES = {"ar": "plain decoding", "dflash2": "DFlash2", "lookup": "prompt lookup", "mtp": "MTP"}


def mode_name(mode: str) -> str:
    return MODE_NAMES.get(mode, mode)


@dataclass(frozen=True)
class Choice:
    mode: str
    reason: str = ""  # non-empty when this choice is a switch


class ThresholdPolicy:
    """Short contexts use ``short_mode``, from ``threshold`` tokens on ``long_mode``."""

    def __init__(self, threshold: int, short_mode: str, long_mode: str) -> None:
        self.threshold, self.short_mode, self.long_mode = threshold, short_mode, long_mode
        self.forced: str | None = None

    def observe(self, mode: str, depth: int, committed: int, seconds: float) -> None:
        pass

    def choose(self, depth: int, current: str | None) -> Choice:
        if self.forced:
            return Choice(self.forced, _switch_reason(current, self.forced, "forced by the user"))
        mode = self.long_mode if depth >= self.threshold else self.short_mode
        why = f"context {depth:,} tokens, threshold {self.threshold:,}"
        return Choice(mode, why if current not in (None, mode) else "")


@dataclass
class _Estimate:
    committed: float = 0.0  # smoothed tokens per step
    seconds: float = 0.0  # smoothed seconds per step
    samples: int = 0
    last_step: int = 0  # policy step count when last observed

    @property
    def rate(self) -> float:
        return self.committed / self.seconds if self.seconds > 0 else 0.0


@dataclass
class CostModelPolicy:
    modes: list[str]
    preferred: str
    smoothing: float = 0.25
    hysteresis: float = 0.15
    probe_interval: int = 48  # steps between re-probes
    probe_steps: int = 4  # steps spent in a probed mode
    stale_after: int = 400  # steps after which an estimate is re-measured
    explore_after: int = 8  # a mode never measured anywhere is tried after this many steps
    min_samples: int = 3
    forced: str | None = None
    _table: dict[tuple[str, int], _Estimate] = field(default_factory=dict)
    _steps: int = 0
    _last_probe: int = 0
    _probing: str | None = None
    _probe_left: int = 0

    @staticmethod
    def bucket(depth: int) -> int:
        """Octaves of context: <512, <1k, <2k, <4k, ..."""
        return max(0, math.ceil(math.log2(max(depth, 1) / 512))) if depth >= 512 else 0

    def observe(self, mode: str, depth: int, committed: int, seconds: float) -> None:
        self._steps += 1
        est = self._table.setdefault((mode, self.bucket(depth)), _Estimate())
        a = self.smoothing if est.samples else 1.0
        est.committed += a * (committed - est.committed)
        est.seconds += a * (seconds - est.seconds)
        est.samples += 1
        est.last_step = self._steps

    def rate(self, mode: str, depth: int) -> float | None:
        """Expected tokens/s of ``mode`` at ``depth``: its own bucket, else the nearest
        measured one (preferring shallower, which is optimistic for the deeper context)."""
        b = self.bucket(depth)
        candidates = [
            (abs(bb - b), bb > b, est)
            for (m, bb), est in self._table.items()
            if m == mode and est.samples >= self.min_samples
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda c: (c[0], c[1]))[2].rate

    def _fresh(self, mode: str, depth: int) -> bool:
        est = self._table.get((mode, self.bucket(depth)))
        return (
            est is not None
            and est.samples >= self.min_samples
            and self._steps - est.last_step <= self.stale_after
        )

    def choose(self, depth: int, current: str | None) -> Choice:
        if self.forced:
            return Choice(self.forced, _switch_reason(current, self.forced, "forced by the user"))
        current = current or self.preferred
        if self._probing:
            if self._probe_left > 0:
                self._probe_left -= 1
                return Choice(self._probing)
            self._probing = None
        never = [m for m in self.modes if m != current and self.rate(m, depth) is None]
        due = self.explore_after if never else self.probe_interval
        if self._steps - self._last_probe >= due:
            stale = never or [m for m in self.modes if m != current and not self._fresh(m, depth)]
            if stale:
                probe = stale[0]
                self._probing, self._probe_left = probe, self.probe_steps - 1
                self._last_probe = self._steps
                return Choice(
                    probe,
                    f"context {depth:,} tokens: re-measuring {mode_name(probe)} "
                    f"({self.probe_steps} steps); its estimate here is missing or stale",
                )
        rates = {m: self.rate(m, depth) for m in self.modes}
        known = {m: r for m, r in rates.items() if r is not None}
        if not known:
            return Choice(current)
        best = max(known, key=known.__getitem__)
        here = known.get(current)
        if here is None:
            return Choice(
                best, _rates_reason(depth, best, current, known) if best != current else ""
            )
        if best != current and known[best] > here * (1 + self.hysteresis):
            return Choice(best, _rates_reason(depth, best, current, known))
        return Choice(current)


def _rates_reason(depth: int, to: str, frm: str | None, rates: dict[str, float]) -> str:
    parts = [f"{mode_name(to)} measured {rates[to]:.1f} tok/s"]
    if frm in rates:
        parts.append(f"{mode_name(frm)} {rates[frm]:.1f}")
    return f"context {depth:,} tokens: " + ", ".join(parts)


def _switch_reason(current: str | None, forced: str, why: str) -> str:
    return "" if current in (None, forced) else f"{mode_name(forced)} {why}"
