"""The two parts that make llama.cpp's DFlash2 more than DFlash: a dynamic local convolution
around every sublayer, and a learned low-rank candidate selector.

Both follow llama.cpp's ``src/models/dflash.cpp`` (``build_dflash2_conv``,
``build_dflash2_selector``) and its driver's walk (``common/speculative.cpp``), so that a
drafter trained here drafts there token for token, and one published there drafts here.
Parameter names are the Hugging Face ones llama.cpp's converter maps to GGUF
(``attention_conv.base_kernel``, ``candidate_selector.predecessor_codebook``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np


class DynamicConv(nn.Module):
    """A per-token, grouped, causal convolution along the block, for one sublayer: side 0
    filters the sublayer's normalised input, side 1 its output, both with the coefficients
    projected once from that normalised input. Channel h's weight at tap j is
    ``base_kernel[side, j, h] + coefficients[side, j, h // group]``; tap j reads the token j
    places earlier in the same block (zero before the block's start)."""

    def __init__(self, hidden: int, kernel: int, group: int) -> None:
        super().__init__()
        self.kernel, self.group = kernel, group
        base = mx.zeros((2, kernel, hidden))
        self.base_kernel = base.at[:, 0, :].add(1.0)  # identity: a new conv changes nothing
        self.kernel_projection = nn.Linear(hidden, 2 * kernel * (hidden // group), bias=False)
        self.kernel_projection.weight = mx.zeros(self.kernel_projection.weight.shape)

    def coefficients(self, normed: mx.array) -> mx.array:
        """[blocks, B, 2*K*G] from the sublayer's normalised input [blocks, B, H]."""
        return self.kernel_projection(normed)

    def __call__(self, x: mx.array, coefficients: mx.array, side: int) -> mx.array:
        """``x`` [blocks, B, H] filtered along B with side ``side``'s weights."""
        blocks, length, hidden = x.shape
        groups = hidden // self.group
        c = coefficients.reshape(blocks, length, 2, self.kernel, groups)[:, :, side]
        weights = mx.repeat(c, self.group, axis=-1) + self.base_kernel[side]  # [n, B, K, H]
        out = weights[:, :, 0] * x
        for tap in range(1, min(self.kernel, length)):
            earlier = mx.pad(x[:, : length - tap], [(0, 0), (tap, 0), (0, 0)])
            out = out + weights[:, :, tap] * earlier
        return out


class CandidateSelector(nn.Module):
    """Scores position t's top-k candidates j after position t-1's candidate i as
    ``logit_t[j] + <P[prev_i] * (W z_t), S[cand_j]>``: the candidate's own logit plus a
    low-rank bigram term gated by the drafter's final hidden state at t."""

    def __init__(self, hidden: int, vocab: int, rank: int) -> None:
        super().__init__()
        self.predecessor_codebook = mx.zeros((vocab, rank))
        self.successor_codebook = mx.zeros((vocab, rank))
        self.hidden_projection = nn.Linear(hidden, rank, bias=False)
        self.hidden_projection.weight = mx.zeros(self.hidden_projection.weight.shape)

    def scores(
        self, anchor: int, candidates: mx.array, unary: mx.array, hidden: mx.array
    ) -> mx.array:
        """[N, k, k]: row i of position t scores its candidates after candidate i of t-1
        (every row of the first position: after the anchor). ``candidates`` [N, k] ids,
        ``unary`` [N, k] their logits, ``hidden`` [N, H] the final-normed states."""
        gate = self.hidden_projection(hidden)  # [N, R]
        k = candidates.shape[1]
        first = mx.broadcast_to(
            self.predecessor_codebook[anchor][None, None], (1, k, gate.shape[1])
        )
        rest = self.predecessor_codebook[candidates[:-1]]  # [N-1, k, R]
        previous = mx.concatenate([first, rest], axis=0) * gate[:, None, :]
        successor = self.successor_codebook[candidates]  # [N, k, R]
        return previous @ successor.transpose(0, 2, 1) + unary[:, None, :]


@dataclass(frozen=True)
class Lattice:
    """The selector's output for one block: candidates and their transition scores."""

    candidates: np.ndarray  # [N, k] token ids, by logit (ties: the lower id first)
    scores: np.ndarray  # [N, k, k] (predecessor index, candidate index)

    def walk(self, n_min: int = 0, p_min: float = 0.0) -> list[int]:
        """llama.cpp's draft: from the anchor, the best-scoring candidate after the one
        chosen before (the first on ties); stop where its softmax among the k scores falls
        below ``p_min``; nothing when shorter than ``n_min``."""
        chosen = self.walk_indices(n_min, p_min)
        return [int(self.candidates[t, j]) for t, j in enumerate(chosen)]

    def walk_indices(self, n_min: int = 0, p_min: float = 0.0) -> list[int]:
        """``walk``'s candidate indices, position by position."""
        out, previous = [], 0
        for row in self.scores:
            s = row[previous].astype(np.float32)
            j = int(np.argmax(s))
            if p_min > 0.0 and confidence(s, j) < np.float32(p_min):
                break
            out.append(j)
            previous = j
        return out if len(out) >= n_min else []

    def transitions(self) -> np.ndarray:
        """[N, k, k] softmax of each row: the selector's confidence in candidate j after
        candidate i (what a tree's node estimates start from)."""
        s = self.scores.astype(np.float64)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def confidence(scores: np.ndarray, chosen: int) -> np.float32:
    """The chosen candidate's softmax among the row's scores, in float32 and summed in
    candidate order as llama.cpp's walk does (a cut at ``p_min`` is then the same cut)."""
    total = np.float32(0.0)
    for value in scores:
        total += np.exp(np.float32(value - scores[chosen]), dtype=np.float32)
    return np.float32(1.0) / total


def top_candidates(logits: np.ndarray, k: int) -> np.ndarray:
    """The k best ids per row of ``logits`` [N, V], best first, ties to the lower id
    (llama.cpp leaves their order unspecified; only exact ties can tell)."""
    k = max(1, min(k, logits.shape[-1]))
    top = np.argpartition(-logits, kth=k - 1, axis=-1)[:, :k]
    values = np.take_along_axis(logits, top, axis=-1)
    order = np.lexsort((top, -values), axis=-1)
    return np.take_along_axis(top, order, axis=-1)


def output_transform(logits: mx.array, scale: float, softcap: float) -> mx.array:
    """The target's output transforms, applied before the selector reads the logits."""
    if scale:
        logits = logits * scale
    if softcap > 0:
        logits = softcap * mx.tanh(logits / softcap)
    return logits
