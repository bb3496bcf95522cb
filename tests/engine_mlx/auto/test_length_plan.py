"""The plan of one step, alone: the number of best-first nodes with the most expected tokens
per second, shorter as confidence drops or verification gets dearer, none when no draft is
worth its forward; one token at most per tree depth."""

from __future__ import annotations

import pytest

from engine_mlx.auto.length_plan import best_length, per_s, smooth, upside
from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.decoding.strategies import LengthPlan


def _costs(per_token_ms: float = 1.0, base_ms: float = 30.0) -> StepCosts:
    """A forward over n tokens costs base + per_token * (n - 1) ms, at any depth."""
    table = {(n, d): (base_ms + per_token_ms * (n - 1)) / 1000 for n in (1, 2, 4, 8, 16)
             for d in (0, 1024)}  # fmt: skip
    return StepCosts(table)


def test_length_is_the_argmax_of_expected_tokens_per_second():
    costs = _costs(per_token_ms=1.0)
    scores = [0.9, 0.8, 0.7, 0.3, 0.05, 0.01, 0.01]
    plan = best_length(costs, scores, 0.010, 0)
    rates = [
        (1 + sum(scores[:n])) / (0.010 + costs.verify_s(n + 1, 0)) for n in range(len(scores) + 1)
    ]
    assert plan.nodes == max(range(len(rates)), key=rates.__getitem__)
    assert plan.expected_tokens == pytest.approx(1 + sum(scores[: plan.nodes]))
    assert plan.predicted_s == pytest.approx(0.010 + costs.verify_s(plan.nodes + 1, 0))
    assert 3 <= plan.nodes <= 4  # the confident prefix, not the long tail


def test_drafts_shorten_as_confidence_drops_and_vanish_when_none_is_worth_it():
    costs = _costs(per_token_ms=4.0)
    confident = best_length(costs, [0.95] * 7, 0.01, 0).nodes
    middling = best_length(costs, [0.6, 0.36, 0.2, 0.1, 0.05, 0.03, 0.01], 0.01, 0)
    hopeless = best_length(costs, [0.05, 0.01, 0.0, 0.0], 0.01, 0)
    assert confident == 7 and 0 < middling.nodes < confident
    assert hopeless.nodes == 0 and hopeless.expected_tokens == 1.0


def test_expensive_verification_keeps_drafts_short():
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]
    cheap = best_length(_costs(per_token_ms=0.5), scores, 0.01, 0)
    dear = best_length(_costs(per_token_ms=12.0), scores, 0.01, 0)
    assert dear.nodes < cheap.nodes


def test_honesty_scales_the_scores_but_one_depth_commits_one_token_at_most():
    costs = _costs(per_token_ms=0.1)
    # two siblings at depth 1, each 0.7: together they may commit one token, not 1.4
    plan = best_length(costs, [0.7, 0.7], 0.0, 0, honesty=1.5, node_depths=[1, 1])
    assert plan.expected_tokens == pytest.approx(2.0)
    chain = best_length(costs, [0.7, 0.7], 0.0, 0, honesty=1.5, node_depths=[1, 2])
    assert chain.expected_tokens == pytest.approx(3.0)  # each capped at one, both counted
    assert best_length(costs, [0.5], 0.0, 0, honesty=1.5).expected_tokens == pytest.approx(1.75)


def test_the_shared_arithmetic():
    plan = LengthPlan(3, 2.5, 0.05)
    assert per_s(plan) == pytest.approx(50.0) and per_s(LengthPlan(0, 1.0, 0.0)) == 0.0
    assert upside(plan).expected_tokens == pytest.approx(4.0)  # 1 + 2 x 1.5 drafted
    assert smooth(None, 4.0) == 4.0 and smooth(2.0, 4.0) == pytest.approx(2.6)
