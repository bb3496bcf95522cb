"""The speed panel's small painted widgets: the context gauge, the auto switch and the notice
box, each following the palette (light or dark)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QCheckBox, QLabel, QSizePolicy, QWidget

WARN_FRACTION = 0.80
CRITICAL_FRACTION = 0.95
# Accents picked at mid lightness so they read on light and dark backgrounds alike.
AMBER = QColor(224, 150, 30)
RED = QColor(222, 64, 64)


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
