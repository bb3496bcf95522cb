// Tree-verify attention: the queries are the candidate tree's nodes, the keys the target's
// KV cache followed by the tree's own keys; a node sees the whole cache and, in the tree,
// only its ancestors and itself (tree_mask). Grouped-query heads: the `rep` query heads of
// one KV head are handled together, so every key tile is read from memory once for all of
// their rows.
//
// Two kernels, split-K ("flash decoding"): fc_tree_attention_partial gives each threadgroup
// one KV head, a block of up to 8 * SIMD-groups query rows and one chunk of the keys, and
// writes an unnormalised partial result per (chunk, row): the running max m, the sum of
// exp(score - m) l, and the weighted sum of values. fc_tree_attention_combine merges the
// chunks. A long cache thus spreads over many threadgroups; a short one uses one chunk.
//
// Layouts (elements): q [H, L, D], k and v [KV, N, D] with any strides (the cache buffers
// are read in place), tree_mask [L, L] (uint8, row = query node, column = key node),
// params = {H, KV, L, N, chunk, query_blocks}, fparams = {scale}; the cache holds N - L
// tokens before the tree's. Partials: o_part [chunks, H, L, D], ml_part [chunks, H, L, 2].
#include "prelude_metal.h"

template <typename T, int D>
[[kernel]] void fc_tree_attention_partial(
    const device T* q [[buffer(0)]],
    const constant int64_t* q_strides [[buffer(1)]],
    const device T* k [[buffer(2)]],
    const constant int64_t* k_strides [[buffer(3)]],
    const device T* v [[buffer(4)]],
    const constant int64_t* v_strides [[buffer(5)]],
    const device uint8_t* tree_mask [[buffer(6)]],
    const device int* params [[buffer(7)]],
    const device float* fparams [[buffer(8)]],
    device float* o_part [[buffer(9)]],
    device float* ml_part [[buffer(10)]],
    uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]],
    uint3 threads_per_threadgroup [[threads_per_threadgroup]],
    uint thread_index_in_threadgroup [[thread_index_in_threadgroup]],
    uint thread_index_in_simdgroup [[thread_index_in_simdgroup]],
    uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]],
    uint simdgroups_per_threadgroup [[simdgroups_per_threadgroup]]) {
  // FC_BODY_BEGIN
  constexpr int TK = 32;        // keys per tile: one per SIMD lane
  constexpr int RPS = 8;        // query rows per SIMD group
  constexpr int DPL = D / 32;   // head-dim elements per lane
  constexpr int MAX_SIMDS = 8;
  FC_THREADGROUP(T, k_tile, TK * D);
  FC_THREADGROUP(float, p_tile, MAX_SIMDS * RPS * TK);

  const int H = params[0];
  const int KV = params[1];
  const int L = params[2];
  const int N = params[3];
  const int chunk = params[4];
  const int query_blocks = params[5];
  const float scale = fparams[0];
  const int rep = H / KV;
  const int rows = rep * L;
  const int prefix = N - L;

  const int lane = int(FC_SIMD_LANE);
  const int sg = int(FC_SIMD_ID);
  const int kvh = int(FC_TG_ID_Y) / query_blocks;
  const int first_row = (int(FC_TG_ID_Y) % query_blocks) * int(FC_NUM_SIMDS) * RPS + sg * RPS;
  const int key_begin = int(FC_TG_ID_Z) * chunk;
  const int key_end = FC_MIN(N, key_begin + chunk);

  const int q_s0 = int(q_strides[0]), q_s1 = int(q_strides[1]), q_s2 = int(q_strides[2]);
  const int k_s0 = int(k_strides[0]), k_s1 = int(k_strides[1]), k_s2 = int(k_strides[2]);
  const int v_s0 = int(v_strides[0]), v_s1 = int(v_strides[1]), v_s2 = int(v_strides[2]);

  float m[RPS];
  float l[RPS];
  float acc[RPS][DPL];
  for (int i = 0; i < RPS; ++i) {
    m[i] = -FC_INFINITY;
    l[i] = 0.0f;
    for (int e = 0; e < DPL; ++e) acc[i][e] = 0.0f;
  }

  for (int t0 = key_begin; t0 < key_end; t0 += TK) {
    FC_BARRIER();  // the previous tile's readers are done with k_tile and p_tile
    for (int idx = int(FC_THREAD_INDEX); idx < TK * D; idx += int(FC_THREADS_PER_TG)) {
      const int key = t0 + idx / D;
      const int d = idx % D;
      k_tile[idx] = key < key_end ? k[kvh * k_s0 + key * k_s1 + d * k_s2] : FC_CAST(T, 0.0f);
    }
    FC_BARRIER();

    // Scores of this lane's key for each of the SIMD group's rows; online softmax update.
    const int key = t0 + lane;
    for (int i = 0; i < RPS; ++i) {
      const int r = first_row + i;
      float p = 0.0f;
      if (r < rows) {  // uniform across the SIMD group
        const int head = kvh * rep + r / L;
        const int node = r % L;
        const bool allowed =
            key < key_end && (key < prefix || tree_mask[node * L + (key - prefix)] != 0);
        float s = -FC_INFINITY;
        if (allowed) {
          float dot = 0.0f;
          for (int d = 0; d < D; ++d) {
            dot += FC_TO_FLOAT(q[head * q_s0 + node * q_s1 + d * q_s2]) *
                   FC_TO_FLOAT(k_tile[lane * D + d]);
          }
          s = dot * scale;
        }
        const float m_new = FC_FMAX(m[i], FC_SIMD_MAX(s));
        if (m_new != -FC_INFINITY) {  // uniform: something is visible
          p = allowed ? FC_EXP(s - m_new) : 0.0f;
          const float alpha = m[i] == -FC_INFINITY ? 0.0f : FC_EXP(m[i] - m_new);
          l[i] = l[i] * alpha + FC_SIMD_SUM(p);
          m[i] = m_new;
          for (int e = 0; e < DPL; ++e) acc[i][e] *= alpha;
        }
      }
      p_tile[(sg * RPS + i) * TK + lane] = p;
    }
    FC_SIMD_BARRIER();

    // Weighted values: each lane owns DPL head-dim elements; a value row is read once per
    // SIMD group for all of its rows.
    const int tile_keys = FC_MIN(TK, key_end - t0);
    for (int j = 0; j < tile_keys; ++j) {
      float vj[DPL];
      for (int e = 0; e < DPL; ++e) {
        vj[e] = FC_TO_FLOAT(v[kvh * v_s0 + (t0 + j) * v_s1 + (lane + 32 * e) * v_s2]);
      }
      for (int i = 0; i < RPS; ++i) {
        const float pij = p_tile[(sg * RPS + i) * TK + j];
        if (pij != 0.0f) {
          for (int e = 0; e < DPL; ++e) acc[i][e] += pij * vj[e];
        }
      }
    }
  }

  for (int i = 0; i < RPS; ++i) {
    const int r = first_row + i;
    if (r < rows) {
      const int head = kvh * rep + r / L;
      const int node = r % L;
      const int out_row = (int(FC_TG_ID_Z) * H + head) * L + node;
      for (int e = 0; e < DPL; ++e) o_part[out_row * D + lane + 32 * e] = acc[i][e];
      if (lane == 0) {
        ml_part[out_row * 2 + 0] = m[i];
        ml_part[out_row * 2 + 1] = l[i];
      }
    }
  }
  // FC_BODY_END
}

