"""The MTP (multi-token prediction) head: one extra decoder layer that drafts the token after
next from the target's own hidden state.

Qwen3.5/3.6 checkpoints carry it as ``mtp.*`` weights (``fc [H, 2H]``,
``pre_fc_norm_embedding``, ``pre_fc_norm_hidden``, ``layers.0.*`` — one full-attention decoder
layer of the target's own kind — and ``norm``); mlx-lm's sanitize drops them, so they are
read here. Hugging Face Qwen3.5 checkpoints store RMSNorm weights zero-centred (applied as
``x * (1 + w)``), detected as mlx-lm does (unconverted conv1d weights). A target without a
built-in head can use a separate safetensors file with the same key names (metadata
``zero_centered_norms`` says which convention it uses); such a file may also carry a
``draft_vocab`` tensor, the tokens its drafts come from (``decoding.draft_vocab``), and a
``draft_steps`` entry, the draft length measured best for it (chained drafts lose acceptance
at every step, so a head can pay at one step and lose at three).

Forward for the token after t+1: ``h' = layer(fc(concat[norm_e(embed(t+1)), norm_h(h_t)]))``,
logits ``head(norm(h'))``; chained by feeding ``h'`` back.
"""

from __future__ import annotations

import copy
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from engine_mlx.errors import ModelLoadError
from engine_mlx.models import quantized
from engine_mlx.models.loading import check_safetensors
from engine_mlx.models.target import TargetModel
from engine_mlx.models.weights import weight_mismatch
from engine_mlx.modes import MTP_STEPS

NORM_SUFFIXES = ("norm.weight", "layernorm.weight", "q_norm.weight", "k_norm.weight")
DRAFT_VOCAB_KEY = "draft_vocab"
DRAFT_STEPS_KEY = "draft_steps"


class MTPUnavailable(Exception):
    """No usable MTP head: the message says why (shown in the UI; auto mode runs without)."""


class MTPHead(nn.Module):
    def __init__(self, hidden: int, eps: float, layer: nn.Module) -> None:
        super().__init__()
        self.reads: str | None = None  # "pre"/"post" final norm, where the file records it
        self.draft_vocab: np.ndarray | None = None  # token ids it drafts from; None: all
        self.draft_steps: int | None = None  # its measured best draft length, where recorded
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        self.pre_fc_norm_embedding = nn.RMSNorm(hidden, eps=eps)
        self.pre_fc_norm_hidden = nn.RMSNorm(hidden, eps=eps)
        self.layers = [layer]
        self.norm = nn.RMSNorm(hidden, eps=eps)

    def step(self, embedded: mx.array, hidden: mx.array, cache) -> mx.array:
        """[1, L, H] embeddings of the next tokens + [1, L, H] hiddens -> new hiddens."""
        x = self.fc(
            mx.concatenate(
                [self.pre_fc_norm_embedding(embedded), self.pre_fc_norm_hidden(hidden)], axis=-1
            )
        )
        length = x.shape[1]
        return self.layers[0](x, "causal" if length > 1 else None, cache)


def new_head(target: TargetModel) -> MTPHead:
    """An MTP head shaped for ``target``: its layer is a copy of one of the target's
    full-attention layers (same kind, same sizes), to be overwritten by loaded or trained
    weights."""
    layer = next((lyr for lyr in target.layers if hasattr(lyr, "self_attn")), None)
    layer = layer or target.attention_template  # rank 0 of a split target may hold none
    if layer is None:
        raise MTPUnavailable(f"{target.spec.name} has no attention layer to model an MTP head on")
    eps = float(getattr(target.inner.norm, "eps", 1e-6))
    return MTPHead(target.spec.hidden_size, eps, quantized.dequantized(copy.deepcopy(layer)))


def _mtp_weights(files: list[Path]) -> tuple[dict[str, mx.array], bool]:
    """``mtp.*`` tensors (prefix stripped) and whether the checkpoint is in HF Qwen3.5 layout."""
    weights: dict[str, mx.array] = {}
    hf_layout = False
    for file in files:
        for key, value in mx.load(str(file)).items():
            if "mtp." in key:
                weights[key[key.index("mtp.") + 4 :]] = value
            elif "conv1d.weight" in key and value.shape[-1] != 1:
                hf_layout = True
    return weights, hf_layout


