#!/usr/bin/env python3
"""The kernel check for a machine with an NVIDIA GPU (nothing here has run it yet).

1. Makes a virtual environment (default /tmp/fc-cuda-venv) that also sees the packages of
   the Python running this script (a GPU image's numpy, pytest, nvidia-* libraries) and
   installs MLX's CUDA build: ``mlx[cuda13]==0.32.4`` and ``mlx-lm==0.32.2`` from the package
   index, or, on a machine without network, from wheels in ``--wheels DIR`` (``mlx`` for the
   machine's Python, ``mlx-cuda-13`` or ``-12`` — about 86 MB — and ``mlx-lm``; installed with
   --no-deps, so the CUDA libraries it needs must be there already).
2. Checks that MLX's CUDA backend is live, then runs tests/engine_mlx/kernels with
   ``FLASHCHAT_REQUIRE_BACKEND=cuda``: every kernel test runs on the emulator and on CUDA, and a
   CUDA case that cannot run fails instead of skipping.
3. Times tree-verify attention (the kernel) against MLX's ``scaled_dot_product_attention``
   with the tree's boolean mask, Qwen3-8B's shapes (32 query heads, 8 KV heads, head dim 128,
   bf16), a chain of 16 nodes and a width-4 tree of 61, at cache lengths 1k..32k, and prints
   a table (median of ``--repeats`` timed calls after warm-up; max |difference|).
4. Generates end to end on a tiny target (head size 64) with a DFlash2 drafter (local
   convolution on), greedy, widths 1 and 3: kernels on (``FLASHCHAT_KERNELS`` unset: CUDA) and
   off (``=0``: MLX references), interleaved; prints whether the tokens are identical, tok/s of
   each, and ``stats.kernels`` (calls per kernel, and any fallback; K/V compaction runs only
   when an accepted path leaves the tree's first branch, rare with a random drafter).

Run from the repository root: ``python3 scripts/gpu_kernel_check.py [--wheels DIR]``.
Exit status: 0 when the tests pass and the backend is live.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_env  # beside this script

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--venv", default="/tmp/fc-cuda-venv", help="virtual environment to use")
    p.add_argument("--wheels", help="install offline from the wheels in this folder")
    p.add_argument("--cuda", choices=("12", "13"), default="13", help="MLX CUDA build")
    p.add_argument("--skip-install", action="store_true")
    p.add_argument("--skip-tests", action="store_true")
    p.add_argument("--lengths", default="1024,2048,4096,8192,16384,32768")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def install(args: argparse.Namespace) -> Path:
    return gpu_env.install(Path(args.venv), args.wheels, args.cuda, args.skip_install)


def inside(args: argparse.Namespace) -> int:
    """Runs in the venv: backend check, tests, timing table."""
    sys.path.insert(0, str(ROOT))
    import mlx.core as mx

    from engine_mlx.backend import live_device  # (its OpenBLAS preload matters on CPUs only)

    print(f"MLX {mx.__version__}, default device {mx.default_device()}, live: {live_device()}")
    if live_device() != "cuda":
        print("MLX's CUDA backend is not live: stopping.")
        return 2
    status = 0
    if not args.skip_tests:
        env = {**os.environ, "FLASHCHAT_REQUIRE_BACKEND": "cuda", "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider"]
        status = subprocess.run([*cmd, "tests/engine_mlx/kernels"], cwd=ROOT, env=env).returncode
        print(f"kernel tests: {'passed' if status == 0 else 'FAILED'}", flush=True)
    bench([int(n) for n in args.lengths.split(",")], args.repeats)
    same = end_to_end(on="1")
    return status or (0 if same else 1)


def bench(lengths: list[int], repeats: int) -> None:
    import mlx.core as mx
    import numpy as np

    from engine_mlx.decoding.tree import CandidateTree
    from engine_mlx.kernels import GpuExecutor, tree_attention

    executor = GpuExecutor("cuda")
    heads, kv_heads, dim, dtype = 32, 8, 128, mx.bfloat16
    scale = dim**-0.5

    def timed(fn) -> float:
        for _ in range(3):
            mx.eval(fn())
        mx.synchronize()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            mx.eval(fn())
            mx.synchronize()
            samples.append(time.perf_counter() - t0)
        return 1e3 * float(np.median(samples))

    trees = {}
    chain = CandidateTree.rooted(1)
    for token in range(2, 17):
        chain.add(len(chain) - 1, token)
    trees["chain 16"] = chain
    wide = CandidateTree.rooted(1)
    for branch in range(4):
        node = 0
        for i in range(15):
            node = wide.add(node, 1000 * (branch + 1) + i)
    trees["tree 61 (w4)"] = wide

    rng = np.random.default_rng(0)
    print()
    print(f"tree-verify attention, H={heads} KV={kv_heads} D={dim} bf16, ms (median of {repeats})")
    header = f"{'cache':>7} | {'queries':>12} | {'sdpa+mask':>9} | {'kernel':>8} | {'speed-up':>8}"
    print(header + " | max |diff|")
    print("-" * (len(header) + 13))
    for n_cache in lengths:
        for label, tree in trees.items():
            nodes = len(tree)
            n = n_cache + nodes
            q = mx.array(rng.standard_normal((1, heads, nodes, dim), dtype=np.float32)).astype(
                dtype
            )
            cap = n + 256  # a cache buffer with spare room, read through a view as the engine does
            k = mx.array(rng.standard_normal((1, kv_heads, cap, dim), dtype=np.float32))
            v = mx.array(rng.standard_normal((1, kv_heads, cap, dim), dtype=np.float32))
            k, v = k.astype(dtype)[..., :n, :], v.astype(dtype)[..., :n, :]
            full = mx.array(
                np.concatenate([np.ones((nodes, n_cache), bool), tree.ancestor_mask()], axis=1)
            )
            tree_mask = mx.array(tree.ancestor_mask())
            mx.eval(q, k, v, full, tree_mask)

            def sdpa(q=q, k=k, v=v, full=full):
                return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=full)

            def ours(q=q, k=k, v=v, tree_mask=tree_mask):
                return tree_attention.kernel(q, k, v, tree_mask, scale, executor)

            diff = mx.abs(ours().astype(mx.float32) - sdpa().astype(mx.float32)).max().item()
            t_ref, t_ours = timed(sdpa), timed(ours)
            print(
                f"{n_cache:>7} | {label:>12} | {t_ref:>9.3f} | {t_ours:>8.3f} | "
                f"{t_ref / t_ours:>7.2f}x | {diff:.2e}",
                flush=True,
            )


def end_to_end(on: str, tokens: int = 64) -> bool:
    """Kernels ``on`` (``FLASHCHAT_KERNELS`` value: "1" on a GPU, "emulate" to try this on a
    CPU) against the references, on a tiny model; True when every run's tokens match."""
    import tempfile

    from engine_mlx.config import GenerationConfig
    from engine_mlx.decoding.dflash_drafter import DFlashDrafter
    from engine_mlx.models.target import TargetModel
    from engine_mlx.session import Session
    from tests.support.drafters import random_dflash
    from tests.support.tiny_models import build_tiny_model

    folder = build_tiny_model("qwen3", Path(tempfile.mkdtemp()), head_dim=64, max_context=2048)
    target = TargetModel.load(folder)
    drafter = random_dflash(target, conv=4)
    drafter.eval()
    session = Session(target, DFlashDrafter(drafter, target))
    ids = target.tokenizer.encode("Hello world, the quick brown fox")
    print(f"\nend to end, tiny qwen3 (head size 64), DFlash2 + local conv, {tokens} tokens")
    same = True
    for width in (1, 3):
        results = {}
        for setting in ("0", on, "0", on):  # interleaved; the second of each is reported
            os.environ["FLASHCHAT_KERNELS"] = setting
            config = GenerationConfig(
                max_tokens=tokens, mode="dflash2", width=width, lookup=False, ignore_eos=True
            )
            results[setting] = list(session.generate(ids, config))[-1]
        os.environ.pop("FLASHCHAT_KERNELS", None)
        ref, ker = results["0"], results[on]
        match = ref.tokens == ker.tokens
        same &= match
        print(
            f"width {width}: tokens identical {match}; decode {ker.stats.decode_tps:.1f} tok/s "
            f"with kernels vs {ref.stats.decode_tps:.1f} without "
            f"({ker.stats.decode_tps / max(ref.stats.decode_tps, 1e-9):.2f}x); "
            f"kernels {ker.stats.kernels}",
            flush=True,
        )
    return same


def main() -> int:
    args = parse_args()
    if args.inside:
        return inside(args)
    os.chdir(ROOT)
    python = install(args)
    forwarded = [a for a in sys.argv[1:] if a != "--inside"]
    return subprocess.run(
        [str(python), str(Path(__file__).resolve()), "--inside", *forwarded]
    ).returncode


if __name__ == "__main__":
    sys.exit(main())
