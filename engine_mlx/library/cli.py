"""``python -m engine_mlx pull ORG/NAME [--revision R] [--json]`` and ``list [--json]``.

``pull`` prints a progress line on stderr (rewritten in place on a terminal) and the
installed folder on stdout; Ctrl+C cancels and keeps what was downloaded, so running the same
command again resumes. ``--json`` prints one object per event instead: ``plan``,
``progress``…, then ``installed`` with the folder.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

from engine_mlx.errors import EngineError
from engine_mlx.library.progress import OperationCancelled, Progress
from engine_mlx.library.units import human_bytes, human_duration

PRINT_INTERVAL_S = 1.0


def progress_line(p: Progress) -> str:
    """``Qwen3-4B  41% 3.3 GB / 8.0 GB  12.5 MB/s  6 min 15 s left  model-00001… (1/3)``."""
    if p.phase == "importing":
        return f"{p.name}  importing tensors {p.done}/{p.total}"
    if p.phase == "verifying":
        return f"{p.name}  verifying {p.file}"
    if p.phase in ("installing", "installed"):
        return f"{p.name}  {p.phase} ({human_bytes(p.total)} in {p.files_total} files)"
    pct = f"{p.fraction:4.0%}"
    speed = f"{human_bytes(p.speed_bps)}/s" if p.speed_bps else "–"
    return (
        f"{p.name}  {pct} {human_bytes(p.done)} / {human_bytes(p.total)}  {speed}  "
        f"{human_duration(p.eta_s)} left  {p.file} ({p.files_done + 1}/{p.files_total})"
    )


def pull_command(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from engine_mlx.library.hub import endpoint_hosts
    from engine_mlx.library.install import add
    from engine_mlx.library.sources import HubSource, SourceError, parse_text

    source = parse_text(args.model, endpoint_hosts())
    if args.revision:
        if not isinstance(source, HubSource):
            raise SourceError("--revision applies to hub models (ORG/NAME) only.")
        source = replace(source, revision=args.revision)
    cancel = threading.Event()
    tty = sys.stderr.isatty()
    last = [0.0]

    def on_plan(plan) -> None:
        if args.json:
            print(json.dumps({"event": "plan", **plan.to_json()}), flush=True)
        else:
            print(plan.summary(), file=sys.stderr, flush=True)

    def on_progress(p: Progress) -> None:
        if args.json:
            print(json.dumps({"event": "progress", **p.to_json()}), flush=True)
            return
        now = time.monotonic()
        final = p.phase == "installed"
        if not final and not tty and now - last[0] < PRINT_INTERVAL_S:
            return
        last[0] = now
        end = "\n" if final or not tty else ""
        print(("\r\x1b[K" if tty else "") + progress_line(p), end=end, file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        path = add(source, progress=on_progress, cancel=cancel, on_plan=on_plan)
    except OperationCancelled as exc:
        print(f"\n{exc}", file=sys.stderr)
        return 130
    except EngineError:
        if tty:
            print(file=sys.stderr)
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if args.json:
        print(json.dumps({"event": "installed", "path": str(path)}), flush=True)
    else:
        print(path)
    return 0


def list_command(args: argparse.Namespace) -> int:
    from engine_mlx.library.catalog import list_installed, pairings, suggestions
    from engine_mlx.library.pending import pending_downloads
    from engine_mlx.paths import models_dir

    models = list_installed()
    pairs = pairings(models)
    suggested = suggestions(models)
    pending = pending_downloads()
    if args.json:
        print(
            json.dumps(
                {
                    "library": str(models_dir()),
                    "models": [m.to_json() for m in models],
                    "pairings": [p.__dict__ for p in pairs],
                    "suggestions": [s.__dict__ for s in suggested],
                    "pending": [
                        {
                            "repo_id": p.repo_id,
                            "commit": p.commit,
                            "bytes_on_disk": p.bytes_on_disk,
                            "total": p.total,
                        }
                        for p in pending
                    ],
                },
                indent=1,
            )
        )
        return 0
    print(f"Library: {models_dir()}")
    if not models:
        print("  (empty: `python -m engine_mlx pull ORG/NAME` downloads a model)")
    rows = [("NAME", "KIND", "ARCHITECTURE", "SIZE", "QUANT", "CONTEXT")]
    for m in models:
        context = f"{m.max_context:,}" if m.max_context else "–"
        rows.append(
            (m.name, m.kind, m.architecture, human_bytes(m.size_bytes), m.quantization, context)
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    if models:
        for row in rows:
            print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for m in models:
        if m.problem:
            print(f"  ! {m.name}: {m.problem}")
    for p in pairs:
        mark = "fits" if p.fits else f"does not fit: {p.reason}"
        print(f"  {p.target} <- {p.kind} {p.companion}: {mark}")
    for s in suggested:
        print(f"  suggested for {s.target}: {s.repo_id} ({s.reason})")
    for p in pending:
        print(
            f"  unfinished download: {p.repo_id} ({human_bytes(p.bytes_on_disk)} of "
            f"{human_bytes(p.total)}); `pull {p.repo_id}` resumes it"
        )
    return 0
