"""Greedy replies of a quantized model with int8 activations against float activations.

    .venv/bin/python scripts/compare_quant_activations.py MODEL [--max-tokens 64]

On AVX-512 VNNI and AVX2 machines the quantized product rounds activations to int8 per group
(engine_mlx/cpu/quant_gemm.c); FLASHCHAT_QUANT_ACTIVATIONS=float keeps them float, which is
MLX's own quantized arithmetic within float rounding. For each held-out prompt this prints how
many leading tokens the two greedy replies share, and where they part, the two continuations.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine_mlx  # noqa: F401  (the BLAS before mlx is used)
from engine_mlx.api import encode_prompt
from engine_mlx.config import GenerationConfig
from engine_mlx.cpu import quantized_product
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session
from engine_mlx.training.heldout import load_heldout


def replies(model: Path, activations: str, max_tokens: int) -> dict[str, tuple[int, ...]]:
    os.environ[quantized_product.ACTIVATIONS_SWITCH] = activations
    target = TargetModel.load(model)
    session = Session(target)
    out = {}
    for prompt in load_heldout():
        ids = encode_prompt(target, list(prompt.messages))
        config = GenerationConfig(max_tokens=max_tokens, ignore_eos=False)
        out[prompt.id] = list(session.generate(ids, config))[-1].tokens
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", type=Path)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    rounded = replies(args.model, "int8", args.max_tokens)
    exact = replies(args.model, "float", args.max_tokens)
    tokenizer = TargetModel.load(args.model).tokenizer
    same = 0
    for key, a in rounded.items():
        b = exact[key]
        shared = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        same += a == b
        line = f"{key:24} {shared:3}/{max(len(a), len(b)):3} tokens shared"
        if a != b:
            part = (tokenizer.decode(list(a[shared : shared + 8])),
                    tokenizer.decode(list(b[shared : shared + 8])))  # fmt: skip
            line += f"; int8 {part[0]!r} / float {part[1]!r}"
        print(line, flush=True)
    print(f"# {same}/{len(rounded)} replies identical ({args.max_tokens} tokens at most)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
