"""Looks at the drafting modes that are not running: when the next one is due, and what each
one said about its mode.

Its own module because a look is a mechanism of its own, with its own cost and budget, apart
from choosing the mode (``mode_choice``) and planning a step (``length_plan``); the
expected-rate policy (``rate_policy``) composes the three.

Every few steps the generation drafts with a mode that is not running, without verifying, and
the step plan (``length_plan.best_length``) says what that draft would have been worth here (its
expected drafted tokens scaled by how the mode's plans compared with what it committed when it
last ran). A look costs one draft — no switch, no verification — and comes less often (doubling
up to ``max_look_every``, across replies) while the mode is far behind plain decoding, and never
so often that the looks at all modes together take more than ``LOOK_BUDGET`` of the time (a
look at 4k tokens of context costs more than one at 100); a new reply looks at every drafting
mode, the running one too, before its first step (the last reply's looks and steps were on
other text).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from engine_mlx.auto.length_plan import SMOOTHING, best_length, per_s
from engine_mlx.auto.mode_record import ModeRecord
from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.decoding.strategies import LengthPlan
from engine_mlx.modes import Mode

LOOK_BUDGET = 0.02  # looks at all modes together take at most this share of the time
# Modes whose draft costs no forward (prompt lookup: a search of the context): looked at every
# step, so auto knows at once when a reply starts copying, and outside the budget.
FREE_LOOKS = frozenset({Mode.LOOKUP})
# A mode whose look comes this close to the best rate is near: looked at as often as ever, and
# tried once a reply (``mode_choice``).
TRIAL_WITHIN = 0.75
# A mode whose last look or run was far behind the bar spends this share of its budget: at
# 2% the looks at DFlash2 and MTP cost the 4-bit Qwen demo 2-3% of a chat reply (the drafters'
# catch-up included), where neither ever paid.
FAR_SHARE = 0.25
CUED_LOOK_EVERY = 2  # steps between looks at a mode while prompt lookup alone beats plain
CUE_MARGIN = 1.25  # by this factor: a two-token match is common and rarely worth a look


@dataclass
class Looks:
    """What is known of each drafting mode (its ``ModeRecord``: its looks, and what its own
    steps showed) and the step count that spaces the looks out."""

    modes: list[Mode]
    costs: Callable[[], StepCosts]  # the machine's step costs as they are now
    look_every: int = 4
    max_look_every: int = 32
    records: dict[Mode, ModeRecord] = field(default_factory=dict)
    steps: int = 0  # steps observed so far
    changes: int = 0  # looks set or cleared so far (the policy re-chooses only after one)

    def record(self, mode: Mode) -> ModeRecord:
        record = self.records.get(mode)
        if record is None:  # (built only when missing: it is asked for ~20 times a step)
            record = self.records[mode] = ModeRecord(look_every=self.look_every)
        return record

    def new_reply(self) -> None:
        """A new reply, new text: one look at once at each drafting mode whose last look or
        run came near the bar (``ModeRecord.near``); one far behind waits for its budgeted
        turn (on the 4-bit Qwen demo, looks at DFlash2 and MTP at every reply's start, the
        drafters catching up on the prompt first, cost ~3% of plain decoding's time on chat
        where neither ever paid)."""
        for mode in self.modes:
            if mode is not Mode.AR:
                self.record(mode).new_reply(fresh_look=mode in FREE_LOOKS)

    def stepped(self, mode: Mode) -> None:
        """A step ran in ``mode``: a drafting mode's own step is as good as a look at it."""
        self.steps += 1
        if mode is not Mode.AR:
            self.record(mode).last_look = self.steps

    def repriced(self, state: ModeRecord) -> LengthPlan | None:
        """A look at the machine's present pace: priced when the machine was idle, a look
        taken while plain decoding runs on a busy one would promise steps at the idle
        machine's speed, and win against plain decoding's steps timed now."""
        look = state.look
        if look is None:
            return None
        scale = self.costs().pace / state.look_pace
        return LengthPlan(look.nodes, look.expected_tokens, look.predicted_s * scale)

    def set_look(self, state: ModeRecord, plan: LengthPlan) -> None:
        state.look, state.look_pace = plan, self.costs().pace
        self.changes += 1

    def due(
        self,
        depth: int,
        current: Mode,
        cues: Mapping[Mode, Sequence[float]] | None = None,
        bar: float = 0.0,
    ) -> Mode | None:
        """A drafting mode, not the running one, whose look is due. ``cues``: the scores of
        what prompt lookup alone would propose for a mode that drafts with it (free to
        compute); one whose cue beats plain decoding by itself (by ``CUE_MARGIN``) is due
        after ``CUED_LOOK_EVERY`` steps, budget or not: the context is being repeated, and
        that is where the mode pays (Qwen, prose at 4k: DFlash2 with lookup 2x plain, but
        looked at once in 29 steps). The cue is priced like a look, with the mode's draft
        time and honesty: priced bare, code's frequent short matches looked at DFlash2 every
        3 steps at 2k of context, 40 ms each, for looks that never beat plain."""
        plain_s = self.costs().verify_s(1, depth)
        costly = sum(m is not Mode.AR and m not in FREE_LOOKS for m in self.modes)
        share = LOOK_BUDGET / max(1, costly)
        fresh = [m for m in self.modes if m is not Mode.AR and self.record(m).fresh_look_due]
        if fresh:
            return fresh[0]
        due = [
            m
            for m in self.modes
            if m not in (Mode.AR, current)
            and self.steps - self.record(m).last_look
            >= self._interval(m, depth, plain_s, share, cues, bar)
        ]
        return min(due, key=lambda m: self.record(m).last_look) if due else None

    def _interval(
        self,
        mode: Mode,
        depth: int,
        plain_s: float,
        share: float,
        cues: Mapping[Mode, Sequence[float]] | None,
        bar: float = 0.0,
    ) -> float:
        """Steps between looks at ``mode``: its own pace, stretched so that its looks (the
        drafter's catch-up included) take ``share`` of plain decoding's time at most, unless
        its cue beats the bar (plain decoding, or the running mode)."""
        if mode in FREE_LOOKS:
            return 1
        state = self.record(mode)
        cue = (cues or {}).get(mode)
        cued = cue and per_s(
            best_length(
                self.costs(),
                cue,
                state.look_time.seconds + state.rest.seconds,
                depth,
                state.honesty,
            )
        )
        if cued and cued > CUE_MARGIN * max(1.0 / plain_s, bar):
            return CUED_LOOK_EVERY
        if not state.near:  # far behind when last seen: a quarter of its share
            share *= FAR_SHARE
        return max(state.look_every, state.look_cost.seconds / (share * plain_s))

    def observe(
        self,
        mode: Mode,
        scores: Sequence[float],
        draft_s: float,
        depth: int,
        node_depths: Sequence[int] | None,
        bar: float,
        spent_s: float | None = None,
    ) -> None:
        """A look at ``mode``: its draft's ``scores``, drafted in ``draft_s``. ``bar``: the
        rate (tokens/s) it is measured against, the best of plain decoding's and the running
        mode's. Looks come less often only at a mode far behind that (below ``TRIAL_WITHIN``
        of it): one near it may be a few looks from winning (its look is one draft's scores),
        and missing that costs more than looking (``LOOK_BUDGET`` bounds the looks' time
        either way)."""
        state = self.record(mode)
        if mode in FREE_LOOKS and not scores:  # nothing to propose here: nothing to rate
            self.changes += state.look is not None
            state.look, state.last_look, state.fresh_look_due = None, self.steps, False
            return
        state.look_time.add(draft_s)
        state.look_cost.add(draft_s if spent_s is None else max(draft_s, spent_s))
        fixed_s = draft_s + state.rest.seconds
        plan = best_length(self.costs(), scores, fixed_s, depth, state.honesty, node_depths)
        old = None if state.fresh_look_due else self.repriced(state)  # not the last text's
        state.fresh_look_due = False
        self.set_look(
            state,
            plan
            if old is None
            else LengthPlan(
                plan.nodes,
                old.expected_tokens + SMOOTHING * 2 * (plan.expected_tokens - old.expected_tokens),
                old.predicted_s + SMOOTHING * 2 * (plan.predicted_s - old.predicted_s),
            ),
        )
        state.last_look = self.steps
        losing = per_s(state.look) < TRIAL_WITHIN * bar
        state.near = not losing
        state.look_every = (
            min(self.max_look_every, 2 * state.look_every) if losing else self.look_every
        )
