"""What both benchmarks measure the same way: our engine's runs, the machine, the prompts of a
given depth, and the cost of one verify forward by tree size."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine_mlx.auto.forward_timing import depth_prompt
from engine_mlx.config import GenerationConfig
from engine_mlx.cpu.machine import cores, cpu_model
from engine_mlx.errors import EngineError
from engine_mlx.events import Error, Finished, Tokens
from engine_mlx.models.target import TargetModel
from engine_mlx.modes import Mode
from engine_mlx.session import Session
from engine_mlx.stats import StepStats

Runner = Callable[[list[int], int], dict[str, Any]]  # (prompt ids, max tokens) -> measurements


def shown_path(path: Path | str) -> str:
    """A path as a report shows it: relative to the working folder when inside it, so a
    committed report names no folder of the machine that made it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return Path(path).name


def context_prompt(target: TargetModel, depth: int) -> list[int]:
    """``depth`` tokens of deterministic prose ending in a question (at least the question)."""
    question = target.tokenizer.encode("Summarise the text above in one paragraph.")
    if depth <= len(question):
        return question
    return depth_prompt(target, depth - len(question)) + question


def machine_description() -> str:
    py = platform.python_version()
    return f"{cpu_model()}, {platform.system()} {platform.machine()}, {cores()} cores, Python {py}"


def finished_reply(
    session: Session, prompt: list[int], config: GenerationConfig
) -> tuple[Finished, list[StepStats]]:
    """One generation's finished event and every step; EngineError for an engine error."""
    finished, steps = None, []
    for event in session.generate(prompt, config):
        if isinstance(event, Tokens):
            steps.append(event.step)
        elif isinstance(event, Finished):
            finished = event
        elif isinstance(event, Error):
            raise EngineError(event.message)
    if finished is None:
        raise EngineError(f"bench: mode {config.mode} produced no result")
    return finished, steps


def run_ours(session: Session, prompt: list[int], config: GenerationConfig) -> dict[str, Any]:
    """One generation, measured; always ``config.max_tokens`` tokens (EOS ignored)."""
    config = replace(config, ignore_eos=True)
    finished, steps = finished_reply(session, prompt, config)
    s = finished.stats
    spec_steps = steps[1:] or steps  # the first step is the prefill's token
    n = len(spec_steps)
    return {
        "prefill_tps": s.prefill_tps,
        "ttft_s": s.ttft_s,
        "decode_tps": s.decode_tps,
        "tau": s.tau,
        "acceptance": s.acceptance_rate if s.acceptance_rate is not None else float("nan"),
        "tokens": s.generated_tokens,
        "draft_ms": 1000 * sum(x.draft_s for x in spec_steps) / n,
        "verify_ms": 1000 * sum(x.verify_s for x in spec_steps) / n,
        "commit_ms": 1000 * sum(x.commit_s for x in spec_steps) / n,
        "step_ms": 1000 * sum(x.seconds for x in spec_steps) / n,
        "output": list(finished.tokens),
        "modes": dict(s.modes),
        "steps": [step_record(x) for x in spec_steps] if config.mode == Mode.AUTO else [],
    }


def step_record(step: StepStats) -> dict[str, Any]:
    """One decoding step for the bench JSON: what auto chose, expected and got."""
    return {
        "mode": step.mode.value,
        "width": step.width,
        "verified": step.drafted + 1,
        "predicted_tokens": round(step.predicted_tokens, 4),
        "tokens": step.committed,
        "predicted_ms": round(1000 * step.predicted_s, 3),
        "ms": round(1000 * step.seconds, 3),
    }
