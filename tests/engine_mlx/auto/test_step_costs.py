"""Step costs: interpolated between measured cells, refined by real steps, calibrated once per
machine and model and cached; a stale or damaged cache is refused with a reason."""

from __future__ import annotations

import json
import time

import pytest

from engine_mlx.auto import step_costs
from engine_mlx.auto.step_costs import StaleCosts, StepCosts, from_json, load_or_calibrate


def _table() -> StepCosts:
    return StepCosts({(1, 0): 0.030, (8, 0): 0.044, (1, 1000): 0.040, (8, 1000): 0.060})


def test_costs_interpolate_in_tokens_and_depth_and_extrapolate_in_depth():
    costs = _table()
    assert costs.verify_s(1, 0) == pytest.approx(0.030)
    assert costs.verify_s(4, 0) == pytest.approx(0.030 + 0.014 * 3 / 7)
    assert costs.verify_s(1, 500) == pytest.approx(0.035)
    assert costs.verify_s(8, 3000) == pytest.approx(0.060 + 0.016 * 2)  # along the last slope
    assert costs.verify_s(20, 0) > costs.verify_s(8, 0)


def test_a_busy_machine_slows_every_forward_not_only_the_one_being_measured():
    costs = _table()
    for _ in range(40):
        costs.observe_verify(1, 0, 0.060)  # only plain steps run, at twice the calibration
    assert costs.verify_s(1, 0) == pytest.approx(0.060)
    # The drafting sizes and the other depths, not measured, are priced at the same pace:
    # left at their calibration, they would look twice as cheap as plain decoding's steps.
    assert costs.verify_s(8, 0) / costs.verify_s(1, 0) == pytest.approx(0.044 / 0.030, rel=0.1)
    assert costs.verify_s(1, 1000) / costs.verify_s(1, 0) == pytest.approx(0.040 / 0.030, rel=0.1)
    for _ in range(40):
        costs.observe_verify(1, 0, 0.030)  # and idle again
    assert costs.verify_s(8, 0) == pytest.approx(0.044, rel=0.05)


def test_one_slow_step_moves_nothing_but_a_slower_machine_is_followed_within_three():
    costs = _table()
    costs.observe_verify(8, 0, 0.200)  # a page fault, the collector: one step 4.5x slower
    assert costs.verify_s(8, 0) == pytest.approx(0.044)
    assert costs.pace == pytest.approx(1.0)
    costs.observe_verify(8, 0, 0.044)
    for _ in range(3):
        costs.observe_verify(8, 0, 0.066)  # the machine is busy now: 1.5x
    assert costs.verify_s(8, 0) == pytest.approx(0.066, rel=0.1)
    assert costs.verify_s(1, 0) == pytest.approx(0.045, rel=0.1)  # every size at that pace


def test_a_size_wrong_by_itself_is_corrected_in_its_cell():
    costs = _table()
    for _ in range(15):  # steps of both sizes; 8 tokens take 30% less than calibrated
        costs.observe_verify(1, 0, 0.030)
        costs.observe_verify(8, 0, 0.031)
    assert costs.verify_s(1, 0) == pytest.approx(0.030, rel=0.03)
    assert costs.verify_s(8, 0) == pytest.approx(0.031, rel=0.03)
    # A share of the disagreement reads as the machine's pace (the two cannot be told
    # apart from these steps alone): the cells nobody measured move, by less than the error.
    assert 0.8 < costs.verify_s(1, 1000) / 0.040 < 1.0


def test_an_extrapolated_cell_takes_its_first_measurement():
    costs = _table()
    costs.observe_verify(1, 4000, 0.050)  # the slope of 0-1000 says ~0.070
    assert costs.verify_s(1, 4000) == pytest.approx(0.050, rel=0.03)
    assert costs.pace == 1.0  # the extrapolation was wrong, not the machine


