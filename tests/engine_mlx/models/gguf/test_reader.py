"""The reader: exact dequantization on both tensor paths, and no crash on damaged headers."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from engine_mlx.errors import GGUFImportError
from engine_mlx.models.gguf import import_gguf
from engine_mlx.models.gguf.reader import read_gguf
from tests.engine_mlx.models.gguf.synthetic import load_weights


def test_tiny_weights_match_reference_dequantization(tiny_import: SimpleNamespace) -> None:
    got = load_weights(tiny_import.folder)
    expected = tiny_import.expected
    assert sorted(got) == sorted(expected)
    for name, ref in expected.items():
        assert got[name].shape == ref.shape, name
        # float32 import of llama.cpp-exact dequantization: equal to the last bit.
        assert np.array_equal(got[name], ref), f"{name}: max diff {np.abs(got[name] - ref).max()}"
    assert ("lm_head.weight" in got) == (tiny_import.variant == "mlx")


def test_corrupted_headers_only_ever_raise_gguf_import_error(
    tmp_path: Path, mlx_gguf: Path
) -> None:
    """Random byte damage in the header: either a clean import or a GGUFImportError, no crash."""
    original = mlx_gguf.read_bytes()
    header_end = read_gguf(mlx_gguf).data_start
    rng = np.random.default_rng(7)
    outcomes = {"ok": 0, "error": 0}
    for k in range(40):
        damaged = bytearray(original)
        for pos in rng.integers(4, header_end, size=int(rng.integers(1, 4))):
            damaged[pos] = int(rng.integers(0, 256))
        path = tmp_path / f"damaged{k}.gguf"
        path.write_bytes(bytes(damaged))
        try:
            import_gguf(path, tmp_path / f"out{k}", dtype="float32")
            outcomes["ok"] += 1
        except GGUFImportError as exc:
            assert path.name in str(exc)
            outcomes["error"] += 1
        path.unlink()
    assert outcomes["error"] > 20
