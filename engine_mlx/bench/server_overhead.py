"""``bench --server-overhead``: what serving over HTTP costs against generating in-process.

A ``serve`` process and this process take turns on the same prompt (greedy, the same mode),
so both see the same machine state; each run reports the engine's own decode tok/s and the
client-side rate (tokens over the time from the first streamed text to the last). The
server's cost is the ratio of the two, per run, and its median.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx

from engine_mlx.api import encode_prompt, load_speculators, load_target
from engine_mlx.arguments import resolve_model
from engine_mlx.bench.measure import machine_description
from engine_mlx.config import GenerationConfig
from engine_mlx.errors import EngineError
from engine_mlx.events import Finished, Tokens
from engine_mlx.session import Session

QUESTION = "Explain what speculative decoding is, with a short Python example."


def run_server_overhead(args: argparse.Namespace) -> int:
    folder = resolve_model(args.model)
    mode = (args.modes or "ar").split(",")[0]
    target = load_target(folder)
    spec = load_speculators(target)
    session = Session(target, spec.drafter, spec.mtp, spec.mtp_reason, reuse_prompt=False)
    messages = [{"role": "user", "content": QUESTION}]
    ids = encode_prompt(target, messages)
    config = GenerationConfig(max_tokens=args.max_tokens, mode=mode)
    with _serving(folder, mode) as url:
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        _http_run(url, model, messages, args.max_tokens, mode)  # warm both sides up
        _direct_run(session, ids, config)
        rows = []
        for _ in range(args.repeats):
            direct = _direct_run(session, ids, config)
            served = _http_run(url, model, messages, args.max_tokens, mode)
            if served["tokens"] != direct["tokens"]:
                raise EngineError("the server's reply differs from generate's: not comparable")
            rows.append({"direct": direct, "served": served})
    result = _summary(rows, mode)
    print(json.dumps(result, indent=1))
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))
    return 0


def _summary(rows: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    engine = [r["served"]["engine_tps"] / r["direct"]["engine_tps"] for r in rows]
    client = [r["served"]["client_tps"] / r["direct"]["client_tps"] for r in rows]
    return {
        "machine": machine_description(),
        "mode": mode,
        "runs": rows,
        "served_over_direct_engine_tps": round(statistics.median(engine), 4),
        "served_over_direct_client_tps": round(statistics.median(client), 4),
    }


def _direct_run(session: Session, ids: list[int], config: GenerationConfig) -> dict[str, Any]:
    first = last = None
    tokens = 0
    finished = None
    for event in session.generate(ids, config):
        if isinstance(event, Tokens):
            now = time.perf_counter()
            first = first or now
            last = now
            tokens += len(event.token_ids)
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None and first is not None and last is not None
    return {
        "tokens": finished.stats.generated_tokens,
        "engine_tps": finished.stats.decode_tps,
        "client_tps": (tokens - 1) / (last - first) if last > first else 0.0,
    }


def _http_run(
    url: str, model: str, messages: list[dict[str, str]], max_tokens: int, mode: str
) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": messages,
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "mode": mode,
    }
    first = last = None
    final: dict[str, Any] = {}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as stream:
        for line in stream.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                final = chunk
            elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
    assert first is not None and last is not None and final
    tokens = final["usage"]["completion_tokens"]
    return {
        "tokens": tokens,
        "engine_tps": final["flashchat"]["decode_tps"],
        "client_tps": (tokens - 1) / (last - first) if last > first else 0.0,
    }


class _serving:
    """A ``serve`` process on a free loopback port for the ``with`` block."""

    def __init__(self, folder, mode: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.command = [sys.executable, "-m", "engine_mlx", "serve", "--model", str(folder)]
        self.command += ["--port", str(self.port), "--mode", mode]

    def __enter__(self) -> str:
        self.proc = subprocess.Popen(self.command, env=os.environ.copy())
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    return url
            except httpx.TransportError:
                time.sleep(0.2)
        self.proc.kill()
        raise EngineError("the server did not start")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
