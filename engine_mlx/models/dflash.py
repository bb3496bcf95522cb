"""The DFlash block-diffusion drafter: v1, llama.cpp's DFlash2, and FlashChat's first variant.

One model covers all three. It loads z-lab DFlash checkpoints unchanged (``config.json`` with
``dflash_config``; weights ``fc``, ``hidden_norm``, ``norm`` and ``layers.*``, with or without
a ``model.`` prefix, no embedding and no head: the target's are used). llama.cpp's DFlash2
(``DFlash2DraftModel``: ``dflash_config`` with ``conv_kernel_size``, ``conv_group_size``,
``selector_rank`` and ``selector_top_k``) adds a dynamic convolution around every sublayer
and a candidate selector (``models.dflash2``). FlashChat's first DFlash2 variant
(``local_conv_kernel``: a fixed depthwise convolution before each layer, weights
``layers.{i}.local_conv.weight [H, k]``) stays loadable until a measurement retires it.

Written here rather than taken from a library: mlx-lm has no DFlash model, and the reference
MLX code patches the target; this one is a plain module fed by captured target features.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models.qwen3 import MLP
from mlx_lm.models.rope_utils import initialize_rope

from engine_mlx.errors import ModelLoadError
from engine_mlx.kernels import local_conv
from engine_mlx.models import attention
from engine_mlx.models.dflash2 import CandidateSelector, DynamicConv
from engine_mlx.models.loading import check_safetensors, read_config
from engine_mlx.models.metadata import check_config
from engine_mlx.models.weights import weight_mismatch


class DrafterMismatchError(ModelLoadError):
    """The drafter does not fit the target (sizes, vocabulary, layers, mask token)."""


@dataclass(frozen=True)
class DFlashConfig:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_target_layers: int
    target_layer_ids: tuple[int, ...]
    block_size: int = 16
    mask_token_id: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40960
    rope_scaling: dict[str, Any] | None = None
    local_conv_kernel: int = 0  # FlashChat's first DFlash2 variant; 0 = none
    # llama.cpp's DFlash2 (all four or none): the dynamic convolution and the selector
    conv_kernel_size: int = 0
    conv_group_size: int = 0
    selector_rank: int = 0
    selector_top_k: int = 0
    causal: bool = False  # attention inside the block; the reference's default: both ways
    attention_value_scale: float = 0.0  # 0: none (llama.cpp's convention for these four)
    output_multiplier: float = 0.0  # the logit scale
    final_logit_softcapping: float = 0.0
    input_embedding_scale: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)  # kept on save

    @property
    def reference_dflash2(self) -> bool:
        """llama.cpp's DFlash2: the dynamic convolution and the selector."""
        return self.selector_top_k > 0

    @classmethod
    def from_dict(cls, cfg: dict[str, Any], where: str = "config.json") -> DFlashConfig:
        check_config(cfg, where)
        try:
            dflash = cfg.get("dflash_config") or {}
            n_layers = int(cfg["num_hidden_layers"])
            n_target = int(cfg.get("num_target_layers") or 0)
            ids = dflash.get("target_layer_ids") or cfg.get("target_layer_ids")
            if ids is None:
                if n_target < 4:
                    raise KeyError("target_layer_ids (and num_target_layers to derive them)")
                ids = default_target_layer_ids(n_target, n_layers)
            heads = int(cfg["num_attention_heads"])
            known = {f for f in cls.__dataclass_fields__ if f != "extra"}

            def either(key: str, default: Any) -> Any:  # dflash_config first, as llama.cpp
                value = dflash.get(key, cfg.get(key))
                return default if value is None else value

            causal = cfg.get("is_causal", dflash.get("causal"))
            config = cls(
                hidden_size=int(cfg["hidden_size"]),
                num_hidden_layers=n_layers,
                num_attention_heads=heads,
                num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads),
                intermediate_size=int(cfg["intermediate_size"]),
                vocab_size=int(cfg["vocab_size"]),
                num_target_layers=n_target,
                target_layer_ids=tuple(int(i) for i in ids),
                block_size=int(either("block_size", 16)),
                mask_token_id=dflash.get("mask_token_id", cfg.get("mask_token_id")),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                rope_theta=float(cfg.get("rope_theta", 1_000_000.0)),
                max_position_embeddings=int(cfg.get("max_position_embeddings", 40960)),
                rope_scaling=cfg.get("rope_scaling"),
                local_conv_kernel=int(dflash.get("local_conv_kernel", 0) or 0),
                conv_kernel_size=int(dflash.get("conv_kernel_size", 0) or 0),
                conv_group_size=int(dflash.get("conv_group_size", 0) or 0),
                selector_rank=int(dflash.get("selector_rank", 0) or 0),
                selector_top_k=int(dflash.get("selector_top_k", 0) or 0),
                causal=bool(causal) if causal is not None else False,
                attention_value_scale=float(dflash.get("attention_value_scale") or 0.0),
                output_multiplier=float(either("output_multiplier", 0.0)),
                final_logit_softcapping=float(either("final_logit_softcapping", 0.0)),
                input_embedding_scale=float(either("input_embedding_scale", 0.0)),
                extra={k: v for k, v in cfg.items() if k not in known and k != "dflash_config"},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelLoadError(f"{where}: not a DFlash drafter config ({exc}).") from exc
        problem = config.problem()
        if problem:
            raise ModelLoadError(f"{where}: {problem}")
        return config

    def problem(self) -> str:
        """Why these hyperparameters cannot make a drafter ("" when they can)."""
        dflash2 = {
            "conv_kernel_size": self.conv_kernel_size,
            "conv_group_size": self.conv_group_size,
            "selector_rank": self.selector_rank,
            "selector_top_k": self.selector_top_k,
        }
        if any(dflash2.values()):
            missing = [k for k, v in dflash2.items() if v <= 0]
            if missing:
                return (
                    "a DFlash2 drafter needs conv_kernel_size, conv_group_size, selector_rank "
                    f"and selector_top_k together (missing or not positive: {', '.join(missing)})."
                )
            if self.hidden_size % self.conv_group_size:
                return (
                    f"conv_group_size {self.conv_group_size} does not divide the hidden size "
                    f"{self.hidden_size}."
                )
            k = self.selector_top_k
            if self.hidden_size < k * (k + 1):
                return (
                    f"selector_top_k {k} needs a hidden size of at least k*(k+1) = {k * (k + 1)} "
                    f"(llama.cpp packs the selector's scores into one hidden-wide row); this "
                    f"drafter's is {self.hidden_size}."
                )
            if self.local_conv_kernel:
                return "local_conv_kernel (FlashChat's first variant) cannot join a DFlash2 config."
        if self.block_size < 2:
            return f"block_size {self.block_size}: a block holds the anchor and at least one mask."
        return ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        extra = d.pop("extra")
        dflash: dict[str, Any] = {"target_layer_ids": list(self.target_layer_ids)}
        moved = (
            "mask_token_id", "local_conv_kernel", "target_layer_ids", "conv_kernel_size",
            "conv_group_size", "selector_rank", "selector_top_k", "causal",
            "attention_value_scale", "output_multiplier", "final_logit_softcapping",
            "input_embedding_scale",
        )  # fmt: skip
        for key in moved:
            d.pop(key)
        if self.mask_token_id is not None:
            dflash["mask_token_id"] = self.mask_token_id
        if self.local_conv_kernel:
            dflash["local_conv_kernel"] = self.local_conv_kernel
        if self.reference_dflash2:
            dflash |= {
                "block_size": self.block_size,
                "conv_kernel_size": self.conv_kernel_size,
                "conv_group_size": self.conv_group_size,
                "selector_rank": self.selector_rank,
                "selector_top_k": self.selector_top_k,
            }
        for key in ("attention_value_scale", "output_multiplier", "final_logit_softcapping",
                    "input_embedding_scale"):  # fmt: skip
            if getattr(self, key):
                dflash[key] = getattr(self, key)
        if self.causal:
            dflash["causal"] = True
        arch = "DFlash2DraftModel" if self.reference_dflash2 else "DFlashDraftModel"
        base = {
            "architectures": [arch],
            "model_type": "qwen3",
            "tie_word_embeddings": True,
            "layer_types": ["full_attention"] * self.num_hidden_layers,
        }
        return {**base, **extra, **d, "architectures": [arch], "dflash_config": dflash}


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """Evenly from 1 to n_target-3, as z-lab's older drafts assume (36, 5 -> 1,9,17,25,33)."""
    if num_draft_layers == 1:
        return [1]
    last = num_target_layers - 3
    step = (last - 1) / (num_draft_layers - 1)
    return [round(1 + i * step) for i in range(num_draft_layers)]


