"""The expected-rate policy on synthetic costs and acceptance: it picks the argmax of expected
tokens per second, shortens drafts as confidence drops, and stays plain when nothing drafted
is worth its forward. And on real tiny models: lossless across mode and length changes."""

from __future__ import annotations

import pytest

from engine_mlx.auto.looks import CUED_LOOK_EVERY, FAR_SHARE, LOOK_BUDGET
from engine_mlx.auto.mode_choice import IDLE_TRIAL_STEPS
from engine_mlx.auto.mode_record import SETTLE_STEPS
from engine_mlx.auto.policy import Choice
from engine_mlx.auto.rate_policy import ExpectedRatePolicy
from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.decoding.selector import AcceptanceCalibrator
from engine_mlx.decoding.strategies import LengthPlan
from engine_mlx.events import ModeSwitch, Tokens
from engine_mlx.modes import Mode
from engine_mlx.session import Session
from engine_mlx.stats import StepStats
from tests.support.auto_driver import drive_auto
from tests.support.drafters import OracleDrafter, random_dflash


def _costs(per_token_ms: float = 1.0, base_ms: float = 30.0) -> StepCosts:
    """A forward over n tokens costs base + per_token * (n - 1) ms, at any depth."""
    table = {(n, d): (base_ms + per_token_ms * (n - 1)) / 1000 for n in (1, 2, 4, 8, 16)
             for d in (0, 1024)}  # fmt: skip
    return StepCosts(table)


def _policy(costs: StepCosts, modes=(Mode.AR, Mode.DFLASH2)) -> ExpectedRatePolicy:
    return ExpectedRatePolicy(list(modes), lambda: costs)


def test_plain_wins_when_looks_promise_nothing_and_a_confident_mode_wins_otherwise():
    costs = _costs(per_token_ms=1.0)
    policy = _policy(costs, (Mode.AR, Mode.DFLASH2, Mode.MTP))
    assert policy.choose(0, None).mode is Mode.AR  # nothing known yet: plain
    assert policy.preview_due(0, Mode.AR) in (Mode.DFLASH2, Mode.MTP)
    policy.observe_preview(Mode.DFLASH2, [0.1, 0.01], 0.015, 0)
    policy.observe_preview(Mode.MTP, [0.05, 0.01], 0.015, 0)
    assert policy.choose(0, Mode.AR).mode is Mode.AR
    policy.observe_preview(Mode.MTP, [0.95, 0.9, 0.85], 0.010, 0)
    policy.observe_preview(Mode.MTP, [0.95, 0.9, 0.85], 0.010, 0)
    choice = policy.choose(0, Mode.AR)
    assert choice.mode is Mode.MTP
    assert (
        "MTP, 4 tokens verified: expects" in choice.reason and "Plain 1.0 tok/step" in choice.reason
    )


def _run_dflash2(policy: ExpectedRatePolicy, steps: int, expected: float, committed: int) -> None:
    """``steps`` DFlash2 steps whose plans expected ``expected`` tokens and got ``committed``."""
    for _ in range(steps):
        stats = StepStats(
            Mode.DFLASH2,
            committed=committed,
            drafted=4,
            draft_s=0.005,
            verify_s=0.034,
            predicted_tokens=expected,
        )
        policy.observe(Mode.DFLASH2, 0, committed, 0.04, stats)


def test_a_mode_whose_look_comes_close_is_tried_once_in_a_reply():
    policy = _policy(_costs(per_token_ms=1.0))  # plain: 30 ms a token
    assert policy.choose(0, None).mode is Mode.AR
    policy.observe(Mode.AR, 0, 1, 0.03)
    policy.observe_preview(Mode.DFLASH2, [0.2, 0.05], 0.005, 0)  # 1.25 tokens at 37 ms
    trial = policy.choose(0, Mode.AR)
    assert trial.mode is Mode.DFLASH2 and trial.reason.startswith("trying DFlash2")
    _run_dflash2(policy, 4, expected=1.25, committed=1)  # it commits nothing drafted
    assert policy.choose(0, Mode.DFLASH2).mode is Mode.AR
    for _ in range(40):  # the same reply: the same forecast no longer earns a trial
        policy.observe(Mode.AR, 0, 1, 0.03)
        policy.observe_preview(Mode.DFLASH2, [0.2, 0.05], 0.005, 0)
        assert policy.choose(0, Mode.AR).mode is Mode.AR


