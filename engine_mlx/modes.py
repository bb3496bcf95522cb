"""The decoding modes, named once: the ids configs and JSON use, the names people read, which
modes a loaded model offers, and what a request gets when its companion is missing.

Imports no MLX, so the app's widgets and stored settings use it without loading the engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

MTP_STEPS = (1, 4)  # the draft lengths an MTP head may run
DEFAULT_MTP_STEPS = 3  # for a head whose file does not say which length it was measured best at


class Mode(StrEnum):
    """A ``str`` as well: ``Mode.AR == "ar"``, and it serialises as its id."""

    AR = "ar"
    LOOKUP = "lookup"
    DFLASH2 = "dflash2"
    MTP = "mtp"
    AUTO = "auto"

    @property
    def label(self) -> str:
        """The name on a button or in a chart marker."""
        return _LABELS[self]

    @property
    def phrase(self) -> str:
        """The name inside a sentence ("… faster than plain decoding")."""
        return _PHRASES[self]

    @property
    def speculative(self) -> bool:
        return self in (Mode.LOOKUP, Mode.DFLASH2, Mode.MTP)


_LABELS = {
    Mode.AR: "Plain",
    Mode.LOOKUP: "Prompt lookup",
    Mode.DFLASH2: "DFlash2",
    Mode.MTP: "MTP",
    Mode.AUTO: "Auto",
}
_PHRASES = {
    Mode.AR: "plain decoding",
    Mode.LOOKUP: "prompt lookup",
    Mode.DFLASH2: "DFlash2",
    Mode.MTP: "MTP",
    Mode.AUTO: "auto mode",
}


def parse_mode(value: str) -> Mode | None:
    """The mode an id names, or None (stored settings and flags are untrusted text)."""
    try:
        return Mode(value)
    except ValueError:
        return None


def mode_label(value: str) -> str:
    """A label for any id; an unknown id passes through so nothing is hidden."""
    mode = parse_mode(value)
    return mode.label if mode else value


def mode_phrase(value: str) -> str:
    mode = parse_mode(value)
    return mode.phrase if mode else value


def available_modes(*, drafter: bool, mtp: bool) -> tuple[Mode, ...]:
    """What a loaded model offers: plain decoding and prompt lookup always, DFlash2 with a
    drafter, MTP with a head, and auto, which chooses among them."""
    modes = [Mode.AR, Mode.LOOKUP]
    modes += [Mode.DFLASH2] if drafter else []
    modes += [Mode.MTP] if mtp else []
    return (*modes, Mode.AUTO)


def auto_candidates(*, drafter: bool, mtp: bool, lookup: bool = True) -> tuple[Mode, ...]:
    """What auto chooses between: plain decoding, prompt lookup alone (unless switched off),
    DFlash2 with a drafter, and MTP when the model has a head. Lookup is a mode of its own
    even beside a drafter: its step pays one verify and no drafter forward, so it pays on a
    reply that copies its prompt at a tau far below what DFlash2 needs on a CPU (copy-heavy
    requests, Qwen demo on AVX2: lookup alone 1.29x plain, DFlash2 with lookup 0.59x)."""
    modes = [Mode.AR]
    modes += [Mode.LOOKUP] if lookup else []
    modes += [Mode.DFLASH2] if drafter else []
    modes += [Mode.MTP] if mtp else []
    return tuple(modes)


def fallback(requested: str, available: Iterable[str]) -> Mode:
    """The mode a request runs in: itself when offered; else auto, which picks the best of
    what is there (a forced DFlash2 whose drafter was removed, a stored id from an older
    version)."""
    mode = parse_mode(requested)
    return mode if mode is not None and mode in set(available) else Mode.AUTO
