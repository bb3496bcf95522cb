"""Pick the fastest BLAS on this machine by measuring it, once, and remember the pick.

Each candidate is timed in its own process (``probe``). The score is the prefill products'
time: with the small-batch product built, the BLAS only does products of more than 32 rows.
Without it, decoding's one-row products count too, weighted as a 64-token answer to a
512-token prompt. The pick is cached in ``paths.cache_dir()/blas-choice.json`` under a key of
the CPU, its cores, MLX's version, whether the small-batch product is built and the
candidates' files, so a new CPU, a new MLX or an upgraded library measures again; a few keys
are kept side by side. Stdlib only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from engine_mlx.cpu.libraries import Candidate
from engine_mlx.cpu.machine import cores, cpu_signature
from engine_mlx.paths import cache_dir

ANSWER_TOKENS_PER_CHUNK = 64
MAX_CACHED = 8  # picks kept in the cache file


@dataclass(frozen=True)
class Choice:
    name: str
    reason: str  # said by `info`, the bench and the status bar


def cache_file() -> Path:
    return cache_dir() / "blas-choice.json"


def choose(candidates: list[Candidate], small_gemm: bool) -> Choice:
    """The candidate to load, from the cache or measured now (a few seconds, once)."""
    if len(candidates) == 1:
        return Choice(candidates[0].name, "the only BLAS installed")
    key = _key(candidates, small_gemm)
    cached = _read(key)
    if cached is not None:
        return cached
    names = ", ".join(c.label for c in candidates)
    print(f"FlashChat: timing the BLAS libraries on this CPU, once ({names})…", file=sys.stderr)
    scores: dict[str, float] = {}
    failures: list[str] = []
    for candidate in candidates:
        try:
            scores[candidate.name] = _score(measure(candidate), small_gemm)
        except RuntimeError as exc:
            failures.append(f"{candidate.label}: {exc}")
    if not scores:
        return Choice(candidates[0].name, "not measured (" + "; ".join(failures) + ")")
    ranked = sorted(scores, key=scores.__getitem__)
    labels = {c.name: c.label for c in candidates}
    timings = ", ".join(f"{labels[name]} {scores[name]:.0f} ms" for name in ranked)
    choice = Choice(ranked[0], f"measured fastest here: {timings}")
    _write(key, choice)
    print(f"FlashChat: {labels[ranked[0]]} {choice.reason}", file=sys.stderr)
    return choice


def measure(candidate: Candidate) -> dict[str, float]:
    """The probe's timings for ``candidate``, from a fresh process."""
    env = {**os.environ, "FLASHCHAT_BLAS": candidate.name, "FLASHCHAT_SMALL_GEMM": "0"}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "engine_mlx.cpu.probe"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"the probe did not finish: {exc}") from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"the probe failed: {last}")
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise RuntimeError(f"the probe printed no result: {proc.stdout[-200:]!r}") from exc


def _score(timings: dict[str, float], small_gemm: bool) -> float:
    score = float(timings["prefill_ms"])
    if not small_gemm:
        score += ANSWER_TOKENS_PER_CHUNK * float(timings["decode_ms"])
    return score


def _key(candidates: list[Candidate], small_gemm: bool) -> str:
    try:
        mlx = metadata.version("mlx")
    except metadata.PackageNotFoundError:
        mlx = "?"
    parts = [cpu_signature(), str(cores()), mlx, str(small_gemm)]
    parts += [f"{c.name}={c.fingerprint()}" for c in candidates]
    return "\n".join(parts)


def _entries() -> dict[str, dict]:
    """The cached picks by key: one per setting (with and without the small-batch product), so
    a process that runs with the other setting does not measure again and evict this one."""
    try:
        data = json.loads(cache_file().read_text(encoding="utf-8"))
        entries = data["choices"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _read(key: str) -> Choice | None:
    try:
        entry = _entries()[key]
        return Choice(str(entry["name"]), str(entry["reason"]))
    except (KeyError, TypeError):
        return None


def _write(key: str, choice: Choice) -> None:
    path = cache_file()
    entries = {k: v for k, v in _entries().items() if k != key}
    entries[key] = {"name": choice.name, "reason": choice.reason}
    entries = dict(list(entries.items())[-MAX_CACHED:])  # the newest: old CPUs, MLX versions go
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"choices": entries}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache: measure again next time
