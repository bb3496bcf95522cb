"""Sampled losslessness, proven by enumeration instead of sampled.

The target here is any function from a context to logits (a hash of the context, on a coarse
grid so that ties are common: at the argmax, at top-k's k-th value, inside top-p's groups).
For a schedule of steps (plain decoding, MTP-like chains, DFlash2-like trees from the real
tree builder, prompt-lookup branches, trees cut by a length plan, in any order, as auto
changes mode and length), every outcome of the engine's acceptance rule is enumerated with
its probability, computed with the engine's own functions (the sampler's penalty and
filters, ``node_logprobs``, ``walk``). The distribution of the first tokens committed must
equal plain sampling's, computed by the engine's plain path and by the definitions written
out here in numpy, within float tolerance. A sampling test cannot settle a 10% shift in one
token's frequency; this settles any shift.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engine_mlx.decoding import acceptance
from engine_mlx.decoding.acceptance import node_logprobs, walk
from engine_mlx.decoding.ngram import NGramIndex
from engine_mlx.decoding.sampling import Sampler, SamplingParams
from engine_mlx.decoding.selector import AcceptanceCalibrator, BlockCandidates, build_tree
from engine_mlx.decoding.tree import CandidateTree
from engine_mlx.thinking import ReasoningState, ThinkingBudget, ThinkingMarkers

VOCAB = 6
TOLERANCE = 2e-6  # float32 arithmetic against float64 definitions, per outcome
Context = tuple[int, ...]
BUDGET: dict = {}  # the budget test's thinking budget: {"markers": ..., "budget": ...}
LOGITS: dict = {"dtype": mx.float32}  # the dtype the target hands the sampler (a Mac's: half)


def toy_logits(context: Context) -> np.ndarray:
    """The stand-in target: a deterministic function of the whole context."""
    digest = hashlib.blake2b(repr(context).encode(), digest_size=8).digest()
    rng = np.random.default_rng(int.from_bytes(digest, "little"))
    return (rng.integers(-4, 5, size=VOCAB) * 0.5).astype(np.float32)


def target_logits(rows: np.ndarray) -> mx.array:
    """The toy logits as the target returns them: on a Mac's GPU path, in half precision (the
    grid's values are exact in float16 and bfloat16, so the definitions below still hold)."""
    return mx.array(rows).astype(LOGITS["dtype"])


# --- plain sampling by its definition (Hugging Face's order), independent of the engine ---


def defined_distribution(logits: np.ndarray, context: Context, params: SamplingParams):
    """(probabilities, ambiguous): ambiguous when a filter's boundary lies within float
    rounding of a token, where float32 and float64 may rightly disagree."""
    if BUDGET:  # a thinking budget: past it, the end marker and nothing else
        state = ReasoningState(BUDGET["markers"])
        state.advance(context)
        if state.inside and state.count >= BUDGET["budget"]:
            return np.eye(VOCAB)[BUDGET["markers"].end], False
    x = logits.astype(np.float64)
    if params.repetition_penalty != 1.0:
        for t in set(context):
            x[t] = (
                x[t] / params.repetition_penalty if x[t] > 0 else x[t] * params.repetition_penalty
            )
    if params.greedy:
        out = np.zeros(VOCAB)
        out[int(np.argmax(x))] = 1.0  # numpy's argmax: the lowest id among ties
        return out, False
    x = x / params.temperature
    keep = np.ones(VOCAB, dtype=bool)
    if 0 < params.top_k < VOCAB:
        ranked = sorted(range(VOCAB), key=lambda t: (-x[t], t))  # ties: the lowest ids
        keep[:] = False
        keep[ranked[: params.top_k]] = True
    ambiguous = False
    p = _normalised(x, keep)
    if params.top_p < 1.0:
        above = np.array([p[p > p[t]].sum() for t in range(VOCAB)])
        ambiguous |= bool(np.any(keep & (np.abs(above - params.top_p) < 1e-5)))
        keep &= above < params.top_p
        p = _normalised(x, keep)
    if params.min_p > 0.0:
        ratio = p / p.max()
        ambiguous |= bool(np.any(keep & (np.abs(ratio - params.min_p) < 1e-5)))
        keep &= ratio >= params.min_p
        p = _normalised(x, keep)
    return p, ambiguous


