"""Drafters for tests: random DFlash models sized for a tiny target, and an oracle."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import mlx.core as mx
import numpy as np

from engine_mlx.decoding.selector import BlockCandidates
from engine_mlx.models.dflash import DFlashConfig, DFlashModel
from engine_mlx.models.target import TargetModel


def random_dflash(
    target: TargetModel,
    *,
    layers: int = 2,
    conv: int = 0,
    block: int = 6,
    seed: int = 0,
    reference: bool = False,
) -> DFlashModel:
    """``conv``: FlashChat's first variant's kernel; ``reference``: llama.cpp's DFlash2 with
    a dynamic convolution (3 taps, groups of 16) and a selector (rank 8, top-4), all random
    and non-zero."""
    spec = target.spec
    dflash2 = {}
    if reference:
        dflash2 = dict(conv_kernel_size=3, conv_group_size=16, selector_rank=8, selector_top_k=4)
    cfg = DFlashConfig(
        hidden_size=spec.hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=96,
        vocab_size=spec.vocab_size,
        num_target_layers=spec.num_layers,
        target_layer_ids=tuple(range(min(layers, spec.num_layers))),
        block_size=block,
        mask_token_id=0,
        local_conv_kernel=conv,
        **dflash2,
    )
    mx.random.seed(seed)
    model = DFlashModel(cfg)
    if conv:
        for layer in model.layers:
            layer.local_conv.weight = 0.3 * mx.random.normal(layer.local_conv.weight.shape)
    if reference:
        for layer in model.layers:
            for conv_module in (layer.attention_conv, layer.mlp_conv):
                base = conv_module.base_kernel
                conv_module.base_kernel = base + 0.3 * mx.random.normal(base.shape)
                proj = conv_module.kernel_projection
                proj.weight = 0.1 * mx.random.normal(proj.weight.shape)
        selector = model.candidate_selector
        for name in ("predecessor_codebook", "successor_codebook"):
            setattr(selector, name, mx.random.normal(getattr(selector, name).shape))
        gate = selector.hidden_projection
        gate.weight = 0.5 * mx.random.normal(gate.weight.shape)
    mx.eval(model.parameters())
    return model


class OracleDrafter:
    """Proposes the target's own greedy continuation of the committed context (computed by
    running the target itself), with the target's runners-up as the other candidates: full
    acceptance and the bonus path in greedy mode, high acceptance when sampling."""

    capture_layers: tuple[int, ...] = ()

    def __init__(self, target: TargetModel, block_size: int = 5) -> None:
        self.target = target
        self.block_size = block_size
        self.context: list[int] = []

    def reset(self) -> None:
        self.context = []

    def observe(self, ids: Sequence[int], features: list[mx.array]) -> None:
        self.context.extend(int(i) for i in ids)

    def defer(self, ids: Sequence[int], features: list[mx.array]) -> None:
        self.observe(ids, features)  # tokens fed while another mode decodes (auto mode)

    def catch_up(self) -> None:
        """Nothing deferred: ``defer`` observes at once."""

    def propose(self, root: int, depth: int, top_k: int) -> BlockCandidates:
        cache = self.target.make_cache()
        logits = self.target.forward(mx.array([*self.context, root]), cache).logits[0, -1]
        tokens, probs = [], []
        for _ in range(depth):
            p = mx.softmax(logits.astype(mx.float32))
            order = mx.argsort(-p)[:top_k]
            tokens.append(order.tolist())
            probs.append(p[order].tolist())
            logits = self.target.forward(order[:1], cache).logits[0, -1]
        return BlockCandidates(np.array(tokens), np.array(probs))


def random_mtp_head(target: TargetModel, seed: int = 0):
    """A random MTP head shaped for ``target`` (fc scaled so its drafts are not constant)."""
    from engine_mlx.models.mtp import new_head

    mx.random.seed(seed)
    head = new_head(target)
    h = target.spec.hidden_size
    head.fc.weight = mx.random.normal((h, 2 * h)) * (1.0 / h**0.5)
    mx.eval(head.parameters())
    return head


def write_builtin_mtp(target: TargetModel, head) -> None:
    """Add ``mtp.*`` tensors to the target's checkpoint in Hugging Face Qwen3.5 layout
    (zero-centred norms), as real Qwen3.5 checkpoints carry them."""
    from mlx.utils import tree_flatten

    from engine_mlx.models.mtp import NORM_SUFFIXES

    file = target.spec.path / "model.safetensors"
    weights = dict(mx.load(str(file)))
    for key, value in tree_flatten(head.parameters()):
        if key.endswith(NORM_SUFFIXES) and value.ndim == 1:
            value = value - 1.0
        weights[f"mtp.{key}"] = value
    mx.save_safetensors(str(file), weights, metadata={"format": "pt"})


def write_tokenizer_gguf(target: TargetModel, path: Path) -> Path:
    """``target``'s tokenizer in GGUF fields at ``path``: what a target GGUF carries, and what a
    drafter GGUF copies from it."""
    from gguf import GGUFWriter

    vocab = target.tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    tokens += [f"[PAD{i}]" for i in range(len(tokens), target.spec.vocab_size)]
    writer = GGUFWriter(str(path), "qwen3")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * len(tokens))
    writer.add_token_merges(["a b", "c d"])
    writer.add_eos_token_id(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
