"""A real server: uvicorn on a free loopback port, in this process (so a test can watch the
engine's events) or as a ``python -m engine_mlx serve`` process."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import uvicorn

from engine_mlx.api import load_target
from engine_mlx.server.app import Server
from engine_mlx.server.runner import EngineRunner
from engine_mlx.session import Session


class Running:
    """A Server answering on 127.0.0.1 from a uvicorn thread; ``close`` stops it."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.uvicorn = uvicorn.Server(uvicorn.Config(server.app, log_level="warning"))
        self.thread = threading.Thread(target=self.uvicorn.run, kwargs={"sockets": [self.sock]})
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.uvicorn.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)

    def close(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


def launch(folder: Path, **options) -> Running:
    """A server on the model in ``folder``; ``max_waiting`` and ``on_event`` go to its engine
    runner, the other options to the Server."""
    build = lambda: Session(load_target(folder), reuse_prompt=True)  # noqa: E731
    runner = EngineRunner(build, options.pop("max_waiting", 4), options.pop("on_event", None))
    runner.wait_ready()
    return Running(Server(runner, **options))


@pytest.fixture
def start_server(tiny_folder: Path) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(**options) -> Running:
        running = launch(options.pop("model", tiny_folder), **options)
        started.append(running)
        return running

    yield start
    for running in started:
        running.close()


@pytest.fixture(scope="module")
def refusing_server(tiny_folder: Path) -> Iterator[Running]:
    """One server with the default options for a module's requests that it refuses before
    generating (nothing of one reaches the next)."""
    running = launch(tiny_folder)
    yield running
    running.close()
