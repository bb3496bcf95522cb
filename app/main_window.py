"""The first window: a prompt box, a streamed reply, and the live decode speed.

(The full app — conversations, the speed panel, settings — builds on this window.)
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QThread, Signal, Slot
from PySide6.QtGui import QKeySequence, QShortcut, QTextCursor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.engine_worker import EngineWorker


class MainWindow(QMainWindow):
    """Sends prompts to the worker thread and renders what comes back."""

    request_load = Signal(str)
    request_generate = Signal(str, int, float)

    def __init__(self, model_path: str = "") -> None:
        super().__init__()
        self.setWindowTitle("FlashChat")
        self.resize(1000, 700)
        self._build_ui()
        self._thread = QThread(self)
        self._thread.setObjectName("engine-worker")
        self.worker = EngineWorker()
        self.worker.moveToThread(self._thread)
        self.request_load.connect(self.worker.load_model)
        self.request_generate.connect(self.worker.generate)
        self.worker.model_loaded.connect(self._on_loaded)
        self.worker.started.connect(self._on_started)
        self.worker.text_delta.connect(self._on_text)
        self.worker.finished.connect(self._on_finished)
        self.worker.error.connect(self._on_error)
        self._thread.start()
        self.model_label.setText("Loading model…")
        self.request_load.emit(model_path)

    def _build_ui(self) -> None:
        central = QWidget(self)
        layout = QVBoxLayout(central)
        self.model_label = QLabel(self)
        self.model_label.setAccessibleName("Loaded model")
        self.reply_view = QTextBrowser(self)
        self.reply_view.setAccessibleName("Reply")
        self.reply_view.setPlaceholderText("The reply streams here.")
        self.prompt_edit = QPlainTextEdit(self)
        self.prompt_edit.setAccessibleName("Prompt")
        self.prompt_edit.setPlaceholderText("Ask something… (Ctrl+Enter sends, Esc stops)")
        self.prompt_edit.setMaximumHeight(120)
        self.max_tokens = QSpinBox(self)
        self.max_tokens.setRange(1, 8192)
        self.max_tokens.setValue(256)
        self.max_tokens.setPrefix("max tokens ")
        self.max_tokens.setAccessibleName("Maximum tokens")
        self.send_button = QPushButton("Send", self)
        self.send_button.setAccessibleName("Send")
        self.send_button.setEnabled(False)
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setAccessibleName("Stop")
        self.stop_button.setEnabled(False)
        self.speed_label = QLabel("–", self)
        self.speed_label.setAccessibleName("Decode speed")
        self.error_label = QLabel(self)
        self.error_label.setAccessibleName("Error")
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #c0392b;")
        self.error_label.hide()

        row = QHBoxLayout()
        row.addWidget(self.speed_label, 1)
        row.addWidget(self.max_tokens)
        row.addWidget(self.stop_button)
        row.addWidget(self.send_button)
        layout.addWidget(self.model_label)
        layout.addWidget(self.reply_view, 1)
        layout.addWidget(self.error_label)
        layout.addWidget(self.prompt_edit)
        layout.addLayout(row)
        self.setCentralWidget(central)

        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        QShortcut(QKeySequence("Ctrl+Return"), self, activated=self.send)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, activated=self.stop)

    @Slot()
    def send(self) -> None:
        prompt = self.prompt_edit.toPlainText().strip()
        if not prompt or not self.send_button.isEnabled():
            return
        self.error_label.hide()
        self.reply_view.clear()
        self.send_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.speed_label.setText("prefilling…")
        self.request_generate.emit(prompt, self.max_tokens.value(), 0.0)

    @Slot()
    def stop(self) -> None:
        self.worker.cancel()

    @Slot(str, str)
    def _on_loaded(self, name: str, backend: str) -> None:
        self.model_label.setText(f"<b>{name}</b> — {backend}")
        self.send_button.setEnabled(True)

    @Slot(int)
    def _on_started(self, prompt_tokens: int) -> None:
        self.speed_label.setText(f"prefilling {prompt_tokens} tokens…")

    @Slot(str, float, int)
    def _on_text(self, text: str, live_tps: float, depth: int) -> None:
        cursor = self.reply_view.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text)
        self.reply_view.setTextCursor(cursor)
        self.speed_label.setText(f"{live_tps:.1f} tok/s · context {depth}")

    @Slot(str, dict)
    def _on_finished(self, reason: str, stats: dict) -> None:
        self.send_button.setEnabled(True)
        self.stop_button.setEnabled(False)
        self.speed_label.setText(
            f"{stats['decode_tps']:.1f} tok/s · {stats['generated_tokens']} tokens · "
            f"TTFT {stats['ttft_s'] * 1000:.0f} ms · {reason.replace('_', ' ')}"
        )

    @Slot(str)
    def _on_error(self, message: str) -> None:
        self.error_label.setText(message)
        self.error_label.show()
        self.stop_button.setEnabled(False)
        self.send_button.setEnabled(self.model_label.text().startswith("<b>"))

    def closeEvent(self, event) -> None:
        self.worker.cancel()
        self._thread.quit()
        self._thread.wait(5000)
        super().closeEvent(event)
