"""``flashchat --ask TEXT``: once the model is loaded, send TEXT, print the reply and close the
window (a smoke test of an installation or a bundle). An error is printed and ends the
application with status 1; so does a reply that could not be saved (a full disk, say): it is
printed, then why it was not saved. Greedy and at most 64 tokens, so the same installation
gives the same answer; the saved settings are not changed."""

from __future__ import annotations

import sys
from typing import Any

from PySide6.QtCore import QObject, QTimer, Slot
from PySide6.QtWidgets import QApplication

from engine_mlx.events import Finished

OVERRIDES = {"temperature": 0.0, "max_tokens": 64}  # generation settings for this one reply


class AskAndQuit(QObject):
    """Drives ``window`` (a MainWindow) through one question; it reads ``window.worker``'s
    signals and the window's ``storage_problem``, and uses its prompt, Send and close. The
    window asks for its model once the event loop runs, so these connections hear even a load
    that fails at once."""

    def __init__(self, window: Any, text: str) -> None:
        super().__init__(window)
        self.window, self.text = window, text
        self.replying = False
        self.done = False  # said what there was to say (closing may report more problems)
        window.worker.model_loaded.connect(self._ask_when_loaded)
        window.worker.started.connect(self._on_started)
        window.worker.finished.connect(self._print_reply_and_quit)
        window.worker.error.connect(self._fail_and_quit)
        window.storage_problem.connect(self._on_storage_problem)

    @Slot(object)
    def _ask_when_loaded(self, _info: object) -> None:
        self.window.prompt_edit.setPlainText(self.text)
        QTimer.singleShot(0, self.window.send)

    @Slot(object)
    def _on_started(self, _event: object) -> None:
        self.replying = True

    @Slot(str)
    def _on_storage_problem(self, message: str) -> None:
        """Before the reply: the question could not be stored, so none will come. During it:
        said once the reply is printed."""
        if not self.replying and not self.done:
            self._fail_and_quit(message)

    @Slot(object)
    def _print_reply_and_quit(self, event: Finished) -> None:
        self.done = True
        print(event.text, flush=True)  # the window has stored the reply (or tried) by now
        window = self.window
        if window.store.is_temporary or not window.keeper.saved:
            print(f"error: the reply was not saved. {window.store_problem}", file=sys.stderr)
            QTimer.singleShot(0, self._close_failed)
        else:
            QTimer.singleShot(0, window.close)

    @Slot(str)
    def _fail_and_quit(self, message: str) -> None:
        self.done = True
        print(f"error: {message}", file=sys.stderr, flush=True)
        self._close_failed()

    def _close_failed(self) -> None:
        self.window.close()  # stops the worker threads first (exiting with them running aborts)
        QApplication.exit(1)
