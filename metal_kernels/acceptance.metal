// The lossless acceptance walk over a verified candidate tree, on the device: no host round
// trip per position.
//
// fc_accept_choice: the target's pick after every node — the argmax of its logits (greedy;
// ties to the lowest id), or, when SAMPLED, an exact sample of its filtered distribution by
// inverse CDF with a given uniform u in [0, 1): the first token whose cumulative probability
// exceeds u * (total probability). One threadgroup per node.
// fc_accept_walk: from the root, accept the child carrying the target's pick and descend;
// stop at the first node without one (its pick is the bonus token). One SIMD group.
#include "prelude_metal.h"

// scores [L, V] (logits, or probabilities when SAMPLED), uniforms [L], params = {L, V};
// choice [L].
template <typename T, bool SAMPLED>
[[kernel]] void fc_accept_choice(
    const device T* scores [[buffer(0)]],
    const device float* uniforms [[buffer(1)]],
    const device int* params [[buffer(2)]],
    device int* choice [[buffer(3)]],
    uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]],
    uint3 threads_per_threadgroup [[threads_per_threadgroup]],
    uint thread_index_in_threadgroup [[thread_index_in_threadgroup]],
    uint thread_index_in_simdgroup [[thread_index_in_simdgroup]],
    uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]],
    uint simdgroups_per_threadgroup [[simdgroups_per_threadgroup]]) {
  // FC_BODY_BEGIN
  FC_THREADGROUP(float, simd_value, 32);
  FC_THREADGROUP(int, simd_first, 32);
  FC_THREADGROUP(int, simd_last, 32);
  const int V = params[1];
  const int row = int(FC_TG_ID_Y);
  const int tid = int(FC_THREAD_INDEX);
  const int threads = int(FC_THREADS_PER_TG);
  const int lane = int(FC_SIMD_LANE);
  const int sg = int(FC_SIMD_ID);
  const int simds = int(FC_NUM_SIMDS);
  const int base = row * V;

  int first = FC_INT_MAX;  // this thread's candidate (lowest id wins)
  int last = -1;           // sampled: last token with nonzero probability (rounding fallback)
  if (!SAMPLED) {
    float best = -FC_INFINITY;
    for (int i = tid; i < V; i += threads) {
      const float x = FC_TO_FLOAT(scores[base + i]);
      if (x > best || first == FC_INT_MAX) {
        best = x;
        first = i;
      }
    }
    const float simd_best = FC_SIMD_MAX(best);
    const int simd_idx = FC_SIMD_MIN(best == simd_best ? first : FC_INT_MAX);
    if (lane == 0) {
      simd_value[sg] = simd_best;
      simd_first[sg] = simd_idx;
    }
    FC_BARRIER();
    float top = -FC_INFINITY;
    first = FC_INT_MAX;
    for (int s = 0; s < simds; ++s) {
      const float x = simd_value[s];
      const int idx = simd_first[s];
      if (idx != FC_INT_MAX && (x > top || (x == top && idx < first) || first == FC_INT_MAX)) {
        top = x;
        first = idx;
      }
    }
    if (tid == 0) choice[row] = first == FC_INT_MAX ? 0 : first;
  } else {
    // Each thread owns a contiguous range; an exclusive scan over the threads gives where
    // its range starts in the cumulative distribution.
    const int per = (V + threads - 1) / threads;
    const int begin = FC_MIN(V, tid * per);
    const int end = FC_MIN(V, begin + per);
    float part = 0.0f;
    for (int i = begin; i < end; ++i) {
      const float p = FC_TO_FLOAT(scores[base + i]);
      part += p;
      if (p > 0.0f) last = i;
    }
    const float before_in_simd = FC_SIMD_PREFIX_EXCLUSIVE_SUM(part);
    const float simd_total = FC_SIMD_SUM(part);
    if (lane == 0) simd_value[sg] = simd_total;
    FC_BARRIER();
    float start = before_in_simd;
    float total = 0.0f;
    for (int s = 0; s < simds; ++s) {
      if (s < sg) start += simd_value[s];
      total += simd_value[s];
    }
    const float target = uniforms[row] * total;
    if (part > 0.0f && start <= target && target < start + part) {
      float running = start;
      for (int i = begin; i < end; ++i) {
        running += FC_TO_FLOAT(scores[base + i]);
        if (running > target) {
          first = i;
          break;
        }
      }
      if (first == FC_INT_MAX) first = last;  // rounding: stay on a token that can occur
    }
    const int simd_first_idx = FC_SIMD_MIN(first);
    const int simd_last_idx = FC_SIMD_MAX(last);
    if (lane == 0) {
      simd_first[sg] = simd_first_idx;
      simd_last[sg] = simd_last_idx;
    }
    FC_BARRIER();
    first = FC_INT_MAX;
    last = -1;
    for (int s = 0; s < simds; ++s) {
      first = FC_MIN(first, simd_first[s]);
      last = FC_MAX(last, simd_last[s]);
    }
    if (tid == 0) choice[row] = first != FC_INT_MAX ? first : (last >= 0 ? last : 0);
  }
  // FC_BODY_END
}

// choice, tokens, parents [L] (parents[0] = -1, parents[i] < i), params = {L};
// path [L]: accepted node ids root excluded, then -1; result = {accepted, bonus, tested},
// tested = the walked nodes that have children (draft positions tested).
[[kernel]] void fc_accept_walk(
    const device int* choice [[buffer(0)]],
    const device int* tokens [[buffer(1)]],
    const device int* parents [[buffer(2)]],
    const device int* params [[buffer(3)]],
    device int* path [[buffer(4)]],
    device int* result [[buffer(5)]],
    uint thread_index_in_simdgroup [[thread_index_in_simdgroup]]) {
  // FC_BODY_BEGIN
  const int L = params[0];
  const int lane = int(FC_SIMD_LANE);
  int node = 0;
  int accepted = 0;
  int tested = 0;
  int bonus = 0;
  // Every lane follows the same walk: the SIMD-group reductions give all lanes one answer.
  for (int step = 0; step < L; ++step) {
    const int pick = choice[node];
    int hit = FC_INT_MAX;
    int has_child = 0;
    for (int j = lane; j < L; j += FC_SIMD_WIDTH) {
      if (parents[j] == node) {
        has_child = 1;
        if (tokens[j] == pick) hit = FC_MIN(hit, j);
      }
    }
    const int child = FC_SIMD_MIN(hit);
    tested += FC_SIMD_MAX(has_child);
    bonus = pick;
    if (child == FC_INT_MAX || child <= node) break;
    if (lane == 0) path[accepted] = child;
    accepted += 1;
    node = child;
  }
  for (int j = accepted + lane; j < L; j += FC_SIMD_WIDTH) path[j] = -1;
  if (lane == 0) {
    result[0] = accepted;
    result[1] = bonus;
    result[2] = tested;
  }
  // FC_BODY_END
}

// Instantiations for a standalone compile of this file (MLX instantiates its own).
template [[host_name("fc_accept_choice_half_greedy")]] [[kernel]]
decltype(fc_accept_choice<half, false>) fc_accept_choice<half, false>;
template [[host_name("fc_accept_choice_float_sampled")]] [[kernel]]
decltype(fc_accept_choice<float, true>) fc_accept_choice<float, true>;
