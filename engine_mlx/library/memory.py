"""What a model needs in memory to run here, estimated from its config before any download,
and how much this machine can give it: the RAM, or on an Apple-Silicon Mac the share of its
unified memory that Metal lets the GPU hold."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from engine_mlx.models.loading import text_config

ESTIMATE_CONTEXT = 8192
"""Memory estimates budget the context cache of an 8k-token conversation (or the model's
whole context when it is shorter): enough to chat, without assuming the maximum."""
RUNTIME_OVERHEAD = 400 * 1000**2
"""MLX, the tokenizer and activations: measured around 300-400 MB for small models."""
LOGIT_ROWS = 64
"""Rows of logits a step may hold at once: the widest draft tree the engine verifies."""


def physical_memory() -> int | None:
    """This machine's RAM in bytes (None when the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def unified_memory() -> bool:
    """An Apple-Silicon Mac: the GPU computes in the memory the CPU uses."""
    return sys.platform == "darwin" and platform.machine() == "arm64"


def usable_memory() -> int | None:
    """What a model may take here: on a Mac's GPU, Metal's recommended working set (macOS
    keeps about a quarter of unified memory for itself); elsewhere the RAM."""
    if unified_memory():
        import mlx.core as mx

        if mx.metal.is_available():
            info = mx.device_info(mx.gpu)
            size = info.get("max_recommended_working_set_size") or info.get("memory_size")
            if isinstance(size, int) and size > 0:
                return size
    return physical_memory()


def attention_layers(tc: dict[str, Any]) -> int:
    """Layers that keep a key/value cache (hybrid models' linear layers keep a fixed state)."""
    layers = int(tc.get("num_hidden_layers") or 0)
    types = tc.get("layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types if "linear" not in str(t) and "attention" in str(t))
    interval = int(tc.get("full_attention_interval") or 0)
    return layers // interval if interval > 1 else layers


def estimate_memory(config: dict[str, Any], weight_bytes: int) -> int:
    """Bytes needed to run: the weights as stored (MLX maps them as they are, quantized or
    not), a float16 key/value cache for ``ESTIMATE_CONTEXT`` tokens, the float32 logits of a
    verify forward (``LOGIT_ROWS`` rows of the vocabulary, with the sampler's copy) and the
    runtime."""
    tc = text_config(config)
    logits = 2 * LOGIT_ROWS * int(tc.get("vocab_size") or 0) * 4
    heads = int(tc.get("num_attention_heads") or 1)
    kv_heads = int(tc.get("num_key_value_heads") or heads)
    head_dim = int(tc.get("head_dim") or int(tc.get("hidden_size") or 0) // max(heads, 1))
    context = min(int(tc.get("max_position_embeddings") or 4096), ESTIMATE_CONTEXT)
    kv_bytes = 2 * attention_layers(tc) * kv_heads * head_dim * 2 * context
    return int(weight_bytes * 1.05) + kv_bytes + logits + RUNTIME_OVERHEAD
