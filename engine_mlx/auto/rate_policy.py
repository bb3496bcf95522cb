"""The default auto policy: each step, the mode and draft length with the most expected tokens
per second.

Expected tokens come from the drafts themselves: the selector scores every candidate node with
its calibrated probability of being accepted together with its ancestors, so a tree of the
best n nodes is expected to commit ``1 + sum(scores[:n])`` tokens. Cost comes from the
machine: ``step_costs`` says what the target's forward over n+1 tokens costs at this depth,
and a step's own draft time is known once it has drafted. So:

- **length** (``plan_length``, after drafting; the arithmetic in ``length_plan``): verify the
  n in 0..all maximising ``(1 + E_n) / (draft + rest + forward(n + 1))`` — fewer tokens when
  confidence drops, none (a plain step) when no draft is worth its forward;
- **a look at the other modes** (``preview_due`` / ``observe_preview``, kept by ``looks``):
  every few steps the generation drafts with a mode that is not running, without verifying,
  and the same plan says what that draft would have been worth here; a reply deeper than
  plain decoding was ever timed starts plain until it has been (its cost there would
  otherwise be an extrapolation);
- **mode** (``choose``, before drafting, decided by ``mode_choice``): plain decoding's rate is
  ``1 / forward(1)``; the running drafting mode's is the tokens its recent steps committed (at
  most ``TRUST_ABOVE_EXPECTED`` times what its plans expected: a lucky run is not a trend)
  over their cost; a mode not running is rated by its recent looks (``rate``). The best rate
  wins, with a margin against flapping, and a mode whose look comes close is tried once a
  reply.

The first step after a switch is not timed (the drafter catching up, the plain pipeline
refilling): it would make every newly chosen mode look slower than it is. A forced mode
overrides everything. ``policy.ThresholdPolicy`` (a fixed context depth) remains selectable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from engine_mlx.auto.length_plan import SMOOTHING, TRIAL_UPSIDE, best_length, per_s, smooth
from engine_mlx.auto.looks import Looks
from engine_mlx.auto.mode_choice import IDLE_TRIAL_STEPS, ModeChoice
from engine_mlx.auto.mode_memory import ModeMemory
from engine_mlx.auto.mode_record import ModeRecord
from engine_mlx.auto.policy import Choice, _switch_reason
from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.decoding.strategies import LengthPlan
from engine_mlx.modes import Mode
from engine_mlx.stats import StepStats

TRUST_ABOVE_EXPECTED = 2.0  # realised tokens count up to this multiple of the plans' expectation
PLAN_HONESTY = (0.5, TRIAL_UPSIDE)  # the running mode's plans scale its scores by honesty,
# within this (a trial's upside is the most the plans themselves may believe)


@dataclass
class ExpectedRatePolicy:
    modes: list[Mode]
    costs_source: Callable[[], StepCosts]  # the calibrated table, loaded on first use
    hysteresis: float = 0.1
    look_every: int = 4
    max_look_every: int = 32
    forced: Mode | None = None
    memory: ModeMemory | None = None  # what the last process learned, kept on disk
    _costs: StepCosts | None = None
    _previous: Mode | None = None  # the mode of the last observed step
    # ``Looks.changes`` at the last choice: decoding plainly, a step after which no look
    # changed cannot change the choice (most chat steps: no lookup match, no look due).
    _seen_changes: int = -1
    looks: Looks = field(init=False, repr=False)  # each drafting mode's record, its looks
    mode_choice: ModeChoice = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.looks = Looks(self.modes, lambda: self.costs, self.look_every, self.max_look_every)
        self.mode_choice = ModeChoice(self.looks, self.hysteresis)
        if self.memory is not None:
            self.memory.load(self.looks.records, self.look_every)

    def reply_done(self) -> None:
        """A reply ended: what was learned on it outlives the process (``mode_memory``)."""
        if self.memory is not None:
            modes = [m for m in self.modes if m is not Mode.AR]
            self.memory.save({m: self.looks.record(m) for m in modes})

    @property
    def costs(self) -> StepCosts:
        if self._costs is None:
            self._costs = self.costs_source()
        return self._costs

    def _state(self, mode: Mode) -> ModeRecord:
        return self.looks.record(mode)

    # --- rates ---------------------------------------------------------------------------

    def rate(self, mode: Mode, depth: int, running: bool) -> LengthPlan | None:
        """Expected tokens and seconds per step of ``mode`` here (``running``: from its own
        recent steps, else from its looks); None when nothing is known yet."""
        if mode is Mode.AR:
            return LengthPlan(0, 1.0, self.costs.verify_s(1, depth))
        state = self.looks.records.get(mode)
        if state is None:
            return None
        if not running or state.realised is None or not state.draft.known:
            return self.looks.repriced(state)
        tokens = state.realised
        if state.expected is not None:
            tokens = min(tokens, TRUST_ABOVE_EXPECTED * state.expected)
        verified = state.verified or 1.0
        seconds = state.draft.seconds + state.rest.seconds + self.costs.verify_s(verified, depth)
        return LengthPlan(round(verified) - 1, max(1.0, tokens), seconds)

    # --- looks (``looks``) ---------------------------------------------------------------

    def preview_due(
        self, depth: int, current: Mode, cues: Mapping[Mode, Sequence[float]] | None = None
    ) -> Mode | None:
        """A drafting mode, not the running one, whose look is due (``Looks.due``)."""
        if self.forced:
            return None
        bar = self._look_bar(Mode.AR, depth)  # plain decoding, or the running drafting mode
        return self.looks.due(depth, current, cues, bar)

    def observe_preview(
        self,
        mode: Mode,
        scores: Sequence[float],
        draft_s: float,
        depth: int,
        node_depths: Sequence[int] | None = None,
        spent_s: float | None = None,
    ) -> None:
        """A look's draft (``draft_s``: drafting alone; ``spent_s``: the look's whole time,
        the drafter's catch-up included, what the looks' budget counts)."""
        bar = self._look_bar(mode, depth) if scores else 0.0  # (nothing to rate: no bar)
        self.looks.observe(mode, scores, draft_s, depth, node_depths, bar, spent_s)

    def _look_bar(self, mode: Mode, depth: int) -> float:
        """The rate a look at ``mode`` must come near to be looked at as often as ever: the
        best of plain decoding's and the running drafting mode's. Measured against plain
        decoding alone, DFlash2's looks while MTP ran at 1.4x plain came at the budget's pace,
        ~35 ms every 8 steps (Qwen, math at 1k-4k: 3-5% of the reply)."""
        bar = per_s(self.rate(Mode.AR, depth, True))
        running = self._previous
        if running not in (None, Mode.AR, mode) and (ran := self.rate(running, depth, True)):
            bar = max(bar, per_s(ran))
        return bar

    # --- the mode (``mode_choice``) ------------------------------------------------------

    def choose(self, depth: int, current: Mode | None) -> Choice:
        if self.forced:
            return Choice(self.forced, _switch_reason(current, self.forced, "forced by the user"))
        if current is Mode.AR and self.looks.changes == self._seen_changes:
            return Choice(Mode.AR)
        # (a drafting mode's own steps are news at every choice)
        self._seen_changes = self.looks.changes if current is Mode.AR else -1
        if current is None:  # a new reply, new text: one look at each drafting mode at once
            self.looks.new_reply()
        if current in (None, Mode.AR) and not self.costs.knows_plain_at(depth):
            # Deeper than plain decoding was ever timed: its cost here is a guess, so the
            # reply starts plain and stays until a plain step is timed; switches follow.
            return Choice(Mode.AR)
        rates = {m: r for m in self.modes if (r := self.rate(m, depth, m is current)) is not None}
        return self.mode_choice.choose(rates, depth, current)

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
        self.looks.stepped(mode)  # a drafting mode's own step counts as a look at it
        timed = mode is self._previous
        self._previous = mode
        if mode is Mode.AR:
            if timed:
                self.costs.observe_verify(1, depth, seconds)
            return
        state = self._state(mode)
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
