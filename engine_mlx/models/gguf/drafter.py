"""DFlash drafters in llama.cpp's GGUF (architecture ``dflash``; DFlash2 when it carries the
selector's tensors): written from and read into ``models.dflash.DFlashModel``.

Names, shapes and keys follow llama.cpp's ``src/models/dflash.cpp`` and its converter
(``conversion/qwen.py``, ``DFlashModel``): the target layers are stored 1-based
(``dflash.target_layers`` = Hugging Face ids + 1), the convolution bases are always F32, and
the tokenizer is the target's, copied field by field from the target's own GGUF with
gguf-py's reader (llama.cpp checks that draft and target vocabularies agree). Written here
rather than by llama.cpp's converter, which needs torch and transformers; what it writes is
held to what that converter writes by a test.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, quants
from mlx.utils import tree_flatten

from engine_mlx.errors import GGUFImportError
from engine_mlx.models.dflash import DFlashConfig, DFlashModel
from engine_mlx.models.gguf.reader import GGUFFile, meta, read_gguf, read_tensor_numpy

ARCH = "dflash"
TYPES = {"f32": GGMLQuantizationType.F32, "f16": GGMLQuantizationType.F16,
         "q8_0": GGMLQuantizationType.Q8_0}  # fmt: skip

_GLOBAL = {
    "fc.weight": "fc.weight",
    "hidden_norm.weight": "enc.output_norm.weight",
    "norm.weight": "output_norm.weight",
    "candidate_selector.predecessor_codebook": "selector_predecessor.weight",
    "candidate_selector.successor_codebook": "selector_successor.weight",
    "candidate_selector.hidden_projection.weight": "selector_hidden.weight",
}
_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "attention_conv.base_kernel": "attn_conv_base",
    "attention_conv.kernel_projection.weight": "attn_conv_proj.weight",
    "mlp_conv.base_kernel": "ffn_conv_base",
    "mlp_conv.kernel_projection.weight": "ffn_conv_proj.weight",
}
# What llama.cpp's dflash arch may carry that this engine does not run yet: refused by name.
_UNSUPPORTED = {
    "token_embd.weight": "its own token embedding",
    "output.weight": "its own output head",
    "d2t": "a reduced draft vocabulary (d2t)",
    "markov_w1.weight": "a DSpark Markov head",
    "rope_freqs.weight": "rope frequency factors",
}
_UNSUPPORTED_IN_LAYERS = {
    "attn_sinks.weight": "attention sinks",
    "post_attention_norm.weight": "post-attention norms",
    "post_ffw_norm.weight": "post-MLP norms",
    "layer_output_scale.weight": "layer output scales",
}


def gguf_name(ours: str) -> str:
    """This engine's parameter name -> the tensor name in llama.cpp's GGUF."""
    if ours in _GLOBAL:
        return _GLOBAL[ours]
    _, index, rest = ours.split(".", 2)
    return f"blk.{index}.{_LAYER[rest]}"


def write_drafter_gguf(
    model: DFlashModel, out: str | Path, tokenizer_gguf: str | Path, qtype: str = "f32"
) -> Path:
    """``model`` as a llama.cpp drafter GGUF, its tokenizer copied from the target's GGUF.
    2-D weights in ``qtype`` (f32, f16 or q8_0: where a row's length allows); norms and the
    convolution bases in F32, as llama.cpp's converter keeps them."""
    cfg = model.config
    if cfg.mask_token_id is None:
        raise ValueError("the drafter has no mask_token_id: llama.cpp reads it from the GGUF")
    if cfg.rope_scaling or cfg.local_conv_kernel:
        what = "rope scaling" if cfg.rope_scaling else "FlashChat's first DFlash2 variant"
        raise ValueError(f"llama.cpp's dflash architecture has no {what}")
    out = Path(out)
    writer = GGUFWriter(str(out), ARCH)
    writer.add_name(out.stem)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_key_length(cfg.head_dim)
    writer.add_value_length(cfg.head_dim)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_array(f"{ARCH}.target_layers", [int(i) + 1 for i in cfg.target_layer_ids])
    writer.add_uint32(f"{ARCH}.block_size", cfg.block_size)
    if cfg.reference_dflash2:
        for key in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"):
            writer.add_uint32(f"{ARCH}.{key}", getattr(cfg, key))
    for key, value in (
        ("attention.value_scale", cfg.attention_value_scale),
        ("logit_scale", cfg.output_multiplier),
        ("final_logit_softcapping", cfg.final_logit_softcapping),
        ("embedding_scale", cfg.input_embedding_scale),
    ):
        if value:
            writer.add_float32(f"{ARCH}.{key}", value)
    if cfg.causal:
        writer.add_bool(f"{ARCH}.attention.causal", True)
    _copy_tokenizer(writer, Path(tokenizer_gguf), cfg)
    for name, value in tree_flatten(model.parameters()):
        _add_tensor(writer, gguf_name(name), np.array(value.astype(mx.float32)), TYPES[qtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _copy_tokenizer(writer: GGUFWriter, source: Path, cfg: DFlashConfig) -> None:
    reader = GGUFReader(str(source))
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ValueError(f"{source.name} has no tokenizer to copy (tokenizer.ggml.tokens)")
    if len(tokens.data) != cfg.vocab_size:
        raise ValueError(
            f"{source.name}'s tokenizer has {len(tokens.data):,} tokens, the drafter's "
            f"vocabulary {cfg.vocab_size:,}: is it the drafter's target?"
        )
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.") or key == "tokenizer.ggml.mask_token_id":
            continue
        main = field.types[0]
        if main == GGUFValueType.ARRAY:
            writer.add_key_value(key, list(field.contents()), main, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, field.contents(), main)
    writer.add_mask_token_id(int(cfg.mask_token_id))


def _add_tensor(writer: GGUFWriter, name: str, data: np.ndarray, qtype: GGMLQuantizationType):
    """Norms, codebook-free vectors and the convolution bases stay F32 (no ``.weight``
    suffix, or 1-D), as llama.cpp's converter writes them."""
    keep_f32 = data.ndim < 2 or not name.endswith(".weight")
    if keep_f32 or qtype == GGMLQuantizationType.F32:
        writer.add_tensor(name, data.astype(np.float32))
    elif qtype == GGMLQuantizationType.F16 or data.shape[-1] % 32:
        writer.add_tensor(name, data.astype(np.float16))
    else:
        writer.add_tensor(name, quants.quantize(data, qtype), raw_dtype=qtype)


def is_drafter_gguf(path: str | Path) -> bool:
    """Whether ``path`` is a GGUF of llama.cpp's ``dflash`` architecture (a drafter)."""
    try:
        return read_gguf(Path(path)).metadata.get("general.architecture") == ARCH
    except GGUFImportError:
        return False


def load_drafter_gguf(path: str | Path) -> DFlashModel:
    """A llama.cpp DFlash / DFlash2 drafter GGUF as a model, every tensor dequantized to
    float32 (any type gguf-py dequantizes), or a GGUFImportError saying what is wrong."""
    g = read_gguf(Path(path))
    name = g.path.name
    arch = g.metadata.get("general.architecture")
    if arch != ARCH:
        raise GGUFImportError(f"{name} is not a DFlash drafter (architecture {arch!r:.40}).")
    _refuse_unsupported(g)
    cfg = _config(g)
    model = DFlashModel(cfg)
    weights = []
    for ours, expected in tree_flatten(model.parameters()):
        tname = gguf_name(ours)
        info = g.tensors.get(tname)
        if info is None:
            raise GGUFImportError(f"{name} is missing tensor '{tname}'")
        if info.shape != tuple(expected.shape):
            raise GGUFImportError(
                f"{name}: tensor '{tname}' has shape {info.shape}, the config asks for "
                f"{tuple(expected.shape)}"
            )
        try:
            weights.append((ours, mx.array(read_tensor_numpy(g, info))))
        except (ValueError, NotImplementedError, KeyError) as exc:
            raise GGUFImportError(f"{name}: cannot read '{tname}' ({info.type_name})") from exc
    model.load_weights(weights)
    mx.eval(model.parameters())
    model.eval()
    return model


def _refuse_unsupported(g: GGUFFile) -> None:
    found = [what for t, what in _UNSUPPORTED.items() if t in g.tensors]
    for tname in g.tensors:
        suffix = tname.split(".", 2)[-1] if tname.startswith("blk.") else ""
        if suffix in _UNSUPPORTED_IN_LAYERS:
            found.append(_UNSUPPORTED_IN_LAYERS[suffix])
    layered = any(t.startswith("blk.") and t.endswith(".attn_q.weight") for t in g.tensors)
    if layered and not any(t.endswith(".attn_v.weight") for t in g.tensors):
        found.append("keys shared as values (no attn_v)")
    for key, what in (
        (f"{ARCH}.attention.sliding_window", "sliding-window attention"),
        (f"{ARCH}.rope.dimension_sections", "M-RoPE sections"),
        (f"{ARCH}.hyper_connection_count", "a DeepSeek-V4 DSpark backbone"),
        (f"{ARCH}.attention.scale", "its own attention scale"),
    ):
        if key in g.metadata:
            found.append(what)
    act = g.metadata.get(f"{ARCH}.hidden_activation", "silu")
    if act != "silu":
        found.append(f"the {act!r:.20} activation")
    if found:
        raise GGUFImportError(
            f"{g.path.name} uses what FlashChat cannot run yet: {', '.join(dict.fromkeys(found))}."
        )


def _config(g: GGUFFile) -> DFlashConfig:
    p = f"{ARCH}."

    def req(key: str, kind=int, what: str = "") -> object:
        return meta(g, p + key, kind, what or key)

    def opt(key: str, kind, default):
        return meta(g, p + key, kind, key, default)

    tokens = meta(g, "tokenizer.ggml.tokens", list, "the target's vocabulary")
    layers = meta(g, p + "target_layers", np.ndarray, "the target layers it reads")
    if layers.ndim != 1 or layers.size == 0 or layers.dtype.kind not in "iu" or layers.min() < 1:
        raise GGUFImportError(f"{g.path.name}: {p}target_layers must list layer ids from 1")
    hidden = int(req("embedding_length", what="hidden size"))
    heads = int(req("attention.head_count", what="attention heads"))
    cfg = DFlashConfig(
        hidden_size=hidden,
        num_hidden_layers=int(req("block_count", what="draft layers")),
        num_attention_heads=heads,
        num_key_value_heads=int(opt("attention.head_count_kv", int, heads)),
        head_dim=int(opt("attention.key_length", int, hidden // max(1, heads))),
        intermediate_size=int(req("feed_forward_length", what="MLP size")),
        vocab_size=len(tokens),
        num_target_layers=0,
        target_layer_ids=tuple(int(i) - 1 for i in layers),
        block_size=int(opt("block_size", int, 16)),
        mask_token_id=meta(g, "tokenizer.ggml.mask_token_id", int, "the mask token", None),
        rms_norm_eps=float(req("attention.layer_norm_rms_epsilon", float, "norm epsilon")),
        rope_theta=float(opt("rope.freq_base", float, 10000.0)),
        max_position_embeddings=int(opt("context_length", int, 40960)),
        conv_kernel_size=int(opt("conv_kernel_size", int, 0)),
        conv_group_size=int(opt("conv_group_size", int, 0)),
        selector_rank=int(opt("selector_rank", int, 0)),
        selector_top_k=int(opt("selector_top_k", int, 0)),
        causal=bool(opt("attention.causal", bool, False)),
        attention_value_scale=float(opt("attention.value_scale", float, 0.0)),
        output_multiplier=float(opt("logit_scale", float, 0.0)),
        final_logit_softcapping=float(opt("final_logit_softcapping", float, 0.0)),
        input_embedding_scale=float(opt("embedding_scale", float, 0.0)),
    )
    if "selector_hidden.weight" in g.tensors and not cfg.reference_dflash2:
        raise GGUFImportError(
            f"{g.path.name}: DFlash2 selector tensors without conv/selector metadata "
            "(llama.cpp: 'DFlash2 model is missing conv/selector metadata')."
        )
    problem = cfg.problem()
    if problem:
        raise GGUFImportError(f"{g.path.name}: {problem}")
    return cfg
