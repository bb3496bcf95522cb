"""Attention for the target's forward, formulated per backend.

On MLX's CPU backend, ``mx.fast.scaled_dot_product_attention`` spends most of its time in
``exp`` inside the softmax, which runs element by element (~17 ns per score here, against
~1.3 ns for numpy's vectorised ``exp``). Multi-token forwards at depth — tree verification,
prefill — are dominated by it. So on the CPU, in fp32, once a forward has enough scores to
matter, the scores come from MLX's BLAS matmul, the softmax runs in numpy, and the weighted
sum goes back through MLX. Measured here (SmolLM2 shapes: 9 query / 3 KV heads, head dim 64;
2-core x86, OpenBLAS), ms per layer, fused SDPA vs this path:

    queries x keys   1x1024  1x2048  16x1024  16x2048  57x2048  512x1536
    fused SDPA         0.67    1.10     3.16     6.66    26.67    125.1
    numpy softmax      0.50    0.57     0.97     1.77     5.63     63.8

Single-token decoding takes it too once the context is long enough: it used to keep the fused
kernel, because reading scores into numpy evaluates the graph layer by layer and stalled the
pipelined decode loop while the matrix products were slow; with the small-batch product
(``engine_mlx/blas.py``) plain decoding of SmolLM2 at depth 4096 runs at 21.0 tok/s this way
against 15.4 with the fused kernel (depth 1024, still under ``MIN_SCORES``: 23.7 vs 24.1). Below
``MIN_SCORES`` scores the fused kernel wins anyway. On Metal and CUDA it is always used.

mlx-lm's attention modules call the ``scaled_dot_product_attention`` of their own module;
``install`` points that name at a dispatcher that takes this path only inside the engine's
forward (``active``), so anything else in the process (an mlx-lm baseline in the same
benchmark) keeps mlx-lm's behaviour.
"""

from __future__ import annotations

import sys
import threading
from functools import lru_cache
from typing import Any

import mlx.core as mx
import numpy as np

from engine_mlx import compute_path
from engine_mlx.kernels import tree_attention
from engine_mlx.kernels.launch import live_executor, record
from engine_mlx.models import exact_attention

MIN_SCORES = 9 * 512  # below this many scores per KV head group, the fused kernel is faster

_state = threading.local()
_originals: dict[str, Any] = {}


class AdditiveMask:
    """A mask already in numpy additive form (0 / -inf), made once per forward."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values


def numpy_path_available() -> bool:
    return compute_path.cpu_path()


@lru_cache(maxsize=64)
def causal_additive(queries: int, keys: int) -> np.ndarray:
    allowed = np.tril(np.ones((queries, keys), dtype=bool), k=keys - queries)
    return np.where(allowed, np.float32(0.0), np.float32(-np.inf))


def to_additive(mask: mx.array) -> AdditiveMask:
    """bool [L, S] (True = may attend) -> additive numpy mask."""
    allowed = np.asarray(mask)
    return AdditiveMask(np.where(allowed, np.float32(0.0), np.float32(-np.inf)))


def numpy_softmax_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: Any
) -> mx.array:
    """[B, H, L, D] x [B, KV, S, D] -> [B, H, L, D]; grouped-query heads share keys."""
    b, h, length, d = queries.shape
    kv, s = keys.shape[1], keys.shape[2]
    rep = h // kv
    grouped = (queries * scale).reshape(b, kv, rep * length, d)
    scores = np.asarray(grouped @ keys.swapaxes(-1, -2)).reshape(b, kv, rep, length, s)
    if isinstance(mask, AdditiveMask):
        weights = scores + mask.values
    elif isinstance(mask, str):  # "causal"
        weights = scores + causal_additive(length, s)
    elif mask is None:
        weights = np.array(scores)
    else:
        weights = scores + to_additive(mask).values
    weights -= weights.max(axis=-1, keepdims=True)
    np.exp(weights, out=weights)
    weights *= 1.0 / weights.sum(axis=-1, keepdims=True)
    probs = mx.array(weights.reshape(b, kv, rep * length, s))
    return (probs @ values).reshape(b, h, length, d)


def verifying() -> bool:
    """Inside a verification forward (``active`` with a tree): its rows must be computed as
    plain decoding computes one, whatever their number."""
    return getattr(_state, "tree", None) is not None


def engine_forward_on_cpu() -> bool:
    """Inside the engine's forward (``active``), on the CPU backend."""
    return bool(getattr(_state, "active", False))