def test_a_step_that_verified_no_draft_does_not_use_up_the_trial():
    policy = _policy(_costs(per_token_ms=1.0))
    policy.choose(0, None)
    stats = StepStats(Mode.DFLASH2, committed=1, drafted=0, draft_s=0.005, verify_s=0.03)
    policy.observe(Mode.DFLASH2, 0, 1, 0.036, stats)  # its plan verified nothing drafted
    policy.observe(Mode.AR, 0, 1, 0.03)
    policy.observe_preview(Mode.DFLASH2, [0.2, 0.05], 0.005, 0)
    assert policy.choose(0, Mode.AR).reason.startswith("trying DFlash2")


def test_a_trial_whose_plans_keep_declining_the_draft_is_used_up():
    policy = _policy(_costs(per_token_ms=1.0))  # plain: 30 ms a token
    policy.choose(0, None)
    policy.observe(Mode.AR, 0, 1, 0.03)
    declined = StepStats(Mode.DFLASH2, committed=1, drafted=0, draft_s=0.005, verify_s=0.03)
    for _ in range(IDLE_TRIAL_STEPS):  # tried, one declined step, back to plain: again
        policy.observe_preview(Mode.DFLASH2, [0.2, 0.05], 0.005, 0)
        assert policy.choose(0, Mode.AR).reason.startswith("trying DFlash2")
        policy.observe(Mode.DFLASH2, 0, 1, 0.036, declined)
        policy.observe(Mode.AR, 0, 1, 0.03)
    policy.observe_preview(Mode.DFLASH2, [0.2, 0.05], 0.005, 0)
    assert policy.choose(0, Mode.AR).mode is Mode.AR  # not for ever


def test_a_newly_chosen_mode_is_not_judged_on_one_step():
    policy = _policy(_costs(per_token_ms=1.0))  # plain: 30 ms a token
    policy.observe_preview(Mode.DFLASH2, [0.9] * 6, 0.01, 0)
    assert policy.choose(0, Mode.AR).mode is Mode.DFLASH2
    unlucky = StepStats(Mode.DFLASH2, committed=1, drafted=2, draft_s=0.01, verify_s=0.036)
    for _ in range(SETTLE_STEPS - 1):  # each a token in 50 ms: behind plain
        policy.plan_length("dflash2", [0.5, 0.3], 0.01, 0)
        policy.observe(Mode.DFLASH2, 0, 1, 0.05, unlucky)
        assert policy.choose(0, Mode.DFLASH2).mode is Mode.DFLASH2
    policy.plan_length("dflash2", [0.5, 0.3], 0.01, 0)
    policy.observe(Mode.DFLASH2, 0, 1, 0.05, unlucky)
    assert policy.choose(0, Mode.DFLASH2).mode is Mode.AR  # three samples are a verdict
    for _ in range(3):  # its looks promise again: rejoined in this reply, it is known here
        policy.observe(Mode.AR, 0, 1, 0.03)
        policy.observe_preview(Mode.DFLASH2, [0.95] * 6, 0.01, 0)
    assert policy.choose(0, Mode.AR).mode is Mode.DFLASH2
    policy.plan_length("dflash2", [0.5, 0.3], 0.01, 0)
    policy.observe(Mode.DFLASH2, 0, 1, 0.05, unlucky)
    assert policy.choose(0, Mode.DFLASH2).mode is Mode.AR  # one step decides now


