"""Settings → "Serve on localhost": the engine's OpenAI-compatible server, inside the app.

The HTTP side (uvicorn) runs on a plain thread of its own; generations run on the engine
worker's thread, queued behind (and ahead of) the chat's own, so the chat and the server take
turns on one model and one KV cache. Requests reach the worker as queued Qt signals; the
worker reports each server generation's events back for the speed panel. The checks on every
request (Host, Origin, JSON bodies, their size) and uvicorn's settings are ``serve``'s own
(``engine_mlx.server.app.uvicorn_server``), with the same allow-lists from the environment.
"""

from __future__ import annotations

import socket
import threading

from PySide6.QtCore import QObject, Signal

from app.engine_worker import EngineWorker
from engine_mlx.config import GenerationConfig
from engine_mlx.modes import Mode
from engine_mlx.server.access import AccessPolicy
from engine_mlx.server.app import Server, uvicorn_server
from engine_mlx.server.runner import Job, JobQueue
from engine_mlx.session import Session

HOST = "127.0.0.1"  # the app serves this machine only (the CLI can do more, with a key)


class WorkerRunner(QObject, JobQueue):
    """Admits server jobs and hands them to the engine worker's thread."""

    dispatch = Signal(object, object)  # (this runner, Job) -> EngineWorker.run_server_job

    def __init__(self, worker: EngineWorker, max_waiting: int = 4) -> None:
        QObject.__init__(self)
        JobQueue.__init__(self, max_waiting, on_event=worker.report_served)
        self._worker = worker
        self.dispatch.connect(worker.run_server_job)  # queued: the worker lives on its thread

    @property
    def session(self) -> Session | None:
        return self._worker.session

    def _dispatch(self, job: Job) -> None:
        self.dispatch.emit(self, job)


class LocalServer:
    """Start and stop serving the app's loaded model on ``http://127.0.0.1:PORT/v1``."""

    def __init__(self, worker: EngineWorker) -> None:
        self._worker = worker
        self._uvicorn = None
        self._thread: threading.Thread | None = None
        self.address = ""

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, port: int) -> str:
        """Serve on ``port``; returns the base URL. OSError when the port is taken."""
        self.stop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            sock.close()
            raise
        server = Server(
            WorkerRunner(self._worker),
            base_config=GenerationConfig(mode=Mode.AUTO),
            access=AccessPolicy.from_options(HOST),
        )
        self._uvicorn = uvicorn_server(server)
        self._thread = threading.Thread(
            target=self._uvicorn.run, kwargs={"sockets": [sock]}, name="flashchat-server"
        )
        self._thread.daemon = True
        self._thread.start()
        self.address = f"http://{HOST}:{sock.getsockname()[1]}/v1"
        return self.address

    def stop(self) -> None:
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._uvicorn, self._thread, self.address = None, None, ""
