"""The pair shipped for the demo model: used by default, refused for other targets, off on
request, and lossless on the real SmolLM2."""

from __future__ import annotations

import pytest

from engine_mlx.api import load_speculators
from engine_mlx.companions import NO_DRAFTER, shipped_companions
from engine_mlx.config import GenerationConfig
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session


def test_other_targets_get_no_shipped_pair(tiny_target):
    target = tiny_target("llama")
    assert shipped_companions(target.spec).drafter is None
    assert load_speculators(target).drafter is None


@pytest.mark.slow
def test_demo_model_drafts_losslessly_with_the_shipped_pair(smollm2_dir):
    target = TargetModel.load(smollm2_dir)
    shipped = shipped_companions(target.spec)
    assert shipped.drafter is not None and shipped.mtp is not None
    spec = load_speculators(target)
    assert spec.drafter is not None and spec.mtp_source == "shipped head"
    assert load_speculators(target, NO_DRAFTER).drafter is None
    ids = target.tokenizer.encode("Solve: a box holds 12 pens. How many pens are in 7 boxes?")
    session = Session(target, spec.drafter, spec.mtp, reuse_prompt=True)

    def run(mode: str, width: int = 1):
        config = GenerationConfig(max_tokens=40, ignore_eos=True, mode=mode, width=width)
        return list(session.generate(ids, config))[-1]

    plain = run("ar")
    for mode, width in (("dflash2", 1), ("dflash2", 4), ("mtp", 1)):
        result = run(mode, width)
        assert result.tokens == plain.tokens, mode
        assert result.stats.tau > 1.0, mode  # a trained pair drafts tokens the target keeps
