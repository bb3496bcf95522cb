"""The decode loop: prompt ids in, events out. Owns the cache; cancellable at any step.

Runs on whatever thread calls it (the app puts it on a worker thread); ``cancel`` is a
``threading.Event`` checked between prefill chunks and between steps, the points where no
MLX work is in flight that would leave the cache half-updated.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import mlx.core as mx

from engine_mlx.backend import backend_info
from engine_mlx.chat import IncrementalDetokenizer, StopStringFilter
from engine_mlx.decoding.ngram import NGramIndex
from engine_mlx.decoding.sampling import Sampler, SamplingParams
from engine_mlx.decoding.selector import AcceptanceCalibrator
from engine_mlx.decoding.strategies import Autoregressive, Drafter, Speculative, Strategy
from engine_mlx.errors import ContextOverflowError, EngineError
from engine_mlx.events import (
    Error,
    Event,
    Finished,
    ModeSwitch,
    PrefillProgress,
    Started,
    Tokens,
)
from engine_mlx.models.target import TargetModel
from engine_mlx.policy import CostModelPolicy, ThresholdPolicy
from engine_mlx.prompt_cache import PrefilledPrompt, snapshot_cache
from engine_mlx.stats import StatsTracker

MODES = ("ar", "lookup", "dflash2", "mtp", "auto")


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = 512
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop_strings: tuple[str, ...] = ()
    mode: str = "ar"
    prefill_chunk: int = 512
    ignore_eos: bool = False  # benchmarks: always generate max_tokens
    width: int = 1  # candidate paths per verification (speculative modes)
    block_size: int | None = None  # draft block; None = the drafter's own (lookup: 8)
    lookup: bool = True  # prompt-lookup candidates in the speculative tree
    policy: str = "cost"  # auto mode: "cost" (measured rates) or "threshold"
    auto_threshold: int = 4096  # the threshold policy's switch depth
    mtp_steps: int = 3  # tokens an MTP head drafts per step (1-4)


class DrafterGroup:
    """The drafters one generation keeps fed: the verify forward captures the union of their
    layers, and every token that goes through the target reaches each of them — observed by
    the one drafting now, deferred (cheap) by idle ones, which catch up when chosen."""

    def __init__(self, drafters: list[Drafter]) -> None:
        self.drafters = drafters
        self.capture = tuple(sorted({lid for d in drafters for lid in d.capture_layers}))

    def _select(self, drafter: Drafter, features: list[mx.array]) -> list[mx.array]:
        return [features[self.capture.index(lid)] for lid in drafter.capture_layers]

    def observe_all(self, ids: Sequence[int], features: list[mx.array]) -> None:
        for d in self.drafters:
            d.observe(ids, self._select(d, features))

    def feed(self, ids: Sequence[int], features: list[mx.array], active: Drafter | None) -> None:
        for d in self.drafters:
            sub = self._select(d, features)
            (d.observe if d is active else d.defer)(ids, sub)


class Session:
    """One target, one generation at a time."""

    def __init__(
        self,
        target: TargetModel,
        drafter: Drafter | None = None,
        mtp: Drafter | None = None,
        mtp_unavailable: str = "no MTP head loaded",
        *,
        reuse_prompt: bool = False,
    ) -> None:
        self.target = target
        self.reuse_prompt = reuse_prompt  # keep the last prefill (``prompt_cache``)
        self._prefilled: PrefilledPrompt | None = None
        self.drafter = drafter
        self.mtp = mtp
        self.mtp_unavailable = mtp_unavailable if mtp is None else ""
        self._eos = set(getattr(target.tokenizer, "eos_token_ids", None) or ())
        self._calibrators: dict[tuple[str, bool], AcceptanceCalibrator] = {}
        self._policies: dict[tuple, CostModelPolicy | ThresholdPolicy] = {}

    def _keep_capture(self) -> tuple[int, ...]:
        """Every layer any of this session's drafters reads, so a kept prefill serves all."""
        drafters = [d for d in (self.drafter, self.mtp) if d is not None]
        return tuple(sorted({lid for d in drafters for lid in d.capture_layers}))

    @property
    def auto_modes(self) -> list[str]:
        """What auto mode chooses between: plain decoding and the best speculative mode."""
        modes = ["ar", "dflash2" if self.drafter is not None else "lookup"]
        return modes + (["mtp"] if self.mtp is not None else [])

    def policy(self, config: GenerationConfig) -> CostModelPolicy | ThresholdPolicy:
        """Kept across generations, so what was measured keeps informing the choice."""
        modes = self.auto_modes
        key = (config.policy, config.auto_threshold, config.sampling.greedy, tuple(modes))
        if key not in self._policies:
            if config.policy == "threshold":
                long_mode = "mtp" if "mtp" in modes else "ar"
                self._policies[key] = ThresholdPolicy(config.auto_threshold, modes[1], long_mode)
            else:
                preferred = "dflash2" if "dflash2" in modes else "ar"
                self._policies[key] = CostModelPolicy(modes, preferred=preferred)
        return self._policies[key]

    def _drafters_for(self, mode: str) -> list[Drafter]:
        if mode == "auto":
            return [d for d in (self.drafter, self.mtp) if d is not None]
        own = {"dflash2": self.drafter, "mtp": self.mtp}.get(mode)
        return [own] if own is not None else []

    def _strategy(
        self,
        mode: str,
        config: GenerationConfig,
        cache: list,
        sampler: Sampler,
        lookup: NGramIndex | None,
        group: DrafterGroup,
    ) -> Strategy:
        if mode == "ar":
            return Autoregressive(
                self.target,
                cache,
                sampler,
                capture=group.capture,
                on_features=group.feed if group.drafters else None,
            )
        drafter = {"dflash2": self.drafter, "mtp": self.mtp}.get(mode)
        block = config.mtp_steps + 1 if mode == "mtp" else config.block_size
        default_block = drafter.block_size if drafter is not None else 8
        key = (mode, config.sampling.greedy)  # acceptance differs greedy vs sampled
        return Speculative(
            mode,
            self.target,
            cache,
            sampler,
            self._calibrators.setdefault(key, AcceptanceCalibrator()),
            drafter=drafter,
            width=1 if mode == "mtp" else config.width,
            block_size=block or default_block,
            lookup=lookup if mode != "mtp" else None,
            capture=group.capture,
            feed=group.feed,
        )

    @property
    def max_context(self) -> int:
        return self.target.spec.max_context

    def check_fits(self, prompt_len: int) -> None:
        if prompt_len == 0:
            raise EngineError("The prompt is empty.")
        if prompt_len >= self.max_context:
            raise ContextOverflowError(
                f"The prompt is {prompt_len:,} tokens but {self.target.spec.name} holds "
                f"{self.max_context:,}; shorten it or start a new conversation."
            )

    def generate(
        self,
        prompt_ids: Sequence[int],
        config: GenerationConfig | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Yields Started, PrefillProgress*, Tokens*, then Finished (or one Error)."""
        config = config or GenerationConfig()
        cancel = cancel or threading.Event()
        try:
            self.check_fits(len(prompt_ids))
            if config.mode not in MODES:
                raise EngineError(
                    f"Mode '{config.mode}' is not available (available: {', '.join(MODES)})."
                )
            if config.max_tokens < 1:
                raise EngineError("max tokens must be at least 1.")
            if config.policy not in ("cost", "threshold"):
                raise EngineError("policy must be 'cost' or 'threshold'.")
            if config.mode == "mtp" and self.mtp is None:
                raise EngineError(f"MTP is unavailable: {self.mtp_unavailable}.")
            if not 1 <= config.mtp_steps <= 4:
                raise EngineError("MTP steps must be between 1 and 4.")
            if config.mode == "dflash2" and self.drafter is None:
                raise EngineError("Mode dflash2 needs a DFlash drafter; load one or use ar.")
            if not 1 <= config.width <= 8:
                raise EngineError("draft width must be between 1 and 8.")
            if config.block_size is not None and not 2 <= config.block_size <= 64:
                raise EngineError("block size must be between 2 and 64.")
            sampler = Sampler(config.sampling)
        except (EngineError, ValueError) as exc:
            yield Error(str(exc))
            return
        yield from self._run(list(prompt_ids), config, cancel, sampler)

    def _run(
        self,
        prompt: list[int],
        config: GenerationConfig,
        cancel: threading.Event,
        sampler: Sampler,
    ) -> Iterator[Event]:
        target = self.target
        stats = StatsTracker(len(prompt), self.max_context)
        eos = set() if config.ignore_eos else self._eos
        yield Started(config.mode, len(prompt), self.max_context, backend_info().describe())
        cache = target.make_cache()
        auto = config.mode == "auto"
        group = DrafterGroup(self._drafters_for(config.mode))
        lookup = NGramIndex() if config.lookup else None
        policy = self.policy(config) if auto else None
        mode = policy.choose(len(prompt), None).mode if auto else config.mode
        strategies: dict[str, Strategy] = {}

        def strategy_for(name: str) -> Strategy:
            if name not in strategies:
                strategies[name] = self._strategy(name, config, cache, sampler, lookup, group)
            return strategies[name]

        for drafter in group.drafters:
            drafter.reset()
        capture = group.capture
        detok = IncrementalDetokenizer(target.tokenizer)
        stops = StopStringFilter(config.stop_strings)
        text_parts: list[str] = []
        tokens: list[int] = []

        def finish(reason: str) -> Finished:
            tail = stops.feed(detok.flush()) + stops.flush() if reason != "stop_string" else ""
            text_parts.append(tail)
            return Finished(reason, "".join(text_parts), tuple(tokens), stats.summary())

        logits = None
        first = 0
        keep = self._keep_capture() if self.reuse_prompt else capture
        chunks: list[tuple[list[int], list[mx.array]]] = []
        kept = self._prefilled
        if self.reuse_prompt and kept is not None and kept.serves(prompt, keep):
            cache = kept.restore_cache()
            logits, first, chunks = kept.logits, len(kept.ids), list(kept.chunks)
            for ids, feats in kept.features_for(capture) if group.drafters else []:
                group.observe_all(ids, feats)
            if lookup is not None:
                lookup.extend(list(kept.ids))
            stats.reused_prompt_tokens = first
        for start in range(first, len(prompt), config.prefill_chunk):
            if cancel.is_set():
                yield finish("cancelled")
                return
            chunk_ids = prompt[start : start + config.prefill_chunk]
            out = target.forward(mx.array(chunk_ids), cache, last_only=True, capture=keep)
            logits = out.logits
            mx.eval(logits, out.features)
            if group.drafters:
                group.observe_all(chunk_ids, [out.features[keep.index(i)] for i in capture])
            if self.reuse_prompt:
                chunks.append((chunk_ids, out.features))
            if lookup is not None:
                lookup.extend(chunk_ids)
            yield PrefillProgress(min(start + config.prefill_chunk, len(prompt)), len(prompt))
        if self.reuse_prompt and first < len(prompt):
            self._prefilled = PrefilledPrompt(
                tuple(prompt), keep, snapshot_cache(cache), logits, chunks
            )
        stats.prefill_done()
        strategy = strategy_for(mode)
        strategy.begin(sampler.sample(logits[0, -1]))
        depth = len(prompt)
        reason = "max_tokens"
        while True:
            if cancel.is_set():
                reason = "cancelled"
                break
            if policy is not None and tokens:  # the first step is the prefill's token
                choice = policy.choose(depth, mode)
                if choice.mode != mode:
                    root = strategy.release()
                    strategy = strategy_for(choice.mode)
                    strategy.resume(root)
                    yield ModeSwitch(mode, choice.mode, choice.reason or "auto policy")
                    mode = choice.mode
            remaining = config.max_tokens - len(tokens)
            room = self.max_context - depth
            t_step = time.perf_counter()
            outcome = strategy.step(min(remaining, room))
            step_stats = replace(outcome.stats, seconds=time.perf_counter() - t_step)
            if policy is not None and tokens:
                policy.observe(mode, depth, step_stats.committed, step_stats.seconds)
            new = outcome.tokens[: min(remaining, room)]
            if lookup is not None:
                lookup.extend(new)
            hit_eos = next((i for i, t in enumerate(new) if t in eos), None)
            if hit_eos is not None:
                new = new[:hit_eos]
            tokens.extend(new)
            depth += len(new)
            live = stats.record(step_stats, depth)
            flags = outcome.from_draft[: len(new)]
            n_draft = sum(flags)  # drafted tokens come first, the target's own token last
            segments = tuple(
                (stops.feed(detok.add(part)), is_draft)
                for part, is_draft in ((new[:n_draft], True), (new[n_draft:], False))
                if part
            )
            text = "".join(seg for seg, _ in segments)
            text_parts.append(text)
            yield Tokens(text, tuple(new), tuple(flags), step_stats, live, depth, segments)
            if hit_eos is not None:
                reason = "eos"
                break
            if stops.stopped:
                reason = "stop_string"
                break
            if len(tokens) >= config.max_tokens:
                reason = "max_tokens"
                break
            if depth >= self.max_context:
                reason = "context_full"
                break
        yield finish(reason)
