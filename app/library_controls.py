"""The model library as the window uses it: its worker thread and window, and the first run.

The library installs on its own thread; the window only shows what changed in its model bar
(the selection kept) and loads what it is asked to. With no model anywhere, the chat area
shows ``first_run.NoModelPanel`` instead, and the first model installed is loaded.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.download_worker import LibraryWorker
from app.first_run import NoModelPanel
from app.widgets.library_view import LibraryView
from app.widgets.model_bar import ModelBar
from engine_mlx.library.hub import endpoint_hosts
from engine_mlx.library.sources import parse_drop


class LibraryControls(QObject):
    load_requested = Signal(str, str)  # target, drafter

    def __init__(self, window: QWidget, model_bar: ModelBar) -> None:
        super().__init__(window)
        self._bar = model_bar
        self.first_run: NoModelPanel | None = None
        self._thread = QThread(self)
        self._thread.setObjectName("library-worker")
        self.worker = LibraryWorker()
        self.worker.moveToThread(self._thread)
        self.view = LibraryView(self.worker, window)
        self.view.library_changed.connect(self._on_library_changed)
        self.view.load_requested.connect(self.load_requested)
        self._thread.start()

    @Slot()
    def open(self) -> None:
        self.view.refresh()
        self.view.show()
        self.view.raise_()
        self.view.activateWindow()

    def show_first_run(self, column: QVBoxLayout, chat: QWidget) -> None:
        """No model anywhere: in place of ``chat``, explain and offer the demo model or a
        file (the library installs it; the first one installed is loaded)."""
        self._bar.set_status("No model installed")
        self.first_run = NoModelPanel(chat.parentWidget())
        self.first_run.download_requested.connect(self._install_text)
        self.first_run.file_chosen.connect(self._install_path)
        self._chat = chat
        chat.hide()
        column.insertWidget(column.indexOf(chat) + 1, self.first_run, 1)

    def _install_text(self, text: str) -> None:
        self.open()
        self.view.start(parse_drop([], [], text, endpoint_hosts()))

    def _install_path(self, path: str) -> None:
        self.open()
        self.view.start(parse_drop([Path(path)]))

    @Slot()
    def _on_library_changed(self) -> None:
        """New or removed models show in the model bar; the selection stays."""
        bar = self._bar
        if self.first_run is not None:
            bar.refresh()
            if bar.target_box.count():
                self.first_run.hide()
                self.first_run = None
                self._chat.show()
                bar.set_status("Loading model…")
                self.load_requested.emit(bar.target_box.itemData(0), "")
                return
        target = bar.target_box.currentData() or ""
        drafter = bar.drafter_box.currentData() or ""
        bar.refresh(target, drafter)
        for box, value in ((bar.target_box, target), (bar.drafter_box, drafter)):
            box.setCurrentIndex(max(box.findData(value), 0))

    def close(self) -> None:
        """Downloads stop (their bytes kept for the next start) and the thread ends."""
        self.worker.cancel_all()
        self.view.close()
        self._thread.quit()

    def wait(self) -> None:
        self._thread.wait(35000)
