"""What a pipeline costs per step against one process, and what speculation gains as the
link between ranks slows: DFlash2 and prompt lookup against plain decoding at several
per-hop latencies, beside what the step-cost model (auto's) predicts from the costs it
measured through that pipeline.

    python scripts/pipeline_latency.py --ranks 2 --delays 0,2,10 --json-out F

The ranks run on this machine over loopback (the ring backend). The latency is simulated:
each message waits ``FLASHCHAT_PIPELINE_DELAY_MS`` before it is sent (``wire.Link``), as
there is no ``tc netem`` in these kernels. The ranks are started the way MLX documents for
running without ``mlx.launch`` (``MLX_RANK`` and ``MLX_HOSTFILE``), because ``mlx.launch``
busy-waits on its ranks' output and takes a core of its own, half of a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CHAT = ROOT / "resources/bench/heldout.jsonl"
COPY = ROOT / "resources/bench/copyheavy.jsonl"


def prompts(count: int) -> list[tuple[str, list[dict]]]:
    """``count`` chat questions and ``count`` copy-heavy requests, the first of each file."""
    out = []
    for kind, path in (("chat", CHAT), ("copy", COPY)):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out += [(kind, row["messages"]) for row in lines[:count]]
    return out


def measure(args: argparse.Namespace) -> dict:
    """On rank 0 (or alone): every mode on every prompt, greedy, and the step costs."""
    from engine_mlx.api import encode_prompt, load_speculators, load_target
    from engine_mlx.config import GenerationConfig
    from engine_mlx.events import Finished
    from engine_mlx.session import Session

    target = load_target(args.model)
    spec = load_speculators(target)
    session = Session(target, spec.drafter, spec.mtp, spec.mtp_reason, reuse_prompt=True)
    started = time.perf_counter()
    costs = session.step_costs()
    calibration_s = time.perf_counter() - started
    rows = []
    for kind, messages in prompts(args.count):
        ids = encode_prompt(target, messages)
        for mode in args.modes.split(","):
            config = GenerationConfig(max_tokens=args.max_tokens, mode=mode, ignore_eos=True)
            last = list(session.generate(ids, config))[-1]
            assert isinstance(last, Finished), last
            s = last.stats
            depth = len(ids) + s.generated_tokens // 2
            nodes = 1 + s.tested / max(s.steps, 1)  # tokens each verify carried, on average
            drafting = s.time_split.get("draft", 0.0) / max(s.steps, 1)  # the drafter's, a step
            step = costs.verify_s(nodes, depth) + drafting
            predicted = s.tau * costs.verify_s(1, depth) / step
            rows.append(dict(kind=kind, mode=mode, tps=s.decode_tps, tau=s.tau,
                             nodes=nodes, predicted=predicted))  # fmt: skip
    plain_ms = costs.verify_s(1, 256) * 1000
    return dict(rows=rows, plain_step_ms=plain_ms, calibration_s=calibration_s,
                verify8_over_1=costs.verify_s(8, 256) / costs.verify_s(1, 256))  # fmt: skip


def run_ranks(args: argparse.Namespace, delay: float, out: Path) -> None:
    """This script as rank 0 and ``args.ranks - 1`` stages, on loopback ports."""
    ports = []
    for _ in range(args.ranks):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as hosts:
        json.dump([[f"127.0.0.1:{p}"] for p in ports], hosts)
    procs = []
    for rank in range(args.ranks):
        env = dict(os.environ, MLX_RANK=str(rank), MLX_HOSTFILE=hosts.name,
                   FLASHCHAT_PIPELINE_DELAY_MS=str(delay), PYTHONPATH=str(ROOT))  # fmt: skip
        command = [sys.executable, __file__, "--as-rank", "--out", str(out), *sys.argv[1:]]
        procs.append(subprocess.Popen(command, env=env))
    codes = [p.wait() for p in procs]
    os.unlink(hosts.name)
    if any(codes):
        raise SystemExit(f"a rank failed: exit codes {codes}")


def as_rank(args: argparse.Namespace) -> int:
    from engine_mlx.distributed.launch import join, leave, run_stage

    pipeline = join()
    if pipeline.rank > 0:
        return run_stage("generate", args.model, pipeline)
    try:
        Path(args.out).write_text(json.dumps(measure(args)))
    finally:
        leave()
    return 0


def table(results: dict[str, dict], modes: list[str]) -> str:
    """Per setting and text: tok/s of plain decoding, and each mode's ratio (the model's
    prediction: tau times a plain step's cost over a step's, its verify priced by the
    step-cost table measured in that setting, its drafting as measured)."""
    head = "| setting | text | plain tok/s | plain step | " + " | ".join(
        f"{m} / plain (model)" for m in modes[1:]
    )
    lines = [head + " |", "|" + " --- |" * (4 + len(modes) - 1)]
    for setting, result in results.items():
        for kind in ("chat", "copy"):
            rows = [r for r in result["rows"] if r["kind"] == kind]
            tps = {m: sum(r["tps"] for r in rows if r["mode"] == m) for m in modes}
            cells = []
            for m in modes[1:]:
                got = [r for r in rows if r["mode"] == m]
                model = sum(r["predicted"] for r in got) / len(got)
                tau = sum(r["tau"] for r in got) / len(got)
                cells.append(f"{tps[m] / tps[modes[0]]:.2f}x ({model:.2f}x), tau {tau:.2f}")
            n = len([r for r in rows if r["mode"] == modes[0]])
            step = f"{result['plain_step_ms']:.0f} ms"
            plain = f"{tps[modes[0]] / n:.1f}"
            lines.append(f"| {setting} | {kind} | {plain} | {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: demo)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--delays", default="0,2,10", help="simulated ms per hop")
    parser.add_argument("--modes", default="ar,lookup,dflash2", help="plain decoding first")
    parser.add_argument("--count", type=int, default=2, help="prompts of each kind")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--as-rank", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.model is None:
        from engine_mlx.demo import ensure_demo_model

        args.model = ensure_demo_model()
    if args.as_rank:
        return as_rank(args)
    os.environ.setdefault("FLASHCHAT_AUTO_MEMORY", "0")
    results = {"one process": measure(args)}
    for delay in [float(d) for d in args.delays.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "rank0.json"
            run_ranks(args, delay, out)
            results[f"{args.ranks} ranks, {delay:g} ms/hop"] = json.loads(out.read_text())
    print(table(results, args.modes.split(",")))
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
