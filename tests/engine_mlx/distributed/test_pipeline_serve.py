"""``serve`` over a target split by ``mlx.launch``: the OpenAI API answers as one process
does, and a rank that dies mid-reply ends the request with a 503 naming it, then the server
exits: nothing hangs."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.engine_mlx.distributed.test_pipeline import ROOT, launch_command
from tests.support.serving import MODEL, free_port

MODES = ["ar", "lookup", "auto"]
QUESTION = {"role": "user", "content": "Name three colours of the sea."}


class Cluster:
    """``mlx.launch -n 2 ... serve`` on the tiny llama: its URL, and rank 1's process."""

    def __init__(self, folder: Path, tmp: Path) -> None:
        port = free_port()
        args = ["-m", "engine_mlx", "serve", "--model", str(folder), "--port", str(port)]
        env = dict(os.environ, FLASHCHAT_AUTO_MEMORY="0", PYTHONPATH=str(ROOT))
        env["FLASHCHAT_STEP_COSTS"] = str(tmp / "step-costs")
        self.proc = subprocess.Popen(
            launch_command(2, args), cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True,
            start_new_session=True,  # so that ``stop`` ends every rank, whatever happened
        )  # fmt: skip
        self.url, self.lines, self.rank1 = f"http://127.0.0.1:{port}", [], threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()  # no rank outlives a failed start
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while not self._healthy():
            assert self.proc.poll() is None, "\n".join(self.lines)
            assert time.monotonic() < deadline, "the pipeline did not serve within 120 s"
            time.sleep(0.2)
        assert self.rank1.wait(10), "\n".join(self.lines)

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip())
            if found := re.match(r"rank 1 \(process (\d+)\)", line):
                self.pid = int(found[1])
                self.rank1.set()

    def _healthy(self) -> bool:
        try:
            return httpx.get(self.url + "/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@pytest.fixture
def cluster(tiny_folder, tmp_path) -> Iterator[Cluster]:
    running = Cluster(tiny_folder, tmp_path)
    yield running
    running.stop()


def chat(url: str, mode: str, **extra) -> httpx.Response:
    body = {"model": MODEL, "messages": [QUESTION], "max_tokens": 24, "temperature": 0}
    return httpx.post(url + "/v1/chat/completions", json={**body, "mode": mode, **extra},
                      timeout=120)  # fmt: skip


def test_two_ranks_answer_as_one_process_in_every_mode(cluster, serve_process):
    for mode in MODES:
        split, alone = chat(cluster.url, mode), chat(serve_process, mode)
        assert split.status_code == alone.status_code == 200, split.text
        content = [r.json()["choices"][0]["message"]["content"] for r in (split, alone)]
        assert content[0] == content[1] and content[0], mode


@pytest.mark.parametrize("stream", [False, True])
def test_a_rank_killed_mid_reply_ends_the_request_with_503_then_the_server_exits(cluster, stream):
    threading.Timer(1.0, os.kill, [cluster.pid, 9]).start()
    started = time.monotonic()
    reply = chat(cluster.url, "ar", max_tokens=100000, ignore_eos=True, stream=stream)
    waited = time.monotonic() - started
    assert waited < 30
    if stream:  # the headers went out before the rank died: the error is the last chunk
        assert reply.status_code == 200
        assert '"type": "server_error"' in reply.text and reply.text.endswith("[DONE]\n\n")
    else:
        assert reply.status_code == 503, reply.text
    assert "pipeline broke: rank 1" in reply.text  # "(process N) has exited", where seen
    cluster.proc.wait(timeout=30)  # and the server exits, saying why
    assert any("pipeline broke" in line for line in cluster.lines), "\n".join(cluster.lines)
