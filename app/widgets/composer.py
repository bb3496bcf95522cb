"""Below the conversation: the prompt, the context meter with its warning, and the row of
controls (Think, Settings…, Stop, Send). The window connects their signals."""

from __future__ import annotations

import time

from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

CONTEXT_WARNING = 0.9  # warn when the conversation fills this share of the context
# While a reply streams the meter follows at most this often: Qt repaints a progress bar at
# once on every new value (~5 ms each on a 2-core machine), and the speed panel already
# shows the depth live.
LIVE_METER_S = 0.5


class Composer(QWidget):
    def __init__(self, think: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context_note = QLabel(self)
        self.context_note.setAccessibleName("Context warning")
        self.context_note.hide()
        self.prompt_edit = QPlainTextEdit(self)
        self.prompt_edit.setAccessibleName("Prompt")
        self.prompt_edit.setPlaceholderText("Message FlashChat…  (Ctrl+Enter sends, Esc stops)")
        self.prompt_edit.setMaximumHeight(90)
        self.context_meter = QProgressBar(self)
        self.context_meter.setAccessibleName("Context used")
        self.context_meter.setTextVisible(True)
        self.context_meter.setFormat("context –")
        self._meter_at = 0.0  # time.monotonic() of the last live update of the meter
        self.send_button = self._button("Send")
        self.send_button.setDefault(True)
        self.stop_button = self._button("Stop")
        self.think_box = QCheckBox("Think", self)
        self.think_box.setAccessibleName("Think")
        self.think_box.setToolTip(
            "A thinking model reasons before it answers (the reasoning folds away above the "
            "answer). Each conversation keeps its own choice."
        )
        self.think_box.setChecked(think)
        self.think_box.hide()  # shown for models that think
        self.settings_button = QPushButton("Settings…", self)
        self.settings_button.setAccessibleName("Settings")

        row = QHBoxLayout()
        row.addWidget(self.context_meter, 1)
        for widget in (self.think_box, self.settings_button, self.stop_button, self.send_button):
            row.addWidget(widget)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.context_note)
        column.addWidget(self.prompt_edit)
        column.addLayout(row)

    def _button(self, text: str) -> QPushButton:
        button = QPushButton(text, self)
        button.setAccessibleName(text)
        button.setEnabled(False)
        return button

    def update_context(self, depth: int, max_context: int, live: bool = False) -> None:
        """The meter at ``depth`` of ``max_context`` tokens, and the warning near the end;
        ``live`` (a reply streaming) updates are skipped within ``LIVE_METER_S`` of the last."""
        if max_context <= 0:
            return
        if live:
            now = time.monotonic()
            if now - self._meter_at < LIVE_METER_S:
                return
            self._meter_at = now
        if self.context_meter.maximum() != max_context:
            self.context_meter.setRange(0, max_context)
        self.context_meter.setValue(min(depth, max_context))
        self.context_meter.setFormat(f"context {depth:,} / {max_context:,}")
        share = depth / max_context
        if share >= CONTEXT_WARNING:
            self.context_note.setText(
                f"The conversation fills {share:.0%} of the model's context: start a new chat "
                "soon, or the reply will be cut short."
            )
            self.context_note.show()
        else:
            self.context_note.hide()
