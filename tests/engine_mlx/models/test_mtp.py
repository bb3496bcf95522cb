"""MTP heads: built-in (Qwen3.5 layout) and separate-file heads load, draft losslessly, and a
missing or misshapen head is reported unavailable while auto mode runs without it."""

from __future__ import annotations

from itertools import product

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.mtp_drafter import MTPDrafter
from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.events import Error, Tokens
from engine_mlx.models.mtp import MTPUnavailable, load_mtp, save_mtp
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session
from tests.support.distribution import position_p_values, sample_replies
from tests.support.drafters import random_mtp_head, write_builtin_mtp
from tests.support.params import slow_except
from tests.support.tiny_models import build_tiny_model

PROMPT = "Hello world, the quick brown fox"


@pytest.fixture(scope="module")
def qwen35_with_mtp(tmp_path_factory):
    """A tiny qwen3_5 whose checkpoint carries mtp.* weights, and the head written into it."""
    path = build_tiny_model("qwen3_5", tmp_path_factory.mktemp("q35mtp"))
    head = random_mtp_head(TargetModel.load(path))
    write_builtin_mtp(TargetModel.load(path), head)
    return TargetModel.load(path), head


def _plain(target, ids, n, **kw):
    cfg = GenerationConfig(max_tokens=n, ignore_eos=True, **kw)
    return list(Session(target).generate(ids, cfg))[-1].tokens


def test_builtin_head_loads_with_zero_centred_norms(qwen35_with_mtp):
    target, written = qwen35_with_mtp
    loaded = load_mtp(target)
    ours, theirs = dict(tree_flatten(loaded.parameters())), dict(tree_flatten(written.parameters()))
    assert ours.keys() == theirs.keys()
    assert all(mx.allclose(ours[k], theirs[k], atol=1e-6) for k in ours)


@pytest.mark.parametrize(
    ("hidden", "steps"), slow_except(product(("post", "pre"), (1, 3)), ("post", 1), ("pre", 3))
)
def test_mtp_greedy_equals_plain_on_hybrid(qwen35_with_mtp, steps, hidden):
    target, _ = qwen35_with_mtp
    ids = target.tokenizer.encode(PROMPT)
    session = Session(target, mtp=MTPDrafter(load_mtp(target), target, steps, hidden))
    cfg = GenerationConfig(max_tokens=30, mode="mtp", mtp_steps=steps, ignore_eos=True)
    events = list(session.generate(ids, cfg))
    assert events[-1].tokens == _plain(target, ids, 30)
    drafted = [e.step.drafted for e in events if isinstance(e, Tokens)][1:]
    assert max(drafted) == steps


def test_separate_file_head_on_llama(tiny_target, tmp_path):
    target = tiny_target("llama")
    file = save_mtp(random_mtp_head(target, seed=2), tmp_path / "mtp.safetensors")
    drafter = MTPDrafter(load_mtp(target, file), target, steps=2)
    ids = target.tokenizer.encode(PROMPT)
    cfg = GenerationConfig(max_tokens=40, mode="mtp", mtp_steps=2, ignore_eos=True)
    finished = list(Session(target, mtp=drafter).generate(ids, cfg))[-1]
    assert finished.tokens == _plain(target, ids, 40)
    assert finished.stats.drafted > 0 and finished.stats.modes == {"mtp": finished.stats.steps}


def test_a_head_drafts_the_length_its_file_recommends(tiny_target, tmp_path):
    """A file's ``draft_steps`` is the default draft length (a config's ``mtp_steps`` still
    overrides it); a value out of range is refused with the file's name."""
    target = tiny_target("llama")
    head = random_mtp_head(target, seed=2)
    head.draft_steps = 1
    file = save_mtp(head, tmp_path / "mtp.safetensors")
    drafter = MTPDrafter(load_mtp(target, file), target)
    assert drafter.block_size == 2
    assert MTPDrafter(load_mtp(target, file), target, steps=3).block_size == 4
    ids = target.tokenizer.encode(PROMPT)
    session = Session(target, mtp=drafter)
    for steps, most in ((None, 1), (2, 2)):
        cfg = GenerationConfig(max_tokens=30, mode="mtp", mtp_steps=steps, ignore_eos=True)
        finished = list(session.generate(ids, cfg))[-1]
        assert finished.tokens == _plain(target, ids, 30)
        assert finished.stats.drafted <= most * finished.stats.steps
        assert finished.stats.drafted > (most - 1) * finished.stats.steps
    weights, meta = mx.load(str(file), return_metadata=True)
    mx.save_safetensors(str(file), weights, metadata={**meta, "draft_steps": "7"})
    with pytest.raises(MTPUnavailable, match=r"mtp\.safetensors: its draft_steps \('7'\)"):
        load_mtp(target, file)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["qwen3_5", "llama"])