def test_a_mode_that_ran_behind_plain_needs_a_wider_margin_each_time_it_is_rejoined():
    policy = _policy(_costs(per_token_ms=1.0))  # plain: 30 ms a token

    def rejoins(times_plain: float) -> bool:
        """Whether a look promising ``times_plain`` plain decoding's rate switches to it."""
        plain_s = policy.costs.verify_s(1, 0)  # as the machine's pace has it now
        look = LengthPlan(4, 2.0, 2 * plain_s / times_plain)
        policy.looks.set_look(policy.looks.record(Mode.DFLASH2), look)
        return policy.choose(0, Mode.AR).mode is Mode.DFLASH2

    def runs_behind_plain() -> None:
        while policy.choose(0, Mode.DFLASH2).mode is Mode.DFLASH2:
            policy.plan_length("dflash2", [0.5, 0.3], 0.01, 0)
            behind = StepStats(Mode.DFLASH2, committed=1, drafted=2, draft_s=0.01, verify_s=0.036)
            policy.observe(Mode.DFLASH2, 0, 1, 0.05, behind)

    policy.choose(0, None)
    assert rejoins(1.15)  # the margin against flapping: 10%
    runs_behind_plain()
    assert not rejoins(1.15) and rejoins(1.25)  # left once: 20%
    runs_behind_plain()
    assert not rejoins(1.35) and rejoins(1.45)  # twice: 40%
    runs_behind_plain()
    policy.choose(0, None)  # a new reply, new text: the margin is back to 10%
    assert rejoins(1.15)


def test_a_settling_mode_gives_way_only_to_a_look_that_beats_the_one_it_was_chosen_by():
    policy = _policy(_costs(per_token_ms=1.0), (Mode.AR, Mode.DFLASH2, Mode.MTP))
    policy.observe_preview(Mode.MTP, [0.9], 0.002, 0)  # 1.9 tokens in 33 ms: 1.7x plain
    assert policy.choose(0, Mode.AR).mode is Mode.MTP
    unlucky = StepStats(Mode.MTP, committed=1, drafted=1, draft_s=0.002, verify_s=0.031)
    policy.plan_length("mtp", [0.9], 0.002, 0)
    policy.observe(Mode.MTP, 0, 1, 0.035, unlucky)
    policy.observe_preview(Mode.DFLASH2, [0.5, 0.3], 0.002, 0)  # 1.8 tokens in 34 ms
    assert policy.choose(0, Mode.MTP).mode is Mode.MTP  # settling: one step is no verdict
    policy.observe_preview(Mode.DFLASH2, [0.95] * 6, 0.002, 0)  # ~5 tokens a step
    assert policy.choose(0, Mode.MTP).mode is Mode.DFLASH2


def test_a_drafting_mode_behind_plain_gives_way_without_a_margin():
    policy = _policy(_costs(per_token_ms=1.0))  # plain: 30 ms a token
    policy.observe_preview(Mode.DFLASH2, [0.9] * 6, 0.01, 0)
    assert policy.choose(0, Mode.AR).mode is Mode.DFLASH2
    for _ in range(8):  # a token in 32.5 ms: 8% behind plain, inside the 10% margin
        policy.plan_length("dflash2", [0.05], 0.0015, 0)
        stats = StepStats(Mode.DFLASH2, committed=1, drafted=1, draft_s=0.0015, verify_s=0.031)
        policy.observe(Mode.DFLASH2, 0, 1, 0.0325, stats)
    assert policy.choose(0, Mode.DFLASH2).mode is Mode.AR


def test_a_look_taken_on_an_idle_machine_is_priced_at_the_present_pace():
    costs = _costs(per_token_ms=10.0)  # plain: 30 ms a token, 2 tokens: 40 ms
    policy = _policy(costs)
    assert policy.choose(0, None).mode is Mode.AR
    policy.observe_preview(Mode.DFLASH2, [0.5], 0.005, 0)  # 1.5 tokens in 45 ms: plain's rate
    policy._state(Mode.DFLASH2).ran_this_reply = True  # its trial in this reply was used up
    for _ in range(10):  # the machine gets busy: plain steps take twice the table
        policy.observe(Mode.AR, 0, 1, 0.060)
    assert costs.pace == pytest.approx(2.0)
    # Priced as when it was taken, the look would be twice plain decoding's rate now.
    assert policy.choose(0, Mode.AR).mode is Mode.AR
    look = policy.rate(Mode.DFLASH2, 0, running=False)
    assert look is not None and look.predicted_s == pytest.approx(0.090)


