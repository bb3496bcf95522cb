"""z-lab's MLX DFlash loop (PyPI ``dflash``, ``dflash/model_mlx.py``) as a benchmark baseline.

Optional: used only when that package is importable. Its loader downloads from the hub, so
the drafter is exported in DFlash v1 layout and built from its own classes here; its loop
patches the target model's layers, so it gets a model instance of its own.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx

from engine_mlx.models.dflash import DFlashModel, save_dflash


def zlab_available() -> bool:
    try:
        import dflash.model_mlx  # noqa: F401
    except ImportError:
        return False
    return True


def make_zlab_runner(
    target_path: Path, drafter: DFlashModel, mask_id: int, dtype: mx.Dtype, block: int
) -> Callable[[list[int], int], dict[str, Any]]:
    """A runner with the bench's signature: (prompt ids, max tokens) -> measurements."""
    from dflash import model_mlx as zl
    from mlx_lm import load

    folder = save_dflash(drafter, Path(tempfile.mkdtemp()) / "v1", v1=True)
    cfg = drafter.config
    zcfg = zl.DFlashConfig(
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        intermediate_size=cfg.intermediate_size,
        vocab_size=cfg.vocab_size,
        rms_norm_eps=cfg.rms_norm_eps,
        rope_theta=cfg.rope_theta,
        max_position_embeddings=cfg.max_position_embeddings,
        block_size=block,
        target_layer_ids=tuple(cfg.target_layer_ids),
        num_target_layers=cfg.num_target_layers,
        mask_token_id=mask_id,
        rope_scaling=cfg.rope_scaling,
    )
    draft = zl.DFlashDraftModel(zcfg)
    draft.load_weights(list(mx.load(str(folder / "model.safetensors")).items()))
    draft.set_dtype(dtype)
    model, tokenizer = load(str(target_path))
    model.set_dtype(dtype)
    tokenizer.eos_token_ids = set()  # like the other runners: always max_tokens

    def run(prompt: list[int], max_tokens: int) -> dict[str, Any]:
        start = time.perf_counter()
        first = last = None
        out: list[int] = []
        steps = 0
        for response in zl.stream_generate(
            model, draft, tokenizer, mx.array(prompt), block_size=block, max_tokens=max_tokens
        ):
            now = time.perf_counter()
            first = first or now
            last = now
            out.extend(response.tokens)
            steps += 1 if response.tokens else 0
        out = out[:max_tokens]
        ttft = first - start
        return {
            "prefill_tps": len(prompt) / ttft,
            "ttft_s": ttft,
            "decode_tps": (len(out) - 1) / (last - first) if len(out) > 1 else 0.0,
            "tau": len(out) / max(1, steps),
            "tokens": len(out),
            "output": out,
        }

    return run
