"""One generation, from a checked config to its last event: prefill, then decode steps.

Holds what lives exactly as long as one reply: the cache, the strategies built for it, the
statistics and the text. ``Session`` owns what outlives it (models, kept prefill, policies,
acceptance calibration) and starts one of these per ``generate``, handing it a ``Setup``:
nothing here reaches back up to the session.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace

import mlx.core as mx

from engine_mlx.auto import Policy
from engine_mlx.auto.looks import FREE_LOOKS
from engine_mlx.backend import backend_info
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.acceptance import replay
from engine_mlx.decoding.loop_guard import LoopGuard
from engine_mlx.decoding.ngram import NGramIndex
from engine_mlx.decoding.sampling import Sampler
from engine_mlx.decoding.strategies import Drafter, Strategy
from engine_mlx.decoding.tree import CandidateTree
from engine_mlx.events import Event, Finished, ModeSwitch, PrefillProgress, Started, Tokens
from engine_mlx.kernels import launch
from engine_mlx.models.target import TargetModel
from engine_mlx.modes import Mode
from engine_mlx.prompt_cache import PrefilledPrompt, PrefillSlot, snapshot_cache
from engine_mlx.reply_text import ReplyText
from engine_mlx.stats import StatsTracker, TimeSplit


class DrafterGroup:
    """The drafters one generation keeps fed: the verify forward captures the union of their
    layers, and every token that goes through the target reaches each of them — observed by
    the one drafting now, deferred (cheap) by idle ones, which catch up when chosen."""

    def __init__(self, drafters: list[Drafter]) -> None:
        self.drafters = drafters
        self.capture = tuple(sorted({lid for d in drafters for lid in d.capture_layers}))

    def _select(self, drafter: Drafter, features: list[mx.array]) -> list[mx.array]:
        return [features[self.capture.index(lid)] for lid in drafter.capture_layers]

    def observe_all(
        self, ids: Sequence[int], features: list[mx.array], only: list[Drafter] | None = None
    ) -> None:
        for d in self.drafters if only is None else only:
            d.observe(ids, self._select(d, features))

    def restore(self, kept: Mapping[Drafter, object]) -> list[Drafter]:
        """Each drafter whose context after the prompt was kept takes it back; returns the
        others, which must observe the prompt's features."""
        fresh = []
        for d in self.drafters:
            state = kept.get(d)
            if state is None:
                fresh.append(d)
            else:
                d.restore_context(state)  # type: ignore[attr-defined]
        return fresh

    def keep(self, into: MutableMapping[Drafter, object], drafters: list[Drafter]) -> None:
        """Keep the context of ``drafters`` (the ones that can hand it over) after the prompt."""
        for d in drafters:
            if hasattr(d, "context_state"):
                into[d] = d.context_state()

    def feed(self, ids: Sequence[int], features: list[mx.array], active: Drafter | None) -> None:
        for d in self.drafters:
            sub = self._select(d, features)
            (d.observe if d is active else d.defer)(ids, sub)


@dataclass(frozen=True)
class Setup:
    """What a generation takes from the session that starts it, fixed when it is built: the
    target, its limits, the drafters of its mode, auto mode's policy (None in a fixed mode),
    how a mode's strategy is built, and where the prefill is kept (None: not kept)."""

    target: TargetModel
    max_context: int
    eos: frozenset[int]
    drafters: list[Drafter]
    policy: Policy | None
    build_strategy: Callable[..., Strategy]
    kept: PrefillSlot | None