def test_prompt_lookup_that_beats_plain_brings_the_next_look_forward():
    policy = _policy(_costs())  # plain: 30 ms a token
    policy.observe_preview(Mode.DFLASH2, [0.0], 0.010, 0)  # a third of a plain step
    for _ in range(CUED_LOOK_EVERY):
        policy.observe(Mode.AR, 0, 1, 0.03)
    assert policy.preview_due(0, Mode.AR) is None  # by the budget: once in 17 steps
    assert policy.preview_due(0, Mode.AR, {Mode.DFLASH2: [0.1]}) is None  # a weak cue
    priced_bare_it_would_pay = {Mode.DFLASH2: [0.4, 0.3]}  # not with the 10 ms draft
    assert policy.preview_due(0, Mode.AR, priced_bare_it_would_pay) is None
    assert policy.preview_due(0, Mode.AR, {Mode.DFLASH2: [0.9, 0.8, 0.7]}) is Mode.DFLASH2


def test_a_mode_far_behind_plain_is_not_tried():
    policy = _policy(_costs(per_token_ms=1.0))
    policy.choose(0, None)
    policy.observe_preview(Mode.DFLASH2, [0.02], 0.02, 0)  # 1.02 tokens at 51 ms: 0.6x plain
    assert policy.choose(0, Mode.AR).mode is Mode.AR


def test_a_trial_needs_a_look_that_would_win_were_its_drafts_underestimated():
    def after_a_look(score: float) -> Choice:
        policy = _policy(_costs(per_token_ms=1.0))  # plain: 30 ms a token, 2 tokens: 31 ms
        policy.choose(0, None)
        policy.observe(Mode.AR, 0, 1, 0.03)
        policy.observe_preview(Mode.DFLASH2, [score], 0.009, 0)
        return policy.choose(0, Mode.AR)

    # 1.1 tokens in 40 ms: within reach of plain's rate (0.83x), but even twice its drafted
    # tokens (1.2 in 40 ms) would not beat plain decoding.
    assert after_a_look(0.1).mode is Mode.AR
    assert after_a_look(0.2).reason.startswith("trying DFlash2")  # twice: 1.4 in 40 ms


def test_an_over_promise_on_one_reply_counts_for_less_on_the_next():
    policy = _policy(_costs(per_token_ms=1.0))
    policy.choose(0, None)
    _run_dflash2(policy, 12, expected=3.0, committed=1)  # plans promised 3, it got 1
    assert policy.choose(0, Mode.DFLASH2).mode is Mode.AR
    policy.choose(0, None)  # a new reply, other text: a confident look is believed enough
    policy.observe_preview(Mode.DFLASH2, [0.95] * 6, 0.01, 0)
    choice = policy.choose(0, Mode.AR)
    assert choice.mode is Mode.DFLASH2 and not choice.reason.startswith("trying")


def test_a_new_reply_rates_the_modes_by_their_looks_at_its_own_text():
    policy = _policy(_costs(per_token_ms=1.0), (Mode.AR, Mode.DFLASH2, Mode.MTP))
    policy.observe_preview(Mode.DFLASH2, [0.95] * 6, 0.005, 0)
    assert policy.choose(0, Mode.AR).mode is Mode.DFLASH2
    _run_dflash2(policy, 8, expected=6.0, committed=7)  # the last reply: DFlash2 flew
    assert policy.choose(0, None).mode is Mode.DFLASH2  # the new one starts where it left off
    looked = []
    while (due := policy.preview_due(0, Mode.DFLASH2)) is not None and due not in looked:
        looked.append(due)  # every drafting mode, the running one too, before the first step
        scores = [0.02] if due is Mode.DFLASH2 else [0.9]  # on this text, MTP drafts well
        policy.observe_preview(due, scores, 0.003, 0)
    assert sorted(looked) == sorted([Mode.DFLASH2, Mode.MTP])
    assert policy.choose(0, Mode.DFLASH2).mode is Mode.MTP  # not the last reply's 7 tokens


