"""Auto mode: which decoding mode runs each step, and how long a draft it verifies.

What the session uses: ``ExpectedRatePolicy`` (the default: the mode and draft length with the
most expected tokens per second, from the drafts' calibrated acceptance and this machine's
step costs; its parts are ``length_plan``, ``looks`` and ``mode_choice``), ``ThresholdPolicy``
(a fixed context depth, set by hand in the app's Settings), and ``StepCosts`` with
``load_or_calibrate`` (what a verify forward costs here, measured once and cached).
``forward_timing`` times forwards for the calibration and the benchmarks.
"""

from engine_mlx.auto.policy import ThresholdPolicy
from engine_mlx.auto.rate_policy import ExpectedRatePolicy
from engine_mlx.auto.step_costs import StepCosts, load_or_calibrate

Policy = ExpectedRatePolicy | ThresholdPolicy

__all__ = [
    "ExpectedRatePolicy",
    "Policy",
    "StepCosts",
    "ThresholdPolicy",
    "load_or_calibrate",
]
