"""Time to first token on turns 2 and 3 of a long thinking conversation, with the kept
prefill's common prefix reused and without (the earlier rule: reuse only a kept prompt that
the new one extends), side by side in one run.

    .venv/bin/python scripts/bench_thinking_turns.py [--layers 12] [--document-chars 6000]

No real thinking model installs offline, so the target is a random-weight Qwen3 of the given
size with a Qwen3.5-style template (the generation prompt opens ``<think>``; earlier turns
lose their reasoning): speed depends on the shapes, not the weights. Greedy, plain decoding,
a 24-token thinking budget, 48 tokens a reply.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine_mlx  # noqa: F401  (the BLAS before mlx)
from engine_mlx.api import encode_prompt
from engine_mlx.bench.measure import machine_description
from engine_mlx.config import GenerationConfig
from engine_mlx.events import Finished
from engine_mlx.models.target import TargetModel
from engine_mlx.prompt_cache import PrefilledPrompt
from engine_mlx.session import Session
from tests.support.tiny_models import build_tiny_model

QUESTIONS = ["Summarise the document.", "Which part matters most?", "Say it in one line."]


def conversation(target: TargetModel, document: str, lcp: bool) -> list[tuple[float, int]]:
    """(TTFT, reused prompt tokens) per turn."""
    original = PrefilledPrompt.common_prefix
    if not lcp:
        PrefilledPrompt.common_prefix = lambda self, prompt, capture: 0  # type: ignore[method-assign]
    try:
        session = Session(target, reuse_prompt=True)
        history: list[dict[str, str]] = []
        out = []
        for n, question in enumerate(QUESTIONS):
            content = f"{document}\n\n{question}" if n == 0 else question
            history.append({"role": "user", "content": content})
            config = GenerationConfig(max_tokens=48, ignore_eos=True, thinking_budget=24)
            events = list(session.generate(encode_prompt(target, history), config))
            finished = next(e for e in events if isinstance(e, Finished))
            history.append({"role": "assistant", "content": finished.text})
            out.append((finished.stats.ttft_s, finished.stats.reused_prompt_tokens))
        return out
    finally:
        PrefilledPrompt.common_prefix = original  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--document-chars", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp()) / "thinker"
    sizes = {
        "hidden_size": args.hidden,
        "intermediate_size": args.hidden * 11 // 4,
        "num_hidden_layers": args.layers,
        "num_attention_heads": args.hidden // 64,
        "num_key_value_heads": max(1, args.hidden // 256),
        "head_dim": 64,
    }
    build_tiny_model("qwen3", folder, thinking="qwen3_5", max_context=8192, sizes=sizes)
    target = TargetModel.load(folder)
    words = "the quick brown fox jumps over the lazy dog and drafts tokens for verification "
    document = (words * (args.document_chars // len(words) + 1))[: args.document_chars]
    print(f"# {machine_description()}; random Qwen3, {args.layers} layers, hidden {args.hidden}")
    conversation(target, document[:200], lcp=True)  # warm-up
    for _ in range(args.rounds):  # interleaved
        for lcp in (False, True):
            turns = conversation(target, document, lcp)
            cells = "  ".join(
                f"turn {i + 1}: {t * 1000:6.0f} ms ({r} reused)" for i, (t, r) in enumerate(turns)
            )
            print(f"{'common prefix' if lcp else 'exact prefix '}  {cells}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