def test_the_cache_round_trips_and_refuses_stale_or_damaged_files():
    costs = _table()
    data = json.loads(json.dumps(costs.to_json()))
    back = from_json(data)
    assert back.verify == costs.verify
    with pytest.raises(StaleCosts, match="days old"):
        from_json({**data, "written": time.time() - 90 * 86400})
    with pytest.raises(StaleCosts, match="another version"):
        from_json({**data, "format": 99})
    with pytest.raises(StaleCosts, match="damaged"):
        from_json({**data, "verify": [[1, 0, -1.0]]})
    with pytest.raises(StaleCosts, match="incomplete"):
        from_json({**data, "verify": data["verify"][:-1]})
    with pytest.raises(StaleCosts, match="damaged"):
        from_json({**data, "verify": "abc"})


def test_calibration_runs_once_per_machine_and_model_then_comes_from_the_cache(
    tiny_target, tmp_path, monkeypatch
):
    monkeypatch.setenv("FLASHCHAT_STEP_COSTS", str(tmp_path))
    target = tiny_target("llama")
    lines: list[str] = []
    first = load_or_calibrate(target, log=lines.append)
    assert first.note.startswith("calibrated now") and len(lines) == 1
    fits = {d for d in step_costs.DEPTHS if d + max(step_costs.TOKENS) < target.spec.max_context}
    assert {d for _, d in first.verify} == fits and 0 in fits
    assert all(s > 0 for s in first.verify.values())
    path = step_costs.cache_file(target)
    assert path.exists() and target.spec.name in path.name
    again = load_or_calibrate(target, log=lines.append)
    assert again.note == "from this machine's calibration" and again.verify == first.verify
    assert len(lines) == 1
    other = tiny_target("qwen3")
    assert step_costs.cache_file(other) != path  # keyed by model
    monkeypatch.setattr(step_costs, "cpu_signature", lambda: "another CPU")
    assert step_costs.cache_file(target) != path  # and by machine
    monkeypatch.undo()
    monkeypatch.setattr(step_costs, "kernels_digest", lambda: "another build")
    assert step_costs.cache_file(target) != path  # and by the engine's kernels
    monkeypatch.undo()
    monkeypatch.setenv("FLASHCHAT_STEP_COSTS", str(tmp_path))
    path.write_text("{not json")
    lines.clear()
    redone = load_or_calibrate(target, log=lines.append)
    assert redone.note.startswith("calibrated now")
    assert "not used" in lines[0] and "measuring again" in lines[0]
    assert json.loads(path.read_text())["format"] == step_costs.FORMAT


def test_a_depth_beyond_the_calibration_gets_its_own_cells():
    costs = _table()
    at_1000 = costs.verify_s(1, 1000)
    for _ in range(60):
        costs.observe_verify(1, 4000, 0.200)  # much slower than the extrapolation says
    assert costs.verify[(1, 1000)] == pytest.approx(at_1000)  # the measured cells stay
    assert costs.verify_s(1, 4000) == pytest.approx(0.200, rel=0.03)
    assert {d for _, d in costs.verify} == {0, 1000, 4096}
    assert from_json(json.loads(json.dumps(costs.to_json()))).verify == costs.verify


def test_a_calibration_is_made_consistent_in_depth_and_tokens():
    measured = {(1, 0): 0.115, (4, 0): 0.180, (8, 0): 0.346,  # 8 at depth 0: a slow moment
                (1, 1024): 0.114, (4, 1024): 0.172, (8, 1024): 0.206}  # fmt: skip
    fixed = step_costs.consistent(measured)
    assert fixed[(8, 0)] == pytest.approx(0.206)  # no dearer than deeper in the context
    assert fixed[(4, 0)] == pytest.approx(0.172) and fixed[(1, 0)] == pytest.approx(0.114)
    assert fixed[(8, 1024)] == pytest.approx(0.206)  # the deepest cells stand
    spike = step_costs.consistent({(1, 0): 0.250, (2, 0): 0.130, (4, 0): 0.170})
    assert [spike[(n, 0)] for n in (1, 2, 4)] == pytest.approx([0.130, 0.130, 0.170])
