"""The acceptance calibrator: estimates from what the target accepted (verified, or judged by
the text once written), weighted toward the latest text; the tree builder: siblings'
estimates are exclusive."""

from __future__ import annotations

import numpy as np

from engine_mlx.decoding.acceptance import Acceptance, replay
from engine_mlx.decoding.selector import AcceptanceCalibrator, BlockCandidates, build_tree
from engine_mlx.decoding.tree import CandidateTree


def _test_one(calibrator: AcceptanceCalibrator, source: str, accepted: bool) -> None:
    """One verification of a single depth-1 candidate drafted with probability 0.9."""
    tree = CandidateTree.rooted(0)
    node = tree.add(0, 7, 0.9, source, score=0.9)
    path = [node] if accepted else []
    calibrator.observe(tree, Acceptance(path=path, tokens=[7, 1] if accepted else [1], tested=1))


def test_estimates_follow_what_the_target_accepted():
    calibrator = AcceptanceCalibrator()
    prior = calibrator.estimate("ngram", 1, 0.9)
    for _ in range(30):
        _test_one(calibrator, "ngram", accepted=False)
    assert calibrator.estimate("ngram", 1, 0.9) < prior / 4
    assert calibrator.estimate("dflash2", 1, 0.9) == prior  # per source


def test_a_new_text_recalibrates_faster_than_the_old_evidence_alone_would_allow():
    kept, renewed = AcceptanceCalibrator(), AcceptanceCalibrator()
    for calibrator in (kept, renewed):
        for _ in range(40):  # one reply: lookup never right
            _test_one(calibrator, "ngram", accepted=False)
    renewed.new_text()
    for calibrator in (kept, renewed):
        for _ in range(6):  # the next reply: always right
            _test_one(calibrator, "ngram", accepted=True)
    assert renewed.estimate("ngram", 1, 0.9) > 1.5 * kept.estimate("ngram", 1, 0.9)


def _cut_step(calibrator: AcceptanceCalibrator, bonus: int) -> None:
    """A plan that verified none of the two proposed depth-1 candidates (tokens 7 and 8, drafted
    with probability 0.3); the target then picked ``bonus``."""
    proposed = CandidateTree.rooted(0)
    proposed.add(0, 7, 0.3, "dflash2", score=0.3)
    proposed.add(0, 8, 0.3, "dflash2", score=0.3)
    verified = proposed.truncated(0)
    calibrator.observe(verified, Acceptance(path=[], tokens=[bonus], tested=0), proposed)


def test_candidates_a_plan_cut_are_judged_by_the_bonus_token():
    right, wrong, blind = AcceptanceCalibrator(), AcceptanceCalibrator(), AcceptanceCalibrator()
    prior = blind.estimate("dflash2", 1, 0.3)
    for _ in range(10):
        _cut_step(right, bonus=7)  # the cut candidate 7 was the target's pick
        _cut_step(wrong, bonus=9)  # neither was
        blind.observe(CandidateTree.rooted(0), Acceptance(path=[], tokens=[9], tested=0))
    assert right.estimate("dflash2", 1, 0.3) > prior + 0.15
    assert wrong.estimate("dflash2", 1, 0.3) < prior / 2
    assert blind.estimate("dflash2", 1, 0.3) == prior


def test_only_the_node_where_the_walk_stopped_gets_evidence_for_free():
    proposed = CandidateTree.rooted(0)
    first = proposed.add(0, 7, 0.95, "dflash2", score=0.95)
    proposed.add(first, 5, 0.3, "dflash2", score=0.3)  # under the accepted node: judged
    proposed.add(0, 8, 0.05, "dflash2", score=0.05)  # beside the accepted path: not judged
    verified = proposed.truncated(1)
    calibrator = AcceptanceCalibrator()
    calibrator.observe(verified, Acceptance(path=[first], tokens=[7, 5], tested=1), proposed)
    blind = AcceptanceCalibrator()
    assert calibrator.estimate("dflash2", 2, 0.3) > blind.estimate("dflash2", 2, 0.3)
    assert calibrator.estimate("dflash2", 1, 0.05) == blind.estimate("dflash2", 1, 0.05)


def test_the_nodes_a_plan_cut_are_judged_once_the_text_is_written():
    proposed, node = CandidateTree.rooted(0), 0
    for depth in range(1, 6):  # a chain of 5 at 0.3 each; the text follows all of it
        node = proposed.add(node, 10 + depth, 0.3, "dflash2", score=0.3**depth)
    verified = proposed.truncated(2)
    calibrator, blind = AcceptanceCalibrator(), AcceptanceCalibrator()
    calibrator.observe(verified, Acceptance(path=[1, 2], tokens=[11, 12, 13], tested=2), proposed)
    at_the_step = calibrator.estimate("dflash2", 3, 0.3)  # the cut child where the walk stopped
    walk = replay(proposed, [11, 12, 13, 14, 15, 99])
    assert walk is not None and walk.path == [1, 2, 3, 4, 5]
    calibrator.observe_unverified(proposed, walk, verified=len(verified))
    for depth in (4, 5):  # never verified, now judged
        assert calibrator.estimate("dflash2", depth, 0.3) > blind.estimate("dflash2", depth, 0.3)
    assert calibrator.estimate("dflash2", 3, 0.3) == at_the_step  # not counted twice


def test_siblings_together_are_never_expected_to_be_accepted_more_than_once():
    calibrator = AcceptanceCalibrator()
    for _ in range(40):  # first choices drafted at 0.45 were right: the bin says 0.9+
        tree = CandidateTree.rooted(0)
        node = tree.add(0, 7, 0.45, "dflash2", score=0.45)
        calibrator.observe(tree, Acceptance(path=[node], tokens=[7, 1], tested=1))
    assert calibrator.estimate("dflash2", 1, 0.42) > 0.85  # the same bin
    # Now the drafter's first and second choices at depth 1 fall in that bin.
    block = BlockCandidates(tokens=np.array([[5, 6], [8, 9]]), probs=np.array([[0.45, 0.42]] * 2))
    flat = build_tree(0, calibrator, width=2, max_depth=1, block=block)
    assert sorted(flat.tokens[1:]) == [5, 6]  # both proposed (the budget allows no other)...
    assert flat.scores[1] > 0.85 and sum(flat.scores[1:]) <= 1.0 + 1e-9  # ...one accepted
    # With room to choose, the second path branches under the confident first token
    # instead of spending a node on its near-certainly rejected sibling.
    deep = build_tree(0, calibrator, width=2, max_depth=2, block=block)
    assert deep.tokens[1:] == [5, 8, 9] and deep.depths[1:] == [1, 2, 2]