class Generation:
    """Yields Started, PrefillProgress*, Tokens*, then Finished; cancellable between prefill
    chunks and between steps, the points where no MLX work is half done."""

    def __init__(
        self,
        setup: Setup,
        prompt: list[int],
        config: GenerationConfig,
        mode: Mode,
        cancel: threading.Event,
        sampler: Sampler,
    ) -> None:
        self.setup, self.target = setup, setup.target
        self.prompt, self.config, self.cancel, self.sampler = prompt, config, cancel, sampler
        self.requested = mode
        self.max_context = setup.max_context
        self.stats = StatsTracker(len(prompt), self.max_context)
        self.split = TimeSplit()  # where the decode time goes (``stats.TIME_PARTS``)
        self._kernel_calls = launch.CALLS.snapshot()  # stats.kernels: this reply's calls
        self.eos = set() if config.ignore_eos else set(setup.eos)
        self.cache = self.target.make_cache()
        self.group = DrafterGroup(setup.drafters)
        self.lookup = NGramIndex() if config.lookup else None
        self.policy = setup.policy
        self.strategies: dict[Mode, Strategy] = {}
        self.text = ReplyText(
            self.target.tokenizer, config.stop_strings, self.target.thinking, prompt
        )
        self.loop_guard = LoopGuard() if config.loop_guard else None
        self.looped = False
        self.tokens: list[int] = []
        self.depth = len(prompt)
        self._previews: dict[Mode, int] = {}  # mode -> len(tokens) at its pending look
        # Whole drafts whose worth the text has not decided yet: (mode, draft, len(tokens)
        # at its root, nodes its step verified).
        self._drafts: list[tuple[Mode, CandidateTree, int, int]] = []

    def events(self) -> Iterator[Event]:
        prompt = self.prompt
        yield Started(self.requested, len(prompt), self.max_context, backend_info().describe())
        mode = self.policy.choose(len(prompt), None).mode if self.policy else self.requested
        for drafter in self.group.drafters:
            drafter.reset()
        logits = yield from self._prefill()
        if logits is None:
            yield self._finish("cancelled")
            return
        self.stats.prefill_done()
        yield from self._decode(Mode(mode), logits)

    # --- prefill ------------------------------------------------------------------------

    def _prefill(self) -> Generator[Event, None, mx.array | None]:
        """Feeds the prompt in chunks (from a kept prefill where it serves); returns the last
        position's logits, or None when cancelled."""
        slot, target, prompt, group = self.setup.kept, self.target, self.prompt, self.group
        capture = group.capture
        keep = slot.capture if slot is not None else capture
        logits, first = None, 0
        chunks: list[tuple[list[int], list[mx.array]]] = []
        kept = slot.prefilled if slot is not None else None
        if kept is not None and kept.serves(prompt, keep):
            self.cache = kept.restore_cache()
            logits, first, chunks = kept.logits, len(kept.ids), list(kept.chunks)
            fresh = group.restore(kept.drafters)
            for ids, feats in kept.features_for(capture) if fresh else []:
                group.observe_all(ids, feats, only=fresh)
            if first == len(prompt):  # their context is the kept prompt's, to keep as well
                group.keep(kept.drafters, fresh)
            if self.lookup is not None:
                self.lookup.extend(list(kept.ids))
            self.stats.reused_prompt_tokens = first
        elif kept is not None and not target.is_hybrid:
            first = kept.common_prefix(prompt, keep)
            if first > 0:  # the shared beginning: the cache cut back to it, features replayed
                self.cache = kept.restore_cache()
                target.trim(self.cache, len(kept.ids) - first)
                chunks = kept.chunks_until(first)
                index = [kept.capture.index(i) for i in capture]
                for ids, feats in chunks:
                    group.observe_all(ids, [feats[i] for i in index])
                if self.lookup is not None:
                    self.lookup.extend(list(prompt[:first]))
                self.stats.reused_prompt_tokens = first
        size = self.config.prefill_chunk
        for start in range(first, len(prompt), size):
            if self.cancel.is_set():
                return None
            chunk_ids = prompt[start : start + size]
            out = target.forward(mx.array(chunk_ids), self.cache, last_only=True, capture=keep)
            logits = out.logits
            mx.eval(logits, out.features)
            if group.drafters:
                group.observe_all(chunk_ids, [out.features[keep.index(i)] for i in capture])
            if slot is not None:
                chunks.append((chunk_ids, out.features))
            if self.lookup is not None:
                self.lookup.extend(chunk_ids)
            yield PrefillProgress(min(start + size, len(prompt)), len(prompt))
        if slot is not None and first < len(prompt):
            slot.prefilled = PrefilledPrompt(
                tuple(prompt), keep, snapshot_cache(self.cache), logits, chunks
            )
            group.keep(slot.prefilled.drafters, group.drafters)
        return logits

    # --- decode -------------------------------------------------------------------------

    def _strategy(self, mode: Mode) -> Strategy:
        if mode not in self.strategies:
            planner = getattr(self.policy, "plan_length", None)
            self.strategies[mode] = self.setup.build_strategy(
                mode, self.config, self.cache, self.sampler, self.lookup, self.group, planner
            )
        return self.strategies[mode]

    def _decode(self, mode: Mode, logits: mx.array) -> Iterator[Event]:
        strategy = self._strategy(mode)
        self.sampler.remember(self.prompt)
        strategy.begin(self.sampler.sample(logits[0, -1]))
        switched = False
        while True:
            if self.cancel.is_set():
                reason = "cancelled"
                break
            if self.policy is not None and self.tokens:  # the first step is the prefill's token
                t0 = time.perf_counter()
                looked_s = self._look(strategy, mode)
                choice = self.policy.choose(self.depth, mode)
                self.split.add("policy", time.perf_counter() - t0 - looked_s)
                if choice.mode != mode and getattr(strategy, "queued_ahead", False):
                    event, hit_eos = self._step(strategy, mode, hand_over=True)
                    yield event
                    reason = self._stop_reason(hit_eos)
                    if reason:
                        break
                if choice.mode != mode:
                    t0 = time.perf_counter()
                    root = strategy.release()
                    strategy = self._strategy(Mode(choice.mode))
                    strategy.resume(root)
                    self.split.add("switch", time.perf_counter() - t0)
                    yield ModeSwitch(mode, choice.mode, choice.reason or "auto policy")
                    mode, switched = Mode(choice.mode), True
            event, hit_eos = self._step(strategy, mode, switched=switched)
            switched = False
            yield event
            reason = self._stop_reason(hit_eos)
            if reason:
                break
        yield self._finish(reason)

    def _look(self, strategy: Strategy, mode: Mode) -> float:
        """Let the auto policy see what the modes would draft here: one that is not running
        when its look is due, and at a new reply's first step each of them, the running one
        too, until the policy has no look due. Returns the seconds the looks' drafts took
        (``TimeSplit``'s looks; the rest is the policy's)."""
        due = getattr(self.policy, "preview_due", None)
        if due is None:
            return 0.0
        root = strategy.peek_root()  # type: ignore[attr-defined]
        cues = {
            m: self._strategy(m).lookup_scores(root)  # type: ignore[attr-defined]
            for m in getattr(self.policy, "modes", ())
            if m not in (Mode.AR, mode) and m not in FREE_LOOKS  # those are looked at anyway
        }
        looked: set[Mode] = set()
        spent = 0.0
        while (other := due(self.depth, mode, {m: c for m, c in cues.items() if c})) is not None:
            if other in looked:
                break
            looked.add(other)
            preview = self._strategy(other)
            t0 = time.perf_counter()
            scores, depths, seconds = preview.preview(root)  # type: ignore[attr-defined]
            took = time.perf_counter() - t0  # the drafter's catch-up too
            spent += took
            self.policy.observe_preview(other, scores, seconds, self.depth, depths, took)  # type: ignore[union-attr]
            if other != mode:  # the running mode's own step judges this very draft
                self._previews[other] = len(self.tokens)
        self.split.add("looks", spent)
        return spent

    def _step(
        self, strategy: Strategy, mode: Mode, hand_over: bool = False, switched: bool = False
    ) -> tuple[Tokens, bool]:
        """One verification step's tokens, cut at EOS, the token budget and the context.

        ``hand_over``: plain decoding's last step before a switch, which commits the token of
        the forward it queued ahead instead of discarding it. That forward was timed in the
        step before, so this one is not shown to the policy (it would price a plain forward
        at ~0 ms). ``switched``: the first step after a change of mode (``TimeSplit``)."""
        limit = min(self.config.max_tokens - len(self.tokens), self.max_context - self.depth)
        decoding = bool(self.tokens)  # the first step is the prefill's token
        t_step = time.perf_counter()
        outcome = strategy.step(limit, **({"queue_next": False} if hand_over else {}))
        step_stats = replace(outcome.stats, seconds=time.perf_counter() - t_step)
        t_policy = time.perf_counter()
        # Only the expected-rate policy plans lengths, so only its steps carry a proposal.
        replayed = outcome.proposed is not None
        if self.policy is not None and self.tokens and not hand_over:
            self.policy.observe(
                mode,
                self.depth,
                step_stats.committed,
                step_stats.seconds,
                step_stats,
                **({"replayed": True} if replayed else {}),
            )
        if replayed:
            verified = outcome.stats.drafted + 1
            self._drafts.append((mode, outcome.proposed, len(self.tokens), verified))  # type: ignore[arg-type]
        observed_s = time.perf_counter() - t_policy
        new = outcome.tokens[:limit]
        self.sampler.remember(new)
        if self.lookup is not None:
            self.lookup.extend(new)
        hit_eos = next((i for i, t in enumerate(new) if t in self.eos), None)
        if hit_eos is not None:
            new = new[:hit_eos]
        looped = self.loop_guard.feed(new) if self.loop_guard is not None else None
        if looped is not None:
            new, self.looped = new[: looped + 1], True
        t_commit = time.perf_counter()
        self.tokens.extend(new)
        self.depth += len(new)
        self._judge_drafts()
        for looked, start in list(self._previews.items()):  # the looks' drafts, judged
            if self.strategies[looked].judge_preview(self.tokens[start:]):  # type: ignore[attr-defined]
                del self._previews[looked]
        t_judged = time.perf_counter()
        if decoding:
            policy_s = observed_s + t_judged - t_commit if self.policy is not None else 0.0
            self.split.add("policy", policy_s)
            self.split.add_step(step_stats, t_judged - t_step - policy_s, switched)
        live = self.stats.record(step_stats, self.depth)
        flags = outcome.from_draft[: len(new)]
        written = self.text.add(new, flags, step_stats)
        event = Tokens(
            "".join(text for text, _ in written.segments),
            tuple(new),
            tuple(flags),
            step_stats,
            live.tps,
            live.context_depth,
            written.segments,
            tau=live.tau,
            acceptance_rate=live.acceptance_rate,
            reasoning=written.reasoning,
            part=written.part.value,
        )
        return event, hit_eos is not None

    def _judge_drafts(self) -> None:
        """Tell the policy what each whole draft would have committed, and the selector's
        calibration how the nodes its plan cut would have fared, once the text after its
        root decides it. A plan that verified 4 of 8 nodes commits at most 5 tokens, so
        its own step cannot say whether the other 4 were worth verifying. (Traced on Qwen's
        code rewrite, where plans verified 3 nodes and committed ~3 while a fixed 8-token
        draft commits 4.6: judged whole, the estimates' honesty rose to 1.7-2.5 within 8
        steps; what still held the plans at 3 nodes was the cost table, ``step_costs.
        consistent``.)"""
        pending = []
        for mode, draft, start, verified in self._drafts:
            walked = replay(draft, self.tokens[start:])
            if walked is None:
                pending.append((mode, draft, start, verified))
            else:
                self.policy.observe_drafts(mode, sum(draft.scores[1:]), walked.accepted)  # type: ignore[union-attr]
                self.strategies[mode].calibrator.observe_unverified(draft, walked, verified)  # type: ignore[attr-defined]
        self._drafts = pending

    def _stop_reason(self, hit_eos: bool) -> str:
        if hit_eos:
            return "eos"
        if self.looped:
            return "repetition"
        if self.text.stopped:
            return "stop_string"
        if len(self.tokens) >= self.config.max_tokens:
            return "max_tokens"
        if self.depth >= self.max_context:
            return "context_full"
        return ""

    def _finish(self, reason: str) -> Finished:
        done = getattr(self.policy, "reply_done", None)
        if done is not None:
            done()
        answer, reasoning = self.text.finish(stopped_by_string=reason == "stop_string")
        stats = replace(
            self.stats.summary(),
            kernels=launch.calls_since(self._kernel_calls),
            time_split=self.split.as_dict(self.stats.decode_seconds()),
            segments=self.text.segments_json(),
        )
        return Finished(reason, answer, tuple(self.tokens), stats, reasoning)
