"""Drive the expected-rate policy through mode and draft-length changes on a schedule, so a
test can check that the output stays lossless across them whatever the machine's speed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine_mlx.auto.rate_policy import ExpectedRatePolicy
from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.modes import Mode


def drive_auto(
    monkeypatch: pytest.MonkeyPatch,
    costs_for_plan: Callable[[int], StepCosts],
    mode_for_choice: Callable[[int, Mode | None], Mode | None],
) -> None:
    """Plan number k (from 1) sees a copy of ``costs_for_plan(k)`` (real steps refine the
    table they are measured against: on the schedule's own, a few would replace it); choice
    number k (from 1) is forced to ``mode_for_choice(k, current)`` (None: the policy
    decides)."""
    calls = {"plan": 0, "choose": 0}
    plan, choose = ExpectedRatePolicy.plan_length, ExpectedRatePolicy.choose

    def scheduled_plan(self, *args):
        calls["plan"] += 1
        self._costs = StepCosts(dict(costs_for_plan(calls["plan"]).verify))
        return plan(self, *args)

    def scheduled_choose(self, depth, current):
        calls["choose"] += 1
        self.forced = mode_for_choice(calls["choose"], current)
        return choose(self, depth, current)

    monkeypatch.setattr(ExpectedRatePolicy, "plan_length", scheduled_plan)
    monkeypatch.setattr(ExpectedRatePolicy, "choose", scheduled_choose)
