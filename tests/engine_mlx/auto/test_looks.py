"""The looks alone: when the next look at a mode that is not running is due (less often at a
mode far behind, never beyond the looks' share of the time, soon when prompt lookup's cue beats
plain decoding, at once for every drafting mode on a new reply), and what a look records."""

from __future__ import annotations

import pytest

from engine_mlx.auto.length_plan import SMOOTHING, best_length, per_s
from engine_mlx.auto.looks import CUED_LOOK_EVERY, LOOK_BUDGET, TRIAL_WITHIN, Looks
from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.decoding.strategies import LengthPlan
from engine_mlx.modes import Mode

PLAIN_S = {0: 0.030, 1024: 0.040}  # a one-token forward at depth 0 and 1k


def _costs() -> StepCosts:
    """A forward over n tokens costs the depth's plain step plus 1 ms per extra token."""
    sizes = (1, 2, 4, 8, 16)
    return StepCosts({(n, d): s + (n - 1) / 1000 for n in sizes for d, s in PLAIN_S.items()})


def _looks(modes=(Mode.AR, Mode.DFLASH2), costs: StepCosts | None = None) -> Looks:
    table = costs or _costs()
    return Looks(list(modes), lambda: table)


def _gaps(looks: Looks, look_s: float, score: float, bar: float, depth: int = 0) -> list[int]:
    """Steps between looks over 300 plain steps, each look drafting ``[score]`` in
    ``look_s`` and measured against ``bar`` tokens/s."""
    gaps, last = [], None
    for step in range(300):
        due = looks.due(depth, Mode.AR)
        if due is not None:
            looks.observe(due, [score], look_s, depth, None, bar)
            if last is not None:
                gaps.append(step - last)
            last = step
        looks.stepped(Mode.AR)
    return gaps


def test_a_mode_far_behind_the_bar_is_looked_at_less_often_doubling_up_to_the_max():
    looks = _looks()
    plain = 1 / PLAIN_S[0]
    # 1 token in 31 ms (1 ms of draft): 0.97x plain, but the bar is a mode at twice plain's
    gaps = _gaps(looks, look_s=0.001, score=0.0, bar=2 * plain)
    assert gaps[:5] == [8, 16, 32, 32, 32]  # from every 4 steps, doubled by each look
    assert looks.record(Mode.DFLASH2).look_every == looks.max_look_every


def test_a_mode_near_the_bar_keeps_being_looked_at():
    looks = _looks()
    plain = 1 / PLAIN_S[0]
    gaps = _gaps(looks, look_s=0.001, score=0.0, bar=plain)  # 0.97x: within TRIAL_WITHIN
    assert set(gaps) == {looks.look_every}
    gaps = _gaps(_looks(), look_s=0.001, score=0.0, bar=0.96 / TRIAL_WITHIN * plain)
    assert set(gaps) == {looks.look_every}  # just within


def test_a_looks_time_budget_spaces_looks_further_apart_at_a_deeper_context():
    # A draft costs more with more context (5 ms at 0, 21 ms at 1k); the looks stay within
    # their share of plain decoding's time there.
    shallow = _gaps(_looks(), look_s=0.005, score=0.0, bar=0.0)
    deep = _gaps(_looks(), look_s=0.021, score=0.0, bar=0.0, depth=1024)
    assert set(shallow) == {9}  # 5 ms / (2% of 30 ms) = 8.3 steps
    assert set(deep) == {27}  # 21 ms / (2% of 40 ms) = 26.25 steps
    assert all(gap * PLAIN_S[1024] * LOOK_BUDGET >= 0.021 for gap in deep)


def test_the_budget_is_shared_between_the_drafting_modes():
    looks = _looks((Mode.AR, Mode.DFLASH2, Mode.MTP))
    looked_s, steps = 0.0, 600
    for _ in range(steps):
        if (due := looks.due(0, Mode.AR)) is not None:
            looks.observe(due, [0.0], 0.030, 0, None, 0.0)  # a look costs a plain step
            looked_s += 0.030
        looks.stepped(Mode.AR)
    first_looks = 2 * 0.030  # both looked at once before their time was known
    assert looked_s <= LOOK_BUDGET * steps * PLAIN_S[0] + first_looks
    assert looked_s > LOOK_BUDGET * steps * PLAIN_S[0] / 2  # each mode its half, not less


def test_a_cue_that_beats_plain_brings_the_next_look_forward():
    looks = _looks()
    looks.observe(Mode.DFLASH2, [0.0], 0.010, 0, None, 0.0)  # by the budget: every 17 steps
    for _ in range(CUED_LOOK_EVERY):
        looks.stepped(Mode.AR)
    assert looks.due(0, Mode.AR) is None
    assert looks.due(0, Mode.AR, {Mode.DFLASH2: [0.1]}) is None  # a weak cue
    assert looks.due(0, Mode.AR, {Mode.DFLASH2: [0.9, 0.8, 0.7]}) is Mode.DFLASH2


def test_a_fresh_reply_looks_at_every_drafting_mode_first_the_running_one_too():
    looks = _looks((Mode.AR, Mode.DFLASH2, Mode.MTP))
    for mode in (Mode.DFLASH2, Mode.MTP):
        looks.observe(mode, [0.5], 0.002, 0, None, 0.0)
    assert looks.due(0, Mode.DFLASH2) is None  # both were just looked at
    looks.new_reply()
    looked = []
    while (due := looks.due(0, Mode.DFLASH2)) is not None:
        looked.append(due)
        looks.observe(due, [0.5], 0.002, 0, None, 0.0)
    assert looked == [Mode.DFLASH2, Mode.MTP]
    for _ in range(3 * looks.max_look_every):  # afterwards: never the running mode
        assert looks.due(0, Mode.DFLASH2) in (None, Mode.MTP)
        looks.stepped(Mode.AR)  # (the clock alone moves: DFlash2's last look only ages)


