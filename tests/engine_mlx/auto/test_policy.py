"""The auto-toggle on synthetic cost curves: switches at the crossing, no flapping, re-probing,
new text in a new generation, depths not measured yet, forced modes."""

from __future__ import annotations

from collections.abc import Callable

from engine_mlx.auto.policy import CostModelPolicy, ThresholdPolicy

Curve = Callable[[int], tuple[float, float]]  # depth -> (tokens per step, seconds per step)


def _simulate(policy, curves: dict[str, Curve], start: str | None, depth: int, steps: int):
    """Run the policy like the session does (``start=None``: a new generation, the policy
    picks the first mode); returns [(depth, mode, reason)] per step."""
    mode = start if start is not None else policy.choose(depth, None).mode
    trace = []
    for _ in range(steps):
        choice = policy.choose(depth, mode)
        mode = choice.mode
        tau, secs = curves[mode](depth)
        policy.observe(mode, depth, tau, secs)
        trace.append((depth, mode, choice.reason))
        depth += round(tau)
    return trace


def _switches(trace):
    return [(d, m, r) for d, m, r in trace if r and "re-measuring" not in r]


# DFlash2: tau 4, step time growing with depth (a wide verify pays attention per node): rate
# 4 / (0.1 + 1e-4 d). MTP: tau 2, flat 0.25 s: rate 8. They cross at depth 3,000.
CURVES: dict[str, Curve] = {
    "dflash2": lambda d: (4.0, 0.1 + 1e-4 * d),
    "mtp": lambda d: (2.0, 0.25),
}


def test_switches_after_the_crossing_and_says_why():
    policy = CostModelPolicy(["dflash2", "mtp"], preferred="dflash2", probe_interval=20)
    trace = _simulate(policy, CURVES, "dflash2", depth=100, steps=3000)
    switches = _switches(trace)
    to_mtp = [s for s in switches if s[1] == "mtp"]
    assert to_mtp, "never switched to MTP"
    depth, _, reason = to_mtp[0]
    assert 3000 <= depth <= 9000  # at or after the crossing (octave buckets + hysteresis)
    assert "MTP measured" in reason and "DFlash2" in reason and f"{depth:,}" in reason
    assert trace[0][1] == "dflash2" and trace[-1][1] == "mtp"
    # before the crossing the fast mode dominates
    early = [m for d, m, _ in trace if d < 3000]
    assert early.count("dflash2") > 0.8 * len(early)


def test_no_flapping_when_rates_are_close():
    flat: dict[str, Curve] = {"a": lambda d: (2.0, 0.200), "b": lambda d: (2.0, 0.195)}
    policy = CostModelPolicy(["a", "b"], preferred="a", probe_interval=10)
    trace = _simulate(policy, flat, "a", depth=0, steps=2000)
    assert len(_switches(trace)) <= 1  # 2.5% apart: inside the hysteresis


def test_reprobes_a_mode_that_measured_badly_once():
    state = {"calls": 0}

    def improving(d: int) -> tuple[float, float]:
        state["calls"] += 1
        return (3.0, 1.0) if state["calls"] <= 4 else (3.0, 0.1)  # slow at first, then fast

    curves: dict[str, Curve] = {"ar": lambda d: (1.0, 0.1), "dflash2": improving}
    policy = CostModelPolicy(["ar", "dflash2"], preferred="ar", probe_interval=16, stale_after=64)
    trace = _simulate(policy, curves, "ar", depth=0, steps=400)
    probes = [r for _, _, r in trace if "re-measuring" in r]
    assert len(probes) >= 2
    assert trace[-1][1] == "dflash2"  # found it fast after all


def test_forced_mode_wins():
    policy = CostModelPolicy(["dflash2", "mtp"], preferred="dflash2")
    policy.forced = "mtp"
    trace = _simulate(policy, CURVES, "dflash2", depth=0, steps=50)
    assert {m for _, m, _ in trace} == {"mtp"}
    assert "forced" in trace[0][2]


def test_threshold_rule():
    policy = ThresholdPolicy(4096, "dflash2", "mtp")
    assert policy.choose(100, None).mode == "dflash2"
    switched = policy.choose(5000, "dflash2")
    assert switched.mode == "mtp" and "threshold 4,096" in switched.reason
    assert policy.choose(5001, "mtp").reason == ""


