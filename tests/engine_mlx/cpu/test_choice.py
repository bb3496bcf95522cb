"""The BLAS choice: measured once, cached per machine, and robust to a library that fails."""

from __future__ import annotations

import pytest

from engine_mlx.cpu import choice, libraries
from engine_mlx.cpu.libraries import Candidate


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def _candidates(tmp_path, *names: str) -> list[Candidate]:
    out = []
    for name in names:
        path = tmp_path / f"lib{name}.so"
        path.write_bytes(name.encode())
        out.append(Candidate(name, (str(path),)))
    return out


def test_the_fastest_is_picked_and_cached(cache_home, monkeypatch):
    timings = {"openblas": 40.0, "mkl": 25.0, "blis": 90.0}
    measured = []

    def fake_measure(candidate):
        measured.append(candidate.name)
        return {"prefill_ms": timings[candidate.name], "decode_ms": 1.0}

    monkeypatch.setattr(choice, "measure", fake_measure)
    candidates = _candidates(cache_home, "openblas", "mkl", "blis")
    picked = choice.choose(candidates, small_gemm=True)
    assert picked.name == "mkl"
    assert picked.reason == "measured fastest here: MKL 25 ms, OpenBLAS 40 ms, BLIS 90 ms"
    assert sorted(measured) == ["blis", "mkl", "openblas"]
    measured.clear()
    assert choice.choose(candidates, small_gemm=True) == picked  # from the cache
    assert measured == []
    # An upgraded library (its file changed) is measured again.
    (cache_home / "libblis.so").write_bytes(b"a newer blis")
    choice.choose(candidates, small_gemm=True)
    assert sorted(measured) == ["blis", "mkl", "openblas"]


def test_without_the_small_batch_product_decoding_counts(cache_home, monkeypatch):
    timings = {"openblas": (40.0, 0.5), "mkl": (30.0, 1.0)}  # MKL prefills faster, decodes slower
    monkeypatch.setattr(
        choice,
        "measure",
        lambda c: {"prefill_ms": timings[c.name][0], "decode_ms": timings[c.name][1]},
    )
    candidates = _candidates(cache_home, "openblas", "mkl")
    assert choice.choose(candidates, small_gemm=True).name == "mkl"
    assert choice.choose(candidates, small_gemm=False).name == "openblas"


def test_a_library_whose_probe_fails_is_skipped(cache_home, monkeypatch):
    def fake_measure(candidate):
        if candidate.name == "mkl":
            raise RuntimeError("the probe failed: OSError: libiomp5.so")
        return {"prefill_ms": 50.0, "decode_ms": 1.0}

    monkeypatch.setattr(choice, "measure", fake_measure)
    picked = choice.choose(_candidates(cache_home, "mkl", "openblas"), small_gemm=True)
    assert picked.name == "openblas"


def test_one_library_is_not_measured(cache_home, monkeypatch):
    monkeypatch.setattr(choice, "measure", lambda c: pytest.fail("measured"))
    picked = choice.choose(_candidates(cache_home, "openblas"), small_gemm=True)
    assert picked == choice.Choice("openblas", "the only BLAS installed")


def test_a_damaged_cache_file_is_measured_again(cache_home, monkeypatch):
    monkeypatch.setattr(choice, "measure", lambda c: {"prefill_ms": 1.0, "decode_ms": 1.0})
    choice.cache_file().parent.mkdir(parents=True)
    choice.cache_file().write_text("{not json")
    picked = choice.choose(_candidates(cache_home, "openblas", "blis"), small_gemm=True)
    assert picked.name in ("openblas", "blis")


@pytest.mark.slow  # a process of its own, timing a 512-token prefill
def test_the_real_probe_measures_the_loaded_blas():
    """One real probe run, in its own process, on a library this machine has."""
    found = libraries.available()
    if not found:
        pytest.skip("no BLAS library installed")
    timings = choice.measure(found[0])
    assert timings["prefill_ms"] > 0 and timings["decode_ms"] > 0
    assert timings["library"].startswith(found[0].label)


def test_each_setting_keeps_its_own_pick(cache_home, monkeypatch):
    """A process without the small-batch product (no compiler, FLASHCHAT_SMALL_GEMM=0) does not
    evict the pick of one with it: switching back and forth measures each once."""
    measured = []

    def fake_measure(candidate):
        measured.append(candidate.name)
        return {"prefill_ms": 10.0, "decode_ms": 1.0}

    monkeypatch.setattr(choice, "measure", fake_measure)
    candidates = _candidates(cache_home, "openblas", "mkl")
    with_small = choice.choose(candidates, small_gemm=True)
    without = choice.choose(candidates, small_gemm=False)
    assert len(measured) == 4
    assert choice.choose(candidates, small_gemm=True) == with_small
    assert choice.choose(candidates, small_gemm=False) == without
    assert len(measured) == 4
