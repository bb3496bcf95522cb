"""The live speed panel: the right-hand column that makes speculative decoding visible.

It is fed plain numbers by the window (of the engine it imports only the MLX-free ``modes``),
so it can be driven by a script in tests and stays responsive however the engine reports
progress.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QPoint, QPointF, QRectF, QSize, Qt, Signal, Slot
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
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from engine_mlx.modes import Mode
from engine_mlx.modes import mode_label as mode_name

TAU_TOOLTIP = "tokens committed per verification step, bonus token included (plain decoding: 1.0)"
ACCEPTANCE_TOOLTIP = (
    "accepted draft tokens / draft tokens tested; tested counts the draft positions on the path "
    "the verifier walked, up to and including the first rejection"
)
NO_VALUE = "–"

WINDOW_S = 30.0  # the chart shows this much wall-clock history
SMOOTHING_S = 0.5  # time constant of the big number's moving average
COALESCE_S = 0.02  # updates closer than this (a burst of commits) become one chart point
WARN_FRACTION = 0.80
CRITICAL_FRACTION = 0.95

# Accents picked at mid lightness so they read on light and dark backgrounds alike.
AMBER = QColor(224, 150, 30)
RED = QColor(222, 64, 64)
MARKER = QColor(168, 98, 222)


def _format_rate(rate: float | None) -> str:
    return NO_VALUE if rate is None or not math.isfinite(rate) else f"{rate:.1f}"


def _format_acceptance(acceptance: float | None) -> str:
    if acceptance is None or not math.isfinite(acceptance):
        return NO_VALUE
    return f"{acceptance * 100:.0f}%"


def _format_tau(tau: float | None) -> str:
    return NO_VALUE if tau is None or not math.isfinite(tau) else f"{tau:.2f}"


def _nice_step(span: float, target: int = 4) -> float:
    """A 1/2/5 x 10^k step so the y grid lands on round numbers (labels stay exact)."""
    raw = max(span, 1e-9) / target
    magnitude = 10 ** math.floor(math.log10(raw))
    for multiple in (1.0, 2.0, 5.0, 10.0):
        if multiple * magnitude >= raw:
            return multiple * magnitude
    return 10.0 * magnitude


def _set_text(label: QLabel, text: str) -> None:
    """Skip unchanged text: ~30 updates a second should not relayout labels that did not change."""
    if label.text() != text:
        label.setText(text)


def _muted(widget: QWidget) -> None:
    """Secondary text uses the palette's placeholder role, so it follows light/dark themes."""
    widget.setForegroundRole(QPalette.ColorRole.PlaceholderText)


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

    # --- data -------------------------------------------------------------------------------

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
        self.update()

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
            pts = [to_point(t, v) for t, v in series.points]
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


