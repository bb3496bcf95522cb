"""Sampled speculative decoding on a real model, at the app's default sampling, draws every
token from plain sampling's distribution: a powered check of what
``test_exact_losslessness`` proves, on the real path (model, shipped drafter, trees, penalty).

Each seed's speculative reply is compared, token by token, with plain sampling's exact
conditional distribution given that reply's own prefix (``tests/support/distribution.py``):
against exact expectations rather than a second noisy sample, 400 seeds detect a shift of
10 percentage points in a token's frequency (``tests/support/test_statistics.py``). Seeds
are fixed: the suite never turns red by chance; p < 0.01 at any of six positions fails it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.settings import AppSettings
from engine_mlx.api import load_speculators
from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session
from tests.support.distribution import position_p_values, sample_replies

PROMPT = "The capital of France is"
POSITIONS = 6
SEEDS = range(1000, 1400)
DEFAULTS = AppSettings()
APP_SAMPLING = SamplingParams(
    temperature=DEFAULTS.temperature,
    top_k=DEFAULTS.top_k,
    top_p=DEFAULTS.top_p,
    repetition_penalty=DEFAULTS.repetition_penalty,
)


def _check(folder: Path, mode: str, width: int, min_accepted: int) -> None:
    """``min_accepted``: the drafts accepted over all seeds that show the speculative path
    was walked (sampled at 0.7 the Qwen drafter is accepted 0.75 times a reply, and auto
    then decodes mostly plainly)."""
    target = TargetModel.load(folder)
    spec = load_speculators(target)
    session = Session(target, spec.drafter, spec.mtp, reuse_prompt=True)
    prompt = target.tokenizer.encode(PROMPT)
    replies, accepted = sample_replies(
        session, prompt, SEEDS, POSITIONS, mode=mode, width=width, sampling=APP_SAMPLING
    )
    p_values = position_p_values(target, prompt, replies, APP_SAMPLING)
    print(f"{folder.name} {mode} width {width}: accepted {accepted}, p", p_values)
    assert min(p_values) > 0.01, [round(p, 4) for p in p_values]
    assert accepted >= min_accepted


@pytest.mark.slow
def test_smollm2_dflash2_samples_plain_samplings_distribution(smollm2_dir):
    _check(smollm2_dir, "dflash2", 3, min_accepted=len(SEEDS))


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("FLASHCHAT_QWEN_DISTRIBUTION") != "1",
    reason="~10 min on a 2-core CPU: FLASHCHAT_QWEN_DISTRIBUTION=1 runs it",
)
@pytest.mark.parametrize(("mode", "width", "min_accepted"), [("dflash2", 3, 200), ("auto", 2, 1)])
def test_the_qwen_demo_samples_plain_samplings_distribution(qwen_dir, mode, width, min_accepted):
    _check(qwen_dir, mode, width, min_accepted)
