"""What the engine worker sends the window: frozen values that cross the thread boundary as
they are. The engine's own events (``Started``, ``ModeSwitch``, ``Finished``) travel
unchanged; these two add what only the app needs. No Qt and no MLX here."""

from __future__ import annotations

from dataclasses import dataclass

from engine_mlx.events import Tokens
from engine_mlx.modes import Mode


@dataclass(frozen=True)
class ModelInfo:
    """What the window shows once a model is loaded."""

    name: str
    path: str
    backend: str  # a few words, for the status bar
    backend_detail: str  # everything, for its tooltip (the BLAS and why it was chosen)
    max_context: int
    modes: tuple[Mode, ...]  # ``modes.available_modes``: what this target and its companions offer
    drafter: str = ""  # the drafter's folder name ("" when none)
    drafter_path: str = ""
    mtp: str = ""  # where the MTP head came from ("" when none)
    mtp_reason: str = ""  # why there is none
    thinks: bool = False  # a thinking model (the Think toggle shows); remote: unknown, False
    decodes_on_cpu: bool = False  # the engine computes on this machine's CPU (stream_pacer)


@dataclass(frozen=True)
class LiveUpdate:
    """Text streamed since the last update, and the latest step with its running numbers."""

    segments: tuple[tuple[str, bool], ...]  # (text, came from drafted tokens)
    latest: Tokens | None
    reasoning: str = ""  # reasoning streamed since the last update (a thinking model)


def reply_record(model: ModelInfo | None, settings: dict) -> dict:
    """What a reply was asked of, kept with its statistics (and so in exports): the model,
    its companions, the requested mode and the sampling."""
    sampling = ("temperature", "top_p", "top_k", "repetition_penalty", "max_tokens")
    return {
        "model": model.name if model else "",
        "drafter": model.drafter if model else "",
        "mtp_head": model.mtp if model else "",
        "requested_mode": str(settings.get("mode", "")),
        "sampling": {key: settings[key] for key in sampling if key in settings},
    }
