#!/usr/bin/env python3
"""The drafter trainer for a lent NVIDIA GPU machine: the demo's DFlash2 drafter and MTP head
from the target's own replies, inside the machine's budget, the weights brought back in $OUT.

Nothing is reachable from that machine and each call carries at most 64 MiB, so what it needs
travels in parts, one part folder a call (the machine keeps them between calls while warm):

    here:   bash scripts/gpu_parts.sh gpu_parts      # wheels + the 4-bit demo, 60 MiB parts
    there:  one call per part folder, carrying ``gpu_parts/NN`` (a no-op command), then
            python3 scripts/gpu_train_pair.py --parts gpu_parts --budget-s 600

On the machine it joins the parts (``--parts``), installs MLX's CUDA build offline
(``gpu_env``), checks that the CUDA backend is live and runs ``python -m engine_mlx
train-pair --scale gpu`` (``engine_mlx/training/pipeline.py``: data, drafter, head, each in
its share of the budget, resumable) into /tmp, then copies the exported pair and the training
log to $OUT/pair. The same pipeline runs at toy scale on the CPU in the tests
(tests/engine_mlx/training/test_pipeline.py); this script has not yet run on a GPU.

Exit status: 0 when a pair was exported.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_env  # beside this script

ROOT = Path(__file__).resolve().parents[1]
UNPACKED = Path("/tmp/fc-gpu-parts")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", type=Path, help="gpu_parts.sh's folder (wheels/ and model.tar)")
    p.add_argument("--model", type=Path, help="a target folder already on the machine")
    p.add_argument("--wheels", help="MLX's wheels already on the machine (default: the parts')")
    p.add_argument("--venv", default="/tmp/fc-cuda-venv")
    p.add_argument("--cuda", choices=("12", "13"), default="13")
    p.add_argument("--budget-s", type=float, default=600.0, help="for the pipeline itself")
    p.add_argument("--work", type=Path, default=Path("/tmp/fc-train-pair"))
    p.add_argument("--scale", choices=("toy", "gpu"), default="gpu")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def join_parts(parts: Path) -> tuple[Path, Path]:
    """The parts joined and unpacked: (wheels folder, model folder)."""
    UNPACKED.mkdir(parents=True, exist_ok=True)
    joined = UNPACKED / "bundle.tar"
    with joined.open("wb") as out:
        for part in sorted(parts.glob("*/bundle.tar.part-*")):
            out.write(part.read_bytes())
    with tarfile.open(joined) as bundle:
        bundle.extractall(UNPACKED, filter="data")
    joined.unlink()
    return UNPACKED / "wheels", next(p.parent for p in (UNPACKED / "model").rglob("config.json"))


def inside(args: argparse.Namespace) -> int:
    """In the CUDA environment: the backend live, then the pipeline, then the copy to $OUT."""
    sys.path.insert(0, str(ROOT))
    import mlx.core as mx

    from engine_mlx.backend import live_device

    print(f"MLX {mx.__version__}, default device {mx.default_device()}, live: {live_device()}")
    if args.scale == "gpu" and live_device() != "cuda":
        print("MLX's CUDA backend is not live: stopping.")
        return 2
    out = Path(os.environ.get("OUT", "/tmp/fc-out")) / "pair"
    log = args.work / "train_pair.log"
    args.work.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "engine_mlx", "train-pair", "--model", str(args.model),
           "--work", str(args.work), "--out", str(args.work / "export"), "--scale", args.scale,
           "--budget-s", str(args.budget_s)]  # fmt: skip
    with log.open("a") as sink:
        status = subprocess.run(cmd, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT).returncode
    print(log.read_text()[-4000:])
    if status != 0:
        return status
    shutil.copytree(args.work / "export", out, dirs_exist_ok=True)
    shutil.copy2(log, out / log.name)
    print(f"pair in {out}")
    return 0


def main() -> int:
    args = parse_args()
    if args.inside:
        return inside(args)
    os.chdir(ROOT)
    if args.parts is not None:
        wheels, model = join_parts(args.parts)
        args.wheels, args.model = args.wheels or str(wheels), args.model or model
    if args.model is None:
        print("name the target: --parts (from gpu_parts.sh) or --model FOLDER")
        return 2
    python = gpu_env.install(Path(args.venv), args.wheels, args.cuda)
    forwarded = [a for a in sys.argv[1:] if a != "--inside"]
    forwarded = [*forwarded, "--model", str(args.model)]
    return subprocess.run(
        [str(python), str(Path(__file__).resolve()), "--inside", *forwarded]
    ).returncode


if __name__ == "__main__":
    sys.exit(main())
