"""The plan of one step: how many of a draft's best-first nodes to verify for the most
expected tokens per second, and the small arithmetic the auto policy shares with it.

A tree of the best n nodes is expected to commit ``1 + sum(scores[:n])`` tokens (the
selector's calibrated scores, scaled by how honest they have been on this text) and to cost
the step's fixed part plus the target's forward over n + 1 tokens at this depth
(``step_costs``). No draft worth its forward: a plain step (0 nodes).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.decoding.strategies import LengthPlan

SMOOTHING = 0.3
# A trial needs a look that would win were its drafted tokens this many times what it expects:
# the most the plans themselves may believe (``rate_policy.PLAN_HONESTY``'s upper bound).
TRIAL_UPSIDE = 2.0


def best_length(
    costs: StepCosts,
    scores: Sequence[float],
    fixed_s: float,
    depth: int,
    honesty: float = 1.0,
    node_depths: Sequence[int] | None = None,
) -> LengthPlan:
    """The best number of nodes, its expected tokens and seconds. ``fixed_s``: the step's
    cost besides the forward (its draft and the rest). ``node_depths``: each node's depth in
    the tree. The target accepts one node per depth at most, so scaled by honesty the nodes of
    one depth are expected to commit one token at most: honesty 1.9 on prose at 4k made a
    width-2 tree's second path, its sibling estimates capped to what the first path leaves,
    worth verifying (12-13 nodes, ~40% dearer than the 8 that committed everything)."""
    best = LengthPlan(0, 1.0, fixed_s + costs.verify_s(1, depth))
    expected = 1.0
    per_depth: dict[int, float] = {}
    for n, score in enumerate(scores, start=1):
        if node_depths is None:
            expected += score * honesty
        else:
            at = node_depths[n - 1]
            before = per_depth.get(at, 0.0)
            per_depth[at] = before + score
            expected += min(1.0, per_depth[at] * honesty) - min(1.0, before * honesty)
        seconds = fixed_s + costs.verify_s(n + 1, depth)
        if expected / seconds > per_s(best):
            best = LengthPlan(n, expected, seconds)
    return best


def upside(plan: LengthPlan) -> LengthPlan:
    """The plan were its drafted tokens ``TRIAL_UPSIDE`` times what it expects."""
    extra = TRIAL_UPSIDE * (plan.expected_tokens - 1.0)
    return LengthPlan(plan.nodes, 1.0 + extra, plan.predicted_s)


def per_s(plan: LengthPlan) -> float:
    """Expected tokens per second."""
    return plan.expected_tokens / plan.predicted_s if plan.predicted_s > 0 else 0.0


def smooth(old: float | None, new: float, weight: float = SMOOTHING) -> float:
    """An exponential moving average's next value (the first value as it is)."""
    return new if old is None else old + weight * (new - old)
