"""Dispatch: which implementation each op runs, the off switch, and how the GPU executors
hand a kernel to MLX (checked here by recording the call, since no GPU is needed for that)."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx import backend as engine_backend
from engine_mlx.kernels import (
    EmulatorExecutor,
    GpuExecutor,
    Launch,
    acceptance,
    candidates,
    kv_compact,
    launch,
    local_conv,
    tree_attention,
)
from metal_kernels import sources


def test_cpu_runs_the_references():
    if engine_backend.live_device() != "cpu":
        pytest.skip("a GPU backend is live")
    assert launch.live_backend() is None and launch.live_executor() is None
    rng = np.random.default_rng(0)
    q = mx.array(rng.standard_normal((1, 2, 3, 64), dtype=np.float32))
    k = v = mx.array(rng.standard_normal((1, 1, 9, 64), dtype=np.float32))
    mask = mx.array(np.tril(np.ones((3, 3), bool)))
    assert mx.array_equal(
        tree_attention.run(q, k, v, mask, 0.1), tree_attention.reference(q, k, v, mask, 0.1)
    ).item()
    x = mx.array(rng.standard_normal((1, 5, 8), dtype=np.float32))
    w = mx.array(rng.standard_normal((8, 4), dtype=np.float32))
    assert mx.array_equal(local_conv.run(x, w), local_conv.reference(x, w)).item()
    logits = mx.array(rng.standard_normal((4, 50), dtype=np.float32))
    assert (
        candidates.topk(logits, 3)[0].tolist() == candidates.reference_topk(logits, 3)[0].tolist()
    )
    walked = acceptance.run(logits, mx.array([1, 2, 3, 4]), mx.array([-1, 0, 1, 1]))
    assert walked.path.shape == (4,)
    rows = kv_compact.gather(k, v, 2, mx.array([0, 1]))
    assert rows[0].shape == (1, 1, 2, 64)


@pytest.mark.parametrize("backend", ["metal", "cuda"])
def test_switch_turns_kernels_off(monkeypatch, backend):
    monkeypatch.setattr(engine_backend, "live_device", lambda: backend)
    monkeypatch.delenv(launch.ENV_SWITCH, raising=False)
    assert launch.live_backend() == backend
    assert isinstance(launch.live_executor(), GpuExecutor)
    monkeypatch.setenv(launch.ENV_SWITCH, "0")
    assert not engine_backend.kernels_enabled()
    assert launch.live_backend() is None and launch.live_executor() is None
    assert engine_backend.kernel_description() == "reference ops (kernels switched off)"
    monkeypatch.setenv(launch.ENV_SWITCH, "emulate")
    assert isinstance(launch.live_executor(), EmulatorExecutor)
    assert engine_backend.kernel_description().startswith("kernels in the CPU emulator: ")
    monkeypatch.delenv(launch.ENV_SWITCH)
    label = "Metal" if backend == "metal" else "CUDA"
    assert engine_backend.kernel_description() == (
        f"{label} kernels: tree attention, acceptance, candidate top-k, path scores, "
        "KV compaction, local convolution"
    )


class Recorder:
    """Stands in for mx.fast.metal_kernel / cuda_kernel: records what it was given."""

    def __init__(self) -> None:
        self.built: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any):
        self.built.append(kwargs)

        def kernel(**call: Any) -> list[mx.array]:
            self.calls.append(call)
            shapes, dtypes = call["output_shapes"], call["output_dtypes"]
            return [mx.zeros(s, d) for s, d in zip(shapes, dtypes, strict=True)]

        return kernel


@pytest.mark.parametrize("backend", ["metal", "cuda"])
def test_gpu_executor_hands_mlx_the_body_and_prelude(monkeypatch, backend):
    recorder = Recorder()
    monkeypatch.setattr(mx.fast, f"{backend}_kernel", recorder)
    executor = GpuExecutor(backend)
    q = mx.zeros((2, 3, 64))
    kv = mx.zeros((1, 9, 64))
    tree_attention.kernel(q, kv, kv, mx.ones((3, 3), dtype=mx.bool_), 0.1, executor)
    tree_attention.kernel(q, kv, kv, mx.ones((3, 3), dtype=mx.bool_), 0.1, executor)
    assert [b["name"] for b in recorder.built] == [
        tree_attention.PARTIAL,
        tree_attention.COMBINE,
    ]  # built once each, then reused
    partial = recorder.built[0]
    source = sources.kernel(tree_attention.PARTIAL)
    assert partial["input_names"] == ["q", "k", "v", "tree_mask", "params", "fparams"]
    assert partial["output_names"] == ["o_part", "ml_part"]
    assert partial["ensure_row_contiguous"] is False  # the cache is read in place, strided
    assert f"FC_BACKEND_{backend.upper()}" in partial["header"]
    assert source.body in partial["source"]
    if backend == "metal":
        for attribute in source.attributes:
            assert attribute in partial["source"]  # so that MLX declares it
        assert partial["atomic_outputs"] is False
    call = recorder.calls[0]
    assert call["grid"] == (32, 1, 1) and call["threadgroup"] == (32, 1, 1)
    assert call["template"] == [("T", mx.float32), ("D", 64)]


def test_metal_atomic_outputs_follow_the_signature(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(mx.fast, "metal_kernel", recorder)
    GpuExecutor("metal")(
        Launch(
            "fc_dialect_atomics",
            inputs=[mx.zeros((32,), dtype=mx.int32)],
            output_shapes=[(16,), (16,)],
            output_dtypes=[mx.int32, mx.int32],
            grid=(32, 1, 1),
            threadgroup=(32, 1, 1),
            init_value=0,
        )
    )
    assert recorder.built[0]["atomic_outputs"] is True
    assert recorder.calls[0]["init_value"] == 0


def test_launch_requires_whole_threadgroups():
    with pytest.raises(ValueError, match="whole number"):
        Launch("fc_local_conv", [], [], [], grid=(48, 1, 1), threadgroup=(32, 1, 1))