// Merges the chunks' partials: out = sum_c exp(m_c - M) o_c / sum_c exp(m_c - M) l_c.
// params = {chunks, rows (H * L), D}; one thread per output element, grid (D, rows).
template <typename T>
[[kernel]] void fc_tree_attention_combine(
    const device float* o_part [[buffer(0)]],
    const device float* ml_part [[buffer(1)]],
    const device int* params [[buffer(2)]],
    device T* out [[buffer(3)]],
    uint3 thread_position_in_grid [[thread_position_in_grid]]) {
  // FC_BODY_BEGIN
  const int chunks = params[0];
  const int rows = params[1];
  const int D = params[2];
  const int d = int(FC_GID_X);
  const int row = int(FC_GID_Y);
  if (d < D && row < rows) {
    float M = -FC_INFINITY;
    for (int c = 0; c < chunks; ++c) M = FC_FMAX(M, ml_part[(c * rows + row) * 2]);
    float num = 0.0f;
    float den = 0.0f;
    for (int c = 0; c < chunks; ++c) {
      const float mc = ml_part[(c * rows + row) * 2];
      if (mc != -FC_INFINITY) {
        const float w = FC_EXP(mc - M);
        num += w * o_part[(c * rows + row) * D + d];
        den += w * ml_part[(c * rows + row) * 2 + 1];
      }
    }
    out[row * D + d] = FC_CAST(T, den > 0.0f ? num / den : 0.0f);
  }
  // FC_BODY_END
}

// Instantiations for a standalone compile of this file (MLX instantiates its own).
template [[host_name("fc_tree_attention_partial_half_64")]] [[kernel]]
decltype(fc_tree_attention_partial<half, 64>) fc_tree_attention_partial<half, 64>;
template [[host_name("fc_tree_attention_partial_half_128")]] [[kernel]]
decltype(fc_tree_attention_partial<half, 128>) fc_tree_attention_partial<half, 128>;
template [[host_name("fc_tree_attention_partial_float_128")]] [[kernel]]
decltype(fc_tree_attention_partial<float, 128>) fc_tree_attention_partial<float, 128>;
template [[host_name("fc_tree_attention_combine_half")]] [[kernel]]
decltype(fc_tree_attention_combine<half>) fc_tree_attention_combine<half>;