class LocalConv(nn.Module):
    """Depthwise causal convolution along the block axis (DFlash2). The op itself is
    ``kernels.local_conv`` (its kernel on a GPU, its MLX reference on the CPU): one
    definition for the drafter, training and the kernel."""

    def __init__(self, hidden: int, kernel: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = mx.zeros((hidden, kernel))
        if bias:
            self.bias = mx.zeros((hidden,))

    def __call__(self, x: mx.array) -> mx.array:
        bias = self.bias if "bias" in self else None
        if self.training:  # kernels have no gradients: training differentiates the reference
            return local_conv.reference(x, self.weight, bias)
        return local_conv.run(x, self.weight, bias)


class DFlashAttention(nn.Module):
    def __init__(self, cfg: DFlashConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.n_heads, self.n_kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.scale = d**-0.5
        self.q_proj = nn.Linear(h, self.n_heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.n_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.n_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.n_heads * d, h, bias=False)
        self.q_norm = nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        self.k_norm = nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        self.causal = cfg.causal

    def _heads(self, x: mx.array, n: int) -> mx.array:
        b, length, _ = x.shape
        return x.reshape(b, length, n, -1).transpose(0, 2, 1, 3)

    def context_kv(self, ctx: mx.array, rope: nn.Module, offset: int) -> tuple[mx.array, mx.array]:
        """Keys/values of context features (projected once per committed token)."""
        keys = rope(self.k_norm(self._heads(self.k_proj(ctx), self.n_kv_heads)), offset=offset)
        return keys, self._heads(self.v_proj(ctx), self.n_kv_heads)

    def __call__(
        self,
        x: mx.array,
        ctx_k: mx.array,
        ctx_v: mx.array,
        rope: nn.Module,
        offset: int | mx.array,
        mask: mx.array | None = None,
    ) -> mx.array:
        """Blocks ``x`` [S*M, B, H] against the context of S sequences (``ctx_k`` [S, kv, T,
        d]): M blocks per sequence, each at its own ``offset`` ([S*M], or one int). Drafting
        is S = M = 1 with no mask; training packs many blocks per sequence, and ``mask``
        [S, 1, M*B, T+M*B] keeps each block to its own context prefix and itself."""
        blocks, length, _ = x.shape
        seqs = ctx_k.shape[0]
        per_seq = blocks // seqs

        def pack(t: mx.array) -> mx.array:  # [S*M, n, B, d] -> [S, n, M*B, d]
            n, d = t.shape[1], t.shape[3]
            t = t.reshape(seqs, per_seq, n, length, d).transpose(0, 2, 1, 3, 4)
            return t.reshape(seqs, n, per_seq * length, d)

        q = pack(rope(self.q_norm(self._heads(self.q_proj(x), self.n_heads)), offset=offset))
        k = pack(rope(self.k_norm(self._heads(self.k_proj(x), self.n_kv_heads)), offset=offset))
        v = pack(self._heads(self.v_proj(x), self.n_kv_heads))
        keys = mx.concatenate([ctx_k, k], axis=2)
        values = mx.concatenate([ctx_v, v], axis=2)
        if mask is None and self.causal and length > 1:
            mask = attention.block_causal_mask(ctx_k.shape[2], length)
        out = attention.attend(q, keys, values, self.scale, mask)
        out = out.reshape(seqs, self.n_heads, per_seq, length, -1).transpose(0, 2, 3, 1, 4)
        return self.o_proj(out.reshape(blocks, length, -1))


class DFlashLayer(nn.Module):
    def __init__(self, cfg: DFlashConfig) -> None:
        super().__init__()
        self.self_attn = DFlashAttention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.value_scale = cfg.attention_value_scale
        if cfg.local_conv_kernel:
            self.local_conv = LocalConv(cfg.hidden_size, cfg.local_conv_kernel)
        if cfg.conv_kernel_size:
            size, group = cfg.conv_kernel_size, cfg.conv_group_size
            self.attention_conv = DynamicConv(cfg.hidden_size, size, group)
            self.mlp_conv = DynamicConv(cfg.hidden_size, size, group)

    def __call__(
        self,
        x: mx.array,
        ctx_k: mx.array,
        ctx_v: mx.array,
        rope: nn.Module,
        offset: int | mx.array,
        mask: mx.array | None = None,
    ) -> mx.array:
        if "local_conv" in self:
            x = x + self.local_conv(x)
        dynamic = "attention_conv" in self
        a = self.input_layernorm(x)
        if dynamic:
            coeffs = self.attention_conv.coefficients(a)
            a = self.attention_conv(a, coeffs, side=0)
        o = self.self_attn(a, ctx_k, ctx_v, rope, offset, mask)
        if self.value_scale:
            o = o * self.value_scale
        if dynamic:
            o = self.attention_conv(o, coeffs, side=1)
        h = x + o
        f = self.post_attention_layernorm(h)  # Qwen's name for the norm before the MLP
        if dynamic:
            coeffs = self.mlp_conv.coefficients(f)
            f = self.mlp_conv(f, coeffs, side=0)
        m = self.mlp(f)
        if dynamic:
            m = self.mlp_conv(m, coeffs, side=1)
        return h + m


class DFlashModel(nn.Module):
    """Block in (embedded by the target), hidden states out (the target's head decodes)."""

    def __init__(self, cfg: DFlashConfig) -> None:
        super().__init__()
        self.config = cfg
        self.fc = nn.Linear(
            len(cfg.target_layer_ids) * cfg.hidden_size, cfg.hidden_size, bias=False
        )
        self.hidden_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.layers = [DFlashLayer(cfg) for _ in range(cfg.num_hidden_layers)]
        self.norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        if cfg.reference_dflash2:
            self.candidate_selector = CandidateSelector(
                cfg.hidden_size, cfg.vocab_size, cfg.selector_rank
            )
        self.rope = initialize_rope(
            cfg.head_dim,
            base=cfg.rope_theta,
            traditional=False,
            scaling_config=cfg.rope_scaling,
            max_position_embeddings=cfg.max_position_embeddings,
        )

    def project_context(self, features: list[mx.array]) -> mx.array:
        """Captured target layer outputs -> the drafter's context states."""
        return self.hidden_norm(self.fc(mx.concatenate(features, axis=-1)))

    def __call__(
        self,
        block: mx.array,
        ctx_kv: list[tuple[mx.array, mx.array]],
        offset: int | mx.array,
        mask: mx.array | None = None,
    ) -> mx.array:
        """Hidden states of ``block`` (see ``DFlashAttention`` for packed training blocks)."""
        h = (
            block * self.config.input_embedding_scale
            if self.config.input_embedding_scale
            else block
        )
        for layer, (k, v) in zip(self.layers, ctx_kv, strict=True):
            h = layer(h, k, v, self.rope, offset, mask)
        return self.norm(h)


def load_dflash(path: str | Path) -> DFlashModel:
    """Load a DFlash drafter checkpoint folder: z-lab's v1, llama.cpp's DFlash2 in Hugging
    Face layout, or FlashChat's first variant (a GGUF: ``models.drafters.load_drafter``)."""
    folder = Path(path).expanduser()
    cfg_file = folder / "config.json"
    if not cfg_file.is_file():
        raise ModelLoadError(f"{folder.name}: config.json is missing; is this a drafter folder?")
    cfg = DFlashConfig.from_dict(read_config(folder), f"{folder.name}/config.json")
    files = sorted(folder.glob("model*.safetensors"))  # not a trainer's state beside them
    if not files:
        raise ModelLoadError(f"{folder.name}: no .safetensors weights found.")
    weights: dict[str, mx.array] = {}
    for file in files:
        check_safetensors(file)
        weights.update(mx.load(str(file)))
    weights = {_our_name(k): v for k, v in weights.items()}
    has_conv_bias = any(k.endswith("local_conv.bias") for k in weights)
    model = DFlashModel(cfg)
    if has_conv_bias:
        for layer in model.layers:
            if "local_conv" in layer:
                layer.local_conv.bias = mx.zeros((cfg.hidden_size,))
    problem = weight_mismatch(model, weights)
    if problem:
        raise ModelLoadError(f"{folder.name}: {problem} (from config.json)")
    expected = dict(tree_flatten(model.parameters()))
    unknown = sorted(k for k in weights if k not in expected)
    if unknown:
        raise ModelLoadError(
            f"{folder.name}: weights this drafter cannot use: {', '.join(unknown[:5])} "
            "(a drafter's own embedding, head or reduced vocabulary is not supported yet)."
        )
    model.load_weights(list(weights.items()))
    mx.eval(model.parameters())
    model.eval()  # inference: kernels where a GPU backend runs them (training resumes train())
    return model


def _our_name(name: str) -> str:
    """A checkpoint's tensor name as this module's parameter name: no ``model.`` prefix,
    and the selector's codebooks with or without the ``.weight`` llama.cpp's converter adds."""
    name = name.removeprefix("model.")
    if name.startswith("candidate_selector.") and name.endswith("_codebook.weight"):
        name = name.removesuffix(".weight")
    return name


def save_dflash(model: DFlashModel, path: str | Path, *, v1: bool = False) -> Path:
    """Write our format (or z-lab's v1 layout, dropping the convolution, with ``v1``)."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = model.config
    weights = dict(tree_flatten(model.parameters()))
    if v1:
        weights = {k: v for k, v in weights.items() if ".local_conv." not in k}
        cfg = replace(cfg, local_conv_kernel=0)
    (folder / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    return folder
