"""Speculative decoding is lossless: greedy output equals plain greedy token for token, and
sampled output equals plain sampling in distribution, on every supported architecture."""

from __future__ import annotations

from itertools import pairwise, product

import mlx.core as mx
import pytest

from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.decoding.mtp_drafter import MTPDrafter
from engine_mlx.decoding.ngram import NGramIndex
from engine_mlx.decoding.sampling import Sampler, SamplingParams, penalise
from engine_mlx.decoding.selector import AcceptanceCalibrator
from engine_mlx.decoding.strategies import Speculative
from engine_mlx.models.target import TargetModel
from engine_mlx.modes import Mode
from engine_mlx.session import Session
from tests.support.auto_driver import drive_auto
from tests.support.distribution import position_p_values, sample_replies
from tests.support.drafters import OracleDrafter, random_dflash, random_mtp_head
from tests.support.params import slow_except
from tests.support.tiny_models import build_tiny_model

PROMPT = "Hello world, the quick brown fox"
SPEC_ARCHS = ("llama", "qwen3", "qwen3_5")


def _tokens(session: Session, ids: list[int], **kw) -> tuple[int, ...]:
    finished = list(session.generate(ids, GenerationConfig(ignore_eos=True, **kw)))[-1]
    assert finished.reason == "max_tokens", finished
    return finished.tokens


@pytest.mark.parametrize(
    ("conv", "arch"), slow_except(product((0, 4), SPEC_ARCHS), (0, "qwen3"), (4, "llama"))
)
def test_dflash2_greedy_equals_plain_greedy(arch, conv, tiny_target):
    target = tiny_target(arch)
    ids = target.tokenizer.encode(PROMPT)
    plain = _tokens(Session(target), ids, max_tokens=32)
    session = Session(target, DFlashDrafter(random_dflash(target, conv=conv), target))
    for width in (1, 2, 4):
        for lookup in (True, False):
            got = _tokens(session, ids, max_tokens=32, mode="dflash2", width=width, lookup=lookup)
            assert got == plain, (width, lookup)


@pytest.mark.parametrize("arch", SPEC_ARCHS)
def test_oracle_drafter_full_acceptance_and_bonus(arch, tiny_target):
    target = tiny_target(arch)
    ids = target.tokenizer.encode(PROMPT)
    plain = _tokens(Session(target), ids, max_tokens=30)
    oracle = OracleDrafter(target, block_size=5)
    for width in (1, 3):
        events = list(
            Session(target, oracle).generate(
                ids,
                GenerationConfig(
                    max_tokens=30, mode="dflash2", width=width, lookup=False, ignore_eos=True
                ),
            )
        )
        finished = events[-1]
        assert finished.tokens == plain
        steps = [e for e in events if type(e).__name__ == "Tokens"][1:]
        assert all("".join(t for t, _ in e.segments) == e.text for e in steps)
        assert any(flag for e in steps for _, flag in e.segments)  # drafted text is marked
        # The oracle is always right: every draft accepted, then the bonus token.
        assert all(e.step.accepted == e.step.committed - 1 for e in steps)
        assert all(e.step.committed == 5 for e in steps[:-1])  # 4 drafts + the bonus
        assert finished.stats.acceptance_rate == 1.0


def test_lookup_mode_is_lossless(tiny_target):
    for arch in SPEC_ARCHS:
        target = tiny_target(arch)
        ids = target.tokenizer.encode("one two three one two three one two")
        plain = _tokens(Session(target), ids, max_tokens=40)
        assert _tokens(Session(target), ids, max_tokens=40, mode="lookup", width=3) == plain