def _numpy_pays(queries: mx.array, keys: mx.array) -> bool:
    """Inside the engine's forward on the CPU, fp32, one sequence, enough scores."""
    return (
        engine_forward_on_cpu()
        and queries.dtype == mx.float32
        and queries.shape[0] == 1
        and queries.shape[2] >= 1
        and queries.shape[2] * keys.shape[2] * queries.shape[1] // keys.shape[1] >= MIN_SCORES
    )


def attend(queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: Any):
    """The engine's own attention modules (the drafter's): the numpy softmax where it pays,
    else the fused kernel. A drafter's block attends to the whole context, so at depth its
    proposal was mostly ``exp``: 3 layers x 6.9 ms at 4k tokens (Qwen2.5-0.5B shapes)."""
    if _numpy_pays(queries, keys):
        return numpy_softmax_attention(queries, keys, values, scale, mask)
    return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask)


def _dispatch(queries, keys, values, cache, scale, mask, sinks=None):
    tree = getattr(_state, "tree", None)
    if (
        getattr(_state, "exact", False)
        and sinks is None
        and not hasattr(cache, "bits")
        and (tree is not None or queries.shape[2] <= exact_attention.EXACT_ROWS)
    ):
        out = exact_attention.attend(queries, keys, values, scale, mask)
        if out is not None:
            return out
    if tree is not None and queries.shape[2] == tree.shape[0]:  # a verification forward
        executor = _state.tree_executor
        usable = (
            executor is not None
            and sinks is None
            and not hasattr(cache, "bits")
            and queries.shape[0] == 1
            and tree_attention.supported(queries)
        )
        record("tree_attention", usable)
        if usable:
            return tree_attention.kernel(queries, keys, values, tree, scale, executor)
    if sinks is None and not hasattr(cache, "bits") and _numpy_pays(queries, keys):
        return numpy_softmax_attention(queries, keys, values, scale, mask)
    if isinstance(mask, AdditiveMask):
        mask = mx.array(mask.values == 0)
    return _originals["base"](
        queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks
    )


def install(module_names: set[str]) -> None:
    """Route the named mlx-lm model modules' attention through the dispatcher."""
    from mlx_lm.models import base

    _originals.setdefault("base", base.scaled_dot_product_attention)
    route(module_names, "scaled_dot_product_attention", _dispatch)


def route(module_names: set[str], name: str, dispatcher: Any) -> None:
    """Point ``name`` at ``dispatcher`` in every named, imported module that has it."""
    for module_name in module_names:
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, name):
            setattr(module, name, dispatcher)


class active:
    """Context manager: the engine's forward is running on this thread (``tree``: a
    verification forward's ancestor mask, for the tree-verify kernel)."""

    def __init__(self, tree: mx.array | None = None, exact: bool = False) -> None:
        self.tree = tree
        self.exact = exact  # decoding and verification rows row by row (exact_attention)

    def __enter__(self) -> None:
        self._previous = (
            getattr(_state, "active", False),
            getattr(_state, "tree", None),
            getattr(_state, "tree_executor", None),
            getattr(_state, "exact", False),
        )
        _state.active = numpy_path_available()
        _state.tree = self.tree
        _state.exact = self.exact
        # Resolved once per forward, not once per layer.
        _state.tree_executor = live_executor() if self.tree is not None else None

    def __exit__(self, *exc: object) -> None:
        _state.active, _state.tree, _state.tree_executor, _state.exact = self._previous


def block_causal_mask(context: int, length: int) -> mx.array:
    """bool [length, context + length]: a block whose queries see all of the context and the
    block's tokens up to their own (a drafter whose config asks for causal attention)."""
    inside = np.tril(np.ones((length, length), dtype=bool))
    return mx.array(np.concatenate([np.ones((length, context), dtype=bool), inside], axis=1))
