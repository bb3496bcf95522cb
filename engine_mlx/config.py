"""How one generation runs: its length, sampling, stop strings, mode and speculation knobs.

Checked once, by ``validate``, before anything is computed, so a bad value (from a flag, a
setting or a server request) is one clear message rather than a failure mid-generation.
Whether the loaded model *has* the companion a mode needs is the session's check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.errors import EngineError
from engine_mlx.modes import MTP_STEPS, Mode, parse_mode

POLICIES = ("expected", "threshold")
MAX_WIDTH = 8
BLOCK_SIZES = (2, 64)
MAX_SEED = 2**64 - 1  # the sampler's key is an unsigned 64-bit number


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = 512
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop_strings: tuple[str, ...] = ()
    mode: Mode | str = Mode.AR
    prefill_chunk: int = 512
    ignore_eos: bool = False  # benchmarks: always generate max_tokens
    width: int = 1  # candidate paths per verification (speculative modes)
    block_size: int | None = None  # draft block; None = the drafter's own (lookup: 8)
    lookup: bool = True  # prompt-lookup candidates in the speculative tree
    # auto mode: "expected" (per step, from the drafts and the machine's step costs) or
    # "threshold" (a fixed context depth, set by hand)
    policy: str = "expected"
    auto_threshold: int = 4096  # the threshold policy's switch depth
    mtp_steps: int | None = None  # tokens an MTP head drafts per step (1-4); None: the head's
    loop_guard: bool = False  # stop a reply that repeats one short cycle (``decoding.loop_guard``)
    # reasoning tokens after which a thinking model's end marker is forced (``thinking``);
    # None: no budget. Models that do not think ignore it.
    thinking_budget: int | None = None

    def validate(self) -> Mode:
        """Raises EngineError naming the first bad field; returns the mode as a ``Mode``."""
        mode = parse_mode(str(self.mode))
        if mode is None:
            names = ", ".join(m.value for m in Mode)
            raise EngineError(f"Mode '{self.mode}' is not available (available: {names}).")
        if self.max_tokens < 1:
            raise EngineError("max tokens must be at least 1.")
        seed = self.sampling.seed
        if seed is not None and not 0 <= seed <= MAX_SEED:
            raise EngineError(f"the seed must be an integer from 0 to {MAX_SEED} (2^64 - 1).")
        if self.thinking_budget is not None and self.thinking_budget < 0:
            raise EngineError("the thinking budget must be at least 0 tokens.")
        if self.prefill_chunk < 1:
            raise EngineError("the prefill chunk must be at least 1 token.")
        if self.policy not in POLICIES:
            raise EngineError(f"policy must be one of {', '.join(POLICIES)}.")
        if self.mtp_steps is not None and not MTP_STEPS[0] <= self.mtp_steps <= MTP_STEPS[1]:
            raise EngineError(f"MTP steps must be between {MTP_STEPS[0]} and {MTP_STEPS[1]}.")
        if not 1 <= self.width <= MAX_WIDTH:
            raise EngineError(f"draft width must be between 1 and {MAX_WIDTH}.")
        low, high = BLOCK_SIZES
        if self.block_size is not None and not low <= self.block_size <= high:
            raise EngineError(f"block size must be between {low} and {high}.")
        return mode
