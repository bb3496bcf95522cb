"""The default auto policy: each step, the mode and draft length with the most expected tokens
per second.

Expected tokens come from the drafts themselves: the selector scores every candidate node with
its calibrated probability of being accepted together with its ancestors, so a tree of the
best n nodes is expected to commit ``1 + sum(scores[:n])`` tokens. Cost comes from the
machine: ``step_costs`` says what the target's forward over n+1 tokens costs at this depth,
and a step's own draft time is known once it has drafted. So:

- **length** (``plan_length``, after drafting): verify the n in 0..all maximising
  ``(1 + E_n) / (draft + rest + forward(n + 1))`` — fewer tokens when confidence drops, none
  (a plain step) when no draft is worth its forward;
- **a look at the other modes** (``preview_due`` / ``observe_preview``): every few steps the
  generation drafts with a mode that is not running, without verifying, and the same plan
  says what that draft would have been worth here (its expected drafted tokens scaled by how
  the mode's plans compared with what it committed when it last ran). A look costs one
  draft — no switch, no verification — and comes less often (doubling up to
  ``max_look_every``, across replies) while the mode is far behind plain decoding, and never
  so often that the looks at all modes together take more than ``LOOK_BUDGET`` of the time
  (a look at 4k tokens of context costs more than one at 100); a new reply looks at every
  drafting mode, the running one too, before its first step (the last reply's looks and
  steps were on other text), and a reply deeper than plain decoding was ever timed starts
  plain until it has been (its cost there would otherwise be an extrapolation);
- **mode** (``choose``, before drafting): plain decoding's rate is ``1 / forward(1)``; the
  running drafting mode's is the tokens its recent steps committed (at most
  ``TRUST_ABOVE_EXPECTED`` times what its plans expected: a lucky run is not a trend) over
  their cost; a mode not running is rated by its recent looks. The best rate wins, with a
  margin against flapping that doubles (``REJOIN_BACKOFF``) for a mode each time, in this
  reply, it ran behind plain decoding and was left;
- **a trial** (``_worth_a_trial``): a look is a forecast from estimates made on other text,
  so a mode whose look comes within ``TRIAL_WITHIN`` of the best rate, and would beat it were
  its drafted tokens ``TRIAL_UPSIDE`` times what the look expects, runs once per reply until
  its own steps say what it does here (a few steps, at worst a little slower).

The first step after a switch is not timed (the drafter catching up, the plain pipeline
refilling): it would make every newly chosen mode look slower than it is. A forced mode
overrides everything. The earlier policies (``policy.CostModelPolicy``, which learns rates by
switching to each mode for a few steps, and ``policy.ThresholdPolicy``) remain selectable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from engine_mlx.auto.length_plan import SMOOTHING, TRIAL_UPSIDE, best_length, per_s, smooth, upside
from engine_mlx.auto.mode_record import SETTLE_STEPS, ModeRecord
from engine_mlx.auto.policy import Choice, _switch_reason
from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.decoding.strategies import LengthPlan
from engine_mlx.modes import Mode
from engine_mlx.stats import StepStats

TRUST_ABOVE_EXPECTED = 2.0  # realised tokens count up to this multiple of the plans' expectation
LOOK_BUDGET = 0.02  # looks at all modes together take at most this share of the time
TRIAL_WITHIN = 0.75  # a mode whose look comes this close to the best rate is tried once a reply
PLAN_HONESTY = (0.5, TRIAL_UPSIDE)  # the running mode's plans scale its scores by honesty,
# within this (a trial's upside is the most the plans themselves may believe)
CUED_LOOK_EVERY = 2  # steps between looks at a mode while prompt lookup alone beats plain
CUE_MARGIN = 1.25  # by this factor: a two-token match is common and rarely worth a look
IDLE_TRIAL_STEPS = 3  # steps whose plans verified no draft after which a trial is used up
# The margin a look must clear to rejoin a mode doubles each time that mode, in this reply,
# ran behind plain decoding and was left.
REJOIN_BACKOFF = 2.0


@dataclass
class ExpectedRatePolicy:
    modes: list[Mode]
    costs_source: Callable[[], StepCosts]  # the calibrated table, loaded on first use
    hysteresis: float = 0.1
    look_every: int = 4
    max_look_every: int = 32
    forced: Mode | None = None
    _costs: StepCosts | None = None
    _drafting: dict[Mode, ModeRecord] = field(default_factory=dict)
    _steps: int = 0
    _previous: Mode | None = None  # the mode of the last observed step

    @property
    def costs(self) -> StepCosts:
        if self._costs is None:
            self._costs = self.costs_source()
        return self._costs

    def _state(self, mode: Mode) -> ModeRecord:
        return self._drafting.setdefault(mode, ModeRecord(look_every=self.look_every))

    # --- rates ---------------------------------------------------------------------------

    def rate(self, mode: Mode, depth: int, running: bool) -> LengthPlan | None:
        """Expected tokens and seconds per step of ``mode`` here (``running``: from its own
        recent steps, else from its looks); None when nothing is known yet."""
        if mode is Mode.AR:
            return LengthPlan(0, 1.0, self.costs.verify_s(1, depth))
        state = self._drafting.get(mode)
        if state is None:
            return None
        if not running or state.realised is None or not state.draft.known:
            return self._repriced(state)
        tokens = state.realised
        if state.expected is not None:
            tokens = min(tokens, TRUST_ABOVE_EXPECTED * state.expected)
        verified = state.verified or 1.0
        seconds = state.draft.seconds + state.rest.seconds + self.costs.verify_s(verified, depth)
        return LengthPlan(round(verified) - 1, max(1.0, tokens), seconds)

    def _repriced(self, state: ModeRecord) -> LengthPlan | None:
        """A look at the machine's present pace: priced when the machine was idle, a look
        taken while plain decoding runs on a busy one would promise steps at the idle
        machine's speed, and win against plain decoding's steps timed now."""
        look = state.look
        if look is None:
            return None
        scale = self.costs.pace / state.look_pace
        return LengthPlan(look.nodes, look.expected_tokens, look.predicted_s * scale)

    def _set_look(self, state: ModeRecord, plan: LengthPlan) -> None:
        state.look, state.look_pace = plan, self.costs.pace

    # --- looks ---------------------------------------------------------------------------

    def preview_due(
        self, depth: int, current: Mode, cues: Mapping[Mode, Sequence[float]] | None = None
    ) -> Mode | None:
        """A drafting mode, not the running one, whose look is due. ``cues``: the scores of
        what prompt lookup alone would propose for a mode that drafts with it (free to
        compute); one whose cue beats plain decoding by itself (by ``CUE_MARGIN``) is due
        after ``CUED_LOOK_EVERY`` steps, budget or not: the context is being repeated, and
        that is where the mode pays (Qwen, prose at 4k: DFlash2 with lookup 2x plain, but
        looked at once in 29 steps). The cue is priced like a look, with the mode's draft
        time and honesty: priced bare, code's frequent short matches looked at DFlash2 every
        3 steps at 2k of context, 40 ms each, for looks that never beat plain."""
        if self.forced:
            return None
        plain_s = self.costs.verify_s(1, depth)
        plain = 1.0 / plain_s
        share = LOOK_BUDGET / max(1, sum(m is not Mode.AR for m in self.modes))

        def interval(mode: Mode) -> float:
            state = self._state(mode)
            cue = (cues or {}).get(mode)
            cued = cue and per_s(
                best_length(
                    self.costs,
                    cue,
                    state.look_time.seconds + state.rest.seconds,
                    depth,
                    state.honesty,
                )
            )
            if cued and cued > CUE_MARGIN * plain:
                return CUED_LOOK_EVERY
            return max(state.look_every, state.look_time.seconds / (share * plain_s))

        fresh = [m for m in self.modes if m is not Mode.AR and self._state(m).fresh_look_due]
        if fresh:
            return fresh[0]
        due = [
            m
            for m in self.modes
            if m not in (Mode.AR, current) and self._steps - self._state(m).last_look >= interval(m)
        ]
        return min(due, key=lambda m: self._state(m).last_look) if due else None

    def observe_preview(
        self,
        mode: Mode,
        scores: Sequence[float],
        draft_s: float,
        depth: int,
        node_depths: Sequence[int] | None = None,
    ) -> None:
        state = self._state(mode)
        state.look_time.add(draft_s)
        fixed_s = draft_s + state.rest.seconds
        plan = best_length(self.costs, scores, fixed_s, depth, state.honesty, node_depths)
        old = None if state.fresh_look_due else self._repriced(state)  # not the last text's
        state.fresh_look_due = False
        self._set_look(
            state,
            plan
            if old is None
            else LengthPlan(
                plan.nodes,
                old.expected_tokens + SMOOTHING * 2 * (plan.expected_tokens - old.expected_tokens),
                old.predicted_s + SMOOTHING * 2 * (plan.predicted_s - old.predicted_s),
            ),
        )
        state.last_look = self._steps
        # Looks come less often only at a mode far behind both plain decoding and the mode
        # running: one near them may be a few looks from winning (its look is one draft's
        # scores), and missing that costs more than looking (``LOOK_BUDGET`` bounds the
        # looks' time either way). Measured against plain decoding alone, DFlash2's looks
        # while MTP ran at 1.4x plain came at the budget's pace, ~35 ms every 8 steps (Qwen,
        # math at 1k-4k: 3-5% of the reply).
        bar = per_s(self.rate(Mode.AR, depth, True))
        running = self._previous
        if running not in (None, Mode.AR, mode) and (ran := self.rate(running, depth, True)):
            bar = max(bar, per_s(ran))
        losing = per_s(state.look) < TRIAL_WITHIN * bar
        state.look_every = (
            min(self.max_look_every, 2 * state.look_every) if losing else self.look_every
        )

    # --- the mode ------------------------------------------------------------------------

    def choose(self, depth: int, current: Mode | None) -> Choice:
        if self.forced:
            return Choice(self.forced, _switch_reason(current, self.forced, "forced by the user"))
        if current is None:  # a new reply, new text: one look at each drafting mode at once
            for mode in self.modes:
                if mode is not Mode.AR:
                    self._state(mode).new_reply()
        if current in (None, Mode.AR) and not self.costs.knows_plain_at(depth):
            # Deeper than plain decoding was ever timed: its cost here is a guess, so the
            # reply starts plain and stays until a plain step is timed; switches follow.
            return Choice(Mode.AR)
        rates = {m: r for m in self.modes if (r := self.rate(m, depth, m is current)) is not None}
        best = max(rates, key=lambda m: per_s(rates[m]))
        if current is None:
            return Choice(best)
        if current is not Mode.AR and self._settling(current):
            chosen_by = self._repriced(self._state(current))
            rival = self._rival_while_settling(current, chosen_by, rates) if chosen_by else None
            if chosen_by is None or rival is None:
                return Choice(current)
            rates[current], best = chosen_by, rival
        here = rates.get(current)
        # The margin against flapping guards the switches that cost something (a drafter
        # catching up, an untimed first step); back to plain decoding, being faster is enough.
        margin = 0.0 if best is Mode.AR else self._join_margin(best)
        if best != current and (here is None or per_s(rates[best]) > per_s(here) * (1 + margin)):
            if current is not Mode.AR and here is not None:  # leaving: its look is what it did
                self._set_look(self._state(current), here)
                plain = rates.get(Mode.AR)
                if plain is not None and per_s(here) < per_s(plain):
                    self._state(current).defeats += 1
            if best is not Mode.AR:  # joining: its own steps will say how it does now
                self._join(best)
            return Choice(best, self._reason(best, rates[best], depth, current, here))
        trial = self._worth_a_trial(rates, best) if current is Mode.AR else None
        if trial is not None:
            self._join(trial)
            why = self._reason(trial, rates[trial], depth, current, here)
            return Choice(trial, f"trying {why}")
        return Choice(current)

    def _rival_while_settling(
        self, current: Mode, chosen_by: LengthPlan, rates: dict[Mode, LengthPlan]
    ) -> Mode | None:
        """A drafting mode whose look beats ``chosen_by`` (the look ``current`` was chosen
        by) by the margin: settling shields a mode from its own first steps, not from a better
        look. Frozen for its 3 steps, MTP, chosen on a reply's first looks at 4k of prose (DFlash2's
        first draft there, at the reply's first token, promised 1.04 tokens), ran on while
        DFlash2's next look promised 2.8 tokens a step, and then committed 4-8 (Qwen)."""
        rivals = [m for m in rates if m not in (current, Mode.AR)]
        beats = [
            m for m in rivals if per_s(rates[m]) > per_s(chosen_by) * (1 + self._join_margin(m))
        ]
        return max(beats, key=lambda m: per_s(rates[m])) if beats else None

    def _join_margin(self, mode: Mode) -> float:
        """How far a look must beat the running mode to switch to ``mode``: the margin
        against flapping, doubled for every time ``mode`` ran behind plain decoding and was
        left in this reply. A look is one draft's scores, and a switch made on the best of
        many noisy looks meets the mean on arrival: on the Qwen demo's chat question
        (sampled), looks at MTP and DFlash2 promised 1.4-1.8 tokens a step, and auto switched
        to them 9 times in 120 tokens; their steps committed 1.0-1.3 at 145-200 ms, behind
        plain decoding's 125 ms a token, each time."""
        return self.hysteresis * REJOIN_BACKOFF ** self._state(mode).defeats

    def _join(self, mode: Mode) -> None:
        state = self._state(mode)
        state.realised = state.expected = state.verified = None
        # Settling is for a mode's first run in a reply: rejoined, its steps here are known.
        state.steps_since_join = SETTLE_STEPS if state.ran_this_reply else 0

    def _settling(self, mode: Mode) -> bool:
        """A mode just chosen keeps running for ``SETTLE_STEPS`` drafted steps: one step's
        committed tokens are one sample (Qwen, code at 2k: DFlash2, 1.44x plain when fixed,
        committed 1 token on its first step in auto and was left at once, for good). Its
        plans declining the draft ``IDLE_TRIAL_STEPS`` times ends that early: nothing is
        being tested then. Only a mode's first run in a reply settles: every later one
        costing 3 steps, looks that kept over-promising on prose at 1k sent auto into
        DFlash2 and MTP for 34 of 54 steps (0.62x plain)."""
        state = self._state(mode)
        return (
            state.steps_since_join < SETTLE_STEPS and state.idle_steps_this_reply < IDLE_TRIAL_STEPS
        )

    def _worth_a_trial(self, rates: dict[Mode, LengthPlan], best: Mode) -> Mode | None:
        """While decoding plainly: a drafting mode that has not run in this reply though its
        look comes within ``TRIAL_WITHIN`` of the best rate. A look is a forecast from
        estimates made on other text (a code rewrite that prompt lookup decodes at 2.6x looked
        like 1.8 tokens per step), and only the mode's own steps can correct it. One trial per
        reply and mode, and none away from a drafting mode that is running: it has its own
        steps to go by. Nor one that could not win even were its look ``TRIAL_UPSIDE`` times
        too modest: at 8k of context a look at DFlash2 expecting 1.3 tokens a step at 240 ms
        came within ``TRIAL_WITHIN`` of plain decoding's 7.7 tok/s, and its trial, ~200 ms a
        token, then the way back, cost ~7% of the reply (Qwen, code and prose at 8k)."""
        best_rate = per_s(rates[best])
        open_ = [
            m
            for m, r in rates.items()
            if m is not Mode.AR
            and not self._state(m).ran_this_reply
            and self._state(m).look is not None
            and per_s(r) >= TRIAL_WITHIN * best_rate
            and per_s(upside(r)) > best_rate
        ]
        if not open_:
            return None
        return max(open_, key=lambda m: per_s(rates[m]))

    def _reason(
        self,
        mode: Mode,
        rate: LengthPlan,
        depth: int,
        other_mode: Mode | None,
        other: LengthPlan | None,
    ) -> str:
        verified = rate.nodes + 1
        text = (
            f"{mode.label}, {verified} token{'s' * (verified != 1)} verified: "
            f"expects {rate.expected_tokens:.1f} tok/step at {rate.predicted_s * 1000:.0f} ms"
        )
        if other is not None and other_mode is not None:
            text += (
                f"; {other_mode.label} {other.expected_tokens:.1f} tok/step "
                f"at {other.predicted_s * 1000:.0f} ms"
            )
        return text + f" (context {depth:,})"

    # --- the length ----------------------------------------------------------------------

    def plan_length(
        self,
        mode: str,
        scores: Sequence[float],
        draft_s: float,
        depth: int,
        node_depths: Sequence[int] | None = None,
    ) -> LengthPlan:
        """The number of best-first nodes to verify that maximises expected tokens/s, the
        scores scaled by how honest they have been on this text (``PLAN_HONESTY``): prompt
        lookup on a code rewrite committed 3–4 tokens a step where its plans expected 2–3, and
        plans taken at face value verified 3–5 nodes where 8 paid more (2.40x plain against
        2.75x for fixed DFlash2)."""
        state = self._state(Mode(mode))
        honesty = min(max(state.honesty, PLAN_HONESTY[0]), PLAN_HONESTY[1])
        plan = best_length(
            self.costs, scores, draft_s + state.rest.seconds, depth, honesty, node_depths
        )
        # Honesty is judged against the scores as they were, not as scaled: else it would
        # undo its own correction.
        state.raw_expected = 1.0 + sum(scores[: plan.nodes])
        prior = state.expected if state.expected is not None else plan.expected_tokens
        state.expected = smooth(prior, plan.expected_tokens)
        state.verified = smooth(state.verified, plan.nodes + 1.0)  # the first: as planned
        return plan

    # --- what happened -------------------------------------------------------------------

    def observe(
        self,
        mode: Mode,
        depth: int,
        committed: int,
        seconds: float,
        stats: StepStats | None = None,
        replayed: bool = False,
    ) -> None:
        """``replayed``: the step's whole draft is judged later (``observe_drafts``), so its
        own committed tokens do not count toward the estimates' honesty."""
        self._steps += 1
        timed = mode is self._previous
        self._previous = mode
        if mode is Mode.AR:
            if timed:
                self.costs.observe_verify(1, depth, seconds)
            return
        state = self._state(mode)
        state.last_look = self._steps
        # A step that verified drafted tokens tested the mode on this text; one whose plan
        # verified none (a plain step in the mode's clothes) did not, but its plan declined
        # the draft: a few of those use up the trial too (else a look within reach of plain
        # sent auto to MTP, one declined step and back, over and over: Qwen, prose at 4k).
        state.idle_steps_this_reply += stats is not None and stats.drafted == 0
        state.steps_since_join += stats is None or stats.drafted > 0
        state.ran_this_reply |= (
            stats is None or stats.drafted > 0 or state.idle_steps_this_reply >= IDLE_TRIAL_STEPS
        )
        if stats is not None:
            self.costs.observe_verify(stats.drafted + 1, depth, stats.verify_s)
            if timed or not state.draft.known:
                state.draft.add(stats.draft_s)
                state.rest.add(max(0.0, seconds - stats.verify_s - stats.draft_s))
        expected = 1.0
        if stats is not None and stats.drafted > 0:  # a plan's own, else the step's record
            expected = state.raw_expected or stats.predicted_tokens
        state.raw_expected = None
        if expected > 1.0 and not replayed:
            self.observe_drafts(mode, expected - 1, committed - 1)
        # A mode's first step starts from what its plan expected, not from one sample.
        prior = state.realised if state.realised is not None else state.expected
        state.realised = smooth(prior, float(committed))

    def observe_drafts(self, mode: Mode, expected: float, accepted: int) -> None:
        """A draft's drafted tokens: ``expected`` by its scores, ``accepted`` by the target
        (verified, or replayed against the text once it was written)."""
        state = self._state(mode)
        keep = 1.0 - SMOOTHING
        state.committed_extra = keep * state.committed_extra + accepted
        state.expected_extra = keep * state.expected_extra + expected
