// K/V compaction after a tree verification: the rows of the accepted path (tree nodes
// `keep`, appended to the cache at `start`) gathered in order, for both keys and values in
// one pass, reading the cache buffers in place (any strides). The caller writes them back at
// start, start + 1, ... (MLX kernels return new arrays; the slice update is MLX's).
#include "prelude_metal.h"

// keys, values [R, C, D] (R = batch * KV heads, C = cache capacity), keep [n],
// params = {R, D, start, n}; k_rows, v_rows [R, n, D].
template <typename T>
[[kernel]] void fc_kv_compact(
    const device T* keys [[buffer(0)]],
    const constant int64_t* keys_strides [[buffer(1)]],
    const device T* values [[buffer(2)]],
    const constant int64_t* values_strides [[buffer(3)]],
    const device int* keep [[buffer(4)]],
    const device int* params [[buffer(5)]],
    device T* k_rows [[buffer(6)]],
    device T* v_rows [[buffer(7)]],
    uint3 thread_position_in_grid [[thread_position_in_grid]]) {
  // FC_BODY_BEGIN
  const int D = params[1];
  const int start = params[2];
  const int n = params[3];
  const int d = int(FC_GID_X);
  const int i = int(FC_GID_Y);
  const int r = int(FC_GID_Z);
  if (d < D) {
    const int src = start + keep[i];
    const int k_at = r * int(keys_strides[0]) + src * int(keys_strides[1]) + d * int(keys_strides[2]);
    const int v_at =
        r * int(values_strides[0]) + src * int(values_strides[1]) + d * int(values_strides[2]);
    k_rows[(r * n + i) * D + d] = keys[k_at];
    v_rows[(r * n + i) * D + d] = values[v_at];
  }
  // FC_BODY_END
}

// Instantiation for a standalone compile of this file (MLX instantiates its own).
template [[host_name("fc_kv_compact_half")]] [[kernel]]
decltype(fc_kv_compact<half>) fc_kv_compact<half>;
