"""Run under ``mlx.launch`` by ``test_pipeline``: rank 0 writes the replies of every case
(``CASES``) as JSON; the other ranks serve their layers. Imported by the test too, which runs
the same cases in one process."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from engine_mlx.api import load_drafter, load_mtp_drafter, load_speculators, load_target
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.events import Error, Finished
from engine_mlx.session import Session

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
NEXT_TURN = " jumps again, and the lazy dog"  # a prompt that extends the kept one

# (name, mode, width, seed or None for greedy): every mode and width, and sampled ones with
# one seed (the pipeline has one sampler, rank 0's, so a seed gives the same tokens).
CASES: list[tuple[str, str, int, int | None]] = [
    ("ar", "ar", 1, None),
    ("dflash2", "dflash2", 1, None),
    ("dflash2-w3", "dflash2", 3, None),
    ("mtp", "mtp", 1, None),
    ("lookup", "lookup", 1, None),
    ("auto", "auto", 1, None),
    ("ar-sampled", "ar", 1, 7),
    ("dflash2-sampled", "dflash2", 3, 7),
    ("mtp-sampled", "mtp", 1, 7),
]


def run_cases(session: Session, names: list[str] | None = None) -> dict[str, Any]:
    """Each case's tokens (those in ``names``, or all), then the next turn's over the kept
    prefill (greedy, auto)."""
    ids = session.target.tokenizer.encode(PROMPT)
    out: dict[str, Any] = {}
    for name, mode, width, seed in CASES:
        if names is not None and name not in names:
            continue
        sampling = SamplingParams() if seed is None else SamplingParams(0.8, seed=seed)
        config = GenerationConfig(
            max_tokens=20, mode=mode, width=width, ignore_eos=True, sampling=sampling
        )
        out[name] = _tokens(session, ids, config)
    longer = ids + session.target.tokenizer.encode(NEXT_TURN)
    out["next-turn"] = _tokens(session, longer, GenerationConfig(max_tokens=12, mode="auto"))
    return out


def _tokens(session: Session, ids: list[int], config: GenerationConfig) -> list[int] | str:
    last = list(session.generate(ids, config))[-1]
    if isinstance(last, Error):
        return f"error: {last.message}"
    assert isinstance(last, Finished)
    return list(last.tokens)


def session_for(model: Path, drafter: Path | None, mtp: Path | None) -> Session:
    """The target with the drafter and MTP head named, or (None) the ones shipped for it."""
    target = load_target(model)
    if drafter is None:
        spec = load_speculators(target)
        return Session(target, spec.drafter, spec.mtp, spec.mtp_reason, reuse_prompt=True)
    head, reason = load_mtp_drafter(target, mtp)
    return Session(target, load_drafter(drafter, target), head, reason, reuse_prompt=True)


def main(argv: list[str]) -> int:
    from engine_mlx.distributed.launch import join, leave, run_stage

    model, drafter, mtp, out = (None if a == "-" else Path(a) for a in argv[:4])
    names = argv[4].split(",") if len(argv) > 4 else None
    pipeline = join()
    assert pipeline is not None, "run me with mlx.launch -n 2 or more"
    if pipeline.rank > 0:
        return run_stage("generate", model, pipeline)
    try:
        replies = run_cases(session_for(model, drafter, mtp), names)
        out.write_text(json.dumps(replies))
    finally:
        leave()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
