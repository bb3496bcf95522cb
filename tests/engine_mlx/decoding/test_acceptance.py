"""Replaying a draft against what the target committed: the walk verification would have
made, decided only once the committed tokens decide it."""

from __future__ import annotations

from engine_mlx.decoding.acceptance import replay
from engine_mlx.decoding.tree import CandidateTree


def _tree() -> CandidateTree:
    """Root 0 -> 5 -> 6, and 0 -> 7 (two candidates at depth 1)."""
    tree = CandidateTree.rooted(0)
    five = tree.add(0, 5)
    tree.add(five, 6)
    tree.add(0, 7)
    return tree


def test_replay_waits_until_the_committed_tokens_decide_the_walk():
    assert replay(_tree(), []) is None
    assert replay(_tree(), [5]) is None  # 5 passed; 6 not judged yet
    assert replay(_tree(), [5, 6]) is None  # a leaf reached: its bonus is still to come


def test_replay_walks_the_committed_path_and_stops_at_the_first_miss():
    result = replay(_tree(), [5, 9, 1])
    assert result is not None
    assert result.path == [1] and result.tokens == [5, 9] and result.tested == 2
    missed = replay(_tree(), [8])
    assert missed is not None and missed.path == [] and missed.tokens == [8]
    leaf = replay(_tree(), [5, 6, 4])
    assert leaf is not None and leaf.accepted == 2 and leaf.bonus == 4 and leaf.tested == 2
