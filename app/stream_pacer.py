"""The streaming reply paced to the eye, not to the engine.

The worker sends what it decoded about 30 times a second (queued signals: its thread never
waits for the window). On a 2-core machine every millisecond the GUI thread spends drawing
is taken from decoding, and drawing faster than the eye reads buys nothing. So the window
hands each update to a ``StreamPacer``, which only keeps it (a list append); a QTimer then
flushes everything kept to the chat view, the speed panel and the reply keeper at most
``FRAME_S`` apart, however fast updates arrive.

Frames are also paced by what they cost. Where the engine decodes on this machine's CPU, it
keeps every core busy, and each millisecond of GUI work stalls one of its threads: measured
on a 2-core CPU with the 4-bit demo, text drawn 20 times a second (about 10% of a core)
cost decoding 10-15%, once a second 0-2.5%. So the pacer reads the GUI thread's CPU time
(``time.thread_time``: the flush, the paints and everything else the thread did since the
last frame) and waits until that is at most ``share`` of the time passed: ``CPU_SHARE`` when
the engine computes on this CPU, ``SPARE_SHARE`` when it does not (a GPU, a remote server).
Text never waits more than ``SLOWEST_S``. ``flush`` can be called at any time (the window
does so before it finishes a reply), and the final state is always complete.

``GuiCost`` accumulates, with ``perf_counter``, the GUI thread's time on the stream; the
window-overhead benchmark reads it (``scripts/window_overhead.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Qt, QTimer, Slot

from app.messages import LiveUpdate
from app.widgets.rate_chart import BUSY_REPAINT_S, REPAINT_S, RateChart

FRAME_S = 1 / 20  # the text: 20 updates a second at most (the panel paces its numbers)
SLOWEST_S = 0.4  # and at least 2.5 a second, whatever a frame costs
CPU_SHARE = 0.025  # of one core, where the engine decodes on this CPU: <= ~2.5% of its speed
SPARE_SHARE = 0.5  # where it does not: the GUI thread at most half busy with the stream


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
        share: float = SPARE_SHARE,
        paced: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(parent)
        self._apply = apply
        self.interval_s = interval_s
        self.share = share  # of the GUI thread's time the stream may take (see the docstring)
        self._paced = paced  # told each frame's spacing, so updates come no faster
        self._segments: list[tuple[str, bool]] = []
        self._reasoning: list[str] = []
        self._latest = None
        self._pending = False
        self._next_at = 0.0  # perf_counter() before which no flush is due
        self._frame_end = -1e9  # perf_counter() when the last flush ended
        self._cpu_mark = 0.0  # and thread_time()
        self.cost = GuiCost()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self.flush)

    def pace_for(self, decodes_on_cpu: bool, chart: RateChart) -> None:
        """The stream's share of the GUI thread, and the speed chart's redraws, for an engine
        that decodes on this CPU (or not)."""
        self.share = CPU_SHARE if decodes_on_cpu else SPARE_SHARE
        chart.pace(BUSY_REPAINT_S if decodes_on_cpu else REPAINT_S)

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
        started, cpu_start = time.perf_counter(), time.thread_time()
        self._apply(update)
        ended, cpu = time.perf_counter(), time.thread_time()
        spent = ended - started
        # The GUI thread's CPU since the last frame (paints, the panel, this flush; after an
        # idle gap, this flush alone) sets how far apart this frame's and the next's starts are.
        recent = started - self._frame_end <= 2 * SLOWEST_S
        busy = cpu - (self._cpu_mark if recent else cpu_start)
        self._frame_end, self._cpu_mark = ended, cpu
        spacing = min(SLOWEST_S, max(self.interval_s, busy / self.share))
        self._next_at = started + spacing
        if self._paced is not None:
            self._paced(spacing)
        cost = self.cost
        cost.flush_s += spent
        cost.flushes += 1
        cost.chars += sum(len(text) for text, _ in update.segments)
        cost.samples.append((cost.chars, spent))
