"""A kernel that does not compile, or computes something else, is switched off on its first call:
the op answers with its reference, says which kernel and why, and never tries it again; a
kernel that agrees keeps running. On the emulator path, with the kernel's source swapped."""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.backend import KERNEL_SWITCH, kernel_description
from engine_mlx.kernels import launch, local_conv, self_check
from metal_kernels import sources


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setenv(KERNEL_SWITCH, "emulate")
    self_check.reset()
    yield
    self_check.reset()


def _inputs():
    rng = np.random.default_rng(4)
    x = mx.array(rng.standard_normal((1, 6, 40), dtype=np.float32))
    w = mx.array(rng.standard_normal((40, 3), dtype=np.float32))
    return x, w


def _swap_body(monkeypatch, body: str) -> list[str]:
    """The local convolution's source with ``body``; returns the names its source was asked for."""
    real = sources.kernel
    asked: list[str] = []

    def kernel(name: str) -> sources.KernelSource:
        asked.append(name)
        source = real(name)
        return dataclasses.replace(source, body=body) if name == local_conv.KERNEL else source

    monkeypatch.setattr(sources, "kernel", kernel)
    return asked


def test_a_kernel_that_does_not_compile_is_switched_off(emulated, monkeypatch):
    asked = _swap_body(monkeypatch, "this is not a kernel body;\n")
    x, w = _inputs()
    before = launch.CALLS.snapshot()
    got = local_conv.run(x, w)
    assert np.array_equal(np.array(got), np.array(local_conv.reference(x, w)))
    reason = self_check.switched_off()["local_conv"]
    assert "failed on its first call" in reason
    tries = len(asked)
    assert np.array_equal(np.array(local_conv.run(x, w)), np.array(got))
    assert len(asked) == tries  # never built again
    kernels = launch.calls_since(before)
    assert kernels["switched_off"] == {"local_conv": reason}
    assert kernels["fallbacks"] == {"local_conv": 1}  # the second call: the reference, counted


def test_a_kernel_that_computes_something_else_is_switched_off(emulated, monkeypatch):
    _swap_body(monkeypatch, _wrong(sources.kernel(local_conv.KERNEL).body))
    x, w = _inputs()
    got = local_conv.run(x, w)
    assert np.array_equal(np.array(got), np.array(local_conv.reference(x, w)))
    assert "disagreed" in self_check.switched_off()["local_conv"]


def _wrong(body: str) -> str:
    """The body with one added to every output: it compiles, and it is wrong."""
    store = "= FC_CAST(T, acc);"
    assert store in body
    return body.replace(store, "= FC_CAST(T, acc + 1.0f);")


def test_a_kernel_that_agrees_keeps_running(emulated):
    x, w = _inputs()
    first = local_conv.run(x, w)
    assert self_check.switched_off() == {}
    second = local_conv.run(x, w)
    assert np.array_equal(np.array(first), np.array(second))


def test_inputs_the_reference_refuses_switch_nothing_off(emulated):
    x, _ = _inputs()
    with pytest.raises(ValueError):
        local_conv.run(x, mx.zeros((7, 3)))  # weight of the wrong width
    assert self_check.switched_off() == {}


def test_info_names_a_switched_off_kernel(monkeypatch):
    self_check.reset()
    try:
        monkeypatch.setattr("engine_mlx.backend.kernel_path", lambda: "metal")
        self_check._switch_off("acceptance", "the kernel failed on its first call (no device)")
        assert "acceptance switched off: the kernel failed" in kernel_description()
    finally:
        self_check.reset()
