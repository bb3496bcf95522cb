"""ThreadSanitizer over the emulator: the kernels' barriers and SIMD-group exchanges leave no
data race, and a kernel missing a barrier is caught (so the check is not vacuous)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine_mlx.decoding.tree import CandidateTree
from engine_mlx.kernels import EmulatorExecutor, acceptance, candidates, tree_attention
from metal_kernels import emulator, sources


def test_kernels_race_free_under_tsan():
    tsan = EmulatorExecutor(tsan=True)
    rng = np.random.default_rng(0)
    tree = CandidateTree.rooted(1)
    tree.add(tree.add(0, 2), 3)  # the root's two branches: 2 -> 3, and 4
    tree.add(0, 4)
    q = mx.array(rng.standard_normal((1, 4, 4, 64), dtype=np.float32))  # 16 rows: 2 SIMD groups
    k = mx.array(rng.standard_normal((1, 1, 48, 64), dtype=np.float32))[..., :40, :]  # strided
    v = mx.array(rng.standard_normal((1, 1, 48, 64), dtype=np.float32))[..., :40, :]
    mask = mx.array(tree.ancestor_mask())
    out = tree_attention.kernel(q, k, v, mask, 0.125, tsan, chunk=32, max_simds=2)

    probs = mx.array(rng.dirichlet(np.ones(90), 3).astype(np.float32))
    uniforms = mx.array(rng.random(3, dtype=np.float32))
    tokens, parents = mx.array([5, 6, 7]), mx.array([-1, 0, 1])
    walked = acceptance.kernel(probs, tokens, parents, uniforms, tsan, threads=64)
    assert walked.path.shape == (3,)

    logits = mx.array(rng.standard_normal((2, 100), dtype=np.float32))
    top, _ = candidates.kernel_topk(logits, 3, tsan, threads=64)

    assert len(tsan.reports) == 5
    for report in tsan.reports:
        assert "WARNING: ThreadSanitizer" not in report, report
    assert mx.allclose(out, tree_attention.reference(q, k, v, mask, 0.125), atol=2e-5).item()
    assert top.tolist() == candidates.reference_topk(logits, 3)[0].tolist()


RACY = """
[[kernel]] void racy(const device float* x [[buffer(0)]], device float* y [[buffer(1)]],
    uint3 thread_position_in_grid [[thread_position_in_grid]],
    uint3 threads_per_threadgroup [[threads_per_threadgroup]],
    uint thread_index_in_threadgroup [[thread_index_in_threadgroup]]) {
  // FC_BODY_BEGIN
  FC_THREADGROUP(float, shared, 64);
  shared[FC_THREAD_INDEX] = x[FC_GID_X];
  // missing: FC_BARRIER();
  y[FC_GID_X] = shared[(FC_THREAD_INDEX + 1) % FC_THREADS_PER_TG];
  // FC_BODY_END
}
"""


def test_tsan_catches_a_missing_barrier():
    source = sources.parse(RACY, "racy.metal")[0]
    x = np.arange(64, dtype=np.float32)
    result = emulator.run_tsan(
        source, [x], [emulator.Output((64,), "float")], (64, 1, 1), (64, 1, 1), teams=1
    )
    assert result.races, result.report
    assert "racy.metal" in result.report  # the report points at the kernel's own line
