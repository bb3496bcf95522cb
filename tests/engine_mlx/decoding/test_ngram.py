"""Prompt lookup: what followed earlier occurrences of the context's last tokens, each
continuation knowing how long its match was, and the selector trusting long matches more."""

from __future__ import annotations

from engine_mlx.decoding.acceptance import Acceptance
from engine_mlx.decoding.ngram import NGramIndex
from engine_mlx.decoding.selector import AcceptanceCalibrator, build_tree, lookup_prob


def test_the_longest_match_comes_first_and_knows_its_length():
    index = NGramIndex()
    index.extend([1, 2, 3, 4, 5, 6, 7, 9, 9, 5, 6, 8, 8, 1, 2, 3, 4, 5, 6])
    found = index.continuations(max_len=3, max_paths=2)
    assert found[0] == [7, 9, 9] and found[0].match == 6  # the copied run
    assert found[1] == [8, 8, 1] and found[1].match == 2  # "5 6" alone
    assert NGramIndex().continuations(3, 1) == []  # nothing seen yet


def test_a_long_match_is_trusted_more_and_calibrated_apart_from_short_ones():
    assert lookup_prob(2) < lookup_prob(4) < lookup_prob(6)
    index = NGramIndex()
    index.extend([1, 2, 3, 4, 5, 6, 7, 8, 20, 5, 6, 9, 1, 2, 3, 4, 5, 6])
    calibrator = AcceptanceCalibrator()
    tree = build_tree(6, calibrator, width=2, max_depth=2, ngram_paths=index.continuations(2, 2))
    by_token = {tree.tokens[i]: i for i in range(1, len(tree))}
    assert tree.scores[by_token[7]] > tree.scores[by_token[9]]
    # Short matches keep failing (code's common two-token phrases); long ones stay trusted.
    weak = [index.continuations(1, 2)[1]]
    short = build_tree(6, calibrator, width=1, max_depth=1, ngram_paths=weak)
    for _ in range(20):
        calibrator.observe(short, Acceptance(path=[], tokens=[0], tested=1))
    again = build_tree(6, calibrator, width=2, max_depth=1, ngram_paths=index.continuations(1, 2))
    scores = {again.tokens[i]: again.scores[i] for i in range(1, len(again))}
    assert scores[9] < 0.2 and scores[7] > 0.6
