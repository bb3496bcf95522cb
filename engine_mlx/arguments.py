"""The command-line flags the CLI and the benchmarks share, and what they mean for the engine.

Its own module so ``cli`` and ``bench`` both import it and neither imports the other.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from engine_mlx import compute_path
from engine_mlx.api import Speculators, load_speculators
from engine_mlx.config import POLICIES, GenerationConfig
from engine_mlx.errors import EngineError
from engine_mlx.models.target import TargetModel
from engine_mlx.modes import Mode, parse_mode


def add_sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temp", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--repetition-penalty",
        type=float,
        default=1.0,
        help="above 1 discourages tokens already in the context, as in Hugging Face "
        "(Qwen2.5 recommends 1.05); 1 = off",
    )


def add_path(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--path",
        choices=("auto", *compute_path.PATHS),
        default=None,
        help="gpu: on the CPU, take every decision a Mac's GPU takes (the checkpoint's dtype, "
        "MLX's own products, the kernels in the emulator); auto: the device's own "
        f"(default: ${compute_path.PATH_SWITCH}, else auto)",
    )


def apply_path(args: argparse.Namespace) -> None:
    """``--path`` sets ``FLASHCHAT_PATH`` for this process before any model loads; a bad value
    of the variable itself is refused with the values it takes."""
    if getattr(args, "path", None):
        os.environ[compute_path.PATH_SWITCH] = args.path
    try:
        compute_path.requested()
    except ValueError as exc:
        raise EngineError(str(exc)) from exc


def add_speculation(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--drafter", type=Path, default=None, help="DFlash drafter folder, or a drafter .gguf"
    )
    p.add_argument("--width", type=int, default=1, help="candidate paths per step (1-8)")
    p.add_argument("--block", type=int, default=None, help="draft block size (default: drafter's)")
    p.add_argument(
        "--no-lookup", action="store_true", help="no prompt-lookup candidates in the tree"
    )
    p.add_argument(
        "--mtp", default=None, help="MTP head: a separate .safetensors file (default: built-in)"
    )
    p.add_argument(
        "--mtp-steps",
        type=int,
        default=None,
        help="tokens the MTP head drafts (1-4; default: what its file recommends, else 3)",
    )
    p.add_argument(
        "--no-companions",
        action="store_true",
        help="do not use the drafter and MTP head shipped for the demo model",
    )
    p.add_argument(
        "--mtp-hidden",
        default=None,
        choices=["post", "pre"],
        help="target state fed to the MTP head: after or before the final norm (default: what "
        "the head was trained on, else post)",
    )
    p.add_argument(
        "--policy",
        default="expected",
        choices=list(POLICIES),
        help="auto mode: expected tokens/s per step (expected) or a fixed context threshold "
        "(threshold)",
    )
    p.add_argument(
        "--auto-threshold",
        type=int,
        default=4096,
        help="threshold policy: context tokens from which plain decoding is used",
    )


def config_from_args(args: argparse.Namespace, **fields) -> GenerationConfig:
    """The GenerationConfig the speculation flags (``add_speculation``) describe."""
    if "max_tokens" not in fields:
        fields["max_tokens"] = args.max_tokens
    return GenerationConfig(
        width=args.width,
        block_size=args.block,
        lookup=not args.no_lookup,
        policy=args.policy,
        auto_threshold=args.auto_threshold,
        mtp_steps=args.mtp_steps,
        **fields,
    )


def speculators_from_args(args: argparse.Namespace, target: TargetModel) -> Speculators:
    """The drafter and MTP head the speculation flags (``add_speculation``) ask for."""
    return load_speculators(
        target,
        args.drafter,
        args.mtp,
        mtp_steps=args.mtp_steps,
        mtp_hidden=args.mtp_hidden,
        companions=not args.no_companions,
    )


def resolve_model(model: Path | None) -> Path:
    """The model folder a ``--model`` flag names; the demo model (imported on first use)
    when it names none."""
    if model is not None:
        return model
    from engine_mlx.demo import ensure_demo_model  # imports the demo only when needed

    return ensure_demo_model()


def parse_modes(text: str) -> list[Mode]:
    """A comma list of mode ids (``--modes``), each checked."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if parse_mode(m) is None]
    if unknown:
        available = ", ".join(m.value for m in Mode)
        raise EngineError(f"unknown mode(s) {unknown}; available: {available}")
    return [Mode(m) for m in names]