def load_mtp(target: TargetModel, file: str | Path | None = None) -> MTPHead:
    """The target's built-in head, or the one in ``file``; MTPUnavailable says why not."""
    if file is not None:
        path = Path(file)
        if not path.is_file():
            raise MTPUnavailable(f"MTP file {path.name} does not exist")
        try:
            check_safetensors(path)
        except ModelLoadError as exc:
            raise MTPUnavailable(str(exc)) from exc
        weights, _ = _mtp_weights([path])
        arrays, meta = mx.load(str(path), return_metadata=True)
        draft_vocab = _draft_vocab(arrays.get(DRAFT_VOCAB_KEY), target.spec.vocab_size, path)
        zero_centered = meta.get("zero_centered_norms") == "1"
        reads = meta.get("reads_hidden")
        draft_steps = _draft_steps(meta.get(DRAFT_STEPS_KEY), path)
        where = path.name
    else:
        files = sorted(target.spec.path.glob("model*.safetensors"))
        weights, zero_centered = _mtp_weights(files)
        zero_centered = zero_centered and target.spec.model_type.startswith("qwen3_5")
        reads, draft_vocab, draft_steps = None, None, None
        where = target.spec.name
    if not weights:
        raise MTPUnavailable(f"{where} has no mtp.* weights (no built-in MTP head)")
    head = new_head(target)
    problem = weight_mismatch(head, weights, prefix="mtp.")
    if problem:
        raise MTPUnavailable(f"{where}: MTP {problem}")
    expected = dict(tree_flatten(head.parameters()))
    loaded = []
    for key in expected:
        value = weights[key]
        if zero_centered and key.endswith(NORM_SUFFIXES) and value.ndim == 1:
            value = value + 1.0
        loaded.append((key, value.astype(expected[key].dtype)))
    head.load_weights(loaded)
    head.reads = reads if reads in ("pre", "post") else None
    head.draft_vocab = draft_vocab
    head.draft_steps = draft_steps
    mx.eval(head.parameters())
    return head


def _draft_vocab(ids: mx.array | None, vocab_size: int, path: Path) -> np.ndarray | None:
    if ids is None:
        return None
    ids = np.array(ids)
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise MTPUnavailable(f"{path.name}: its draft_vocab is not a list of token ids")
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise MTPUnavailable(f"{path.name}: its draft_vocab is not of a {vocab_size:,}-token model")
    return ids.astype(np.int32)


def _draft_steps(value: str | None, path: Path) -> int | None:
    if value is None:
        return None
    low, high = MTP_STEPS
    if not value.isdigit() or not low <= int(value) <= high:
        raise MTPUnavailable(f"{path.name}: its draft_steps ({value!r}) is not {low}-{high}")
    return int(value)


def save_mtp(
    head: MTPHead,
    path: str | Path,
    reads: str | None = None,
    draft_vocab: np.ndarray | None = None,
) -> Path:
    """Write a separate MTP file (``mtp.*`` keys, ordinary norms), recording which target
    state the head was trained on (``reads``: "pre" or "post" final norm) when known, and
    the tokens it drafts from (``draft_vocab``, else the head's own) when there is a subset."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    weights = {f"mtp.{k}": v for k, v in tree_flatten(head.parameters())}
    vocab = draft_vocab if draft_vocab is not None else head.draft_vocab
    if vocab is not None:
        weights[DRAFT_VOCAB_KEY] = mx.array(np.asarray(vocab, dtype=np.int32))
    metadata = {"zero_centered_norms": "0"}
    if reads or head.reads:
        metadata["reads_hidden"] = reads or head.reads
    if head.draft_steps is not None:
        metadata[DRAFT_STEPS_KEY] = str(head.draft_steps)
    mx.save_safetensors(str(path), weights, metadata=metadata)
    return path
