"""The pairs shipped for the bundled models: used by default, refused for other targets, off
on request, and lossless on the real Qwen2.5-Coder-0.5B-Instruct and SmolLM2."""

from __future__ import annotations

import pytest

from engine_mlx.api import encode_prompt, load_speculators
from engine_mlx.companions import COMPANIONS_DIR, NO_DRAFTER, shipped_companions
from engine_mlx.config import GenerationConfig
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session


def test_other_targets_get_no_shipped_pair(tiny_target):
    target = tiny_target("llama")
    assert shipped_companions(target.spec).drafter is None
    assert load_speculators(target).drafter is None


def _drafts_losslessly(folder, prompt: str, widths: tuple[int, ...]) -> None:
    """The shipped pair is found and used by default, and every speculative mode returns the
    plain-greedy tokens while keeping drafted tokens."""
    target = TargetModel.load(folder)
    shipped = shipped_companions(target.spec)
    assert shipped.drafter is not None and shipped.mtp is not None
    spec = load_speculators(target)
    assert spec.drafter is not None and spec.mtp_source == "shipped head"
    assert load_speculators(target, NO_DRAFTER).drafter is None
    ids = encode_prompt(target, prompt)
    session = Session(target, spec.drafter, spec.mtp, reuse_prompt=True)

    def run(mode: str, width: int = 1):
        config = GenerationConfig(max_tokens=40, ignore_eos=True, mode=mode, width=width)
        return list(session.generate(ids, config))[-1]

    plain = run("ar")
    for mode, width in [*(("dflash2", w) for w in widths), ("mtp", 1)]:
        result = run(mode, width)
        assert result.tokens == plain.tokens, (mode, width)
        assert result.stats.tau > 1.0, (mode, width)  # a trained pair drafts tokens kept


@pytest.mark.slow
def test_smollm2_drafts_losslessly_with_its_shipped_pair(smollm2_dir):
    _drafts_losslessly(
        smollm2_dir, "Solve: a box holds 12 pens. How many pens are in 7 boxes?", (1, 4)
    )


@pytest.mark.slow
def test_the_qwen_demo_drafts_losslessly_with_its_shipped_pair(qwen_dir):
    # widths 1 and 2 are the drafter's best; the MTP head drafts one token (its file says so)
    prompt = "Write a Python function that reverses a string."
    _drafts_losslessly(qwen_dir, prompt, (1, 2))


@pytest.mark.slow
def test_the_4_bit_demo_keeps_the_demos_pair_and_drafts_losslessly(qwen_4bit_dir):
    prompt = "Write a Python function that reverses a string."
    _drafts_losslessly(qwen_4bit_dir, prompt, (1,))


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["smollm2_dir", "qwen_4bit_dir"])
def test_the_llama_cpp_format_drafters_beside_the_pairs_draft_losslessly(folder, request):
    """Each pair's drafter in llama.cpp's DFlash2 format (dynamic convolutions, selector) loads
    from beside the default and gives the plain-greedy tokens, keeping drafted ones."""
    target = TargetModel.load(request.getfixturevalue(folder))
    name = target.spec.name.removesuffix("-4bit")
    drafter = load_speculators(target, COMPANIONS_DIR / name / f"{name}-DFlash2-llamacpp").drafter
    assert drafter is not None and drafter.model.config.reference_dflash2
    ids = encode_prompt(target, "Write a Python function that reverses a string.")
    session = Session(target, drafter)
    plain = list(session.generate(ids, GenerationConfig(max_tokens=40, ignore_eos=True)))[-1]
    for width in (1, 3):
        config = GenerationConfig(max_tokens=40, ignore_eos=True, mode="dflash2", width=width)
        result = list(session.generate(ids, config))[-1]
        assert result.tokens == plain.tokens, width
        assert result.stats.tau > 1.0, width
