"""The speed panel's chart: tok/s against wall-clock time, one line per generation, with the
mode switches marked."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, QTimer
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QPainter,
    QPainterPath,
    QPaintEvent,
    QPalette,
    QPen,
)
from PySide6.QtWidgets import QSizePolicy, QWidget

WINDOW_S = 30.0  # the chart shows this much wall-clock history
COALESCE_S = 0.02  # updates closer than this (a burst of commits) become one chart point
# New points are drawn at most this often: the line moves 4 times a second, and each redraw
# (~10 ms on a busy 2-core machine) is GUI time taken from decoding.
REPAINT_S = 0.25
BUSY_REPAINT_S = 1.0  # where the engine decodes on this CPU (``app.stream_pacer``)
MARKER = QColor(168, 98, 222)  # mid lightness: reads on light and dark backgrounds alike


def _nice_step(span: float, target: int = 4) -> float:
    """A 1/2/5 x 10^k step so the y grid lands on round numbers (labels stay exact)."""
    raw = max(span, 1e-9) / target
    magnitude = 10 ** math.floor(math.log10(raw))
    for multiple in (1.0, 2.0, 5.0, 10.0):
        if multiple * magnitude >= raw:
            return multiple * magnitude
    return 10.0 * magnitude


@dataclass
class _Series:
    """One generation's line; ``merged`` counts the raw values averaged into the last point."""

    points: list[tuple[float, float]] = field(default_factory=list)
    merged: int = 1


