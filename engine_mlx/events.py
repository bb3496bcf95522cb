"""The events a generation yields: the only thing clients (CLI, bench, app) ever see.

Plain frozen dataclasses, so they cross threads safely and serialise to JSON one-to-one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from engine_mlx.modes import Mode
from engine_mlx.stats import GenerationStats, StepStats


@dataclass(frozen=True)
class Started:
    mode: Mode
    prompt_tokens: int
    max_context: int
    backend: str


@dataclass(frozen=True)
class PrefillProgress:
    done: int
    total: int


@dataclass(frozen=True)
class Tokens:
    """One step's committed tokens. ``text`` is the new printable text (it may be empty
    while a UTF-8 character or a possible stop string is incomplete). The running numbers
    (live tok/s, tau, acceptance, depth) are the generation's so far, as ``stats`` defines
    them, so no client recomputes them."""

    text: str
    token_ids: tuple[int, ...]
    from_draft: tuple[bool, ...]
    step: StepStats
    live_tps: float
    context_depth: int
    segments: tuple[tuple[str, bool], ...] = ()  # text split by whether it came from drafts
    tau: float = 0.0
    acceptance_rate: float | None = None
    reasoning: str = ""  # new reasoning text (a thinking model); ``text`` is the answer's
    part: str = "answer"  # what the reply is in after this step: "reasoning" or "answer"


@dataclass(frozen=True)
class ModeSwitch:
    from_mode: Mode
    to_mode: Mode
    reason: str


@dataclass(frozen=True)
class Finished:
    """``reason``: eos, max_tokens, stop_string, repetition (the loop guard), context_full or
    cancelled."""

    reason: str
    text: str  # the answer; a thinking model's reasoning is apart, in ``reasoning``
    tokens: tuple[int, ...]
    stats: GenerationStats
    reasoning: str = ""


@dataclass(frozen=True)
class Error:
    message: str
    status: int = 500  # the server's HTTP status for it (503: the model's pipeline broke)


Event = Started | PrefillProgress | Tokens | ModeSwitch | Finished | Error

_NAMES = {
    Started: "started",
    PrefillProgress: "prefill_progress",
    Tokens: "tokens",
    ModeSwitch: "mode_switch",
    Finished: "finished",
    Error: "error",
}


def event_to_json(event: Event) -> dict[str, Any]:
    """The CLI's ``--json`` line for one event (a stable contract)."""
    name = _NAMES[type(event)]
    if isinstance(event, Finished):
        return {
            "event": name,
            "reason": event.reason,
            "tokens": list(event.tokens),
            "text": event.text,
            "reasoning": event.reasoning,
            "stats": event.stats.to_json(),
        }
    body = asdict(event)
    return {"event": name, **{k: _plain(v) for k, v in body.items()}}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value


__all__ = [
    "Error",
    "Event",
    "Finished",
    "ModeSwitch",
    "PrefillProgress",
    "Started",
    "Tokens",
    "event_to_json",
]
