"""Progress events and cancellation, shared by downloads, copies and GGUF imports.

The engine reports plain dataclasses through a callback (no Qt here); the app's worker
turns them into signals. Events are rate-limited (every ``interval_s``, and always at a file
boundary and at the end) so a fast link cannot flood a window with repaints.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from engine_mlx.errors import EngineError

SPEED_WINDOW_S = 5.0


class OperationCancelled(EngineError):
    """The person cancelled; whatever was complete is kept for a resume."""


@dataclass(frozen=True)
class Progress:
    """Where an install stands. ``done``/``total`` count bytes (tensors for a GGUF import);
    ``phase`` is "downloading", "verifying", "copying", "importing", "installing" or
    "installed"."""

    name: str
    phase: str
    file: str
    file_done: int
    file_size: int
    done: int
    total: int
    files_done: int
    files_total: int
    speed_bps: float = 0.0
    eta_s: float | None = None

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


ProgressCallback = Callable[[Progress], None]


def check_cancel(cancel: threading.Event | None, message: str) -> None:
    if cancel is not None and cancel.is_set():
        raise OperationCancelled(message)


class ProgressReporter:
    """Keeps the running totals and measures speed over the last few seconds of transfer
    (bytes already on disk from an earlier session do not count as speed)."""

    def __init__(
        self,
        name: str,
        total: int,
        files_total: int,
        callback: ProgressCallback | None,
        interval_s: float = 0.1,
    ) -> None:
        self.name, self.total, self.files_total = name, total, files_total
        self.callback, self.interval_s = callback, interval_s
        self.done = 0
        self.files_done = 0
        self.file, self.file_done, self.file_size = "", 0, 0
        self.phase = "downloading"
        self._samples: deque[tuple[float, int]] = deque()
        self._transferred = 0
        self._last_emit = float("-inf")

    def start_file(self, file: str, size: int, already: int, phase: str) -> None:
        self.file, self.file_size, self.file_done, self.phase = file, size, already, phase
        self.done += already
        self.emit(force=True)

    def advance(self, n: int) -> None:
        """``n`` new bytes of the current file arrived (or were checked)."""
        self.file_done += n
        self.done += n
        self._transferred += n
        now = time.monotonic()
        self._samples.append((now, self._transferred))
        while len(self._samples) > 2 and now - self._samples[0][0] > SPEED_WINDOW_S:
            self._samples.popleft()
        self.emit()

    def restart_file(self) -> None:
        """The current file starts over (the server ignored a resume): its bytes are gone."""
        self.done -= self.file_done
        self.file_done = 0

    def file_finished(self) -> None:
        self.files_done += 1
        self.emit(force=True)

    def skip_file(self, file: str, size: int) -> None:
        """A file already complete and verified by an earlier session."""
        self.file, self.file_size, self.file_done = file, size, size
        self.done += size
        self.files_done += 1

    def speed(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    def emit(self, force: bool = False, phase: str | None = None) -> None:
        if phase:
            self.phase = phase
        now = time.monotonic()
        if self.callback is None or (not force and now - self._last_emit < self.interval_s):
            return
        self._last_emit = now
        speed = self.speed()
        remaining = max(self.total - self.done, 0)
        eta = remaining / speed if speed > 0 else (0.0 if remaining == 0 else None)
        self.callback(
            Progress(
                name=self.name,
                phase=self.phase,
                file=self.file,
                file_done=self.file_done,
                file_size=self.file_size,
                done=self.done,
                total=self.total,
                files_done=self.files_done,
                files_total=self.files_total,
                speed_bps=speed,
                eta_s=eta,
            )
        )
