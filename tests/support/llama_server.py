"""llama-server (built by scripts/build_llama_cpp.sh) on a free loopback port, for the tests
that check FlashChat against llama.cpp itself."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def start_llama_server(binary: Path, args: list[str], log: Path) -> tuple[subprocess.Popen, int]:
    """The running server and its port, once /health answers; AssertionError with the end
    of its log if it does not start within a minute."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [str(binary), *args, "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return process, port
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.25)
    process.terminate()
    raise AssertionError(f"llama-server did not start: {log.read_text()[-2000:]}")
