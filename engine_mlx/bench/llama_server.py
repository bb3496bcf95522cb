"""llama.cpp's server as two suite cells: its plain decoding and its DFlash2, on the same
target GGUF, with the same drafter (exported to GGUF), the same prompts, greedy, and n_max =
block - 1.

Tokens/s come from the server's own ``timings`` (``predicted_per_second``: decoding only, the
prompt being kept by ``cache_prompt`` after a first request prefills it). Acceptance is
``draft_n_accepted / draft_n``. The server reports no step count, so tau is derived: every
verification commits its accepted tokens plus one, so steps = predicted_n - draft_n_accepted
(exact while every draft is the walk's full n_max, which ``p_min`` = 0 gives).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
import weakref
from pathlib import Path
from typing import Any

from engine_mlx.bench.measure import Runner
from engine_mlx.errors import EngineError

START_TIMEOUT_S = 120
REQUEST_TIMEOUT_S = 1800


def llama_server(envs: Path) -> Path:
    return envs / "llama.cpp" / "bin" / "llama-server"


def start_server(binary: Path, args: list[str], log: Path) -> tuple[subprocess.Popen, int]:
    """A llama-server on a free loopback port, once /health answers; EngineError with the
    end of its log if it does not start."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [str(binary), *args, "--host", "127.0.0.1", "--port", str(port)]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return process, port
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.25)
    process.terminate()
    process.wait(timeout=30)
    raise EngineError(f"llama-server did not start: {log.read_text(errors='replace')[-2000:]}")


def complete(port: int, prompt: list[int], tokens: int, keep_prompt: bool = True) -> dict[str, Any]:
    """One greedy /completion of exactly ``tokens`` tokens after ``prompt`` (token ids);
    ``keep_prompt``: the server may reuse a previous request's prefill (``cache_prompt``)."""
    body = {"prompt": prompt, "n_predict": tokens, "temperature": 0, "top_k": 1,
            "ignore_eos": True, "return_tokens": True, "cache_prompt": keep_prompt}  # fmt: skip
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as reply:
        return json.loads(reply.read())


def measurements(reply: dict[str, Any]) -> dict[str, Any]:
    """A /completion reply as the suite's cell measurements (see the module for tau)."""
    t = reply["timings"]
    predicted = int(t["predicted_n"])
    drafted, accepted = int(t.get("draft_n", 0)), int(t.get("draft_n_accepted", 0))
    steps = max(1, predicted - accepted)
    return {
        "decode_tps": float(t["predicted_per_second"]),
        "tau": predicted / steps if drafted else float("nan"),
        "acceptance": accepted / drafted if drafted else float("nan"),
        "tokens": predicted,
        "step_ms": float(t["predicted_ms"]) / steps,
        "output": list(reply.get("tokens", [])),
        "modes": {},
    }


def server_runner(binary: Path, args: list[str], log: Path) -> Runner:
    """A suite runner around one server, stopped when the runner is dropped."""
    process, port = start_server(binary, args, log)
    primed: set[tuple[int, ...]] = set()

    def run(prompt: list[int], max_tokens: int) -> dict[str, Any]:
        key = tuple(prompt)
        if key not in primed:  # prefill once; the timed requests reuse the kept prompt
            complete(port, prompt, 1)
            primed.add(key)
        return measurements(complete(port, prompt, max_tokens))

    weakref.finalize(run, _stop, process)
    return run


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


def server_args(gguf: Path, context: int, threads: int) -> list[str]:
    """The target alone, one slot."""
    return ["-m", str(gguf), "-c", str(context), "-np", "1", "-t", str(threads),
            "-tb", str(threads)]  # fmt: skip


def dflash_args(drafter_gguf: Path, n_max: int, threads: int) -> list[str]:
    """The drafter beside the target: llama.cpp's DFlash2 walk of ``n_max`` tokens."""
    return ["-md", str(drafter_gguf), "--spec-type", "draft-dflash", "--spec-draft-n-max",
            str(n_max), "-td", str(threads), "-tbd", str(threads)]  # fmt: skip


def llama_cells(
    envs: Path,
    gguf: Path | None,
    drafter: Path | None,
    block: int,
    context: int,
    workdir: Path,
) -> tuple[dict[str, Runner], dict[str, str]]:
    """The runners "llama.cpp server" (plain) and "llama.cpp dflash2" (the drafter folder
    ``drafter`` exported to GGUF), and the reason for each that cannot run."""
    binary = llama_server(envs)
    names = ("llama.cpp server", "llama.cpp dflash2")
    if gguf is None:
        return {}, dict.fromkeys(names, "no GGUF for this model (import one, or --llama-gguf)")
    if not binary.is_file():
        return {}, dict.fromkeys(names, f"{binary} is missing: run scripts/setup_bench_envs.sh")
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    base = server_args(gguf, context, threads)
    runners: dict[str, Runner] = {}
    reasons: dict[str, str] = {}
    try:
        runners[names[0]] = server_runner(binary, base, workdir / "llama-plain.log")
    except EngineError as exc:
        reasons[names[0]] = str(exc)
    if drafter is None:
        reasons[names[1]] = "no drafter"
        return runners, reasons
    from engine_mlx.models.gguf.export_drafter import export_drafter

    try:
        exported = export_drafter(drafter, workdir, form="gguf", qtype="f16", tokenizer_gguf=gguf)
        args = base + dflash_args(exported, block - 1, threads)
        runners[names[1]] = server_runner(binary, args, workdir / "llama-dflash2.log")
    except (EngineError, ValueError) as exc:
        reasons[names[1]] = str(exc)
    return runners, reasons
