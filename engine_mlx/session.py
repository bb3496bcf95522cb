"""A loaded target and its drafters, ready to generate: prompt ids in, events out.

Runs on whatever thread calls it (the app puts it on a worker thread); ``cancel`` is a
``threading.Event``. The session keeps what outlives one reply (the kept prefill, the auto
policies' measurements, acceptance calibration); ``generation`` runs each reply.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence

from engine_mlx.auto import (
    ExpectedRatePolicy,
    Policy,
    StepCosts,
    ThresholdPolicy,
    load_or_calibrate,
)
from engine_mlx.auto.mode_memory import ModeMemory, companion_fingerprint
from engine_mlx.auto.step_costs import cache_file
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.ngram import NGramIndex
from engine_mlx.decoding.sampling import Sampler
from engine_mlx.decoding.selector import AcceptanceCalibrator
from engine_mlx.decoding.strategies import (
    Autoregressive,
    Drafter,
    LengthPlanner,
    Speculative,
    Strategy,
)
from engine_mlx.errors import ContextOverflowError, EngineError
from engine_mlx.events import Error, Event
from engine_mlx.generation import DrafterGroup, Generation, Setup
from engine_mlx.models.target import TargetModel
from engine_mlx.modes import Mode, auto_candidates
from engine_mlx.prompt_cache import PrefilledPrompt, PrefillSlot
from engine_mlx.thinking import ThinkingBudget

log = logging.getLogger(__name__)


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
        self.drafter = drafter
        self.mtp = mtp
        self.mtp_unavailable = mtp_unavailable if mtp is None else ""
        self.eos = set(getattr(target.tokenizer, "eos_token_ids", None) or ())
        self._calibrators: dict[tuple[Mode, bool], AcceptanceCalibrator] = {}
        self._policies: dict[tuple, Policy] = {}
        self._step_costs: StepCosts | None = None
        self._kept = PrefillSlot(())

    @property
    def prefilled(self) -> PrefilledPrompt | None:
        """The last prefill, kept for the next reply (``reuse_prompt``)."""
        return self._kept.prefilled

    @prefilled.setter
    def prefilled(self, value: PrefilledPrompt | None) -> None:
        self._kept.prefilled = value

    def keep_capture(self) -> tuple[int, ...]:
        """Every layer any of this session's drafters reads, so a kept prefill serves all."""
        drafters = [d for d in (self.drafter, self.mtp) if d is not None]
        return tuple(sorted({lid for d in drafters for lid in d.capture_layers}))

    @property
    def auto_modes(self) -> list[Mode]:
        """What auto mode chooses between (``modes.auto_candidates``), prompt lookup on."""
        return self.auto_modes_for(lookup=True)

    def auto_modes_for(self, *, lookup: bool) -> list[Mode]:
        return list(
            auto_candidates(
                drafter=self.drafter is not None, mtp=self.mtp is not None, lookup=lookup
            )
        )

    def step_costs(self) -> StepCosts:
        """This machine's step costs for the target: cached on disk, else measured now."""
        if self._step_costs is None:
            self._step_costs = load_or_calibrate(self.target, log=log.info)
        return self._step_costs

    def policy(self, config: GenerationConfig) -> Policy:
        """Kept across generations, so what was measured keeps informing the choice."""
        modes = self.auto_modes_for(lookup=config.lookup)
        key = (config.policy, config.auto_threshold, config.sampling.greedy, tuple(modes))
        if key not in self._policies:
            if config.policy == "threshold":
                long_mode = Mode.MTP if Mode.MTP in modes else Mode.AR
                short_mode = (
                    Mode.DFLASH2 if Mode.DFLASH2 in modes else modes[min(1, len(modes) - 1)]
                )
                self._policies[key] = ThresholdPolicy(config.auto_threshold, short_mode, long_mode)
            else:
                memory = self.mode_memory(key)
                self._policies[key] = ExpectedRatePolicy(modes, self.step_costs, memory=memory)
        return self._policies[key]

    def mode_memory(self, key: tuple) -> ModeMemory | None:
        """Where auto's policy for ``key`` keeps what it learned (``auto.mode_memory``):
        beside this machine's step costs for the target, one file per companion pair and
        policy setting; None where ``FLASHCHAT_AUTO_MEMORY=0`` (the tests' default)."""
        if os.environ.get("FLASHCHAT_AUTO_MEMORY", "1") == "0":
            return None
        costs = cache_file(self.target)
        digest = companion_fingerprint(self.drafter, self.mtp, extra=repr(key))
        return ModeMemory(costs.with_name(f"{costs.stem}-modes-{digest}.json"))

    def drafters_for(self, mode: Mode) -> list[Drafter]:
        if mode is Mode.AUTO:
            return [d for d in (self.drafter, self.mtp) if d is not None]
        own = {Mode.DFLASH2: self.drafter, Mode.MTP: self.mtp}.get(mode)
        return [own] if own is not None else []

    def build_strategy(
        self,
        mode: Mode,
        config: GenerationConfig,
        cache: list,
        sampler: Sampler,
        lookup: NGramIndex | None,
        group: DrafterGroup,
        planner: LengthPlanner | None = None,
    ) -> Strategy:
        if mode is Mode.AR:
            return Autoregressive(
                self.target,
                cache,
                sampler,
                capture=group.capture,
                on_features=group.feed if group.drafters else None,
            )
        drafter = {Mode.DFLASH2: self.drafter, Mode.MTP: self.mtp}.get(mode)
        if mode is Mode.MTP:
            block = config.mtp_steps + 1 if config.mtp_steps else None
        else:
            block = config.block_size
        default_block = drafter.block_size if drafter is not None else 8
        key = (mode, config.sampling.greedy)  # acceptance differs greedy vs sampled
        return Speculative(
            mode,
            self.target,
            cache,
            sampler,
            self._calibrators.setdefault(key, AcceptanceCalibrator()),
            drafter=drafter,
            width=1 if mode is Mode.MTP else config.width,
            block_size=block or default_block,
            lookup=lookup if mode is not Mode.MTP else None,
            capture=group.capture,
            feed=group.feed,
            planner=planner,
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

    def check_available(self, mode: Mode) -> None:
        """A forced mode needs its companion; the message says what to load instead."""
        if mode is Mode.MTP and self.mtp is None:
            raise EngineError(f"MTP is unavailable: {self.mtp_unavailable}.")
        if mode is Mode.DFLASH2 and self.drafter is None:
            raise EngineError("Mode dflash2 needs a DFlash drafter; load one or use ar.")

    def generate(
        self,
        prompt_ids: Sequence[int],
        config: GenerationConfig | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Yields Started, PrefillProgress*, Tokens*, then Finished (or one Error)."""
        config = config or GenerationConfig()
        try:
            self.check_fits(len(prompt_ids))
            mode = config.validate()
            self.check_available(mode)
            markers = self.target.thinking
            budget = config.thinking_budget
            forcing = (
                ThinkingBudget(markers, budget, prompt_ids)
                if markers and budget is not None
                else None
            )
            sampler = Sampler(config.sampling, forcing)
        except (EngineError, ValueError) as exc:
            yield Error(str(exc))
            return
        cancel = cancel or threading.Event()
        for calibrator in self._calibrators.values():
            calibrator.new_text()
        yield from Generation(self._setup(config, mode), list(prompt_ids), config, mode, cancel,
                              sampler).events()  # fmt: skip

    def _setup(self, config: GenerationConfig, mode: Mode) -> Setup:
        """What one generation takes from this session (``generation.Setup``)."""
        if self.reuse_prompt:
            self._kept.capture = self.keep_capture()
        return Setup(
            target=self.target,
            max_context=self.max_context,
            eos=frozenset(self.eos),
            drafters=self.drafters_for(mode),
            policy=self.policy(config) if mode is Mode.AUTO else None,
            build_strategy=self.build_strategy,
            kept=self._kept if self.reuse_prompt else None,
        )