def test_one_slow_look_does_not_space_the_next_ones_out():
    policy = _policy(_costs())  # plain: 30 ms a token
    for seconds in (0.050, 0.001, 0.001):  # a drafter's first draft, then its usual one
        policy.observe_preview(Mode.DFLASH2, [0.05], seconds, 0)
    gaps = _look_gaps(policy, look_s=0.001)
    assert max(gaps) == policy.look_every


def _look_gaps(policy: ExpectedRatePolicy, look_s: float, score: float = 0.05) -> list[int]:
    gaps, last = [], None
    for step in range(300):
        due = policy.preview_due(0, Mode.AR)
        if due is not None:
            policy.observe_preview(due, [score], look_s, 0)
            if last is not None:
                gaps.append(step - last)
            last = step
        policy.observe(Mode.AR, 0, 1, 0.03)
    return gaps


def test_a_mode_far_behind_plain_is_looked_at_less_often():
    # Far behind (0.7x plain), a mode spends a quarter of its share of the budget: 12 ms a
    # look, 2% of a 30 ms step, a quarter of it: one look every 80 steps, not every 20.
    far = _look_gaps(_policy(_costs()), look_s=0.012, score=0.0)
    assert far and all(gap >= 0.012 / (LOOK_BUDGET * FAR_SHARE * 0.030) for gap in far)
    near = _look_gaps(_policy(_costs()), look_s=0.002, score=0.0)  # 0.9x plain: as ever
    assert set(near) == {4}


def test_a_mode_far_behind_the_running_mode_is_looked_at_less_often():
    policy = _policy(_costs(), (Mode.AR, Mode.DFLASH2, Mode.MTP))  # plain: 30 ms a token
    policy.observe_preview(Mode.MTP, [0.9], 0.002, 0)
    assert policy.choose(0, Mode.AR).mode is Mode.MTP
    gaps, last = [], None
    mtp = StepStats(Mode.MTP, committed=2, drafted=1, draft_s=0.002, verify_s=0.031)
    for step in range(300):  # MTP commits 2 tokens a step: ~1.8x plain decoding
        if policy.preview_due(0, Mode.MTP) is Mode.DFLASH2:
            policy.observe_preview(Mode.DFLASH2, [0.05], 0.001, 0)  # 1.02x plain
            if last is not None:
                gaps.append(step - last)
            last = step
        policy.plan_length("mtp", [0.9], 0.002, 0)
        policy.observe(Mode.MTP, 0, 2, 0.033, mtp)
    assert gaps == sorted(gaps) and gaps[-1] == policy.max_look_every


def test_a_mode_near_plain_keeps_being_looked_at():
    policy = _policy(_costs())
    gaps = _look_gaps(policy, look_s=0.001, score=0.05)  # 1.05 tokens in 32 ms: 1.02x plain
    assert max(gaps) == policy.look_every


def test_looks_stay_within_their_share_of_the_time():
    gaps = _look_gaps(_policy(_costs()), look_s=0.030)  # a look costs a plain step
    assert min(gaps) >= 1 / LOOK_BUDGET  # one plain step's worth per 50 steps


def test_looks_at_every_mode_together_stay_within_the_share():
    policy = _policy(_costs(), (Mode.AR, Mode.DFLASH2, Mode.MTP))  # plain: 30 ms a token
    looked_s = 0.0
    for _ in range(600):
        if (due := policy.preview_due(0, Mode.AR)) is not None:
            policy.observe_preview(due, [0.05], 0.030, 0)  # a look costs a plain step
            looked_s += 0.030
        policy.observe(Mode.AR, 0, 1, 0.03)
    first_looks = 2 * 0.030 * policy.look_every  # before any is timed, every 4 steps
    assert looked_s <= LOOK_BUDGET * 600 * 0.030 + first_looks


