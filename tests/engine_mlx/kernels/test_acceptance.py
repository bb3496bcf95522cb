"""The acceptance walk on the device: kernel == MLX reference == the engine's host walk."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.decoding.acceptance import walk
from engine_mlx.decoding.tree import CandidateTree
from engine_mlx.kernels import acceptance


def random_tree(rng: np.random.Generator, nodes: int, vocab: int) -> CandidateTree:
    tree = CandidateTree.rooted(int(rng.integers(0, vocab)))
    while len(tree) < nodes:
        tree.add(int(rng.integers(0, len(tree))), int(rng.integers(0, vocab)))
    return tree


def steer(rng, tree: CandidateTree, vocab: int) -> list[int]:
    """Target picks that accept a random root-to-leaf path for a random number of steps."""
    picks = [int(t) for t in rng.integers(0, vocab, len(tree))]
    node = 0
    for _ in range(int(rng.integers(0, 8))):
        kids = list(tree.children[node].values())
        if not kids:
            break
        child = kids[int(rng.integers(0, len(kids)))]
        picks[node] = tree.tokens[child]
        node = child
    return picks


def greedy_logits(rng, picks: list[int], vocab: int, dtype) -> mx.array:
    logits = rng.standard_normal((len(picks), vocab)).astype(np.float32)
    logits[np.arange(len(picks)), picks] = 8.0  # above any other draw in any dtype
    return mx.array(logits).astype(dtype)


def dyadic_probs(rng, picks: list[int], vocab: int) -> np.ndarray:
    """Distributions in multiples of 1/1024 (sums exact in fp32 in any order, so the
    inverse-CDF pick is the same on every backend), most mass on the steered token, many
    zeros."""
    probs = np.zeros((len(picks), vocab), dtype=np.float32)
    for row, pick in enumerate(picks):
        support = rng.choice(vocab, size=min(vocab, 12), replace=False)
        counts = rng.multinomial(1024 - 512, np.ones(len(support)) / len(support))
        probs[row, support] = counts / 1024.0
        probs[row, pick] += 512 / 1024.0
    return probs


def assert_same_walk(ours: acceptance.WalkResult, ref: acceptance.WalkResult, tree, picks):
    host = walk(tree, picks)
    accepted = int(ours.accepted.item())
    assert accepted == int(ref.accepted.item()) == host.accepted
    assert int(ours.bonus.item()) == int(ref.bonus.item()) == host.bonus
    assert int(ours.tested.item()) == int(ref.tested.item()) == host.tested
    assert ours.path.tolist() == ref.path.tolist()
    assert ours.path.tolist()[:accepted] == host.path
    assert all(i == -1 for i in ours.path.tolist()[accepted:])


@pytest.mark.parametrize(
    ("nodes", "vocab", "dtype"),
    [(13, 1000, mx.float32), (25, 997, mx.float16), (40, 301, mx.bfloat16), (1, 50, mx.float32)],
    ids=["f32", "f16-odd-vocab", "bf16-wide-tree", "root-only"],
)
def test_greedy_walk(executor, nodes, vocab, dtype):
    rng = np.random.default_rng(nodes)
    for _ in range(3):
        tree = random_tree(rng, nodes, vocab)
        picks = steer(rng, tree, vocab)
        logits = greedy_logits(rng, picks, vocab, dtype)
        tokens, parents = mx.array(tree.tokens), mx.array(tree.parents)
        ours = acceptance.kernel(logits, tokens, parents, None, executor)
        ref = acceptance.reference(logits, tokens, parents)
        assert_same_walk(ours, ref, tree, picks)


@pytest.mark.parametrize(("nodes", "vocab"), [(17, 700), (9, 5), (1, 64)])
def test_sampled_walk(executor, nodes, vocab):
    rng = np.random.default_rng(vocab)
    for _ in range(3):
        tree = random_tree(rng, nodes, vocab)
        picks = steer(rng, tree, vocab)
        probs = mx.array(dyadic_probs(rng, picks, vocab))
        uniforms = mx.array(rng.random(nodes, dtype=np.float32))
        tokens, parents = mx.array(tree.tokens), mx.array(tree.parents)
        choice = acceptance.reference_choice(probs, uniforms)
        chosen = np.asarray(probs)[np.arange(nodes), np.asarray(choice)]
        assert (chosen > 0).all()  # never a token the target cannot produce
        ours = acceptance.kernel(probs, tokens, parents, uniforms, executor)
        ref = acceptance.reference(probs, tokens, parents, uniforms)
        assert_same_walk(ours, ref, tree, choice.tolist())


def test_greedy_ties_go_to_the_lowest_id(executor):
    logits = mx.array([[0.0, 3.0, 1.0, 3.0], [5.0, 5.0, 5.0, 5.0]])
    tokens, parents = mx.array([0, 3]), mx.array([-1, 0])
    ours = acceptance.kernel(logits, tokens, parents, None, executor)
    ref = acceptance.reference(logits, tokens, parents)
    assert int(ours.bonus.item()) == int(ref.bonus.item()) == 1
    assert int(ours.accepted.item()) == 0


def test_inverse_cdf_sampling_matches_the_distribution():
    """The sampled pick is an exact draw: frequencies over many uniforms follow p."""
    probs = mx.array([[0.0, 0.25, 0.5, 0.0, 0.25]])
    uniforms = mx.array(np.random.default_rng(0).random(4000, dtype=np.float32))
    picks = acceptance.reference_choice(mx.broadcast_to(probs, (4000, 5)), uniforms)
    freq = np.bincount(np.asarray(picks), minlength=5) / 4000
    assert freq[0] == freq[3] == 0
    assert np.allclose(freq, np.asarray(probs)[0], atol=0.03)


def test_a_uniform_next_to_one_stays_on_a_token_that_can_occur(executor):
    """u * total can round up to the total; the vocabulary's last token (filtered out here)
    must still never be picked, by the kernel or by its reference."""
    probs = np.zeros((2, 7), dtype=np.float32)
    probs[:, :3] = [0.1, 0.7, 0.2]
    probs[1, 3] = 1e-8  # a sum that float32 cannot hold exactly
    below_one = np.nextafter(np.float32(1.0), np.float32(0.0))
    uniforms = mx.array(np.array([below_one, below_one], dtype=np.float32))
    tokens, parents = mx.array([0]), mx.array([-1])
    for row in range(2):
        p = mx.array(probs[row : row + 1])
        ours = acceptance.kernel(p, tokens, parents, uniforms[row : row + 1], executor)
        ref = acceptance.reference(p, tokens, parents, uniforms[row : row + 1])
        assert probs[row, int(ours.bonus.item())] > 0
        assert probs[row, int(ref.bonus.item())] > 0