def _normalised(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    e = np.where(keep, np.exp(x - x[keep].max()), 0.0)
    return e / e.sum()


# --- the engine's rule, enumerated ----------------------------------------------------------


def engine_sampler(params: SamplingParams, committed: Context) -> Sampler:
    sampler = Sampler(params, ThinkingBudget(**BUDGET) if BUDGET else None)
    sampler.remember(committed)
    return sampler


def plain_probs(context: Context, params: SamplingParams, first: bool) -> np.ndarray:
    """The engine's plain decoding: the prompt's token from the prefill's logits, then each
    token from a forward queued with the newest token (the root) not yet remembered."""
    logits = target_logits(toy_logits(context))
    if first:
        return np.exp(np.array(engine_sampler(params, context).logprobs(logits)))
    sampler = engine_sampler(params, context[:-1])
    rows = [list(context[-1:])] if sampler.forcing is not None else None
    return np.exp(np.array(sampler.logprobs(logits, extra=mx.array(context[-1:]), rows=rows)))


def tree_outcomes(tree: CandidateTree, probs: np.ndarray) -> dict[Context, float]:
    """Every way the walk can end, with its probability: at each visited node the pick y has
    probability probs[node, y]; a child carrying y is accepted, else y is the bonus. Each
    outcome is checked against the engine's ``walk`` given the same picks."""
    out: dict[Context, float] = {}

    def visit(node: int, committed: Context, prob: float, picks: dict[int, int]) -> None:
        for y in np.nonzero(probs[node] > 0)[0].tolist():
            p = prob * float(probs[node, y])
            chosen = {**picks, node: y}
            child = tree.children[node].get(y)
            if child is not None:
                visit(child, (*committed, y), p, chosen)
                continue
            walked = walk(tree, [chosen.get(i, 0) for i in range(len(tree))])
            assert tuple(walked.tokens) == (*committed, y)
            out[(*committed, y)] = out.get((*committed, y), 0.0) + p

    visit(0, (), 1.0, {})
    return out


# A step maker: (committed context, its root-ending tokens) -> the step's tree, or None for a
# plain decoding step. Deterministic in the context, so every branch sees its own trees.
StepMaker = Callable[[Context], CandidateTree | None]


def plain_step(context: Context) -> None:
    return None


def _rng(context: Context, salt: str) -> np.random.Generator:
    digest = hashlib.blake2b(repr((salt, context)).encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


def _block(context: Context, depth: int, k: int) -> BlockCandidates:
    """A drafter's top-k per position: often the toy target's own best tokens along its
    greedy path (so drafts are accepted), otherwise random ones."""
    rng = _rng(context, "block")
    tokens, probs, path = [], [], context
    for _ in range(depth):
        best = list(np.argsort(-toy_logits(path), kind="stable"))
        if rng.random() < 0.4:
            best = list(rng.permutation(VOCAB))
        tokens.append(best[:k])
        probs.append(sorted(rng.dirichlet(np.ones(k)), reverse=True))
        path = (*path, int(best[0]))
    return BlockCandidates(np.array(tokens), np.array(probs))


def _selector_block(context: Context, depth: int, k: int) -> BlockCandidates:
    """A DFlash2 selector's lattice: the same candidates, probabilities that depend on the
    candidate before (``BlockCandidates.transitions``)."""
    block = _block(context, depth, k)
    rng = _rng(context, "lattice")
    transitions = rng.dirichlet(np.ones(k), size=(depth, k)).astype(np.float32)
    transitions[0, 1:] = transitions[0, 0]  # depth 1: every row follows the root
    return BlockCandidates(block.tokens, transitions[:, 0], transitions=transitions)


def chain_step(depth: int) -> StepMaker:
    """An MTP-like chain: one candidate per position."""

    def make(context: Context) -> CandidateTree:
        return build_tree(
            context[-1],
            AcceptanceCalibrator(),
            width=1,
            max_depth=depth,
            block=_block(context, depth, 1),
            block_source="mtp",
        )

    return make


def tree_step(
    width: int, depth: int, lookup: bool = False, plan: int | None = None, selector: bool = False
) -> StepMaker:
    """A DFlash2-like tree from the real tree builder, optionally with prompt-lookup paths
    (the real n-gram index over the context) and cut to ``plan`` nodes (a length plan)."""

    def make(context: Context) -> CandidateTree:
        paths = None
        if lookup:
            index = NGramIndex(min_n=1, max_n=2)
            index.extend(list(context))
            paths = index.continuations(depth, width)
        tree = build_tree(
            context[-1],
            AcceptanceCalibrator(),
            width=width,
            max_depth=depth,
            block=(_selector_block if selector else _block)(context, depth, max(width, 2)),
            ngram_paths=paths,
        )
        return tree.truncated(plan) if plan is not None else tree

    return make


def speculative_distribution(
    prompt: Context, schedule: list[StepMaker], params: SamplingParams, horizon: int
) -> dict[Context, float]:
    """P(first ``horizon`` generated tokens) under the engine: the prompt's token, then the
    schedule's steps in turn (cycled), each drawn by the engine's own functions."""
    out: dict[Context, float] = {}

    def go(generated: Context, prob: float, step: int) -> None:
        if len(generated) >= horizon:
            key = generated[:horizon]
            out[key] = out.get(key, 0.0) + prob
            return
        context = prompt + generated
        tree = schedule[step % len(schedule)](context)
        if tree is None:
            probs = plain_probs(context, params, first=False)[None]
            tree = CandidateTree.rooted(context[-1])
        else:
            rows = [toy_logits(context + tuple(tree.tokens[n] for n in tree.path(i)))
                    for i in range(len(tree))]  # fmt: skip
            sampler = engine_sampler(params, context)
            logprobs = node_logprobs(tree, target_logits(np.stack(rows)), sampler)
            probs = np.exp(np.array(logprobs))
        for committed, p in tree_outcomes(tree, probs).items():
            go(generated + committed, prob * p, step + 1)

    first = plain_probs(prompt, params, first=True)
    for token in np.nonzero(first > 0)[0].tolist():
        go((token,), float(first[token]), 0)
    return out


def plain_distribution(
    prompt: Context, params: SamplingParams, horizon: int, probs_at: Callable
) -> tuple[dict[Context, float], bool]:
    """P(first ``horizon`` tokens) of plain sampling, token by token with ``probs_at``
    (context, first) -> (probabilities, ambiguous)."""
    out: dict[Context, float] = {}
    ambiguous = False

    def go(generated: Context, prob: float) -> None:
        nonlocal ambiguous
        if len(generated) == horizon:
            out[generated] = prob
            return
        probs, unsure = probs_at(prompt + generated, not generated)
        ambiguous |= unsure
        for token in np.nonzero(probs > 0)[0].tolist():
            go((*generated, token), prob * float(probs[token]))

    go((), 1.0)
    return out, ambiguous


def largest_gap(a: dict[Context, float], b: dict[Context, float]) -> float:
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


PROMPT: Context = (1, 2, 3, 1, 2)
SCHEDULES: dict[str, list[StepMaker]] = {
    "plain": [plain_step],
    "mtp chain": [chain_step(3)],
    "dflash2 width 1": [tree_step(1, 3)],
    "dflash2 width 3": [tree_step(3, 2)],
    "dflash2 with lookup": [tree_step(2, 3, lookup=True)],
    "dflash2 with a selector": [tree_step(2, 3, selector=True)],
    "auto: modes and lengths change": [
        plain_step,
        tree_step(3, 3, plan=4),
        chain_step(2),
        plain_step,
        tree_step(2, 3, lookup=True, plan=2),
        tree_step(2, 2, selector=True),
    ],
}


def check_lossless(params: SamplingParams, schedule: list[StepMaker], horizon: int = 3) -> float:
    """The largest gap between the engine's speculative distribution and plain sampling's
    (defined and the engine's plain path agreeing first); asserts the totals. Settings whose
    filter boundaries fall within rounding of a token are not for this test."""
    defined, ambiguous = plain_distribution(
        PROMPT,
        params,
        horizon,
        lambda ctx, first: defined_distribution(toy_logits(ctx), ctx, params),
    )
    if ambiguous:
        return float("nan")
    engine_plain, _ = plain_distribution(
        PROMPT, params, horizon, lambda ctx, first: (plain_probs(ctx, params, first), False)
    )
    assert largest_gap(engine_plain, defined) < TOLERANCE, "plain decoding is off its definition"
    spec = speculative_distribution(PROMPT, schedule, params, horizon)
    assert abs(sum(spec.values()) - 1.0) < 1e-5
    return largest_gap(spec, engine_plain)


SINGLE_SETTINGS = [
    SamplingParams(),  # greedy
    SamplingParams(repetition_penalty=1.5),  # greedy with the penalty
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.7),
    SamplingParams(temperature=1.0, top_k=1),
    SamplingParams(temperature=1.0, top_k=3),  # ties at the 3rd value are common here
    SamplingParams(temperature=1.0, top_p=0.8),
    SamplingParams(temperature=1.0, top_p=0.3),
    SamplingParams(temperature=1.0, min_p=0.2),
    SamplingParams(temperature=1.0, repetition_penalty=1.05),
    SamplingParams(temperature=1.0, repetition_penalty=2.0),
    SamplingParams(temperature=1.0, repetition_penalty=0.7),
    # the app's defaults
    SamplingParams(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.05),
    SamplingParams(temperature=0.7, top_k=3, top_p=0.8, repetition_penalty=1.05),
]


@pytest.mark.parametrize("schedule", list(SCHEDULES), ids=list(SCHEDULES))
@pytest.mark.parametrize("params", SINGLE_SETTINGS, ids=repr)
def test_every_setting_alone_commits_exactly_plain_samplings_distribution(params, schedule):
    assert check_lossless(params, SCHEDULES[schedule]) < TOLERANCE  # nan (ambiguous) fails


HALF_SETTINGS = [SINGLE_SETTINGS[i] for i in (0, 2, 3, 5, 6, 8, 9, 12)]


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("schedule", list(SCHEDULES), ids=list(SCHEDULES))
@pytest.mark.parametrize("params", HALF_SETTINGS, ids=repr)
def test_half_precision_logits_commit_exactly_plain_samplings_distribution(
    params, schedule, dtype, monkeypatch
):
    """A Mac's target computes in float16 or bfloat16: the sampler, the acceptance rule and
    the walk take its logits as they are, and the distribution is still plain sampling's to
    float32 precision (the penalty, temperature and filters are computed in float32)."""
    monkeypatch.setitem(LOGITS, "dtype", dtype)
    assert check_lossless(params, SCHEDULES[schedule]) < TOLERANCE


settings_combined = st.builds(
    SamplingParams,
    temperature=st.sampled_from([0.5, 0.7, 1.0, 1.6]),
    top_k=st.sampled_from([0, 2, 3, 4]),
    top_p=st.sampled_from([1.0, 0.9, 0.8, 0.5]),
    min_p=st.sampled_from([0.0, 0.05, 0.2]),
    repetition_penalty=st.sampled_from([1.0, 1.05, 1.3, 0.8]),
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(settings_combined, st.sampled_from(list(SCHEDULES)))
def test_settings_combined_commit_exactly_plain_samplings_distribution(params, schedule):
    gap = check_lossless(params, SCHEDULES[schedule])
    assume(not np.isnan(gap))
    assert gap < TOLERANCE


@pytest.mark.parametrize("schedule", list(SCHEDULES), ids=list(SCHEDULES))
@pytest.mark.parametrize(
    "params",
    [SamplingParams(), SamplingParams(temperature=1.0), SINGLE_SETTINGS[-2]],
    ids=["greedy", "T1", "app defaults"],
)
def test_a_thinking_budget_forces_the_end_marker_alike_in_every_mode(params, schedule, monkeypatch):
    """Token 4 opens reasoning, 5 ends it; the prompt opens it and the budget is two
    reasoning tokens: the end marker is forced once the context holds two, which falls
    inside a verification tree's paths, in every step shape."""
    budget = {"markers": ThinkingMarkers(start=4, end=5), "budget": 2}
    monkeypatch.setitem(globals(), "BUDGET", budget)
    monkeypatch.setitem(globals(), "PROMPT", (1, 2, 3, 4))
    assert check_lossless(params, SCHEDULES[schedule]) < TOLERANCE
    forced = speculative_distribution(PROMPT, SCHEDULES[schedule], params, 3)
    # every outcome that kept reasoning for two tokens continues with the end marker
    assert all(o[2] == 5 for o in forced if {4, 5}.isdisjoint(o[:2]) and forced[o] > 0)


def test_a_penalty_counted_one_step_off_is_caught(monkeypatch):
    """The proof has teeth: with each node's path tokens shifted by one (the node's own
    token left out, as if counted from its parent), the enumeration finds the bias."""
    honest = acceptance.path_tokens

    def shifted(tree: CandidateTree) -> mx.array:
        rows = honest(tree)
        parents = [max(p, 0) for p in tree.parents]
        return rows[mx.array(parents)]

    monkeypatch.setattr(acceptance, "path_tokens", shifted)
    params = SamplingParams(temperature=1.0, repetition_penalty=2.0)
    assert check_lossless(params, SCHEDULES["dflash2 width 3"]) > 1e-3


def test_path_tokens_hold_each_nodes_path_and_nothing_else():
    tree = tree_step(3, 3, lookup=True)((4, 0, 5, 4, 0))
    rows = np.array(acceptance.path_tokens(tree))
    for node in range(len(tree)):
        expected = {tree.tokens[0], *(tree.tokens[n] for n in tree.path(node))}
        assert set(rows[node].tolist()) == expected


@pytest.mark.parametrize("width", [1, 2, 4])
def test_one_row_and_many_rows_keep_the_same_tokens_under_ties(width):
    """Top-k's k-th value tied across many tokens: a row alone and the same row among
    others keep the same set, the lowest ids among the tied."""
    row = np.array([1.0, 2.0, 2.0, 0.0, 2.0, 2.0, -1.0, 2.0], dtype=np.float32)
    others = np.random.default_rng(width).normal(size=(width, row.size)).astype(np.float32)
    params = SamplingParams(temperature=1.0, top_k=3, top_p=0.95)
    sampler = Sampler(params)
    alone = np.array(sampler.logprobs(mx.array(row)))
    among = np.array(sampler.logprobs(mx.array(np.vstack([others, row[None]]))))[-1]
    assert np.isfinite(alone).nonzero()[0].tolist() == [1, 2, 4]
    np.testing.assert_array_equal(alone, among)


def test_the_inverse_cdf_draw_gives_every_token_exactly_its_probability():
    """The device path picks by inverse CDF: the measure of uniforms u that pick token t is
    its probability, a token of probability 0 is never picked, not even at u -> 1."""
    from engine_mlx.kernels.acceptance import reference_choice

    rng = np.random.default_rng(0)
    for _ in range(20):
        probs = rng.dirichlet(np.ones(VOCAB) * 0.5)
        probs[rng.random(VOCAB) < 0.3] = 0.0
        probs = (probs / probs.sum()).astype(np.float32)
        cdf = np.cumsum(probs.astype(np.float32), dtype=np.float32)
        measure = np.diff(np.concatenate([[0.0], cdf.astype(np.float64)])) / float(cdf[-1])
        np.testing.assert_allclose(measure, probs, atol=1e-6)
        edges = np.array([0.0, np.nextafter(np.float32(1), np.float32(0)), 0.5], np.float32)
        picks = np.array(reference_choice(mx.array(np.tile(probs, (3, 1))), mx.array(edges)))
        assert all(probs[p] > 0 for p in picks.tolist())


def test_the_schedules_really_accept_drafts():
    """The enumeration walks accepted drafts, not only rejections: under greedy decoding
    every schedule but plain commits more than one token in some step."""
    params = SamplingParams()
    for name, schedule in SCHEDULES.items():
        context, lengths = PROMPT, []
        for step in range(4):
            tree = schedule[step % len(schedule)](context)
            if tree is None:
                lengths.append(1)
                context = (*context, int(np.argmax(toy_logits(context))))
                continue
            rows = [toy_logits(context + tuple(tree.tokens[n] for n in tree.path(i)))
                    for i in range(len(tree))]  # fmt: skip
            probs = np.exp(np.array(node_logprobs(tree, mx.array(np.stack(rows)), Sampler(params))))
            ((committed, _),) = tree_outcomes(tree, probs).items()
            lengths.append(len(committed))
            context += committed
        assert (max(lengths) > 1) == (name != "plain"), (name, lengths)
