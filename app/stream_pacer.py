"""The streaming reply paced to the eye, not to the engine.

The worker sends what it decoded about 30 times a second (queued signals: its thread never
waits for the window). On a 2-core machine every millisecond the GUI thread spends drawing
is taken from decoding, and drawing faster than the eye reads buys nothing. So the window
hands each update to a ``StreamPacer``, which only keeps it (a list append); a QTimer then
flushes everything kept to the chat view, the speed panel and the reply keeper at most
``FRAME_S`` apart, however fast updates arrive. A flush that took long (a very long reply on
a slow machine) pushes the next one back by as long again, so the stream never takes more
than about half of the GUI thread. ``flush`` can be called at any time (the window does so
before it finishes a reply), and the final state is always complete.

``GuiCost`` accumulates, with ``perf_counter``, the GUI thread's time on the stream; the
window-overhead benchmark reads it (``scripts/window_overhead.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Qt, QTimer, Slot

from app.messages import LiveUpdate

FRAME_S = 1 / 20  # the text: 20 updates a second at most (the panel paces its numbers)


@dataclass
class GuiCost:
    """Where the GUI thread's time on the stream went, in seconds (``perf_counter``)."""

    receive_s: float = 0.0  # keeping updates as they arrive
    updates: int = 0
    flush_s: float = 0.0  # rendering the kept text and numbers
    flushes: int = 0
    chars: int = 0  # reply characters flushed so far
    # (reply characters so far, that flush's seconds): how a flush's cost grows with the reply
    samples: list[tuple[int, float]] = field(default_factory=list)


class StreamPacer(QObject):
    """Coalesces ``LiveUpdate``s and hands them to ``apply`` at most every ``interval_s``."""

    def __init__(
        self,
        apply: Callable[[LiveUpdate], None],
        interval_s: float = FRAME_S,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._apply = apply
        self.interval_s = interval_s
        self._segments: list[tuple[str, bool]] = []
        self._reasoning: list[str] = []
        self._latest = None
        self._pending = False
        self._next_at = 0.0  # perf_counter() before which no flush is due
        self.cost = GuiCost()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self.flush)

    @Slot(object)
    def push(self, update: LiveUpdate) -> None:
        """Keep ``update`` for the next flush, and make sure one is coming."""
        started = time.perf_counter()
        self._segments.extend(update.segments)
        if update.reasoning:
            self._reasoning.append(update.reasoning)
        if update.latest is not None:
            self._latest = update.latest
        self._pending = True
        if not self._timer.isActive():
            wait = max(0.0, self._next_at - started)
            self._timer.start(round(wait * 1000))
        self.cost.receive_s += time.perf_counter() - started
        self.cost.updates += 1

    @property
    def pending(self) -> bool:
        """Whether updates are kept that have not been shown yet."""
        return self._pending

    @Slot()
    def flush(self) -> None:
        """Show everything kept now, as one update."""
        self._timer.stop()
        if not self._pending:
            return
        update = LiveUpdate(tuple(self._segments), self._latest, "".join(self._reasoning))
        self._segments, self._reasoning, self._latest, self._pending = [], [], None, False
        started = time.perf_counter()
        self._apply(update)
        spent = time.perf_counter() - started
        self._next_at = started + max(self.interval_s, 2 * spent)
        cost = self.cost
        cost.flush_s += spent
        cost.flushes += 1
        cost.chars += sum(len(text) for text, _ in update.segments)
        cost.samples.append((cost.chars, spent))
