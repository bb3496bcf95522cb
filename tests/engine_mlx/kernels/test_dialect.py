"""The dialect: what every macro means on each backend, the layout of the .metal files, and
the emulator's strictness (a kernel that would misbehave on a GPU fails here)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.kernels import Launch
from metal_kernels import emulator, sources

GRID, GROUP = (128, 4, 1), (64, 2, 1)  # 4 threadgroups of 128 threads (2-D), 4 SIMD groups


def expected_selftest(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What fc_dialect_selftest must write, from the launch geometry alone (threads are
    numbered x fastest; SIMD groups are 32 consecutive thread indices)."""
    (gx, gy, _), (tx, ty, _) = GRID, GROUP
    threads, groups_x = tx * ty, gx // tx
    gid = np.arange(gx * gy)
    y, xx = np.divmod(gid, gx)
    index = (y % ty) * tx + xx % tx
    group = (y // ty) * groups_x + xx // tx
    member = np.empty((group.max() + 1, threads), dtype=np.int64)  # (group, index) -> gid
    member[group, index] = gid
    lane, simd = index % 32, index // 32
    ids = np.stack(
        [xx % tx, y % ty, xx // tx, y // ty, xx, y, index, np.full_like(gid, threads), lane,
         simd, np.full_like(gid, threads // 32), np.full_like(gid, 32),
         np.full_like(gid, groups_x), np.full_like(gid, gy // ty)],
        axis=1,
    )  # fmt: skip
    values = np.zeros((gid.size, 12))
    for g in gid:
        v = x[member[group[g], simd[g] * 32 : simd[g] * 32 + 32]].astype(np.float64)
        values[g] = [
            v.sum(), v.max(), v.min(), v[: lane[g]].sum(), v[(lane[g] + 5) % 32],
            v[lane[g] ^ 3], v[7], x[member[group[g], threads - 1 - index[g]]], np.exp(x[g]),
            np.log1p(abs(x[g])), np.sqrt(abs(x[g])), max(x[g], 0.0),
        ]  # fmt: skip
    return ids, values


def test_selftest_kernel(executor):
    x = np.random.default_rng(0).standard_normal(GRID[0] * GRID[1]).astype(np.float32)
    ids, values = executor(
        Launch(
            "fc_dialect_selftest",
            inputs=[mx.array(x)],
            output_shapes=[(x.size, 16), (x.size, 12)],
            output_dtypes=[mx.int32, mx.float32],
            grid=GRID,
            threadgroup=GROUP,
        )
    )
    want_ids, want_values = expected_selftest(x)
    got = np.asarray(ids)
    assert (got[:, :14] == want_ids).all()
    assert (got[:, 15] == 128).all()  # the threadgroup atomic counter's final value
    for group in range(4):  # ... which handed out 0..127 once each, per threadgroup
        members = got[:, 2] + 2 * got[:, 3] == group
        assert sorted(got[members, 14]) == list(range(128))
    assert np.allclose(np.asarray(values), want_values, rtol=1e-5, atol=1e-5)


def test_device_atomics(executor):
    keys = np.random.default_rng(1).integers(0, 1000, 512).astype(np.int32)
    counts, largest = executor(
        Launch(
            "fc_dialect_atomics",
            inputs=[mx.array(keys)],
            output_shapes=[(16,), (16,)],
            output_dtypes=[mx.int32, mx.int32],
            grid=(512, 1, 1),
            threadgroup=(128, 1, 1),
            init_value=0,
        )
    )
    assert np.asarray(counts).tolist() == np.bincount(keys % 16, minlength=16).tolist()
    want = [int(keys[keys % 16 == b].max()) if (keys % 16 == b).any() else 0 for b in range(16)]
    assert np.asarray(largest).tolist() == want


def _macros(backend: str) -> set[str]:
    return set(re.findall(r"#define (FC_\w+)", sources.prelude(backend))) - {
        f"FC_BACKEND_{backend.upper()}",
        f"FC_PRELUDE_{backend.upper()}_H",
        "FC_FULL_MASK",
    }


def test_the_three_preludes_define_the_same_dialect():
    metal, cuda, cpu = _macros("metal"), _macros("cuda"), _macros("cpu")
    assert metal == cuda == cpu, (metal ^ cuda, metal ^ cpu)


def test_metal_prelude_is_metal_builtins_only():
    """Every Metal macro expands to MSL built-ins, kernel attributes, casts or literals."""
    allowed = set(sources.METAL_ATTRIBUTES) | {
        "metal", "threadgroup_barrier", "simdgroup_barrier", "mem_flags", "mem_threadgroup",
        "mem_device", "simd_sum", "simd_max", "simd_min", "simd_prefix_exclusive_sum",
        "simd_shuffle", "simd_shuffle_xor", "simd_broadcast", "exp", "log", "sqrt", "fmax",
        "fmin", "max", "min", "numeric_limits", "infinity", "static_cast", "ushort", "float",
        "threadgroup",
        "atomic_int", "atomic_fetch_add_explicit", "atomic_fetch_max_explicit",
        "atomic_load_explicit", "atomic_store_explicit", "memory_order_relaxed",
        "x", "y", "z", "type", "name", "count", "lane", "mask", "ptr", "v", "a", "b",
    }  # fmt: skip
    for line in sources.prelude("metal").splitlines():
        m = re.match(r"#define FC_\w+(\([^)]*\))?\s+(.*)", line)
        if m:
            words = set(re.findall(r"[A-Za-z_]\w*", m.group(2))) - {"FC_THREAD_INDEX"}
            assert words <= allowed | {w for w in words if w.startswith("FC_")}, line


def test_every_kernel_file_parses_consistently():
    kernels = sources.all_kernels()
    expected = {
        "fc_dialect_selftest", "fc_dialect_atomics", "fc_tree_attention_partial",
        "fc_tree_attention_combine", "fc_accept_choice", "fc_accept_walk", "fc_topk",
        "fc_path_scores", "fc_local_conv", "fc_kv_compact",
    }  # fmt: skip
    assert set(kernels) == expected
    for k in kernels.values():
        assert "#include" not in k.body and "[[" not in k.body, k.name
        assert not re.search(r"\b(device|constant|thread)\s+\w+\s*\*", k.body), k.name
        # C++ that MSL lacks or the dialect forbids (no lambdas, exceptions, heap, library)
        banned = re.search(r"\b(double|goto|new|delete|throw|try|virtual|std)\b|\[\]\(", k.body)
        assert banned is None, (k.name, banned)


def test_loader_rejects_a_body_that_names_attributes_directly():
    text = """
[[kernel]] void bad(const device float* x [[buffer(0)]], device float* y [[buffer(1)]],
    uint3 thread_position_in_grid [[thread_position_in_grid]]) {
  // FC_BODY_BEGIN
  y[thread_position_in_grid.x] = x[0];
  // FC_BODY_END
}
"""
    with pytest.raises(sources.KernelSourceError, match="dialect"):
        sources.parse(text)


def test_loader_rejects_a_missing_attribute():
    text = """
[[kernel]] void bad(const device float* x [[buffer(0)]], device float* y [[buffer(1)]]) {
  // FC_BODY_BEGIN
  y[FC_GID_X] = x[0];
  // FC_BODY_END
}
"""
    with pytest.raises(sources.KernelSourceError, match="thread_position_in_grid"):
        sources.parse(text)


def _one(body: str, extra_attrs: str = "") -> sources.KernelSource:
    text = f"""
[[kernel]] void probe(const device float* x [[buffer(0)]], device float* y [[buffer(1)]],
    uint3 thread_position_in_grid [[thread_position_in_grid]],
    uint thread_index_in_threadgroup [[thread_index_in_threadgroup]],
    uint thread_index_in_simdgroup [[thread_index_in_simdgroup]]{extra_attrs}) {{
  // FC_BODY_BEGIN
{body}
  // FC_BODY_END
}}
"""
    return sources.parse(text, "probe.metal")[0]


def _run(source: sources.KernelSource, threads: int = 64) -> np.ndarray:
    x = np.arange(threads, dtype=np.float32)
    (y,) = emulator.run(
        source, [x], [emulator.Output((threads,), "float")], (threads, 1, 1), (threads, 1, 1)
    )
    return y


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("  if (FC_THREAD_INDEX < 16) { FC_BARRIER(); }\n  y[FC_GID_X] = 0.0f;", "different"),
        ("  if (FC_SIMD_LANE == 0) return;\n  y[FC_GID_X] = FC_SIMD_SUM(x[FC_GID_X]);", "dead"),
        (
            "  FC_THREADGROUP(float, big, 9000);\n  big[0] = 1.0f;\n  y[FC_GID_X] = big[0];",
            "32 KiB",
        ),
        ("  y[FC_GID_X] = FC_SIMD_SHUFFLE(x[FC_GID_X], 40);", "out of range"),
    ],
    ids=["divergent-barrier", "lane-left-simd-op", "threadgroup-memory", "bad-lane"],
)
def test_emulator_reports_what_a_gpu_would_get_wrong(body, message):
    with pytest.raises(emulator.EmulatorError, match=message):
        _run(_one(body))


def test_emulator_poisons_threadgroup_memory_and_outputs():
    """Threadgroup memory starts as NaN (read-before-write shows), and an unwritten output
    element keeps its poison."""
    body = "  FC_THREADGROUP(float, t, 64);\n  if (FC_GID_X > 0) y[FC_GID_X] = t[FC_THREAD_INDEX];"
    y = _run(_one(body))
    assert np.isnan(y).all()


def test_emulator_rejects_partial_threadgroups():
    source = _one("  y[FC_GID_X] = x[FC_GID_X];")
    with pytest.raises(emulator.EmulatorError, match="whole number"):
        emulator.run(
            source,
            [np.zeros(48, np.float32)],
            [emulator.Output((48,), "float")],
            (48, 1, 1),
            (32, 1, 1),
        )


@pytest.mark.skipif(
    sys.platform != "darwin" or shutil.which("xcrun") is None,
    reason="compiling .metal files standalone needs Xcode's metal compiler (macOS)",
)
def test_metal_files_compile_standalone(tmp_path):
    for path in sorted(sources.KERNEL_DIR.glob("*.metal")):
        subprocess.run(
            ["xcrun", "-sdk", "macosx", "metal", "-std=metal3.0", "-I", str(sources.KERNEL_DIR),
             "-c", str(path), "-o", str(tmp_path / f"{path.stem}.air")],
            check=True,
        )  # fmt: skip