def test_a_drafting_modes_own_step_counts_as_a_look_at_it():
    looks = _looks()
    looks.stepped(Mode.DFLASH2)
    for _ in range(looks.look_every):
        assert looks.due(0, Mode.AR) is None
        looks.stepped(Mode.AR)
    assert looks.due(0, Mode.AR) is Mode.DFLASH2


def test_looks_on_one_text_are_smoothed_and_a_new_texts_first_replaces_them():
    costs = _costs()
    looks = _looks(costs=costs)
    state = looks.record(Mode.DFLASH2)
    first = best_length(costs, [0.9, 0.8], 0.002, 0)
    second = best_length(costs, [0.1], 0.002, 0)
    looks.observe(Mode.DFLASH2, [0.9, 0.8], 0.002, 0, None, 0.0)
    assert state.look == first
    looks.observe(Mode.DFLASH2, [0.1], 0.002, 0, None, 0.0)
    step = SMOOTHING * 2 * (second.expected_tokens - first.expected_tokens)
    assert state.look.expected_tokens == pytest.approx(first.expected_tokens + step)
    looks.new_reply()
    looks.observe(Mode.DFLASH2, [0.1], 0.002, 0, None, 0.0)
    assert state.look == second  # the last text's looks are no forecast for this one


def test_a_look_is_repriced_at_the_machines_present_pace():
    costs = _costs()
    looks = _looks(costs=costs)
    state = looks.record(Mode.DFLASH2)
    looks.set_look(state, LengthPlan(1, 1.5, 0.045))
    for _ in range(10):  # the machine gets busy: plain steps take twice the table
        costs.observe_verify(1, 0, 2 * PLAIN_S[0])
    assert costs.pace == pytest.approx(2.0)
    repriced = looks.repriced(state)
    assert repriced is not None and repriced.predicted_s == pytest.approx(0.090)
    assert per_s(repriced) == pytest.approx(per_s(state.look) / 2)
    assert looks.repriced(looks.record(Mode.MTP)) is None  # never looked at


def test_a_mode_that_comes_near_again_is_looked_at_as_often_as_ever():
    looks = _looks()
    plain = 1 / PLAIN_S[0]
    _gaps(looks, look_s=0.001, score=0.0, bar=2 * plain)
    assert looks.record(Mode.DFLASH2).look_every == looks.max_look_every
    looks.observe(Mode.DFLASH2, [0.9, 0.8], 0.001, 0, None, 2 * plain)  # ~1.8x plain now
    assert looks.record(Mode.DFLASH2).look_every == looks.look_every


def test_a_new_reply_looks_at_once_only_at_modes_that_came_near_and_at_free_ones():
    looks = _looks((Mode.AR, Mode.LOOKUP, Mode.DFLASH2, Mode.MTP))
    plain = 1 / PLAIN_S[0]
    looks.observe(Mode.DFLASH2, [0.0], 0.020, 0, None, plain)  # far behind plain decoding
    looks.observe(Mode.MTP, [0.9, 0.9], 0.001, 0, None, plain)  # ahead of it
    assert not looks.record(Mode.DFLASH2).near and looks.record(Mode.MTP).near
    looks.new_reply()
    fresh = []
    while (due := looks.due(0, Mode.AR)) is not None and due not in fresh:
        fresh.append(due)
        looks.observe(due, [0.9, 0.9], 0.001, 0, None, plain)
    assert fresh == [Mode.LOOKUP, Mode.MTP]  # DFlash2 waits for its budgeted turn


def test_prompt_lookup_costs_no_budget_and_is_looked_at_every_step():
    looks = _looks((Mode.AR, Mode.LOOKUP, Mode.DFLASH2))
    gaps = _gaps(looks, look_s=0.00001, score=0.0, bar=1 / PLAIN_S[0])
    assert gaps.count(1) > 250  # (the budgeted DFlash2 looks come between)


def test_the_budget_counts_what_a_look_really_took_the_drafters_catch_up_included():
    looks = _looks()
    looks.observe(Mode.DFLASH2, [0.0], 0.005, 0, None, 0.0, spent_s=0.015)
    # 15 ms a look, 2% of 30 ms a step: one look every 25 steps, not every 9 (5 ms)
    for _ in range(24):
        looks.stepped(Mode.AR)
        assert looks.due(0, Mode.AR) is None
    looks.stepped(Mode.AR)
    assert looks.due(0, Mode.AR) is Mode.DFLASH2


def test_a_cue_must_beat_the_running_mode_not_only_plain_decoding():
    looks = _looks((Mode.AR, Mode.LOOKUP, Mode.DFLASH2))
    looks.observe(Mode.DFLASH2, [0.0], 0.010, 0, None, 0.0)
    for _ in range(CUED_LOOK_EVERY):
        looks.stepped(Mode.LOOKUP)
    cue = {Mode.DFLASH2: [0.9, 0.8, 0.7]}  # prompt lookup beats plain decoding here...
    assert looks.due(0, Mode.LOOKUP, cue, bar=0.0) is Mode.DFLASH2
    # ...but prompt lookup itself runs at 3x plain: drafting on top of it is no cue
    assert looks.due(0, Mode.LOOKUP, cue, bar=3 / PLAIN_S[0]) is None
