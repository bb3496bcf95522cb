"""A real ``python -m engine_mlx serve`` process on the tiny llama, for the server's tests
and the app's (which points a window at it): one for the whole session (tests/conftest.py
offers these fixtures), since a request leaves nothing behind that the next one could see."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

MODEL = "tiny"  # the tiny model's folder name, which the server serves it as


@pytest.fixture(scope="session")
def tiny_folder(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama under the name the server serves it as."""
    folder = tmp_path_factory.mktemp("served") / MODEL
    folder.symlink_to(tiny_model_dir("llama"), target_is_directory=True)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(
    folder: Path, *options: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, str]:
    """``python -m engine_mlx serve`` on ``folder`` with ``options``, once it answers; the
    process and its base URL (the caller terminates it)."""
    port = free_port()
    command = [sys.executable, "-m", "engine_mlx", "serve", "--model", str(folder)]
    command += ["--port", str(port), "--mode", "ar", *options]
    proc = subprocess.Popen(
        command, env=env or os.environ.copy(), stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "serve exited"
        assert time.monotonic() < deadline, "serve did not answer within 120 s"
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    return proc, url


@pytest.fixture(scope="session")
def serve_process(tiny_folder: Path) -> Iterator[str]:
    """``python -m engine_mlx serve`` on the tiny model, started once; yields its base URL."""
    proc, url = start_serve(tiny_folder, "--max-queue", "2")
    yield url
    proc.terminate()
    proc.wait(timeout=30)
