"""Connect…: a model on another machine's OpenAI-compatible server, chosen from its list.

"Find models" asks the server for its model list (``GET /v1/models``) on a short-lived thread
so the window never waits on the network; the dialog says what went wrong (unreachable, a key
needed, not an OpenAI-compatible API) in words a person can act on.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QWidget,
)

from engine_mlx.errors import EngineError
from engine_mlx.remote import Endpoint, list_models, normalise_url


class _Lookup(QObject):
    done = Signal(object, str)  # model ids (or None), error message


class ConnectDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Connect to a server")
        self.url = QLineEdit("http://127.0.0.1:8080/v1", self)
        self.url.setAccessibleName("Server address")
        self.api_key = QLineEdit(self)
        self.api_key.setAccessibleName("API key")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("only if the server wants one")
        self.find_button = QPushButton("Find models", self)
        self.find_button.setAccessibleName("Find models")
        self.models = QComboBox(self)
        self.models.setAccessibleName("Remote model")
        self.message = QLabel("", self)
        self.message.setAccessibleName("Connection status")
        self.message.setWordWrap(True)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self
        )
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(False)
        form = QFormLayout(self)
        form.addRow("Address", self.url)
        form.addRow("API key", self.api_key)
        form.addRow("", self.find_button)
        form.addRow("Model", self.models)
        form.addRow(self.message)
        form.addRow(self.buttons)
        self._lookup = _Lookup(self)
        self._lookup.done.connect(self._on_models)
        self.find_button.clicked.connect(self.find_models)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

    def find_models(self) -> None:
        self.find_button.setEnabled(False)
        self.message.setText("Asking the server for its models…")
        url, key = normalise_url(self.url.text()), self.api_key.text().strip()

        def ask() -> None:
            try:
                self._lookup.done.emit(list_models(url, key), "")
            except EngineError as exc:
                self._lookup.done.emit(None, str(exc))

        threading.Thread(target=ask, daemon=True).start()

    def _on_models(self, models: list[str] | None, error: str) -> None:
        self.find_button.setEnabled(True)
        self.models.clear()
        if models is None or not models:
            self.message.setText(error or "The server offers no models.")
        else:
            self.models.addItems(models)
            self.message.setText(f"{len(models)} model(s) at {normalise_url(self.url.text())}.")
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setEnabled(bool(models))

    def endpoint(self) -> Endpoint:
        return Endpoint(
            normalise_url(self.url.text()), self.models.currentText(), self.api_key.text().strip()
        )
