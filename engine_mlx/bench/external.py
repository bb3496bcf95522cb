"""Public MLX DFlash implementations as baselines for ``bench --suite``, each in its own venv.

Why child processes: z-lab's ``dflash``, ``dflash-mlx`` and ``mlx-dspark`` pin different MLX
and mlx-lm versions and two of them install a ``dflash`` command, so none can share our
environment. ``scripts/setup_bench_envs.sh`` makes one venv per implementation; here each
gets a runner script (``engine_mlx/bench/runners/run_*.py``) started once with the target
and our drafter exported in z-lab's v1 layout, then asked for generations over JSON lines
(the protocol is described in ``runners/_protocol.py``). Every implementation that
cannot run says why, in words, for the report's ``baselines_not_run``.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import mlx.core as mx

from engine_mlx.bench.measure import Runner, shown_path
from engine_mlx.errors import EngineError
from engine_mlx.models.dflash import DFlashModel, save_dflash

RUNNERS_DIR = Path(__file__).resolve().parent / "runners"
SETUP_HINT = "run scripts/setup_bench_envs.sh"
LOAD_TIMEOUT_S = 900.0  # import + load + a short test generation, on a busy CPU
REQUEST_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Baseline:
    name: str  # as it appears in the report
    env: str  # folder under the environments folder
    script: str  # runner in runners/


BASELINES = (
    Baseline("z-lab", "zlab", "run_zlab.py"),
    Baseline("dflash-mlx", "dflash-mlx", "run_dflash_mlx.py"),
    Baseline("mlx-dspark", "mlx-dspark", "run_mlx_dspark.py"),
)


class ExternalError(EngineError):
    """A runner process did not answer as the protocol says."""


def default_envs_dir() -> Path:
    """``FLASHCHAT_BENCH_ENVS``, else ``.bench-envs/`` beside the package (the repo root)."""
    override = os.environ.get("FLASHCHAT_BENCH_ENVS")
    return Path(override) if override else Path(__file__).resolve().parents[2] / ".bench-envs"


def export_v1(drafter: DFlashModel, mask_id: int, block: int, folder: Path) -> Path:
    """The drafter in z-lab's v1 layout with the mask token and block size our session uses
    (the drafter's own config may lack the mask or differ from ``--block``)."""
    save_dflash(drafter, folder, v1=True)
    cfg_file = folder / "config.json"
    cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    cfg["block_size"] = int(block)
    cfg["dflash_config"]["mask_token_id"] = int(mask_id)
    cfg_file.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return folder


class RunnerProcess:
    """One runner child: started once, asked many times, ended when dropped or at exit."""

    def __init__(self, argv: list[str]) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115  (closed with the process)
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        assert self._proc.stdout is not None
        threading.Thread(target=_pump, args=(self._proc.stdout, self._lines), daemon=True).start()
        self._finalizer = weakref.finalize(self, _stop, self._proc, self._stderr)

    def receive(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise ExternalError(f"no answer within {timeout:.0f} s") from None
        if line is None:
            try:
                code: int | str = self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                code = "unknown (stdout closed, still running)"
            raise ExternalError(f"runner exited with code {code}{self._stderr_tail()}")
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            raise ExternalError(f"not a protocol line: {line.strip()[:200]!r}") from None
        if not isinstance(message, dict):
            raise ExternalError(f"not a protocol message: {line.strip()[:200]!r}")
        return message

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self._proc.poll() is not None or self._proc.stdin is None:
            raise ExternalError(f"runner is gone (code {self._proc.returncode})")
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ExternalError(f"runner is gone: {exc}{self._stderr_tail()}") from None
        return self.receive(timeout)

    def close(self) -> None:
        self._finalizer()

    def _stderr_tail(self, lines: int = 3) -> str:
        self._stderr.seek(0)
        text = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        return (": " + " | ".join(text[-lines:])) if text else ""


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _stop(proc: subprocess.Popen[str], stderr: IO[bytes]) -> None:
    """End of stdin ends a runner; one that does not listen is killed."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    stderr.close()


def _as_runner(process: RunnerProcess, name: str) -> Runner:
    def run(prompt: list[int], max_tokens: int) -> dict[str, Any]:
        reply = process.ask(
            {"prompt": [int(t) for t in prompt], "max_tokens": max_tokens}, REQUEST_TIMEOUT_S
        )
        if "error" in reply:
            raise EngineError(f"{name}: {reply['error']}")
        return reply

    return run  # its closure keeps the child alive as long as the suite holds the runner


def _not_started_reason(hello: dict[str, Any], model_type: str) -> str:
    error = hello.get("error", "no reason given")
    if hello.get("unsupported"):
        return f"does not support this target (model_type {model_type}): {error}"
    if hello.get("stage") == "probe":
        return f"failed a short test generation on this target ({model_type}): {error}"
    return f"failed to load the target ({model_type}) or the v1 drafter: {error}"


def _dtype_name(dtype: mx.Dtype | str | None) -> str:
    return "" if dtype is None else str(dtype).removeprefix("mlx.core.")


def external_baselines(
    target_path: Path,
    drafter_model: DFlashModel,
    mask_id: int,
    block: int,
    envs_dir: Path | None = None,
    dtype: mx.Dtype | str | None = None,
    only: tuple[str, ...] | None = None,
) -> tuple[dict[str, Runner], dict[str, str]]:
    """Start every implementation whose environment exists (``only``: those names).

    Returns the suite's runners ``(prompt, max_tokens) -> {decode_tps, tau, tokens,
    output, ...}`` by name, and for each implementation not run, the reason. Runners load
    in parallel; each is tried on a short generation before it counts as running, so a
    target an implementation refuses shows up here, with the error it gave.
    """
    envs = Path(envs_dir) if envs_dir else default_envs_dir()
    model_type = _model_type(Path(target_path))
    runners: dict[str, Runner] = {}
    reasons: dict[str, str] = {}
    wanted = [b for b in BASELINES if only is None or b.name in only]
    with tempfile.TemporaryDirectory(prefix="flashchat-v1-drafter-") as tmp:
        drafter_dir = export_v1(drafter_model, mask_id, block, Path(tmp) / "drafter")
        started: list[tuple[Baseline, RunnerProcess]] = []
        for baseline in wanted:
            python = envs / baseline.env / "bin" / "python"
            if not python.exists():
                where = shown_path(envs / baseline.env)
                reasons[baseline.name] = f"no environment at {where}: {SETUP_HINT}"
                continue
            argv = [str(python), str(RUNNERS_DIR / baseline.script)]
            argv += ["--target", str(target_path), "--drafter", str(drafter_dir)]
            argv += ["--block", str(block), "--dtype", _dtype_name(dtype)]
            try:
                started.append((baseline, RunnerProcess(argv)))
            except OSError as exc:
                reasons[baseline.name] = f"could not start {python}: {exc}; {SETUP_HINT}"
        for baseline, process in started:  # all loaded before the exported drafter goes
            try:
                hello = process.receive(LOAD_TIMEOUT_S)
            except ExternalError as exc:
                hello = {"error": str(exc), "stage": "load"}
            if not hello.get("ready"):
                process.close()
                reasons[baseline.name] = _not_started_reason(hello, model_type)
                continue
            runners[baseline.name] = _as_runner(process, baseline.name)
            info = ", ".join(f"{k} {v}" for k, v in hello.get("info", {}).items())
            print(f"# {baseline.name} (external, {envs / baseline.env}): {info}", file=sys.stderr)
    return runners, reasons


def _model_type(target_path: Path) -> str:
    try:
        cfg = json.loads((target_path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "unknown"
    return str(cfg.get("model_type", "unknown"))