class ContextGauge(QWidget):
    """A thin bar of used / max context that warns in amber past 80% and red past 95%."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._used = 0
        self._maximum = 0
        self.setAccessibleName("Context depth gauge")
        self.setFixedHeight(8)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_values(self, used: int, maximum: int) -> None:
        used, maximum = max(0, int(used)), max(0, int(maximum))
        if (used, maximum) == (self._used, self._maximum) and self.accessibleDescription():
            return
        self._used, self._maximum = used, maximum
        self.setAccessibleDescription(
            f"{self._used:,} of {self._maximum:,} tokens ({self.fraction():.0%})"
            if self._maximum
            else f"{self._used:,} tokens"
        )
        self.update()

    def value(self) -> int:
        return self._used

    def maximum(self) -> int:
        return self._maximum

    def fraction(self) -> float:
        return min(1.0, self._used / self._maximum) if self._maximum else 0.0

    def level(self) -> str:
        """'ok', 'warning' (> 80%) or 'critical' (> 95%)."""
        fraction = self._used / self._maximum if self._maximum else 0.0
        if fraction > CRITICAL_FRACTION:
            return "critical"
        if fraction > WARN_FRACTION:
            return "warning"
        return "ok"

    def bar_color(self) -> QColor:
        level = self.level()
        if level == "critical":
            return QColor(RED)
        if level == "warning":
            return QColor(AMBER)
        return self.palette().color(QPalette.ColorRole.Highlight)

    def sizeHint(self) -> QSize:
        return QSize(200, 8)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        track = QColor(self.palette().color(QPalette.ColorRole.WindowText))
        track.setAlphaF(0.14)
        rect = QRectF(self.rect())
        radius = rect.height() / 2
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(track)
        painter.drawRoundedRect(rect, radius, radius)
        if self.fraction() > 0:
            filled = QRectF(rect)
            filled.setWidth(max(rect.height(), rect.width() * self.fraction()))
            painter.setBrush(self.bar_color())
            painter.drawRoundedRect(filled, radius, radius)


class ToggleSwitch(QCheckBox):
    """A QCheckBox drawn as a slide switch: it reads as 'mode on/off', not 'option ticked'."""

    _TRACK_W = 32
    _TRACK_H = 18
    _GAP = 6

    def sizeHint(self) -> QSize:
        fm = self.fontMetrics()
        width = self._TRACK_W + self._GAP + fm.horizontalAdvance(self.text()) + 4
        return QSize(width, max(self._TRACK_H + 4, fm.height() + 4))

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()

    def hitButton(self, pos: QPoint) -> bool:
        # The whole widget (track and text) is the click target, not just the style's indicator.
        return self.rect().contains(pos)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        text = palette.color(QPalette.ColorRole.WindowText)
        track = QRectF(1, (self.height() - self._TRACK_H) / 2, self._TRACK_W, self._TRACK_H)
        radius = self._TRACK_H / 2
        if self.isChecked():
            fill = palette.color(QPalette.ColorRole.Highlight)
        else:
            fill = QColor(text)
            fill.setAlphaF(0.28)
        if not self.isEnabled():
            fill.setAlphaF(fill.alphaF() * 0.5)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(fill)
        painter.drawRoundedRect(track, radius, radius)
        if self.hasFocus():
            painter.setPen(QPen(palette.color(QPalette.ColorRole.Highlight), 1.5))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(track.adjusted(-1.5, -1.5, 1.5, 1.5), radius + 1, radius + 1)
        knob_r = radius - 2
        cx = track.right() - radius if self.isChecked() else track.left() + radius
        outline = QColor(text)
        outline.setAlphaF(0.25)
        painter.setPen(QPen(outline, 0.8))
        painter.setBrush(QColor(255, 255, 255))  # the knob, not a background
        painter.drawEllipse(QPointF(cx, track.center().y()), knob_r, knob_r)
        painter.setPen(
            text if self.isEnabled() else palette.color(QPalette.ColorRole.PlaceholderText)
        )
        text_rect = QRectF(track.right() + self._GAP, 0, self.width(), self.height())
        painter.drawText(
            text_rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, self.text()
        )


class NoticeLabel(QLabel):
    """A word-wrapped label in an amber box, painted by hand because a style sheet would pin
    the text colour and stop it following the palette."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWordWrap(True)
        self.setContentsMargins(7, 5, 7, 5)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        fill = QColor(AMBER)
        fill.setAlphaF(0.16)
        border = QColor(AMBER)
        border.setAlphaF(0.8)
        painter.setPen(QPen(border, 1))
        painter.setBrush(fill)
        painter.drawRoundedRect(QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5), 4, 4)
        painter.end()
        super().paintEvent(event)


