"""A combo box that shortens its shown name in the middle ("Qwen2.5-Co…Instruct-DFlash2")
rather than cutting its end, where model names differ; the whole name is its tooltip."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPaintEvent
from PySide6.QtWidgets import QComboBox, QStyle, QStyleOptionComboBox, QStylePainter, QWidget


class ElidingComboBox(QComboBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view().setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.currentIndexChanged.connect(lambda _i: self.setToolTip(self.currentText()))

    def shown_text(self) -> str:
        """The current name as painted: elided in the middle to the text area's width."""
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        area = self.style().subControlRect(
            QStyle.ComplexControl.CC_ComboBox, option, QStyle.SubControl.SC_ComboBoxEditField, self
        )
        return self.fontMetrics().elidedText(
            self.currentText(), Qt.TextElideMode.ElideMiddle, max(area.width() - 4, 0)
        )

    def paintEvent(self, _event: QPaintEvent) -> None:
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        option.currentText = self.shown_text()
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)