def test_the_running_mode_is_judged_by_what_it_commits():
    policy = _policy(_costs(per_token_ms=1.0))
    policy.observe_preview(Mode.DFLASH2, [0.9] * 6, 0.01, 0)
    assert policy.choose(0, Mode.AR).mode is Mode.DFLASH2
    policy.observe(Mode.AR, 0, 1, 0.03)
    for _ in range(12):  # its drafts look fine, but the target accepts nothing
        policy.plan_length("dflash2", [0.9] * 6, 0.01, 0)
        stats = StepStats(Mode.DFLASH2, committed=1, drafted=6, draft_s=0.01, verify_s=0.036)
        policy.observe(Mode.DFLASH2, 0, 1, 0.047, stats)
    assert policy.choose(0, Mode.DFLASH2).mode is Mode.AR


def _plans_after(policy: ExpectedRatePolicy, steps: int, accepted_share: float) -> int:
    """Nodes the next plan verifies after ``steps`` steps that accepted this share of what
    each plan verified."""
    scores = [0.7, 0.5, 0.35, 0.25, 0.18, 0.12, 0.08]
    for _ in range(steps):
        plan = policy.plan_length("dflash2", scores, 0.01, 0)
        committed = 1 + round(accepted_share * plan.nodes)
        verify_s = policy.costs.verify_s(plan.nodes + 1, 0)  # forwards as the table says
        stats = StepStats(Mode.DFLASH2, committed=committed, drafted=plan.nodes, verify_s=verify_s)
        policy.observe(Mode.DFLASH2, 0, committed, verify_s + 0.01, stats)
    return policy.plan_length("dflash2", scores, 0.01, 0).nodes


def test_plans_lengthen_when_drafts_beat_their_scores_and_shorten_when_they_fall_short():
    at_face_value = _plans_after(_policy(_costs(per_token_ms=3.0)), 0, 0.0)
    assert 0 < at_face_value < 7
    assert _plans_after(_policy(_costs(per_token_ms=3.0)), 8, 1.0) > at_face_value
    assert _plans_after(_policy(_costs(per_token_ms=3.0)), 8, 0.0) < at_face_value


def test_honesty_never_expects_one_depth_to_commit_more_than_one_token():
    first = [0.8, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35]  # a width-2 tree: the first path...
    second = [0.2, 0.18, 0.16, 0.14, 0.12, 0.1, 0.08]  # ...and what its siblings leave
    nodes = sorted(
        [(s, d) for d, s in enumerate(first, 1)] + [(s, d) for d, s in enumerate(second, 1)],
        reverse=True,
    )
    scores, depths = [s for s, _ in nodes], [d for _, d in nodes]
    plans = {}
    for known in (True, False):
        policy = _policy(_costs(per_token_ms=1.0))
        state = policy._state(Mode.DFLASH2)
        state.committed_extra, state.expected_extra = 100.0, 40.0  # drafts beat their scores
        plans[known] = policy.plan_length("dflash2", scores, 0.01, 0, depths if known else None)
    assert plans[True].expected_tokens <= 1 + len(first)  # one token a depth, and the bonus
    assert plans[True].nodes <= len(first) < plans[False].nodes  # no node of the second path


def test_one_missed_draft_is_not_a_verdict_on_the_estimates_but_several_are():
    policy = _policy(_costs())
    _run_dflash2(policy, 1, expected=2.2, committed=1)
    after_one = policy._state(Mode.DFLASH2).honesty
    _run_dflash2(policy, 5, expected=2.2, committed=1)
    assert after_one > 0.65  # the plans still verify most of what they would
    assert policy._state(Mode.DFLASH2).honesty < 0.5  # six in a row: they over-promise here


