"""The acceptance calibrator: estimates from what the target accepted, weighted toward the
latest text."""

from __future__ import annotations

from engine_mlx.decoding.acceptance import Acceptance
from engine_mlx.decoding.selector import AcceptanceCalibrator
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
