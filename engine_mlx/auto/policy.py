"""What a policy answers, and the simplest policy.

Every auto policy shares one interface (``choose(depth, current) -> Choice``, ``observe(...)``);
``Choice`` is its answer: the mode of the next step, and why, in words, when that is a switch.
``ThresholdPolicy`` is the rule other local apps use: above N context tokens switch to the
long-context mode (the app's Settings dialog sets N by hand). The default policy is
``rate_policy.ExpectedRatePolicy``.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def _switch_reason(current: Mode | None, forced: Mode, why: str) -> str:
    return "" if current in (None, forced) else f"{mode_name(forced)} {why}"