def test_one_slow_step_does_not_drive_a_winning_mode_away():
    policy = _policy(_costs(per_token_ms=1.0), (Mode.AR, Mode.MTP))  # plain: 30 ms a token
    policy.observe_preview(Mode.MTP, [0.9], 0.003, 0)
    assert policy.choose(0, Mode.AR).mode is Mode.MTP

    def mtp_step(seconds: float) -> None:
        policy.plan_length("mtp", [0.9], 0.003, 0)
        stats = StepStats(Mode.MTP, committed=2, drafted=1, draft_s=0.003, verify_s=0.031)
        policy.observe(Mode.MTP, 0, 2, seconds, stats)

    for _ in range(6):  # 2 tokens in 35 ms against plain's 1 in 30
        mtp_step(0.035)
    mtp_step(0.250)  # the collector, a page fault: once
    for _ in range(3):
        mtp_step(0.035)
        assert policy.choose(0, Mode.MTP).mode is Mode.MTP


def test_a_mode_whose_plans_verify_its_draft_every_other_step_is_priced_in_between():
    policy = _policy(_costs(per_token_ms=10.0), (Mode.AR, Mode.MTP))  # 30 ms, 40 for two
    policy.observe_preview(Mode.MTP, [0.9], 0.003, 0)
    assert policy.choose(0, Mode.AR).mode is Mode.MTP
    for k in range(12):
        plan = policy.plan_length("mtp", [0.9] if k % 2 else [0.05], 0.003, 0)
        assert plan.nodes == k % 2
        stats = StepStats(
            Mode.MTP, committed=1 + k % 2, drafted=k % 2, draft_s=0.003, verify_s=0.03 + k % 2 / 100
        )
        policy.observe(Mode.MTP, 0, 1 + k % 2, stats.verify_s + 0.003, stats)
    forward_s = policy.rate(Mode.MTP, 0, running=True).predicted_s - 0.003
    assert 0.033 < forward_s < 0.037  # neither one token's forward nor two's


def test_a_forced_mode_overrides_and_takes_no_looks():
    policy = _policy(_costs())
    policy.forced = Mode.DFLASH2
    assert policy.choose(0, Mode.AR).mode is Mode.DFLASH2
    assert policy.preview_due(0, Mode.DFLASH2) is None


