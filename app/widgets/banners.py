"""The banners above the conversation: an error in red, and a problem with the history file
in amber with the button that moves the file aside."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget


class ErrorBanner(QLabel):
    """The last error, until the next reply starts or a model loads."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Error")
        self.setWordWrap(True)
        self.setStyleSheet(
            "QLabel { color: #ffffff; background: #c0392b; padding: 6px; border-radius: 4px; }"
        )
        self.hide()

    def show_message(self, message: str) -> None:
        self.setText(message)
        self.show()


class StorageBanner(QWidget):
    """Why the history is not being saved, and (for a file that cannot be used) the way out:
    moving it aside and starting a fresh one."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("History problem")
        self.setObjectName("storageBanner")
        self.setStyleSheet(
            "QWidget#storageBanner { background: #fdf2d0; border: 1px solid #e0b84c; "
            "border-radius: 4px; } QLabel { color: #4a3b00; }"
        )
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.fresh_button = QPushButton("Move it aside and start fresh", self)
        self.fresh_button.setAccessibleName("Start a fresh history")
        row = QHBoxLayout(self)
        row.addWidget(self.label, 1)
        row.addWidget(self.fresh_button)
        self.hide()

    def show_problem(self, message: str, unusable: bool) -> None:
        self.label.setText(message)
        self.fresh_button.setVisible(unusable)
        self.show()
