"""The architecture mapping: Q/K un-permutation and Llama 3 RoPE scaling."""

from __future__ import annotations

from types import SimpleNamespace

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.models.gguf import architecture
from tests.engine_mlx.models.gguf.synthetic import (
    HEADS,
    llama3_rope_factors,
    llama_cpp_row_order,
    load_weights,
)


@pytest.mark.parametrize(("rows", "heads"), [(64, 4), (32, 2), (576, 9), (192, 3), (8, 1)])
def test_unpermute_inverts_llama_cpp_permutation_exactly(rows: int, heads: int) -> None:
    hf = np.random.default_rng(rows).standard_normal((rows, 5)).astype(np.float32)
    gguf_rows = hf[llama_cpp_row_order(rows, heads)]
    assert not np.array_equal(gguf_rows, hf) or rows // heads == 2
    back = np.array(architecture.unpermute_qk(mx.array(gguf_rows), heads))
    assert np.array_equal(back, hf)  # bit-exact: a pure row shuffle


def test_tiny_f32_permuted_tensor_is_bit_exact_original(
    tiny_import: SimpleNamespace, hf_weights: dict[str, np.ndarray]
) -> None:
    got = load_weights(tiny_import.folder)
    name = "model.layers.0.self_attn.q_proj.weight"  # stored F32 and permuted in both GGUFs
    assert np.array_equal(got[name], hf_weights[name])
    assert not np.array_equal(got[name], hf_weights[name][llama_cpp_row_order(64, HEADS)])


def test_llama3_rope_table_is_recognised() -> None:
    spec = SimpleNamespace(head_dim=64, rope_theta=500000.0)
    params = {"factor": 32.0, "low": 1.0, "high": 4.0, "original": 8192}
    table = llama3_rope_factors(64, 500000.0, params)
    got = architecture._llama3_scaling(table, spec, 8192)  # type: ignore[arg-type]
    assert got is not None and got["factor"] == 32.0 and got["high_freq_factor"] == 4.0
    assert architecture._llama3_scaling(table * 1.5, spec, 8192) is None  # type: ignore[arg-type]
