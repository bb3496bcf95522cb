"""The window's three panes: conversations | the chat column | the speed panel."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMainWindow, QSplitter, QVBoxLayout, QWidget


def three_panes(
    window: QMainWindow, left: QWidget, column: list[QWidget], right: QWidget, stretch: QWidget
) -> QVBoxLayout:
    """Lay ``column`` top to bottom between ``left`` and ``right`` (``stretch`` takes the
    height); the middle column's layout, for panels shown in it later."""
    center = QWidget(window)
    layout = QVBoxLayout(center)
    layout.setContentsMargins(0, 0, 0, 0)
    for widget in column:
        layout.addWidget(widget, 1 if widget is stretch else 0)
    splitter = QSplitter(Qt.Orientation.Horizontal, window)
    for pane in (left, center, right):
        splitter.addWidget(pane)
    splitter.setStretchFactor(1, 1)
    splitter.setCollapsible(1, False)
    splitter.setCollapsible(2, False)  # the speed panel stays, however narrow the window
    splitter.setSizes([220, 760, 300])
    window.setCentralWidget(splitter)
    return layout
