"""The threshold policy: one mode below a context depth, another from it on, and a reason only
when that is a switch."""

from __future__ import annotations

from engine_mlx.auto.policy import ThresholdPolicy


def test_threshold_rule():
    policy = ThresholdPolicy(4096, "dflash2", "mtp")
    assert policy.choose(100, None).mode == "dflash2"
    switched = policy.choose(5000, "dflash2")
    assert switched.mode == "mtp" and "threshold 4,096" in switched.reason
    assert policy.choose(5001, "mtp").reason == ""


def test_a_forced_mode_overrides_the_threshold():
    policy = ThresholdPolicy(4096, "dflash2", "mtp")
    policy.forced = "mtp"
    assert policy.choose(100, None).mode == "mtp"
    forced = policy.choose(100, "dflash2")
    assert forced.mode == "mtp" and "forced by the user" in forced.reason
