"""The lossless acceptance rule, one walk for greedy and sampled decoding.

At each node the target picks its token (the argmax when greedy; a sample from its filtered
distribution otherwise). If a child of the node carries that token, the walk accepts it and
descends; otherwise the target's pick is the bonus token and the step ends. Every emitted
token is thus exactly what the target would have produced from that prefix — the draft only
decides how many of them one forward yields. Drafts here are point masses (argmax / top-k
candidates), for which this rule is exact; the SpecInfer-style residual rule with softmax
draft probabilities would be biased for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_mlx.decoding.tree import CandidateTree


@dataclass(frozen=True)
class Acceptance:
    path: list[int]  # accepted node ids, root excluded
    tokens: list[int]  # accepted draft tokens, then the bonus token
    tested: int  # draft positions on the walked path (up to and including a rejection)

    @property
    def accepted(self) -> int:
        return len(self.path)

    @property
    def bonus(self) -> int:
        return self.tokens[-1]


def walk(tree: CandidateTree, target_choice: list[int]) -> Acceptance:
    """``target_choice[i]`` is the target's token after node i (argmax or a sample)."""
    node, path, tested = 0, [], 0
    while True:
        choice = int(target_choice[node])
        kids = tree.children[node]
        if kids:
            tested += 1
        child = kids.get(choice)
        if child is None:
            tokens = [tree.tokens[i] for i in path] + [choice]
            return Acceptance(path=path, tokens=tokens, tested=tested)
        path.append(child)
        node = child
