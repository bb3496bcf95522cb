"""The window's File menu for moving conversations in and out (``app.transfer``): Import…,
Export All…, Export This Conversation…, and the export the conversation list's context menu
asks for. It owns its dialogs and messages so the main window only wires it in."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QFileDialog, QMainWindow, QMessageBox

from app.storage import ConversationStore, StorageError
from app.transfer.errors import TransferError
from app.transfer.export import export_conversations
from app.transfer.importing import read_import

EXPORT_FILTERS = {"json": "FlashChat JSON (*.json)", "md": "Markdown (*.md)"}
IMPORT_FILTER = (
    "Conversations (*.json *.jsonl);;FlashChat JSON, OpenAI messages or ChatGPT export "
    "(*.json *.jsonl);;All files (*)"
)


class HistoryTransfer(QObject):
    imported = Signal(list)  # the new conversation ids
    notice = Signal(str)  # one line for the status bar

    def __init__(
        self,
        window: QMainWindow,
        store: Callable[[], ConversationStore],
        current: Callable[[], int | None],
    ) -> None:
        super().__init__(window)
        self.window, self._store, self._current = window, store, current
        menu = window.menuBar().addMenu("&File")
        self.import_action = menu.addAction("Import Conversations…")
        self.import_action.setShortcut(QKeySequence("Ctrl+Shift+I"))
        self.import_action.triggered.connect(self.ask_import)
        menu.addSeparator()
        self.export_one_action = menu.addAction("Export This Conversation…")
        self.export_one_action.triggered.connect(self._export_current)
        self.export_all_action = menu.addAction("Export All Conversations…")
        self.export_all_action.setShortcut(QKeySequence("Ctrl+Shift+E"))
        self.export_all_action.triggered.connect(lambda: self.ask_export(None))
        menu.aboutToShow.connect(
            lambda: self.export_one_action.setEnabled(self._current() is not None)
        )

    def _export_current(self) -> None:
        current = self._current()
        if current is not None:
            self.ask_export([current])

    def ask_export(self, ids: list[int] | None) -> None:
        """A save dialog, then the export; ``ids`` None means every conversation."""
        name = (
            "FlashChat conversations.json" if ids is None or len(ids) > 1 else "conversation.json"
        )
        path, chosen = QFileDialog.getSaveFileName(
            self.window, "Export conversations", name, ";;".join(EXPORT_FILTERS.values())
        )
        if not path:
            return
        fmt = "md" if path.lower().endswith(".md") or chosen == EXPORT_FILTERS["md"] else "json"
        self.export_to(Path(path), fmt, ids)

    def export_to(self, path: Path, fmt: str, ids: list[int] | None) -> bool:
        try:
            n = export_conversations(self._store(), path, fmt, ids)
        except (TransferError, StorageError) as exc:
            QMessageBox.warning(self.window, "Export failed", str(exc))
            return False
        self.notice.emit(f"Exported {n} conversation{'s' * (n != 1)} to {path.name}")
        return True

    def ask_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.window, "Import conversations", "", IMPORT_FILTER
        )
        if path:
            self.import_from(Path(path))

    def import_from(self, path: Path) -> bool:
        """Reads and adds the file's conversations in one transaction; a bad file changes
        nothing and says why."""
        try:
            result = read_import(path, time.time())
            ids = self._store().add_conversations(result.conversations)
        except (TransferError, StorageError) as exc:
            QMessageBox.warning(self.window, "Import failed", f"{path.name}: {exc}")
            return False
        self.notice.emit(result.summary(path.name))
        self.imported.emit(ids)
        return True
