"""Models added by dropping onto the window or pasting outside the prompt: a Hugging Face
link, ORG/NAME, a model folder, a .gguf or MTP .safetensors file. What is named goes to the
model library, which opens to show the install. The prompt keeps plain-text drops and hands
links and files on; the read-only conversation takes none."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QMimeData, QObject
from PySide6.QtGui import QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import QMainWindow, QWidget

from app.widgets.library_view import source_from_mime
from engine_mlx.library.hub import endpoint_hosts
from engine_mlx.library.sources import SourceError


def names_a_model(mime: QMimeData) -> bool:
    try:
        source_from_mime(mime, endpoint_hosts())
    except SourceError:
        return False
    return True


class ModelDrops(QObject):
    """Watches ``window`` and ``prompt`` for drops, and Paste on the window."""

    def __init__(
        self,
        window: QMainWindow,
        prompt: QWidget,
        install: Callable[[QMimeData], str | None],
        no_drops: tuple[QWidget, ...],
    ) -> None:
        """``install``: hands what was dropped or pasted to the model library (its job id, or
        None when it names nothing to install)."""
        super().__init__(window)
        self._window, self._prompt, self.add_from_mime = window, prompt, install
        window.setAcceptDrops(True)
        for widget in no_drops:
            widget.setAcceptDrops(False)
        window.installEventFilter(self)
        prompt.installEventFilter(self)
        QShortcut(QKeySequence.StandardKey.Paste, window, activated=self.paste)

    def paste(self) -> None:
        self.add_from_mime(QGuiApplication.clipboard().mimeData())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if watched is self._window:
            # Any file or link is taken (the library then says why it cannot add it); text
            # only when it names a model, so dragging a sentence over the window is refused.
            if kind == QEvent.Type.DragEnter:
                mime = event.mimeData()
                if mime.hasUrls() or names_a_model(mime):
                    event.acceptProposedAction()
                return True
            if kind == QEvent.Type.Drop:
                if self.add_from_mime(event.mimeData()) is not None:
                    event.acceptProposedAction()
                return True
        elif (
            kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove, QEvent.Type.Drop)
            and event.mimeData().hasUrls()
            and names_a_model(event.mimeData())
        ):  # links and files dropped on the prompt add a model; plain text is typed in
            if kind == QEvent.Type.Drop:
                self.add_from_mime(event.mimeData())
            event.acceptProposedAction()
            return True
        return super().eventFilter(watched, event)
