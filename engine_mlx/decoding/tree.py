"""Candidate trees: the draft tokens one verification forward tests at once.

Node 0 is the root: the last committed token, not yet in the target's cache. Every other node
is a draft token whose parent is the token before it. A node's position is the prefix length
plus its depth, and it may attend to the cached prefix and to its own ancestors only, so one
forward scores every root-to-leaf path as if each had been decoded alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np


@dataclass
class CandidateTree:
    tokens: list[int]
    parents: list[int] = field(default_factory=lambda: [-1])
    depths: list[int] = field(default_factory=lambda: [0])
    probs: list[float] = field(default_factory=lambda: [1.0])  # drafter's probability
    sources: list[str] = field(default_factory=lambda: ["root"])
    # The selector's estimate that the target accepts the whole path to a node (root: 1).
    scores: list[float] = field(default_factory=lambda: [1.0])
    children: list[dict[int, int]] = field(default_factory=lambda: [{}])

    @classmethod
    def rooted(cls, root_token: int) -> CandidateTree:
        return cls(tokens=[int(root_token)])

    def __len__(self) -> int:
        return len(self.tokens)

    def add(
        self, parent: int, token: int, prob: float = 1.0, source: str = "draft", score: float = 0.0
    ) -> int:
        """Add ``token`` under ``parent`` (or return the existing node for it)."""
        existing = self.children[parent].get(int(token))
        if existing is not None:
            return existing
        node = len(self.tokens)
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.probs.append(float(prob))
        self.sources.append(source)
        self.scores.append(float(score))
        self.children.append({})
        self.children[parent][int(token)] = node
        return node

    def truncated(self, nodes: int) -> CandidateTree:
        """The root and the first ``nodes`` draft nodes. Parents come before children, so
        any prefix is a tree; built best-first, it is the best tree of its size."""
        keep = nodes + 1
        if keep >= len(self):
            return self
        return CandidateTree(
            tokens=self.tokens[:keep],
            parents=self.parents[:keep],
            depths=self.depths[:keep],
            probs=self.probs[:keep],
            sources=self.sources[:keep],
            scores=self.scores[:keep],
            children=[{t: c for t, c in kids.items() if c < keep} for kids in self.children[:keep]],
        )

    def within_depth(self, depth: int) -> CandidateTree:
        """The nodes at most ``depth`` below the root, in their order."""
        if max(self.depths) <= depth:
            return self
        out, kept = CandidateTree.rooted(self.tokens[0]), {0: 0}
        for i in range(1, len(self)):
            if self.depths[i] <= depth:
                parent = kept[self.parents[i]]
                kept[i] = out.add(
                    parent, self.tokens[i], self.probs[i], self.sources[i], self.scores[i]
                )
        return out

    @property
    def width(self) -> int:
        """Root-to-leaf paths (leaves), at least 1."""
        return max(1, sum(1 for c in self.children[1:] if not c)) if len(self) > 1 else 1

    @property
    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents) if i > 0)

    def path(self, node: int) -> list[int]:
        """Node ids from the root's first child down to ``node``."""
        out = []
        while node > 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def ancestor_mask(self) -> np.ndarray:
        """[N, N] bool: row i marks i and its ancestors (parents come before children)."""
        n = len(self)
        mask = np.zeros((n, n), dtype=bool)
        for i in range(n):
            if self.parents[i] >= 0:
                mask[i] = mask[self.parents[i]]
            mask[i, i] = True
        return mask

    def attention_mask(self, prefix_len: int) -> mx.array | None:
        """[N, prefix + N] for the verification forward; None for a chain (plain causal)."""
        if self.is_chain:
            return None
        n = len(self)
        full = np.ones((n, prefix_len + n), dtype=bool)
        full[:, prefix_len:] = self.ancestor_mask()
        return mx.array(full)

    def positions(self, prefix_len: int) -> mx.array | None:
        """Per-node positions; None for a chain (positions follow the cache)."""
        if self.is_chain:
            return None
        return mx.array(np.asarray(self.depths, dtype=np.int32) + prefix_len)
