"""Tiny random-weight models in Hugging Face layout, with a byte-level BPE tokenizer trained
offline and a ChatML chat template: they exercise the real loading code in milliseconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK_TOKENS = ["<think>", "</think>"]
# Qwen3's template, reduced to what thinking needs: earlier turns lose their reasoning, and
# enable_thinking=false appends an empty block after the generation prompt. "qwen3" lets the
# model open the block itself; "qwen3_5" opens it in the generation prompt.
_THINKING_HISTORY = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{% set content = message['content'] %}"
    "{% if '</think>' in content %}"
    "{% set content = content.split('</think>')[-1].lstrip('\n') %}"
    "{% endif %}"
    "{{ '<|im_start|>assistant\n' + content + '<|im_end|>\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}"
    "{% endfor %}"
)
THINKING_TEMPLATES = {
    "qwen3": _THINKING_HISTORY + "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\n\n</think>\n\n' }}{% endif %}{% endif %}",
    "qwen3_5": _THINKING_HISTORY + "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\n\n</think>\n\n' }}{% else %}{{ '<think>\n' }}{% endif %}{% endif %}",
}

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b\n",
    "Speculative decoding drafts several tokens and verifies them in one forward pass.",
    "Two plus two is four. Seven times six is forty-two.",
    "Héllo wörld: ünïcödé, 日本語, emoji 🙂 and math ∑ x² ≤ π.",
    "FlashChat runs Qwen models on MLX with a block-diffusion drafter.",
]

ARCH_CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
    },
    "qwen2": {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
    },
    "qwen3": {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
    },
    "qwen3_5": {
        "model_type": "qwen3_5",
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "full_attention_interval": 2,
        "linear_num_value_heads": 4,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "tie_word_embeddings": False,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
        },
    },
}


def write_tokenizer(out: Path, vocab_size: int = 320, thinking: str | None = None) -> int:
    """Train a byte-level BPE on a built-in corpus; write tokenizer files; return its size.
    ``thinking`` ("qwen3" or "qwen3_5"): thinking markers and that style's template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS + (THINK_TOKENS if thinking else []),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "chat_template": THINKING_TEMPLATES[thinking] if thinking else CHAT_TEMPLATE,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "bos_token": None,
                "model_max_length": 512,
            }
        )
    )
    return tok.get_vocab_size()


def checkpoint_dtype() -> str:
    """float16 where the suite runs the GPU path (``FLASHCHAT_PATH=gpu``): the engine then
    computes in the checkpoint's dtype, as on a Mac, whose models are half precision."""
    from engine_mlx import compute_path

    return "float16" if compute_path.requested() == "gpu" else "float32"


def build_tiny_model(
    arch: str,
    out: Path,
    *,
    seed: int = 0,
    max_context: int = 512,
    chat_template: bool = True,
    vocab_size: int | None = None,
    head_dim: int | None = None,
    thinking: str | None = None,
    sizes: dict[str, Any] | None = None,
    dtype: str | None = None,
) -> Path:
    """Write config.json, model.safetensors and tokenizer files for ``arch`` into ``out``.

    ``vocab_size`` smaller than the tokenizer's makes a tiny-vocabulary model for
    distribution tests (prompts are then given as ids); ``head_dim`` overrides the
    attention head size (the tree-verify kernel takes 64 and 128); ``sizes`` overrides any
    other config field (a bigger random model for a benchmark); ``dtype`` is the checkpoint's
    (default ``checkpoint_dtype()``: half precision on the GPU path, as a Mac's models are)."""
    from mlx_lm.utils import _get_classes

    vocab = write_tokenizer(out, thinking=thinking)
    if not chat_template:
        cfg_file = out / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text())
        cfg.pop("chat_template")
        cfg_file.write_text(json.dumps(cfg))
    eos = json.loads((out / "tokenizer.json").read_text())["added_tokens"][2]["id"]
    config = {
        **ARCH_CONFIGS[arch],
        "vocab_size": vocab_size or vocab,
        "max_position_embeddings": max_context,
        "eos_token_id": eos,
        "torch_dtype": dtype or checkpoint_dtype(),
        **({"head_dim": head_dim} if head_dim else {}),
        **(sizes or {}),
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))
    model_cls, args_cls = _get_classes(config)
    mx.random.seed(seed)
    model = model_cls(args_cls.from_dict(config))
    weights = {
        name: value.astype(getattr(mx, config["torch_dtype"]))
        for name, value in tree_flatten(model.parameters())
    }
    if arch == "qwen3_5":
        weights = _to_hf_qwen3_5(weights)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "pt"})
    return out


def _to_hf_qwen3_5(weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """mlx-lm layout -> the Hugging Face checkpoint layout mlx-lm's sanitize expects:
    `model.language_model.*` names, torch conv1d layout, zero-centred RMSNorm weights."""
    norm_suffixes = (
        ".input_layernorm.weight",
        ".post_attention_layernorm.weight",
        "model.norm.weight",
        ".q_norm.weight",
        ".k_norm.weight",
    )
    hf: dict[str, mx.array] = {}
    for key, value in weights.items():
        name = key.replace("language_model.model.", "model.language_model.")
        name = name.replace("language_model.lm_head", "lm_head")
        if "conv1d.weight" in key:
            value = value.moveaxis(2, 1)
        elif any(key.endswith(s) for s in norm_suffixes) and value.ndim == 1:
            value = value - 1.0
        hf[name] = value
    return hf
