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

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from engine_mlx.decoding.sampling import Sampler
from engine_mlx.decoding.tree import CandidateTree
from engine_mlx.kernels import acceptance as acceptance_op
from engine_mlx.kernels.launch import live_executor, record


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


def walk(tree: CandidateTree, target_choice: Sequence[int]) -> Acceptance:
    """``target_choice[i]`` is the target's token after node i (argmax or a sample; read
    only for the nodes the walk reaches)."""
    path, bonus, tested = acceptance_op.walk_host(target_choice, tree.tokens, tree.parents)
    return Acceptance(path=path, tokens=[tree.tokens[i] for i in path] + [bonus], tested=tested)


def replay(tree: CandidateTree, committed: list[int]) -> Acceptance | None:
    """The walk the target in fact made over an unverified ``tree``: ``committed`` are the
    tokens it committed after the root, in whatever mode. The same event as verification (a
    candidate passes exactly when it is the target's pick), so the same evidence; None until
    those tokens decide the walk."""
    node, path = 0, []
    for token in committed:
        child = tree.children[node].get(int(token))
        if child is None:
            tested = len(path) + (1 if tree.children[node] else 0)
            return Acceptance(path, [tree.tokens[i] for i in path] + [int(token)], tested)
        path.append(child)
        node = child
    return None


def path_tokens(tree: CandidateTree) -> mx.array:
    """[N, N] token ids: row i holds the tokens of node i and its ancestors, padded with
    node i's own token (a set, so repeats change nothing)."""
    own = np.array(tree.tokens, dtype=np.int32)
    return mx.array(np.where(tree.ancestor_mask(), own[None, :], own[:, None]))


def path_sequences(tree: CandidateTree) -> list[list[int]]:
    """Per node, in order, the tokens it adds to the committed context: its ancestors' below
    the root (which is committed already) and its own; the root's row is empty."""
    rows: list[list[int]] = []
    for i, parent in enumerate(tree.parents):
        rows.append([] if i == 0 else [*rows[parent], tree.tokens[i]])
    return rows


def _context(tree: CandidateTree, sampler: Sampler) -> tuple[mx.array | None, list | None]:
    """What the sampler needs of each node's path: the penalty's token sets, the forcing
    rule's ordered tokens."""
    extra = path_tokens(tree) if sampler.penalises else None
    return extra, path_sequences(tree) if sampler.forcing is not None else None


def accept(tree: CandidateTree, logits: mx.array, sampler: Sampler) -> Acceptance:
    """The target's picks for every node of ``tree`` (logits [N, V] from its verification)
    and the walk. Sampled picks are drawn from ``node_logprobs``'s distribution (by
    ``Sampler.sample``); greedy ones are its argmax.
    Where kernels run (a GPU backend, or the emulator), picks and walk run on the device
    with one read-back; sampled picks there draw by inverse CDF (another random stream, the
    same distribution). Elsewhere the sampler picks and the walk runs on the host."""
    on_device = live_executor() is not None
    if sampler.params.greedy:
        scores = sampler.adjusted(logits, *_context(tree, sampler))
        if not on_device:
            record("acceptance", kernel=False)
            return walk(tree, mx.argmax(scores, axis=-1).tolist())
        uniforms = None
    else:
        if not on_device:  # drawn among each row's survivors, only on the walk's path
            record("acceptance", kernel=False)
            return walk(tree, sampler.picks(logits, *_context(tree, sampler)))
        scores = mx.exp(node_logprobs(tree, logits, sampler))
        uniforms = mx.random.uniform(shape=(len(tree),), key=sampler.next_key())
    tokens = mx.array(tree.tokens, dtype=mx.int32)
    parents = mx.array(tree.parents, dtype=mx.int32)
    walked = acceptance_op.run(scores, tokens, parents, uniforms)
    path = [int(i) for i in walked.path.tolist() if i >= 0]
    bonus = int(walked.bonus.item())
    return Acceptance(path, [tree.tokens[i] for i in path] + [bonus], int(walked.tested.item()))


def node_logprobs(tree: CandidateTree, logits: mx.array, sampler: Sampler) -> mx.array:
    """[N, V]: the distribution ``accept`` draws node i's pick from. A repetition penalty at
    node i counts the committed context (the sampler's) and the tokens on node i's own path,
    the root included: exactly the text that node would continue."""
    return sampler.logprobs(logits, *_context(tree, sampler))