@pytest.mark.parametrize("arch", ["llama", "qwen3_5"])
def test_cache_after_each_step_equals_plain_cache(arch, tiny_target):
    """Compaction (and hybrid rollback) leave exactly the committed tokens' states."""
    target = tiny_target(arch)
    prompt = target.tokenizer.encode(PROMPT)
    drafter = DFlashDrafter(random_dflash(target, conv=4), target)
    cache = target.make_cache()
    strategy = Speculative(
        "dflash2",
        target,
        cache,
        Sampler(SamplingParams()),
        AcceptanceCalibrator(),
        drafter=drafter,
        width=4,
        block_size=5,
    )
    out = target.forward(mx.array(prompt), cache, capture=strategy.capture_layers)
    drafter.observe(prompt, out.features)
    strategy.begin(mx.argmax(out.logits[0, -1]))
    committed: list[int] = []
    widths = set()
    for _ in range(8):
        outcome = strategy.step(limit=100)
        committed += outcome.tokens
        widths.add(outcome.stats.width)
        ref_cache = target.make_cache()
        target.forward(mx.array(prompt + committed[:-1]), ref_cache)
        n = len(prompt) + len(committed) - 1
        assert target.cache_length(cache) == n
        for ours, theirs in zip(cache, ref_cache, strict=True):
            if hasattr(ours, "offset"):  # attention layer: the first n rows
                assert ours.offset == theirs.offset == n
                assert mx.allclose(ours.keys[..., :n, :], theirs.keys[..., :n, :], atol=1e-4)
                assert mx.allclose(ours.values[..., :n, :], theirs.values[..., :n, :], atol=1e-4)
            else:  # recurrent layer: conv state and recurrent state
                for a, b in zip(ours.cache, theirs.cache, strict=True):
                    assert mx.allclose(a, b, atol=1e-4)
    if arch == "llama":
        assert max(widths) > 1  # trees were really verified