def test_never_measured_modes_are_tried_early():
    curves: dict[str, Curve] = {m: (lambda d: (1.0, 0.1)) for m in ("ar", "lookup", "mtp")}
    policy = CostModelPolicy(["ar", "lookup", "mtp"], preferred="ar", settle=3)
    trace = _simulate(policy, curves, "ar", depth=0, steps=40)
    first_use = {m: next(i for i, (_, mode, _) in enumerate(trace) if mode == m) for m in curves}
    assert first_use["ar"] == 0
    assert first_use["lookup"] <= 4 and first_use["mtp"] <= 8


# Plain decoding 75 ms per token; DFlash2 156 ms per step whatever the text, its tokens per
# step depend on the text: 1.5 on prose (9.6 tok/s, plain is faster), 2.5 on code (16 tok/s).
PLAIN: Curve = lambda d: (1.0, 0.075)  # noqa: E731


def _dflash(tau: float) -> Curve:
    return lambda d: (tau, 0.156)


def test_new_text_gets_the_drafter_measured_again():
    policy = CostModelPolicy(["ar", "dflash2"], preferred="dflash2")
    prose = _simulate(policy, {"ar": PLAIN, "dflash2": _dflash(1.5)}, None, 0, 40)
    assert prose[-1][1] == "ar"  # learned that plain decoding wins on this text
    code = _simulate(policy, {"ar": PLAIN, "dflash2": _dflash(2.5)}, None, 0, 40)
    assert code[0][1] == "ar"  # starts with what was fastest last time ...
    used = [m for _, m, _ in code]
    assert used.count("dflash2") >= 32  # ... re-measures the drafter on the new text, keeps it


def test_a_mode_that_cannot_win_is_not_probed_again():
    # MTP: 1.2 tokens per 171 ms step (7 tok/s) against plain decoding's 13.3 tok/s.
    curves: dict[str, Curve] = {"ar": PLAIN, "mtp": lambda d: (1.2, 0.171)}
    policy = CostModelPolicy(["ar", "mtp"], preferred="ar")
    trace = _simulate(policy, curves, None, 0, 150)
    assert [m for _, m, _ in trace].count("mtp") == policy.probe_steps


def test_a_deeper_context_is_measured_not_assumed():
    # DFlash2 wins at depth 0 (2.5 tokens / 156 ms) but its step time explodes with depth
    # while its tokens per step fall; plain decoding slows gently.
    curves: dict[str, Curve] = {
        "ar": lambda d: (1.0, 0.075 + 2.5e-6 * d),
        "dflash2": lambda d: (2.5 if d < 4000 else 1.3, 0.156 + 4e-5 * d),
    }
    policy = CostModelPolicy(["ar", "dflash2"], preferred="dflash2")
    shallow = _simulate(policy, curves, None, 0, 30)
    assert [m for _, m, _ in shallow].count("dflash2") >= 24
    deep = _simulate(policy, curves, None, 4200, 40)
    switched = [i for i, (_, m, r) in enumerate(deep) if m == "ar" and r]
    assert switched and switched[0] <= 8, deep[:10]
    assert [m for _, m, _ in deep[12:]] == ["ar"] * (len(deep) - 12)


def test_step_time_is_interpolated_between_measured_depths():
    policy = CostModelPolicy(["ar"], preferred="ar")
    for depth, seconds in ((100, 0.1), (3000, 0.2)):
        for _ in range(3):
            policy.observe("ar", depth, 1, seconds)
    assert abs(policy.rate("ar", 1550) - 1 / 0.15) < 1e-6  # halfway
    assert abs(policy.rate("ar", 5900) - 1 / 0.3) < 1e-6  # along the last two


def test_the_first_step_after_a_switch_is_not_timed():
    # Plain decoding is the faster mode (13.3 tok/s against MTP's 7.6), but its first step
    # after a switch costs 0.3 s: timed, three probe steps would put it at ~5 tok/s.
    policy = CostModelPolicy(["ar", "mtp"], preferred="mtp")
    mode, previous, used = policy.choose(0, None).mode, None, []
    for _ in range(60):
        mode = policy.choose(0, mode).mode
        seconds = 0.3 if mode == "ar" and previous != "ar" else 0.075
        tokens, seconds = (1.0, seconds) if mode == "ar" else (1.3, 0.17)
        policy.observe(mode, 0, tokens, seconds)
        previous = mode
        used.append(mode)
    assert used[-40:] == ["ar"] * 40
