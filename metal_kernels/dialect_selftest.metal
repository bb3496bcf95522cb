// Dialect self-test: every id, SIMD-group function, barrier, threadgroup array and atomic of
// the dialect, each written to an output so a test can compare it with what the grid implies.
// Not used by the engine; it pins down what each backend's prelude means.
#include "prelude_metal.h"

// ids[i] (16 ints per thread): tid x/y, threadgroup x/y, grid x/y, thread index, threads per
// threadgroup, lane, SIMD group, SIMD groups, live SIMD width, threadgroups in x/y, threadgroup
// atomic counter's old value and its final value.
// values[i] (12 floats per thread): SIMD sum, max, min, exclusive prefix sum, shuffle from
// lane+5, shuffle xor 3, broadcast of lane 7, the x of the thread at the mirrored position in
// the threadgroup (through threadgroup memory), exp(x), log(1+|x|), sqrt(|x|), fmax(x, 0).
[[kernel]] void fc_dialect_selftest(
    const device float* x [[buffer(0)]],
    device int* ids [[buffer(1)]],
    device float* values [[buffer(2)]],
    uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
    uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]],
    uint3 thread_position_in_grid [[thread_position_in_grid]],
    uint3 threads_per_threadgroup [[threads_per_threadgroup]],
    uint3 threadgroups_per_grid [[threadgroups_per_grid]],
    uint thread_index_in_threadgroup [[thread_index_in_threadgroup]],
    uint thread_index_in_simdgroup [[thread_index_in_simdgroup]],
    uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]],
    uint simdgroups_per_threadgroup [[simdgroups_per_threadgroup]],
    uint threads_per_simdgroup [[threads_per_simdgroup]]) {
  // FC_BODY_BEGIN
  FC_THREADGROUP(float, mirror, 1024);
  FC_THREADGROUP_ATOMIC_INT(counter, 1);
  const uint index = FC_THREAD_INDEX;
  const uint threads = FC_THREADS_PER_TG;
  const uint width = FC_TG_SIZE_X * FC_NUM_TG_X;
  const uint gid = FC_GID_Y * width + FC_GID_X;
  const uint lane = FC_SIMD_LANE;
  const float v = x[gid];

  if (index == 0) {
    FC_ATOMIC_STORE(&counter[0], 0);
  }
  mirror[index] = v;
  FC_BARRIER();
  const int old = FC_ATOMIC_ADD(&counter[0], 1);
  const float mirrored = mirror[threads - 1 - index];
  FC_BARRIER();
  const int total = FC_ATOMIC_LOAD(&counter[0]);

  const uint out = gid * 16;
  ids[out + 0] = int(FC_TID_X);
  ids[out + 1] = int(FC_TID_Y);
  ids[out + 2] = int(FC_TG_ID_X);
  ids[out + 3] = int(FC_TG_ID_Y);
  ids[out + 4] = int(FC_GID_X);
  ids[out + 5] = int(FC_GID_Y);
  ids[out + 6] = int(index);
  ids[out + 7] = int(threads);
  ids[out + 8] = int(lane);
  ids[out + 9] = int(FC_SIMD_ID);
  ids[out + 10] = int(FC_NUM_SIMDS);
  ids[out + 11] = int(FC_SIMD_WIDTH_LIVE);
  ids[out + 12] = int(FC_NUM_TG_X);
  ids[out + 13] = int(FC_NUM_TG_Y);
  ids[out + 14] = old;
  ids[out + 15] = total;

  const uint vo = gid * 12;
  values[vo + 0] = FC_SIMD_SUM(v);
  values[vo + 1] = FC_SIMD_MAX(v);
  values[vo + 2] = FC_SIMD_MIN(v);
  values[vo + 3] = FC_SIMD_PREFIX_EXCLUSIVE_SUM(v);
  values[vo + 4] = FC_SIMD_SHUFFLE(v, (lane + 5) % FC_SIMD_WIDTH);
  values[vo + 5] = FC_SIMD_SHUFFLE_XOR(v, 3);
  values[vo + 6] = FC_SIMD_BROADCAST(v, 7);
  values[vo + 7] = mirrored;
  values[vo + 8] = FC_EXP(v);
  values[vo + 9] = FC_LOG(1.0f + (v < 0.0f ? -v : v));
  values[vo + 10] = FC_SQRT(v < 0.0f ? -v : v);
  values[vo + 11] = FC_FMAX(v, 0.0f);
  // FC_BODY_END
}

// Device atomics on outputs (MLX's atomic_outputs): a histogram of keys, and the largest
// value seen per bucket.
[[kernel]] void fc_dialect_atomics(
    const device int* keys [[buffer(0)]],
    device metal::atomic_int* counts [[buffer(1)]],
    device metal::atomic_int* largest [[buffer(2)]],
    uint3 thread_position_in_grid [[thread_position_in_grid]]) {
  // FC_BODY_BEGIN
  const int key = keys[FC_GID_X];
  FC_ATOMIC_ADD(&counts[key % 16], 1);
  FC_ATOMIC_MAX(&largest[key % 16], key);
  // FC_BODY_END
}