class SpeedPanel(QWidget):
    """Live decode speed, speculation quality, context depth and mode controls.

    Each user action emits exactly one signal, from its own control: the switch emits
    ``auto_toggled``, the combo emits ``forced_mode_changed``; the other control follows
    silently (picking a mode turns the switch off; picking "Auto" or switching auto on selects
    "Auto"; switching auto off pins the mode running now, readable via ``forced_mode()``).
    ``set_auto`` / ``set_forced_mode`` update the controls without emitting anything, so the
    window can mirror engine state without signal loops.
    """

    auto_toggled = Signal(bool)
    forced_mode_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Speed panel")
        self._modes: list[str] = []
        self._mode = ""
        self._max_context = 0
        self._depth = 0
        self._last_t: float | None = None
        self._smoothed: float | None = None
        self._smooth_t: float | None = None
        self._finished_rates: dict[str, float] = {}
        self._syncing = False
        self._build_ui()
        self.reset()

    # --- layout -----------------------------------------------------------------------------

    def _label(self, name: str, text: str = "", muted: bool = False) -> QLabel:
        label = QLabel(text, self)
        label.setAccessibleName(name)
        if muted:
            _muted(label)
        return label

    def _build_ui(self) -> None:
        root = QVBoxLayout(self)
        root.setContentsMargins(10, 10, 10, 10)
        root.setSpacing(8)

        # big live rate
        self.rate_caption = self._label("Decode speed caption", "Decode speed", muted=True)
        self.rate_label = self._label("Decode speed", NO_VALUE)
        big = QFont(self.font())
        big.setPointSizeF(self.font().pointSizeF() * 2.6)
        big.setBold(True)
        self.rate_label.setFont(big)
        self.rate_unit = self._label("Decode speed unit", "tok/s", muted=True)
        rate_row = QHBoxLayout()
        rate_row.setSpacing(6)
        rate_row.addWidget(self.rate_label, 0, Qt.AlignmentFlag.AlignBaseline)
        rate_row.addWidget(self.rate_unit, 0, Qt.AlignmentFlag.AlignBaseline)
        rate_row.addStretch(1)
        root.addWidget(self.rate_caption)
        root.addLayout(rate_row)

        self.chart = RateChart(self)
        root.addWidget(self.chart)

        # acceptance and tau
        stats = QGridLayout()
        stats.setHorizontalSpacing(12)
        stats.setVerticalSpacing(0)
        self.acceptance_caption = self._label("Acceptance rate caption", "Acceptance", muted=True)
        self.acceptance_label = self._label("Acceptance rate", NO_VALUE)
        self.tau_caption = self._label("Tokens per step caption", "τ tokens / step", muted=True)
        self.tau_label = self._label("Tokens per step (tau)", NO_VALUE)
        value_font = QFont(self.font())
        value_font.setPointSizeF(self.font().pointSizeF() * 1.35)
        value_font.setBold(True)
        for widget in (self.acceptance_caption, self.acceptance_label):
            widget.setToolTip(ACCEPTANCE_TOOLTIP)
        for widget in (self.tau_caption, self.tau_label):
            widget.setToolTip(TAU_TOOLTIP)
        self.acceptance_label.setFont(value_font)
        self.tau_label.setFont(value_font)
        stats.addWidget(self.acceptance_caption, 0, 0)
        stats.addWidget(self.tau_caption, 0, 1)
        stats.addWidget(self.acceptance_label, 1, 0)
        stats.addWidget(self.tau_label, 1, 1)
        stats.setColumnStretch(0, 1)
        stats.setColumnStretch(1, 1)
        root.addLayout(stats)

        # context depth
        context_row = QHBoxLayout()
        self.context_caption = self._label("Context depth caption", "Context", muted=True)
        self.context_label = self._label("Context depth", NO_VALUE)
        context_row.addWidget(self.context_caption)
        context_row.addStretch(1)
        context_row.addWidget(self.context_label)
        self.context_gauge = ContextGauge(self)
        root.addLayout(context_row)
        root.addWidget(self.context_gauge)
        root.addSpacing(2)

        # mode and its controls
        mode_row = QHBoxLayout()
        self.mode_caption = self._label("Current mode caption", "Mode", muted=True)
        self.mode_label = self._label("Current mode", NO_VALUE)
        mode_font = QFont(self.font())
        mode_font.setBold(True)
        self.mode_label.setFont(mode_font)
        # A thinking model's reply: which part is decoding (its reasoning or its answer).
        self.part_label = self._label("Part decoding", "", muted=True)
        self.part_label.hide()
        mode_row.addWidget(self.mode_caption)
        mode_row.addStretch(1)
        mode_row.addWidget(self.part_label)
        mode_row.addWidget(self.mode_label)
        root.addLayout(mode_row)

        controls = QHBoxLayout()
        controls.setSpacing(8)
        self.auto_switch = ToggleSwitch("Auto", self)
        self.auto_switch.setAccessibleName("Auto mode")
        self.auto_switch.setToolTip("Let the engine pick the decoding mode by context depth")
        self.auto_switch.setChecked(True)
        self.mode_combo = QComboBox(self)
        self.mode_combo.setAccessibleName("Decoding mode")
        self.mode_combo.setToolTip("Force one decoding mode, or leave the choice to Auto")
        self.mode_combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.mode_combo.addItem(Mode.AUTO.label, Mode.AUTO.value)
        controls.addWidget(self.auto_switch)
        controls.addWidget(self.mode_combo, 1)
        root.addLayout(controls)

        self.reason_label = self._label("Last mode switch", muted=True)
        self.reason_label.setWordWrap(True)
        root.addWidget(self.reason_label)

        self.notice_label = NoticeLabel(self)
        self.notice_label.setAccessibleName("Speculation notice")
        root.addWidget(self.notice_label)

        self.summary_label = self._label("Last generation", muted=True)
        self.summary_label.setWordWrap(True)
        root.addWidget(self.summary_label)
        root.addStretch(1)

        self.auto_switch.toggled.connect(self._on_switch_toggled)
        self.mode_combo.currentIndexChanged.connect(self._on_combo_changed)

    def sizeHint(self) -> QSize:
        return QSize(300, super().sizeHint().height())

    # --- configuration ----------------------------------------------------------------------

    def set_available_modes(self, modes: list[str]) -> None:
        """Fill the forced-mode combo ("Auto" first), keeping the selection where possible.

        A forced mode that is no longer offered falls back to Auto silently: the window chose
        the list, so it already knows.
        """
        self._modes = list(modes)
        current = self.forced_mode()
        self._syncing = True
        try:
            self.mode_combo.clear()
            self.mode_combo.addItem(Mode.AUTO.label, Mode.AUTO.value)
            for mode in self._modes:
                self.mode_combo.addItem(mode_name(mode), mode)
            index = self.mode_combo.findData(current)
            self.mode_combo.setCurrentIndex(max(index, 0))
            if index < 0 and not self.auto_switch.isChecked():
                self.auto_switch.setChecked(True)
        finally:
            self._syncing = False
        self._update_notice()

    def set_max_context(self, max_context: int) -> None:
        self._max_context = max(0, int(max_context))
        self._set_context(self._depth)

    def set_auto(self, enabled: bool) -> None:
        """Reflect the engine's auto setting without emitting ``auto_toggled``."""
        self._syncing = True
        try:
            self.auto_switch.setChecked(enabled)
            self._follow_switch(enabled)
        finally:
            self._syncing = False

    def set_forced_mode(self, mode: str) -> None:
        """Reflect a forced mode ("auto" or a mode id) without emitting ``forced_mode_changed``."""
        self._syncing = True
        try:
            index = self.mode_combo.findData(mode)
            if index >= 0:
                self.mode_combo.setCurrentIndex(index)
                self.auto_switch.setChecked(mode == Mode.AUTO)
        finally:
            self._syncing = False

    def forced_mode(self) -> str:
        """Either "auto" or the mode id the combo shows."""
        data = self.mode_combo.currentData()
        return data if isinstance(data, str) else Mode.AUTO

    # --- user interaction -------------------------------------------------------------------

    @Slot(bool)
    def _on_switch_toggled(self, checked: bool) -> None:
        if self._syncing:
            return
        self._syncing = True
        try:
            self._follow_switch(checked)
        finally:
            self._syncing = False
        self.auto_toggled.emit(checked)

    def _follow_switch(self, checked: bool) -> None:
        if checked:
            self.mode_combo.setCurrentIndex(0)
        elif self.forced_mode() == Mode.AUTO and self.mode_combo.count() > 1:
            index = self.mode_combo.findData(self._mode)
            self.mode_combo.setCurrentIndex(index if index > 0 else 1)

    @Slot(int)
    def _on_combo_changed(self, index: int) -> None:
        if self._syncing or index < 0:
            return
        mode = self.forced_mode()
        self._syncing = True
        try:
            self.auto_switch.setChecked(mode == Mode.AUTO)
        finally:
            self._syncing = False
        self.forced_mode_changed.emit(mode)

    # --- live feed --------------------------------------------------------------------------

    def generation_started(self, prompt_tokens: int, mode: str, now: float | None = None) -> None:
        """A new line on the chart; the rate restarts its smoothing (prefill is not decode)."""
        t = time.monotonic() if now is None else now
        self._last_t = t
        self._smoothed = None
        self._smooth_t = None
        self.chart.begin_series(t)
        _set_text(self.rate_label, NO_VALUE)
        _set_text(self.acceptance_label, NO_VALUE)
        _set_text(self.tau_label, NO_VALUE)
        self._set_mode(mode)
        self._set_context(prompt_tokens)

    def update_live(
        self,
        tokens_per_s: float,
        context_depth: int,
        tau: float,
        acceptance: float | None,
        mode: str,
        now: float | None = None,
    ) -> None:
        """One progress report (~30 per second); the big number is a time-based average."""
        t = time.monotonic() if now is None else now
        self._last_t = t
        if math.isfinite(tokens_per_s):
            if self._smoothed is None or self._smooth_t is None:
                self._smoothed = tokens_per_s
            else:
                dt = max(0.0, t - self._smooth_t)
                alpha = 1.0 - math.exp(-dt / SMOOTHING_S)
                self._smoothed += alpha * (tokens_per_s - self._smoothed)
            self._smooth_t = t
            self.chart.add_point(t, tokens_per_s)
        _set_text(self.rate_label, _format_rate(self._smoothed))
        _set_text(self.tau_label, _format_tau(tau))
        _set_text(self.acceptance_label, _format_acceptance(acceptance))
        self._set_context(context_depth)
        if mode and mode != self._mode:
            self._set_mode(mode)

    def mode_switched(
        self, from_mode: str, to_mode: str, reason: str, now: float | None = None
    ) -> None:
        """Mark the chart and say why, so a speed change is never a mystery."""
        if now is not None:
            t = now
        elif self._last_t is not None:
            t = self._last_t  # the latest report is at most a frame old
        else:
            t = time.monotonic()
        self._last_t = t
        self.chart.add_marker(t, mode_name(to_mode))
        self._set_mode(to_mode)
        why = reason.strip()
        text = f"Switched {mode_name(from_mode)} → {mode_name(to_mode)}"
        _set_text(self.reason_label, f"{text}: {why}" if why else text)

    def generation_finished(self, stats: Mapping[str, Any]) -> None:
        """Show the measured totals and remember the rate for the slower-than-plain check."""
        tps = stats.get("decode_tps")
        tps = float(tps) if isinstance(tps, int | float) and math.isfinite(tps) else None
        if tps is not None:
            _set_text(self.rate_label, _format_rate(tps))
        if "tau" in stats:
            _set_text(self.tau_label, _format_tau(stats.get("tau")))
        if "acceptance_rate" in stats:
            _set_text(self.acceptance_label, _format_acceptance(stats.get("acceptance_rate")))
        if stats.get("max_context"):
            self._max_context = int(stats["max_context"])
        if stats.get("context_depth") is not None:
            self._set_context(int(stats["context_depth"]))
        else:
            self._set_context(self._depth)

        modes: Mapping[str, int] = stats.get("modes") or {}
        dominant = max(modes, key=lambda m: modes[m]) if modes else self._mode
        if dominant and tps is not None:
            self._finished_rates[dominant] = tps
        self._update_notice()

        parts = []
        if stats.get("generated_tokens") is not None:
            parts.append(f"{int(stats['generated_tokens']):,} tokens")
        if stats.get("ttft_s") is not None:
            parts.append(f"first token {float(stats['ttft_s']):.2f} s")
        if tps is not None:
            parts.append(f"{tps:.1f} tok/s")
        _set_text(self.summary_label, "Last reply: " + " · ".join(parts) if parts else "")
        self.summary_label.setVisible(bool(parts))

    def reset(self) -> None:
        """Forget everything measured (new model or conversation); keeps modes and settings."""
        self._mode = ""
        self._depth = 0
        self._last_t = None
        self._smoothed = None
        self._smooth_t = None
        self._finished_rates.clear()
        self.chart.clear()
        _set_text(self.rate_label, NO_VALUE)
        _set_text(self.acceptance_label, NO_VALUE)
        _set_text(self.tau_label, NO_VALUE)
        _set_text(self.mode_label, NO_VALUE)
        _set_text(self.reason_label, "No mode switch yet")
        self.summary_label.clear()
        self.summary_label.hide()
        self._set_context(0)
        self._update_notice()

    # --- helpers ----------------------------------------------------------------------------

    def set_part(self, part: str) -> None:
        """ "reasoning" or "answer" while a thinking model decodes; "" hides the mark."""
        text = {"reasoning": "thinking ·", "answer": "answering ·"}.get(part, "")
        _set_text(self.part_label, text)
        self.part_label.setVisible(bool(text))

    def _set_mode(self, mode: str) -> None:
        self._mode = mode
        _set_text(self.mode_label, mode_name(mode) if mode else NO_VALUE)

    def _set_context(self, depth: int) -> None:
        self._depth = max(0, int(depth))
        self.context_gauge.set_values(self._depth, self._max_context)
        maximum = f"{self._max_context:,}" if self._max_context else NO_VALUE
        _set_text(self.context_label, f"{self._depth:,} / {maximum}")

    def _update_notice(self) -> None:
        plain = self._finished_rates.get(Mode.AR)
        lines = []
        if plain is not None:
            order = [m for m in self._modes if m in self._finished_rates]
            order += [m for m in self._finished_rates if m not in order]
            for mode in order:
                rate = self._finished_rates[mode]
                if mode != Mode.AR and rate < plain:
                    lines.append(
                        f"{mode_name(mode)} measured {rate:.1f} tok/s, plain decoding "
                        f"{plain:.1f} — speculation is not paying here"
                    )
        _set_text(self.notice_label, "\n".join(lines))
        if self.notice_label.isHidden() == bool(lines):
            self.notice_label.setVisible(bool(lines))