def test_sampled_mtp_matches_plain_sampling_in_distribution(arch, tmp_path):
    """qwen3_5 with a built-in head, llama with a separate file; a 12-token vocabulary."""
    path = build_tiny_model(arch, tmp_path / "v12", vocab_size=12, seed=3)
    target = TargetModel.load(path)
    head = random_mtp_head(target, seed=4)
    if arch == "qwen3_5":
        write_builtin_mtp(target, head)
        target = TargetModel.load(path)
        head = load_mtp(target)
    else:
        head = load_mtp(target, save_mtp(head, tmp_path / "mtp.safetensors"))
    session = Session(target, mtp=MTPDrafter(head, target, steps=2))
    prompt, params = [3, 5, 7, 3, 5], SamplingParams(temperature=0.6)
    replies, accepted = sample_replies(
        session, prompt, range(5000, 5250), 3, mode="mtp", mtp_steps=2, sampling=params
    )
    p_values = position_p_values(target, prompt, replies, params)
    assert min(p_values) > 1e-3, p_values
    assert accepted > 0


def test_head_with_a_draft_vocabulary_drafts_from_it_losslessly(tiny_target, tmp_path):
    """A head file carrying ``draft_vocab`` proposes only its tokens and the context's; the
    output stays the target's own."""
    target = tiny_target("llama")
    frequent = np.arange(150, 320, 4, dtype=np.int32)  # ids unlike their column numbers
    file = save_mtp(random_mtp_head(target, seed=2), tmp_path / "mtp.safetensors", None, frequent)
    head = load_mtp(target, file)
    assert head.draft_vocab.tolist() == frequent.tolist()
    whole = load_mtp(target, file)
    whole.draft_vocab = None  # the same head, drafting from the whole vocabulary
    full, sub = MTPDrafter(whole, target, 3), MTPDrafter(head, target, 3)
    ids = target.tokenizer.encode(PROMPT)
    out = target.forward(mx.array(ids), target.make_cache(), capture=sub.capture_layers)
    for drafter in (full, sub):
        drafter.observe(ids, out.features)
    allowed = np.array(sorted(set(frequent.tolist()) | set(ids)))
    block = sub.propose(ids[-1], 3, top_k=4)
    assert set(block.tokens.ravel().tolist()) <= set(allowed.tolist())
    # its first draft is the full head's best allowed token
    first = np.array(full.propose(ids[-1], 1, top_k=320).tokens[0])
    assert block.tokens[0, 0] == next(t for t in first if t in set(allowed.tolist()))
    cfg = GenerationConfig(max_tokens=40, mode="mtp", mtp_steps=3, ignore_eos=True)
    sub.reset()
    finished = list(Session(target, mtp=sub).generate(ids, cfg))[-1]
    assert finished.tokens == _plain(target, ids, 40)
    assert finished.stats.drafted > 0
    weights = dict(mx.load(str(file)))
    weights["draft_vocab"] = mx.array([3, 999])
    mx.save_safetensors(str(file), weights)
    with pytest.raises(MTPUnavailable, match="draft_vocab is not of a 320-token model"):
        load_mtp(target, file)


def test_missing_and_misshapen_heads_are_unavailable(tiny_target, tmp_path):
    target = tiny_target("llama")
    with pytest.raises(MTPUnavailable, match="no mtp"):
        load_mtp(target)
    with pytest.raises(MTPUnavailable, match="does not exist"):
        load_mtp(target, tmp_path / "nope.safetensors")
    bad = save_mtp(random_mtp_head(tiny_target("qwen3")), tmp_path / "bad.safetensors")
    weights = dict(mx.load(str(bad)))
    weights["mtp.fc.weight"] = mx.zeros((64, 32))
    mx.save_safetensors(str(bad), weights)
    with pytest.raises(MTPUnavailable, match=r"mtp\.fc\.weight has shape \(64, 32\)"):
        load_mtp(target, bad)


def test_auto_runs_without_mtp_and_reports_why(tiny_target):
    target = tiny_target("llama")
    session = Session(target, mtp=None, mtp_unavailable="llama has no mtp.* weights")
    assert "mtp" not in session.auto_modes
    events = list(session.generate([5, 6, 7], GenerationConfig(max_tokens=5, mode="mtp")))
    assert isinstance(events[0], Error) and "llama has no mtp.* weights" in events[0].message
    auto = list(session.generate([5, 6, 7], GenerationConfig(max_tokens=5, mode="auto")))
    assert auto[-1].reason in ("max_tokens", "eos")


def test_auto_switches_to_mtp_past_the_threshold(qwen35_with_mtp):
    target, _ = qwen35_with_mtp
    ids = target.tokenizer.encode(PROMPT)
    session = Session(target, mtp=MTPDrafter(load_mtp(target), target, steps=2))
    cfg = GenerationConfig(
        max_tokens=40,
        mode="auto",
        policy="threshold",
        auto_threshold=len(ids) + 10,
        ignore_eos=True,
    )
    events = list(session.generate(ids, cfg))
    modes = {e.step.mode for e in events if isinstance(e, Tokens)}
    assert modes == {"lookup", "mtp"}
    assert events[-1].tokens == _plain(target, ids, 40)