@pytest.fixture(scope="module")
def tiny_vocab_target(tmp_path_factory) -> TargetModel:
    path = build_tiny_model("qwen3", tmp_path_factory.mktemp("vocab12"), vocab_size=12, seed=3)
    return TargetModel.load(path)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "width", "penalty"),  # auto: lengths and modes change
    [("dflash2", 1, 1.0), ("dflash2", 3, 1.0), ("auto", 1, 1.0), ("auto", 3, 1.0),
     ("dflash2", 3, 1.5)],
)  # fmt: skip
def test_sampled_distribution_matches_plain_sampling(
    mode, width, penalty, tiny_vocab_target, monkeypatch
):
    target = tiny_vocab_target
    prompt = [3, 5, 7, 3, 5]
    params = SamplingParams(temperature=0.6, top_k=8, repetition_penalty=penalty)
    session = Session(target, OracleDrafter(target, block_size=3))
    if mode == "auto":  # drive auto through mode and draft-length changes
        cheap = StepCosts({(n, 0): 0.05 for n in (1, 2, 4)})  # every node is worth it
        dear = StepCosts({(n, 0): 0.001 + 0.05 * n for n in (1, 2, 4)})
        drive_auto(
            monkeypatch,
            lambda k: cheap if k % 4 else dear,
            lambda k, current: Mode.AR if k % 4 == 0 else Mode.DFLASH2,
        )
    runs = 300
    replies, accepted = sample_replies(
        session, prompt, range(10_000, 10_000 + runs), 3, mode=mode, width=width, sampling=params
    )
    p_values = position_p_values(target, prompt, replies, params)
    assert min(p_values) > 1e-3, p_values
    # drafts were really accepted, not just rejected (auto also spends steps in plain decoding)
    assert accepted > (runs // 4 if mode == "dflash2" else runs // 30)


def test_a_look_is_judged_by_the_tokens_committed_after_it(tiny_target):
    """Auto's look at a mode that is not running drafts without verifying; once later steps
    (of any mode) commit the target's tokens, the look counts as verified evidence."""
    target = tiny_target("llama")
    ids = target.tokenizer.encode(PROMPT)
    plain = list(_tokens(Session(target), ids, max_tokens=8))
    oracle = OracleDrafter(target, block_size=5)
    oracle.observe(ids, [])
    calibrator, blind = AcceptanceCalibrator(), AcceptanceCalibrator()
    spec = Speculative(
        "dflash2",
        target,
        target.make_cache(),
        Sampler(SamplingParams()),
        calibrator,
        drafter=oracle,
        block_size=5,
    )
    spec.preview(plain[0])
    assert not spec.judge_preview(plain[1:3])  # every token so far was drafted: not decided
    assert spec.judge_preview(plain[1:])
    block = oracle.propose(plain[0], 4, top_k=1)
    for depth in range(1, 5):
        prob = float(block.probs[depth - 1][0])
        assert calibrator.estimate("dflash2", depth, prob) > blind.estimate("dflash2", depth, prob)
    assert spec.judge_preview(plain[1:])  # judged once: nothing left to judge


def test_lookup_scores_say_what_prompt_lookup_alone_would_propose(tiny_target):
    """Free to compute every step: auto asks it whether the context is being repeated."""
    target = tiny_target("llama")
    lookup = NGramIndex()

    def strategy(index: NGramIndex | None) -> Speculative:
        return Speculative(
            "dflash2",
            target,
            target.make_cache(),
            Sampler(SamplingParams()),
            AcceptanceCalibrator(),
            block_size=5,
            lookup=index,
        )

    lookup.extend([5, 6, 7, 8, 9, 10, 11])
    assert strategy(lookup).lookup_scores(7) == []  # 5 6 7 ... 11: no earlier match
    lookup.extend([5, 6, 7])  # "5 6 7" again: what followed it before is proposed
    scores = strategy(lookup).lookup_scores(7)
    assert len(scores) == 4 and all(a >= b > 0 for a, b in pairwise(scores))
    assert strategy(None).lookup_scores(7) == []


def _penalised_reference(target: TargetModel, ids: list[int], n: int, penalty: float) -> list[int]:
    """Greedy decoding by the definition: each token is the argmax of the last position's
    logits over the whole text so far, every token in it penalised once (Hugging Face)."""
    out: list[int] = []
    for _ in range(n):
        text = ids + out
        logits = target.forward(mx.array(text), target.make_cache()).logits[0, -1]
        seen = mx.zeros(logits.shape)
        seen[mx.array(text)] = 1.0
        out.append(int(mx.argmax(penalise(logits, seen, penalty)).item()))
    return out


@pytest.mark.parametrize("arch", slow_except(SPEC_ARCHS, "llama"))
def test_a_repetition_penalty_is_lossless_in_every_mode(arch, tiny_target, monkeypatch):
    target = tiny_target(arch)
    ids = target.tokenizer.encode("one two three one two three one two")
    greedy = SamplingParams(repetition_penalty=1.6)
    plain = _tokens(Session(target), ids, max_tokens=24, sampling=greedy)
    assert list(plain) == _penalised_reference(target, ids, 24, 1.6)
    assert plain != _tokens(Session(target), ids, max_tokens=24)  # the penalty did something
    mtp = MTPDrafter(random_mtp_head(target), target, steps=2)
    session = Session(target, DFlashDrafter(random_dflash(target, conv=4), target), mtp)
    for mode, width in (("dflash2", 1), ("dflash2", 4), ("lookup", 3), ("mtp", 1)):
        got = _tokens(session, ids, max_tokens=24, mode=mode, width=width, sampling=greedy)
        assert got == plain, (mode, width)
    oracle = Session(target, OracleDrafter(target, block_size=5))  # every draft accepted
    assert _tokens(oracle, ids, max_tokens=24, mode="dflash2", width=2, sampling=greedy) == plain
    cheap = StepCosts({(n, 0): 0.05 for n in (1, 2, 4)})
    modes = (Mode.AR, Mode.DFLASH2, Mode.MTP)  # a change of mode at every step
    drive_auto(monkeypatch, lambda k: cheap, lambda k, current: modes[k % 3])
    assert _tokens(session, ids, max_tokens=24, mode="auto", width=2, sampling=greedy) == plain


def test_the_last_steps_draft_the_whole_block_and_keep_what_the_reply_has_left(
    tiny_target, monkeypatch
):
    """A shorter block drafts otherwise (its masks attend to each other), so the end of a
    reply drafts the block it was trained on and verifies only what still fits, as llama.cpp
    does."""
    target = tiny_target("llama")
    oracle = OracleDrafter(target, block_size=5)
    depths: list[int] = []
    propose = oracle.propose

    def recording(root: int, depth: int, top_k: int):
        depths.append(depth)
        return propose(root, depth, top_k)

    monkeypatch.setattr(oracle, "propose", recording)
    ids = target.tokenizer.encode(PROMPT)
    config = GenerationConfig(max_tokens=13, mode="dflash2", lookup=False, ignore_eos=True)
    events = list(Session(target, oracle).generate(ids, config))
    steps = [e.step for e in events if type(e).__name__ == "Tokens"]
    assert sum(s.committed for s in steps) == 13
    assert set(depths) == {4}
    assert [s.drafted for s in steps[1:]] == [4, 4, 1]  # 1 + 5 + 5, then 2 left: one draft
