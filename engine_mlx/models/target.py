"""The target model: an mlx-lm model driven layer by layer.

mlx-lm's ``Model.__call__`` derives positions from the cache offset and builds a causal mask
itself. Speculative verification needs more: explicit per-token positions (tree nodes share a
depth), an explicit attention mask (ancestor-only), and the hidden states of chosen layers
(drafter context). So we reuse mlx-lm's modules and weights unchanged and write only the
short outer loop. Positions reach the rotary embedding through ``PositionedRoPE``, which wraps
each attention's ``rope`` and, when positions are set, rotates every token by its own
position (MLX's ``fast.rope`` takes per-batch offsets, so tokens go on the batch axis).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.base import create_attention_mask, create_ssm_mask
from mlx_lm.models.cache import ArraysCache, KVCache, make_prompt_cache

from engine_mlx.backend import compute_dtype
from engine_mlx.distributed.remote_caches import PipelineClient, RemoteCaches
from engine_mlx.distributed.wire import Rows
from engine_mlx.errors import ModelLoadError
from engine_mlx.kernels import kv_compact
from engine_mlx.models import (
    attention,
    exact_attention,
    half_layers,
    numpy_layers,
    quantized,
    swiglu,
)
from engine_mlx.models.inplace_kv_cache import InPlaceKVCache
from engine_mlx.models.loading import ModelSpec, validate_model_folder
from engine_mlx.models.numpy_rope import NumpyRoPE
from engine_mlx.thinking import thinking_markers


class _PositionContext:
    """Shared by all PositionedRoPE wrappers of one model (not a module, not a parameter)."""

    def __init__(self) -> None:
        self.positions: mx.array | None = None


class PositionedRoPE(nn.Module):
    """Wraps an mlx-lm RoPE: plain offset when no positions are set, per-token otherwise."""

    def __init__(self, inner: nn.Module, context: _PositionContext) -> None:
        super().__init__()
        self.inner = inner
        self._context = context
        self._numpy: NumpyRoPE | None = None

    def rotate_in_numpy(self) -> None:
        """Rotate float32 inputs in numpy (``numpy_rope``), if the inner RoPE is a plain one."""
        if NumpyRoPE.takes(self.inner):
            self._numpy = NumpyRoPE(self.inner)

    def __call__(self, x: mx.array, offset: int | mx.array = 0) -> mx.array:
        positions = self._context.positions
        if self._numpy is not None and x.dtype == mx.float32:
            length = x.shape[2]
            start = int(offset.item()) if isinstance(offset, mx.array) else int(offset)
            rows = np.arange(start, start + length) if positions is None else np.asarray(positions)
            return mx.array(self._numpy(np.asarray(x), rows))
        if positions is None:
            return self.inner(x, offset=offset)
        # x: [1, heads, L, D] -> [L, heads, 1, D]: one batch entry (one offset) per token.
        rotated = self.inner(x.transpose(2, 1, 0, 3), offset=positions)
        return rotated.transpose(2, 1, 0, 3)


@dataclass
class ForwardOutput:
    logits: mx.array  # [1, L, vocab]
    features: list[mx.array] = field(default_factory=list)  # [1, L, hidden] per captured id


@dataclass(frozen=True)
class LayerPart:
    """The layers ``[start, stop)`` of a target split across processes (``distributed``):
    rank 0 holds the first ones with the embeddings and the head, each other rank the next."""

    start: int
    stop: int


@dataclass(frozen=True)
class CacheSnapshot:
    """Enough of a cache to roll it back: KV offsets and recurrent-state references."""

    entries: tuple[Any, ...]


class TargetModel:
    """A loaded target: weights, tokenizer, and the layer-by-layer forward."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        spec: ModelSpec,
        *,
        first_layer: int = 0,
        linear: tuple[bool, ...] | None = None,
    ) -> None:
        """``first_layer`` and ``linear`` (every layer's kind, the whole model's) for a part
        of a split target, whose ``model`` holds only its own layers."""
        self.model = model
        self.tokenizer = tokenizer
        self.spec = spec
        if linear is None:
            linear = tuple(bool(getattr(layer, "is_linear", False)) for layer in model.layers)
        self.first_layer = first_layer
        self.is_hybrid = any(linear)
        # Rank 0 of a split target: the other ranks' layers, through the pipeline.
        self.pipeline: PipelineClient | None = None
        self.layout = ""  # how a split target's layers lie across processes ("" if not split)
        # An attention layer of the whole model, where this part holds none: what an MTP
        # head on rank 0 is modelled on (``mtp.new_head``).
        self.attention_template: nn.Module | None = None
        self._remote_trimmable = not any(linear[first_layer + len(model.layers) :])
        # On the CPU: the engine's product, with int8 activations where the decoding and
        # verification rows agree to the bit (attention-only targets: exact_attention).
        self.quantized_layers = quantized.install(model, int8=not self.is_hybrid)
        # A float16 checkpoint's layers: the same product over its float16 weights.
        self.half_layers = 0 if self.is_hybrid else half_layers.install(model)
        self.exact_attention = quantized.rounds_activations(model) or self.half_layers > 0
        self.inner = model.model
        self.layers = list(model.layers)
        owner = getattr(model, "language_model", model)
        self._tied = bool(getattr(owner.args, "tie_word_embeddings", False))
        self._head = None if self._tied else owner.lm_head
        self._positions = _PositionContext()
        for layer in self.layers:
            attn = getattr(layer, "self_attn", None)
            if attn is not None and not isinstance(attn.rope, PositionedRoPE):
                attn.rope = PositionedRoPE(attn.rope, self._positions)
            if attn is not None and (self.quantized_layers or self.half_layers):  # left at every
                attn.rope.rotate_in_numpy()  # product anyway: rotate in numpy too
        attention.install(
            {
                type(layer.self_attn).__module__
                for layer in self.layers
                if hasattr(layer, "self_attn")
            }
        )
        swiglu.install({type(lyr.mlp).__module__ for lyr in self.layers if hasattr(lyr, "mlp")})
        # Decoding and verification rows of such a target: its layers over numpy arrays.
        self._numpy_layers = numpy_layers.numpy_layers(model) if self.exact_attention else None
        self.dtype = self.inner.norm.weight.dtype  # the compute dtype, quantized or not
        self.thinking = thinking_markers(tokenizer)  # None: a model that does not think

    # ----------------------------------------------------------------- loading
    @classmethod
    def load(
        cls, path: str | Path, dtype: mx.Dtype | None = None, part: LayerPart | None = None
    ) -> TargetModel:
        """Validate the folder, load with mlx-lm, cast to the backend's compute dtype;
        ``part``: only those layers' weights are read (and the embeddings and head on the
        part that starts at layer 0)."""
        from mlx_lm.utils import load_model, load_tokenizer

        spec = validate_model_folder(path)
        try:
            model, config = load_model(spec.path, lazy=True)
            tokenizer = load_tokenizer(spec.path, eos_token_ids=config.get("eos_token_id"))
        except MemoryError:
            raise ModelLoadError(
                f"{spec.name}: not enough memory to load it; close other apps or choose a "
                "smaller model."
            ) from None
        except Exception as exc:  # mlx-lm and transformers reject a config in many ways
            raise ModelLoadError(f"{spec.name}: mlx-lm could not load it: {exc}") from exc
        linear = tuple(bool(getattr(layer, "is_linear", False)) for layer in model.layers)
        template = None
        if part is not None:
            template = next((lyr for lyr in model.layers if hasattr(lyr, "self_attn")), None)
            _keep_layers(model, part)
        target_dtype = dtype if dtype is not None else compute_dtype(_fp32_bytes(model))
        if target_dtype is not None:
            model.set_dtype(target_dtype)
            if template is not None:
                template.set_dtype(target_dtype)
        mx.eval(model.parameters())
        model.eval()
        first = 0 if part is None else part.start
        target = cls(model, tokenizer, spec, first_layer=first, linear=linear)
        if template is not None and not any(hasattr(lyr, "self_attn") for lyr in target.layers):
            target.attention_template = template  # its weights stay unread until copied
        return target

    # ----------------------------------------------------------------- forward
    def make_cache(self) -> list[Any]:
        """This process's layers' caches, then (on rank 0 of a split target) the other
        ranks' as one ``RemoteCaches``."""
        cache = make_prompt_cache(self.model)
        if self._numpy_layers is not None:  # their rows go straight into the buffers
            cache = [InPlaceKVCache() if type(c) is KVCache else c for c in cache]
        if self.pipeline is not None:
            cache.append(RemoteCaches(self.pipeline, self._remote_trimmable))
        return cache

    def embed(self, tokens: mx.array) -> mx.array:
        return self.inner.embed_tokens(tokens)

    def head(self, hidden: mx.array) -> mx.array:
        """Final norm already applied -> logits."""
        if self._tied:
            return self.inner.embed_tokens.as_linear(hidden)
        return self._head(hidden)

    def head_product(self, ids: np.ndarray) -> Callable[[mx.array], mx.array] | None:
        """Logits for ``ids`` only, through the CPU's quantized product (the rows kept
        quantized: a 32k-token draft vocabulary dequantized is 115 MB to stream a draft);
        None where the head is not the engine's quantized product."""
        layer = self.inner.embed_tokens if self._tied else self._head
        matrix = getattr(layer, "_matrix", None)
        if matrix is None:
            return None
        rows, int8 = matrix.rows(np.asarray(ids)), layer._int8
        return lambda hidden: quantized.multiply_mx(rows, hidden, int8)

    def head_rows(self, ids: mx.array) -> mx.array | None:
        """Rows of the output projection for ``ids`` ([n, hidden]), so training can score a
        subset of the vocabulary (a quantized head's dequantized); None for a head with a
        bias."""
        if self._tied:
            return self.inner.embed_tokens(ids)
        head = self._head
        if "bias" in head:
            return None
        if isinstance(head, nn.QuantizedLinear):
            biases = None if head.get("biases") is None else head.biases[ids]
            return mx.dequantize(
                head.weight[ids], head.scales[ids], biases, head.group_size, head.bits, head.mode
            )
        return head.weight[ids] if isinstance(head, nn.Linear) else None

    def forward(
        self,
        tokens: mx.array,
        cache: list[Any],
        *,
        positions: mx.array | None = None,
        mask: mx.array | None = None,
        capture: tuple[int, ...] | list[int] = (),
        last_only: bool = False,
        tree: mx.array | None = None,
    ) -> ForwardOutput:
        """One forward over ``tokens`` ([L] or [1, L]) appended to ``cache``.

        ``positions`` ([L] int) overrides the cache-derived positions; ``mask`` (bool
        [L, cache_len + L], True = may attend) overrides the causal mask of attention
        layers. ``capture`` lists layer ids whose outputs are returned (after the layer,
        as HF ``hidden_states[lid + 1]``). ``last_only`` computes logits for the last
        token only (prefill). ``tree`` (bool [L, L], a node and its ancestors; a chain's is
        lower-triangular) marks a verification forward: where kernels run, its attention is
        the tree-verify kernel's (the mask it implies is ``mask``'s, or causal).
        """
        inputs = tokens[None] if tokens.ndim == 1 else tokens
        h = self.embed(inputs)
        if mask is not None and self.is_hybrid and positions is None:
            raise ValueError("an explicit mask needs explicit positions")
        remote = cache[-1] if isinstance(cache[-1], RemoteCaches) else None
        local = cache[:-1] if remote is not None else cache
        captured: dict[int, mx.array] = {}
        with self.placed(positions, tree):
            h = self.run_layers(h, local, positions, mask, capture, captured)
            if remote is not None:
                h = self._remote_layers(remote, h, (positions, mask, tree), capture, captured)
            if last_only:
                h = h[:, -1:]
            logits = self.head(self.inner.norm(h))  # inside: a verification's head too
        return ForwardOutput(logits=logits, features=[captured[i] for i in capture])

    @contextmanager
    def placed(self, positions: mx.array | None, tree: mx.array | None) -> Iterator[None]:
        """A forward's per-token positions and attention path, set for its layers."""
        self._positions.positions = None if positions is None else positions.astype(mx.int32)
        try:
            with attention.active(tree, exact=self.exact_attention):
                yield
        finally:
            self._positions.positions = None

    def run_layers(
        self,
        h: mx.array,
        cache: list[Any],
        positions: mx.array | None,
        mask: mx.array | None,
        capture: tuple[int, ...] | list[int],
        captured: dict[int, mx.array],
    ) -> mx.array:
        """This process's layers over ``h`` (inside ``placed``); the outputs of the layers
        in ``capture`` (model-wide ids) go to ``captured``."""
        attn_mask = mask if mask is not None else self._causal_mask(h, cache)
        if isinstance(attn_mask, mx.array) and attention.numpy_path_available():
            attn_mask = attention.to_additive(attn_mask)  # converted once, not per layer
        ssm_mask = create_ssm_mask(h, self._first(cache, ArraysCache)) if self.is_hybrid else None
        wanted = {i - self.first_layer for i in capture}
        mine: dict[int, mx.array] = {}
        allowed = self._numpy_rows(h, cache, attn_mask)
        if allowed is not None:
            h = self._numpy_forward(h, cache, allowed, positions, wanted, mine)
        else:
            h = self._mlx_forward(h, cache, (attn_mask, ssm_mask), wanted, mine)
        captured.update({lid + self.first_layer: x for lid, x in mine.items()})
        return h

    def _remote_layers(
        self,
        remote: RemoteCaches,
        h: mx.array,
        placing: tuple[mx.array | None, mx.array | None, mx.array | None],
        capture: tuple[int, ...] | list[int],
        captured: dict[int, mx.array],
    ) -> mx.array:
        """The other ranks' layers: ``h`` goes around the pipeline with the placing
        (positions, mask, tree) and comes back with the layers captured there."""
        far = tuple(sorted(i for i in set(capture) if i >= self.first_layer + len(self.layers)))
        host = [None if x is None else np.asarray(x) for x in placing]
        out = remote.forward(Rows(np.asarray(h.astype(mx.float32)), *host, capture=far))
        for lid, rows in zip(far, out.features, strict=True):
            captured[lid] = mx.array(rows).astype(h.dtype)
        return mx.array(out.hidden).astype(h.dtype)

    def _mlx_forward(
        self,
        h: mx.array,
        cache: list[Any],
        masks: tuple[Any, Any],
        wanted: set[int],
        captured: dict[int, mx.array],
    ) -> mx.array:
        """The layers as mlx-lm wrote them (``masks``: the attention and recurrent ones)."""
        attn_mask, ssm_mask = masks
        for lid, (layer, layer_cache) in enumerate(zip(self.layers, cache, strict=True)):
            h = layer(h, ssm_mask if getattr(layer, "is_linear", False) else attn_mask, layer_cache)
            if lid in wanted:
                captured[lid] = h
        return h

    def _numpy_rows(self, h: mx.array, cache: list[Any], mask: Any) -> list[np.ndarray] | None:
        """Each new row's cache slots when this forward runs through the numpy layers
        (``numpy_layers``: a quantized target's), else None."""
        rows = h.shape[1]
        if self._numpy_layers is None or h.shape[0] != 1 or not numpy_layers.runs(cache):
            return None
        return exact_attention.allowed_keys(mask, rows, cache[0].offset + rows)

    def _numpy_forward(
        self,
        h: mx.array,
        cache: list[Any],
        allowed: list[np.ndarray],
        positions: mx.array | None,
        wanted: set[int],
        captured: dict[int, mx.array],
    ) -> mx.array:
        """The layers over numpy rows (``numpy_layers``)."""
        rows, start = h.shape[1], cache[0].offset
        where = np.arange(start, start + rows) if positions is None else np.asarray(positions)
        x = np.asarray(h)[0]
        shared = numpy_layers.ForwardRows(where, allowed)
        for lid, (layer, layer_cache) in enumerate(zip(self._numpy_layers, cache, strict=True)):
            x = layer(x, layer_cache, shared)
            if lid in wanted:
                captured[lid] = mx.array(x[None])
        numpy_layers.settle(cache)
        return mx.array(x[None])

    def _causal_mask(self, h: mx.array, cache: list[Any]) -> Any:
        return create_attention_mask(h, self._first(cache, KVCache))

    @staticmethod
    def _first(cache: list[Any], kind: type | tuple[type, ...]) -> Any:
        return next((c for c in cache if isinstance(c, kind)), None)

    # ------------------------------------------------------------------ caches
    def cache_length(self, cache: list[Any]) -> int:
        """Tokens in the cache (the context depth)."""
        kv = self._first(cache, (KVCache, RemoteCaches))
        return int(kv.offset) if kv is not None else 0

    def can_trim(self, cache: list[Any]) -> bool:
        return all(c.is_trimmable() for c in cache)

    def trim(self, cache: list[Any], n: int) -> None:
        """Drop the last ``n`` tokens; hybrid caches must use snapshot/restore instead."""
        if n <= 0:
            return
        if not self.can_trim(cache):
            raise ValueError("this cache holds recurrent state: use snapshot()/restore()")
        for c in cache:
            c.trim(n)

    def compact(self, cache: list[Any], start: int, keep: list[int]) -> None:
        """After a tree verification that appended nodes at ``start``: keep the rows of
        nodes ``keep`` (in order) at ``start, start+1, ...`` and drop the rest."""
        for c in cache:
            if isinstance(c, RemoteCaches):
                c.compact(start, keep)
                continue
            if not isinstance(c, KVCache):
                raise ValueError("tree compaction needs attention (KV) caches only")
            c.keys, c.values = kv_compact.compact(c.keys, c.values, start, keep)
            c.offset = start + len(keep)

    def snapshot(self, cache: list[Any]) -> CacheSnapshot:
        """Cheap: KV layers keep their offset (rows below it are never overwritten by
        appends); recurrent layers keep references to their immutable state arrays."""
        entries: list[Any] = []
        for c in cache:
            if isinstance(c, KVCache):
                entries.append(c.offset)
            elif isinstance(c, ArraysCache):
                entries.append((list(c.cache), c.lengths))
            elif isinstance(c, RemoteCaches):
                entries.append(c.snapshot())
            else:
                raise TypeError(f"cannot snapshot a {type(c).__name__}")
        return CacheSnapshot(tuple(entries))

    def restore(self, cache: list[Any], snap: CacheSnapshot) -> None:
        """Roll ``cache`` back to ``snap`` (taken on the same cache, before later appends)."""
        for c, entry in zip(cache, snap.entries, strict=True):
            if isinstance(c, KVCache):
                if entry > c.offset:
                    raise ValueError("snapshot is newer than the cache")
                c.offset = entry
            elif isinstance(c, RemoteCaches):
                c.restore(entry)
            else:
                state, lengths = entry
                c.cache = list(state)
                c.lengths = lengths


def _keep_layers(model: nn.Module, part: LayerPart) -> None:
    """Drop the layers outside ``part`` before their weights are read (mlx-lm loads them
    lazily), and the embeddings and head where the part does not start the model."""
    inner = model.model
    inner.layers = inner.layers[part.start : part.stop]
    if part.start > 0:
        inner.embed_tokens = nn.Module()
        owner = getattr(model, "language_model", model)
        if "lm_head" in owner:
            owner.lm_head = nn.Module()


def _fp32_bytes(model: nn.Module) -> int:
    from mlx.utils import tree_flatten

    return sum(v.size * 4 for _, v in tree_flatten(model.parameters()))