@pytest.mark.parametrize("arch", ["llama", "qwen3_5"])
def test_mode_and_length_changes_within_one_reply_are_lossless(arch, tiny_target, monkeypatch):
    target = tiny_target(arch)
    ids = target.tokenizer.encode("Hello world, the quick brown fox")
    session = Session(target, DFlashDrafter(random_dflash(target), target))
    config = GenerationConfig(max_tokens=64, mode="auto", ignore_eos=True, width=2)
    policy = session.policy(config)
    assert isinstance(policy, ExpectedRatePolicy)
    # Every other plan finds verification nearly free, then dear (all nodes, then none), and
    # the mode alternates every few steps: changes of both within one reply.
    cheap, dear = _costs(per_token_ms=0.01, base_ms=50), _costs(per_token_ms=30, base_ms=1)
    drive_auto(
        monkeypatch,
        lambda k: cheap if k % 2 else dear,
        lambda k, current: (Mode.DFLASH2 if (k // 5) % 2 else Mode.AR) if current else None,
    )
    events = list(session.generate(ids, config))
    steps = [e.step for e in events if isinstance(e, Tokens)]
    assert len({s.mode for s in steps}) == 2 and any(isinstance(e, ModeSwitch) for e in events)
    assert len({s.drafted for s in steps if s.mode is Mode.DFLASH2}) > 1  # lengths varied
    plain = list(Session(target).generate(ids, GenerationConfig(max_tokens=64, ignore_eos=True)))
    assert events[-1].tokens == plain[-1].tokens


def test_a_reply_deeper_than_plain_was_ever_timed_starts_plain_and_measures_it():
    policy = _policy(_costs(per_token_ms=1.0))
    policy.observe_preview(Mode.DFLASH2, [0.95] * 6, 0.005, 4000)  # a great look at 4k
    assert policy.choose(100, None).mode is Mode.DFLASH2  # where plain is calibrated
    assert policy.choose(4000, None).mode is Mode.AR  # where its cost is extrapolated
    policy.observe(Mode.AR, 4000, 1, 0.040)
    policy.observe(Mode.AR, 4001, 1, 0.040)  # timed: the second plain step in a row
    assert policy.costs.knows_plain_at(4002)
    assert policy.choose(4002, None).mode is Mode.DFLASH2


def test_a_whole_draft_is_judged_by_the_text_not_by_the_part_a_plan_verified(
    tiny_target, monkeypatch
):
    target = tiny_target("llama")
    ids = target.tokenizer.encode("Hello world, the quick brown fox")
    session = Session(target, OracleDrafter(target, block_size=6))  # every draft is right
    config = GenerationConfig(max_tokens=40, mode="auto", ignore_eos=True, lookup=False)
    dear = _costs(per_token_ms=12, base_ms=30)  # plans verify a node or two, not five
    drive_auto(monkeypatch, lambda k: dear, lambda k, current: Mode.DFLASH2)
    judged: list[tuple[float, int]] = []
    observe = ExpectedRatePolicy.observe_drafts
    monkeypatch.setattr(
        ExpectedRatePolicy,
        "observe_drafts",
        lambda self, mode, expected, accepted: (
            judged.append((expected, accepted)) or observe(self, mode, expected, accepted)
        ),
    )
    cut: list[int] = []  # nodes of each judged draft that its plan did not verify
    unverified = AcceptanceCalibrator.observe_unverified
    monkeypatch.setattr(
        AcceptanceCalibrator,
        "observe_unverified",
        lambda self, draft, walk, n: cut.append(len(draft) - n) or unverified(self, draft, walk, n),
    )
    events = list(session.generate(ids, config))
    verified = [e.step.drafted for e in events if isinstance(e, Tokens) and e.step.drafted]
    assert verified and verified[0] < 5  # the first plan verified part of the block
    assert judged and judged[0][1] == 5  # and the whole block passed
    assert cut and cut[0] > 0  # the selector's calibration saw the part it cut
    assert session.policy(config)._state(Mode.DFLASH2).honesty > 1.5  # so plans grow bolder


def test_a_new_reply_looks_at_the_running_mode_before_it_verifies_a_draft(tiny_target, monkeypatch):
    target = tiny_target("llama")
    ids = target.tokenizer.encode("Hello world, the quick brown fox")
    session = Session(target, OracleDrafter(target, block_size=6))
    config = GenerationConfig(max_tokens=24, mode="auto", ignore_eos=True, lookup=False)
    seen: list[tuple[str, Mode]] = []
    choose, look = ExpectedRatePolicy.choose, ExpectedRatePolicy.observe_preview
    observe = ExpectedRatePolicy.observe

    def start_in_dflash2(self, depth, current):  # as after a reply where it won
        chosen = choose(self, depth, current)
        return Choice(Mode.DFLASH2) if current is None else chosen

    monkeypatch.setattr(ExpectedRatePolicy, "choose", start_in_dflash2)
    monkeypatch.setattr(
        ExpectedRatePolicy,
        "observe_preview",
        lambda self, mode, *a: seen.append(("look", mode)) or look(self, mode, *a),
    )
    monkeypatch.setattr(
        ExpectedRatePolicy,
        "observe",
        lambda self, mode, *a, **k: seen.append(("step", mode)) or observe(self, mode, *a, **k),
    )
    events = list(session.generate(ids, config))
    assert next(e for e in events if isinstance(e, Tokens)).step.mode is Mode.DFLASH2
    assert seen[0] == ("look", Mode.DFLASH2)  # its first step is rated on this text
    plain = list(Session(target).generate(ids, GenerationConfig(max_tokens=24, ignore_eos=True)))
    assert events[-1].tokens == plain[-1].tokens
