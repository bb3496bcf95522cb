"""Real generations through the kernels, as a Mac runs them: on the GPU path
(``FLASHCHAT_PATH=gpu``: float16 checkpoints, MLX's own products) every wired kernel of a
DFlash2 or MTP reply runs in the CPU emulator, and the tokens are plain decoding's;
``stats.kernels`` says which path ran and counts each kernel, so a silent fallback shows.
The forced-reference switch gives the same tokens."""

from __future__ import annotations

import mlx.core as mx
import pytest

from engine_mlx.compute_path import PATH_SWITCH
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.decoding.mtp_drafter import MTPDrafter
from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.kernels.launch import ENV_SWITCH
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session
from tests.support.drafters import OracleDrafter, random_dflash, random_mtp_head
from tests.support.tiny_models import build_tiny_model

PROMPT = "Hello world, the quick brown fox"


def _run(session: Session, ids: list[int], **kw):
    config = GenerationConfig(max_tokens=20, ignore_eos=True, **kw)
    return list(session.generate(ids, config))[-1]


@pytest.fixture(autouse=True)
def _gpu_path(monkeypatch):
    monkeypatch.setenv(PATH_SWITCH, "gpu")


@pytest.fixture(scope="module")
def wide_heads(tmp_path_factory):
    """Tiny float16 targets loaded on the GPU path; head size 64 (one the tree-verify kernel
    takes) unless asked otherwise."""
    built: dict[tuple[str, int | None], TargetModel] = {}

    def get(arch: str, head_dim: int | None = 64) -> TargetModel:
        if (arch, head_dim) not in built:
            folder = tmp_path_factory.mktemp(f"wide_{arch}")
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv(PATH_SWITCH, "gpu")
                model = build_tiny_model(arch, folder, head_dim=head_dim, dtype="float16")
                built[arch, head_dim] = TargetModel.load(model)
        return built[arch, head_dim]

    return get


@pytest.mark.slow  # the emulator runs every kernel launch as real threads: ~10 s each
@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen3_5"])
@pytest.mark.parametrize("conv", [0, 4])
def test_emulated_kernels_give_plain_greedy_tokens(arch, conv, wide_heads, monkeypatch):
    target = wide_heads(arch)
    assert target.dtype == mx.float16  # a Mac's half precision, through every kernel
    ids = target.tokenizer.encode(PROMPT)
    plain = _run(Session(target), ids)
    model = random_dflash(target, conv=conv)
    model.eval()  # inference, as a loaded drafter is
    session = Session(target, DFlashDrafter(model, target))
    monkeypatch.setenv(ENV_SWITCH, "emulate")
    for width in (1, 3):
        result = _run(session, ids, mode="dflash2", width=width, lookup=False)
        assert result.tokens == plain.tokens, width
        kernels = result.stats.kernels
        assert kernels["path"] == "emulated" and "fallbacks" not in kernels
        assert kernels["calls"]["acceptance"] >= 1
        assert kernels["calls"]["tree_attention"] >= 1  # the width-1 chain's verify too
        assert kernels["calls"]["candidate_topk"] >= 1 and kernels["calls"]["path_scores"] >= 1
        assert ("local_conv" in kernels["calls"]) == bool(conv)
    # Accepted paths off the tree's first branch move K/V rows (the hybrid replays instead):
    # an oracle drafter's tree of width 3 is accepted along such paths.
    oracle = _run(Session(target, OracleDrafter(target)), ids, mode="dflash2", width=3)
    assert oracle.tokens == plain.tokens
    if not target.is_hybrid:
        assert oracle.stats.kernels["calls"]["kv_compact"] >= 1
    monkeypatch.setenv(ENV_SWITCH, "0")
    forced = _run(session, ids, mode="dflash2", width=3, lookup=False)
    assert forced.tokens == plain.tokens
    assert forced.stats.kernels["path"] == "reference"


@pytest.mark.slow  # the emulator, as above
def test_emulated_mtp_gives_plain_greedy_tokens(wide_heads, monkeypatch):
    target = wide_heads("qwen3")
    ids = target.tokenizer.encode(PROMPT)
    plain = _run(Session(target), ids)
    session = Session(target, mtp=MTPDrafter(random_mtp_head(target), target, steps=3))
    monkeypatch.setenv(ENV_SWITCH, "emulate")
    result = _run(session, ids, mode="mtp")
    assert result.tokens == plain.tokens
    assert result.stats.kernels["calls"]["acceptance"] >= 1
    assert result.stats.kernels["calls"]["tree_attention"] >= 1
    assert result.stats.kernels["calls"]["path_scores"] >= 1
    penalty = SamplingParams(repetition_penalty=1.6)  # penalised logits into the kernel
    monkeypatch.setenv(ENV_SWITCH, "0")
    plain = _run(Session(target), ids, sampling=penalty)
    monkeypatch.setenv(ENV_SWITCH, "emulate")
    assert _run(session, ids, mode="mtp", sampling=penalty).tokens == plain.tokens


def test_head_sizes_the_kernel_does_not_take_show_as_fallbacks(wide_heads, monkeypatch):
    target = wide_heads("llama", head_dim=None)  # head size 16
    ids = target.tokenizer.encode(PROMPT)
    plain = _run(Session(target), ids)
    monkeypatch.setenv(ENV_SWITCH, "emulate")
    result = _run(Session(target, OracleDrafter(target)), ids, mode="dflash2", width=3)
    assert result.tokens == plain.tokens
    assert result.stats.kernels["fallbacks"]["tree_attention"] >= 1


def test_plain_decoding_reports_its_path(wide_heads, monkeypatch):
    target = wide_heads("llama")
    ids = target.tokenizer.encode(PROMPT)
    assert _run(Session(target), ids).stats.kernels == {"path": "emulated", "calls": {}}
    monkeypatch.setenv(ENV_SWITCH, "0")
    assert _run(Session(target), ids).stats.kernels == {"path": "reference", "calls": {}}