class RateChart(QWidget):
    """tok/s against wall-clock time over the last ``window_s`` seconds.

    The x axis is time, not chunk index, so a burst of multi-token commits arriving at once
    takes no horizontal room (and is coalesced into one point) instead of drawing a spike.
    """

    def __init__(self, parent: QWidget | None = None, window_s: float = WINDOW_S) -> None:
        super().__init__(parent)
        self.window_s = window_s
        self._series: list[_Series] = []
        self._markers: list[tuple[float, str]] = []
        self._latest: float | None = None
        self.setAccessibleName("Decode speed chart")
        self.setAccessibleDescription(
            f"Tokens per second over the last {window_s:.0f} seconds; "
            "vertical markers show decoding mode switches"
        )
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(150)
        self.repaint_timer = QTimer(self)  # paces the redraws that new points ask for
        self.repaint_timer.setSingleShot(True)
        self.repaint_timer.setInterval(round(REPAINT_S * 1000))
        self.repaint_timer.timeout.connect(self.update)

    # --- data -------------------------------------------------------------------------------

    def pace(self, seconds: float) -> None:
        """Draw new points at most every ``seconds``."""
        self.repaint_timer.setInterval(round(seconds * 1000))

    def begin_series(self, now: float) -> None:
        """Start a new line so two generations are never joined across the idle gap."""
        self._advance(now)
        if not self._series or self._series[-1].points:
            self._series.append(_Series())
        self.update()

    def add_point(self, now: float, rate: float) -> None:
        """Plot ``rate`` at ``now``; points within COALESCE_S of the previous one are averaged."""
        if not math.isfinite(rate):
            return
        self._advance(now)
        if not self._series:
            self._series.append(_Series())
        series = self._series[-1]
        if series.points and now - series.points[-1][0] < COALESCE_S:
            t, value = series.points[-1]
            series.merged += 1
            series.points[-1] = (t, value + (rate - value) / series.merged)
        else:
            series.points.append((now, rate))
            series.merged = 1
        self._prune()
        if not self.repaint_timer.isActive():
            self.repaint_timer.start()

    def add_marker(self, now: float, label: str) -> None:
        """A vertical line where the mode switched, labelled with the new mode."""
        self._advance(now)
        self._markers.append((now, label))
        self._prune()
        self.update()

    def clear(self) -> None:
        self._series.clear()
        self._markers.clear()
        self._latest = None
        self.update()

    def series(self) -> list[list[tuple[float, float]]]:
        """Copies of the visible lines, oldest generation first."""
        return [list(s.points) for s in self._series if s.points]

    def points(self) -> list[tuple[float, float]]:
        return [p for s in self._series for p in s.points]

    def markers(self) -> list[tuple[float, str]]:
        return list(self._markers)

    def latest(self) -> float | None:
        return self._latest

    def _advance(self, now: float) -> None:
        if self._latest is not None and now < self._latest - 1e-9:
            # The clock went backwards (a new test script or a restarted clock): old data
            # would land off-screen in the future, so start over.
            self._series.clear()
            self._markers.clear()
            self._latest = now
        else:
            self._latest = now if self._latest is None else max(self._latest, now)
        self._prune()

    def _prune(self) -> None:
        if self._latest is None:
            return
        cutoff = self._latest - self.window_s
        for series in self._series:
            if series.points and series.points[0][0] < cutoff:
                series.points = [p for p in series.points if p[0] >= cutoff]
        keep_last = self._series[-1:] if self._series else []
        self._series = [s for s in self._series[:-1] if s.points] + keep_last
        self._markers = [m for m in self._markers if m[0] >= cutoff]

    # --- painting ---------------------------------------------------------------------------

    def sizeHint(self) -> QSize:
        return QSize(280, 150)

    def minimumSizeHint(self) -> QSize:
        return QSize(180, 150)

    def _y_scale(self) -> tuple[float, float]:
        peak = max((v for _, v in self.points()), default=0.0)
        top = max(peak * 1.12, 10.0)
        step = _nice_step(top)
        return math.ceil(top / step) * step, step

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        text = palette.color(QPalette.ColorRole.WindowText)
        muted = palette.color(QPalette.ColorRole.PlaceholderText)
        grid = QColor(text)
        grid.setAlphaF(0.12)
        base = palette.color(QPalette.ColorRole.Base)

        frame = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        painter.setPen(QPen(grid, 1))
        painter.setBrush(base)
        painter.drawRoundedRect(frame, 4, 4)

        small = QFont(self.font())
        small.setPointSizeF(max(7.0, small.pointSizeF() * 0.8))
        painter.setFont(small)
        fm = QFontMetrics(small)

        y_max, step = self._y_scale()
        labels = [self._tick_label(i * step, step) for i in range(round(y_max / step) + 1)]
        left = max(fm.horizontalAdvance(s) for s in [*labels, "tok/s"]) + 10
        # The top margin holds the unit and a row of switch labels; the top tick label is
        # centred on the plot's top edge, so it needs half a line below the unit's row.
        plot = QRectF(left, fm.height() * 1.5 + 6, self.width() - left - 8, 0)
        plot.setBottom(self.height() - fm.height() - 6)
        if plot.width() <= 10 or plot.height() <= 10:
            return

        # y grid and labels
        for i, label in enumerate(labels):
            y = plot.bottom() - plot.height() * (i * step) / y_max
            painter.setPen(QPen(grid, 1))
            painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
            painter.setPen(muted)
            painter.drawText(
                QRectF(0, y - fm.height() / 2, left - 5, fm.height()),
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                label,
            )
        painter.setPen(muted)
        unit_rect = QRectF(4, 2, fm.horizontalAdvance("tok/s") + 2, fm.height())
        painter.drawText(unit_rect, Qt.AlignmentFlag.AlignLeft, "tok/s")

        # x grid every 10 s, labelled by age
        for age in range(int(self.window_s), -1, -10):
            x = plot.right() - plot.width() * age / self.window_s
            painter.setPen(QPen(grid, 1))
            painter.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()))
            label = "now" if age == 0 else f"−{age}s"
            width = fm.horizontalAdvance(label)
            lx = min(max(x - width / 2, 2.0), self.width() - width - 3)
            painter.setPen(muted)
            painter.drawText(QPointF(lx, plot.bottom() + fm.ascent() + 3), label)

        if self._latest is None or not self.points():
            painter.setPen(muted)
            painter.drawText(plot, Qt.AlignmentFlag.AlignCenter, "waiting for tokens")
            return

        def to_point(t: float, value: float) -> QPointF:
            x = plot.right() - plot.width() * (self._latest - t) / self.window_s
            y = plot.bottom() - plot.height() * min(value, y_max) / y_max
            return QPointF(x, y)

        painter.save()
        painter.setClipRect(plot.adjusted(-1, -2, 1, 1))
        accent = palette.color(QPalette.ColorRole.Highlight)
        visible = [s for s in self._series if s.points]
        for index, series in enumerate(visible):
            colour = QColor(accent)
            current = index == len(visible) - 1
            if not current:
                colour.setAlphaF(0.45)
            pen = QPen(colour, 2.0 if current else 1.5)
            pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
            pen.setCapStyle(Qt.PenCapStyle.RoundCap)
            painter.setPen(pen)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            pts = _one_per_pixel([to_point(t, v) for t, v in series.points])
            if len(pts) == 1:
                painter.setBrush(colour)
                painter.drawEllipse(pts[0], 2.0, 2.0)
                continue
            path = QPainterPath(pts[0])
            for pt in pts[1:]:
                path.lineTo(pt)
            painter.drawPath(path)
        painter.restore()

        # Mode-switch markers: a dashed line with a tag naming the new mode. The tag hangs off
        # its own line (to the right, or to the left near the right edge) so it is never read
        # as belonging to a neighbour; a tag that would collide drops to a second row.
        # Switches closer together than a tag is wide (auto trying a mode for one step and
        # coming back) are one marker: "3 switches → Plain".
        tag_h = fm.height() + 2
        rows: list[list[QRectF]] = [[unit_rect], []]
        tops = (plot.top() - tag_h - 1, plot.top() + 1)
        for x, label in merge_close_markers(
            [(to_point(t, 0).x(), label) for t, label in self._markers],
            min_gap=fm.horizontalAdvance("DFlash2") + 8,
        ):
            tag_w = fm.horizontalAdvance(label) + 8
            tag_x = x if x + tag_w <= self.width() - 2 else x - tag_w
            row = 0
            for row, top in enumerate(tops):
                tag = QRectF(max(tag_x, 1.0), top, tag_w, tag_h)
                if not any(tag.intersects(other.adjusted(-2, 0, 2, 0)) for other in rows[row]):
                    break
            rows[row].append(tag)
            painter.setPen(QPen(MARKER, 1.2, Qt.PenStyle.DashLine))
            painter.drawLine(QPointF(x, tag.top()), QPointF(x, plot.bottom()))
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(MARKER)
            painter.drawRoundedRect(tag, 3, 3)
            painter.setPen(QColor(255, 255, 255))  # on the tag's own fill, in either theme
            painter.drawText(tag, Qt.AlignmentFlag.AlignCenter, label)

    @staticmethod
    def _tick_label(value: float, step: float) -> str:
        return f"{value:.0f}" if step >= 1 else f"{value:.1f}"


def _one_per_pixel(points: list[QPointF]) -> list[QPointF]:
    """Drop points less than a pixel right of the last one kept (the newest always stays):
    30 s of 25 updates a second is far more points than the plot has pixels."""
    kept = points[:1]
    for point in points[1:-1]:
        if point.x() - kept[-1].x() >= 1.0:
            kept.append(point)
    return kept + points[-1:] if len(points) > 1 else kept


def merge_close_markers(
    markers: list[tuple[float, str]], min_gap: float
) -> list[tuple[float, str]]:
    """(x, label) markers, in time order, with runs closer than ``min_gap`` pixels merged
    into one at the run's last switch, labelled with how many switches it holds."""
    groups: list[list[tuple[float, str]]] = []
    for x, label in markers:
        if groups and x - groups[-1][-1][0] < min_gap:
            groups[-1].append((x, label))
        else:
            groups.append([(x, label)])
    return [
        (
            group[-1][0],
            group[-1][1] if len(group) == 1 else f"{len(group)} switches → {group[-1][1]}",
        )
        for group in groups
    ]
