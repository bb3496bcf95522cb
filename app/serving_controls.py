"""Settings → "Serve on localhost", as the window shows it: the server started, stopped or
moved to match the settings, its address in the status bar, and each request it serves on
the speed panel as it streams (the chat does not show it: the reply belongs to the client)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Slot
from PySide6.QtWidgets import QLabel, QMainWindow

from app.engine_worker import EngineWorker
from app.local_server import LocalServer
from app.settings import AppSettings
from app.widgets.speed_panel import SpeedPanel
from engine_mlx.events import Finished, Started, Tokens


class ServingControls(QObject):
    def __init__(
        self,
        window: QMainWindow,
        worker: EngineWorker,
        panel: SpeedPanel,
        on_error: Callable[[str], None],
        resting_message: Callable[[], str],
    ) -> None:
        super().__init__(window)
        self._window, self._panel = window, panel
        self._on_error, self._resting_message = on_error, resting_message
        self.server = LocalServer(worker)
        self.label = QLabel(window)
        self.label.setAccessibleName("Local server")
        window.statusBar().addPermanentWidget(self.label)
        worker.served.connect(self.on_served)

    def apply(self, settings: AppSettings) -> None:
        """Start, stop or move the local server to match ``settings``."""
        want, port = settings.serve_enabled, settings.serve_port
        if self.server.running and (not want or not self.server.address.endswith(f":{port}/v1")):
            self.server.stop()
        if want and not self.server.running:
            try:
                self.server.start(port)
            except OSError as exc:
                self._on_error(
                    f"Cannot serve on port {port}: {exc.strerror or exc}. Choose another port "
                    "in Settings."
                )
        address = self.server.address
        self.label.setText(f"Serving on {address}" if address else "")
        self.label.setVisible(bool(address))

    @Slot(object)
    def on_served(self, event: Started | Tokens | Finished) -> None:
        status = self._window.statusBar()
        if isinstance(event, Started):
            self._panel.generation_started(event.prompt_tokens, event.mode)
            status.showMessage("Serving a request…")
        elif isinstance(event, Tokens):
            self._panel.update_live(
                event.live_tps, event.context_depth, event.tau, event.acceptance_rate,
                event.step.mode,
            )  # fmt: skip
        else:
            self._panel.generation_finished({**event.stats.to_json(), "reason": event.reason})
            status.showMessage(self._resting_message())
