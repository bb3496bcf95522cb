"""``flashchat --ask TEXT``: once the model is loaded, send TEXT, print the reply and close the
window (a smoke test of an installation or a bundle). An error is printed and ends the
application with status 1. Greedy and at most 64 tokens, so the same installation gives the
same answer; the saved settings are not changed."""

from __future__ import annotations

import sys
from typing import Any

from PySide6.QtCore import QObject, QTimer, Slot
from PySide6.QtWidgets import QApplication

from engine_mlx.events import Finished

OVERRIDES = {"temperature": 0.0, "max_tokens": 64}  # generation settings for this one reply


class AskAndQuit(QObject):
    """Drives ``window`` (a MainWindow) through one question; it reads ``window.worker``'s
    signals and uses its prompt, Send and close. The window asks for its model once the event
    loop runs, so these connections hear even a load that fails at once."""

    def __init__(self, window: Any, text: str) -> None:
        super().__init__(window)
        self.window, self.text = window, text
        window.worker.model_loaded.connect(self._ask_when_loaded)
        window.worker.finished.connect(self._print_reply_and_quit)
        window.worker.error.connect(self._fail_and_quit)

    @Slot(object)
    def _ask_when_loaded(self, _info: object) -> None:
        self.window.prompt_edit.setPlainText(self.text)
        QTimer.singleShot(0, self.window.send)

    @Slot(object)
    def _print_reply_and_quit(self, event: Finished) -> None:
        print(event.text, flush=True)
        QTimer.singleShot(0, self.window.close)  # after the window has stored the reply

    @Slot(str)
    def _fail_and_quit(self, message: str) -> None:
        print(f"error: {message}", file=sys.stderr, flush=True)
        self.window.close()  # stops the worker threads first (exiting with them running aborts)
        QApplication.exit(1)
