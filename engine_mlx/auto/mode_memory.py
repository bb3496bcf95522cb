"""What auto learned about each drafting mode, kept on disk between processes.

Per machine, target and companion pair (the step-cost table's key, plus a fingerprint of the
drafter and the MTP head), beside the step-cost table: whether each mode's latest look or run
came near the bar, how often it is looked at, how honest its plans were, and the times of its
parts. Without it every new process (every app start, every ``serve``) paid again to learn that
a drafter does not pay here: a look at each drafting mode at the first reply, the drafters
catching up on the prompt first, and a trial run of the one that looked closest.

A file that is damaged, from another format, or older than the step-cost table's age limit is
ignored (and replaced at the next save): what it held is a head start, never a requirement.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

from engine_mlx.auto.mode_record import ModeRecord, Timing
from engine_mlx.auto.step_costs import MAX_AGE_DAYS
from engine_mlx.decoding.strategies import LengthPlan
from engine_mlx.modes import Mode, parse_mode

FORMAT = 1
_TIMINGS = ("draft", "rest", "look_time", "look_cost")
_NUMBERS = ("committed_extra", "expected_extra")


def companion_fingerprint(*companions: object, extra: str = "") -> str:
    """A short digest naming the drafter and MTP head (None: absent): their kind, shape and a
    sample of their first weights, so a retrained drafter starts afresh; ``extra`` adds what
    else tells two records apart (the policy's settings)."""
    parts = [extra]
    for companion in companions:
        if companion is None:
            parts.append("-")
            continue
        module = getattr(companion, "model", None) or getattr(companion, "head", None)
        sample = ""
        if module is not None and hasattr(module, "parameters"):
            leaves = tree_flatten(module.parameters())
            if leaves:
                name, first = leaves[0]
                flat = first.reshape(-1)[:256].astype(mx.float32)
                sample = f"{name}:{first.shape}:{float(mx.sum(flat * flat)):.6g}"
        block = getattr(companion, "block_size", "?")
        layers = getattr(companion, "capture_layers", ())
        parts.append(f"{type(companion).__name__}:{block}:{layers}:{sample}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


class ModeMemory:
    """Loads into and saves from a policy's ``ModeRecord`` per mode."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, records: dict[Mode, ModeRecord], look_every: int) -> bool:
        """Fill ``records`` from the file; False (records untouched) when there is none or it
        cannot be used."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("format") != FORMAT:
                return False
            if time.time() - float(data["saved"]) > MAX_AGE_DAYS * 86400:
                return False
            loaded = {
                mode: _record(fields, look_every)
                for key, fields in dict(data["modes"]).items()
                if (mode := parse_mode(key)) is not None
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        records.update(loaded)
        return bool(loaded)

    def save(self, records: Mapping[Mode, ModeRecord]) -> None:
        """Write atomically; a read-only or full disk only loses the head start."""
        data = {
            "format": FORMAT,
            "saved": time.time(),
            "modes": {mode.value: _fields(record) for mode, record in records.items()},
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            pass


def _fields(record: ModeRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {name: list(getattr(record, name).samples) for name in _TIMINGS}
    fields |= {name: getattr(record, name) for name in _NUMBERS}
    fields |= {"near": record.near, "look_every": record.look_every, "defeats": record.defeats}
    if record.look is not None:
        look = record.look
        fields["look"] = [look.nodes, look.expected_tokens, look.predicted_s, record.look_pace]
    return fields


def _record(fields: Mapping[str, Any], look_every: int) -> ModeRecord:
    record = ModeRecord(look_every=max(look_every, int(fields["look_every"])))
    for name in _TIMINGS:
        timing = Timing()
        for seconds in fields[name]:
            timing.add(_finite(seconds))
        setattr(record, name, timing)
    for name in _NUMBERS:
        setattr(record, name, _finite(fields[name]))
    record.near = bool(fields["near"])
    record.defeats = max(0, int(fields["defeats"]))
    if "look" in fields:
        nodes, tokens, seconds, pace = fields["look"]
        record.look = LengthPlan(int(nodes), _finite(tokens), _finite(seconds))
        record.look_pace = _finite(pace) or 1.0
    return record


def _finite(value: object) -> float:
    number = float(value)  # type: ignore[arg-type]
    if number != number or number in (float("inf"), float("-inf")) or number < 0:
        raise ValueError("not a finite, non-negative number")
    return number
