// Candidate building for the DFlash2 selector.
//
// fc_topk: per block position (one threadgroup per row of logits), the K most likely tokens
// and their softmax probabilities, most likely first (ties to the lowest id). Each thread
// keeps its own sorted top-KMAX over a strided share of the vocabulary; K rounds of a
// threadgroup-wide argmax over the threads' current heads then pop the winners in order.
// fc_path_scores: the selector's estimate a = (hits + w p) / (trials + w) for each candidate
// (calibration cell: depth = position + 1 capped at max_depth, bin = floor(p * bins)), and the
// score of the path that follows the top candidate up to the position before and then this
// candidate: prod_{j < d} a[j][0] * a[d][c].
#include "prelude_metal.h"

// logits [P, V], params = {P, V, K} (K <= KMAX); tokens [P, K], probs [P, K].
template <typename T, int KMAX>
[[kernel]] void fc_topk(
    const device T* logits [[buffer(0)]],
    const device int* params [[buffer(1)]],
    device int* tokens [[buffer(2)]],
    device float* probs [[buffer(3)]],
    uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]],
    uint3 threads_per_threadgroup [[threads_per_threadgroup]],
    uint thread_index_in_threadgroup [[thread_index_in_threadgroup]],
    uint thread_index_in_simdgroup [[thread_index_in_simdgroup]],
    uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]],
    uint simdgroups_per_threadgroup [[simdgroups_per_threadgroup]]) {
  // FC_BODY_BEGIN
  FC_THREADGROUP(float, simd_value, 32);
  FC_THREADGROUP(int, simd_index, 32);
  const int V = params[1];
  const int K = params[2];
  const int row = int(FC_TG_ID_Y);
  const int tid = int(FC_THREAD_INDEX);
  const int threads = int(FC_THREADS_PER_TG);
  const int lane = int(FC_SIMD_LANE);
  const int sg = int(FC_SIMD_ID);
  const int simds = int(FC_NUM_SIMDS);
  const int base = row * V;

  // The row's maximum, and the softmax normaliser.
  float local_max = -FC_INFINITY;
  for (int i = tid; i < V; i += threads) local_max = FC_FMAX(local_max, FC_TO_FLOAT(logits[base + i]));
  local_max = FC_SIMD_MAX(local_max);
  if (lane == 0) simd_value[sg] = local_max;
  FC_BARRIER();
  float row_max = -FC_INFINITY;
  for (int s = 0; s < simds; ++s) row_max = FC_FMAX(row_max, simd_value[s]);
  FC_BARRIER();
  float local_sum = 0.0f;
  for (int i = tid; i < V; i += threads) {
    const float x = FC_TO_FLOAT(logits[base + i]);
    local_sum += x == -FC_INFINITY ? 0.0f : FC_EXP(x - row_max);
  }
  local_sum = FC_SIMD_SUM(local_sum);
  if (lane == 0) simd_value[sg] = local_sum;
  FC_BARRIER();
  float row_sum = 0.0f;
  for (int s = 0; s < simds; ++s) row_sum += simd_value[s];

  // This thread's top-KMAX, sorted (value descending; ids ascending within a thread, and an
  // equal value never displaces an earlier one).
  float top_value[KMAX];
  int top_index[KMAX];
  for (int j = 0; j < KMAX; ++j) {
    top_value[j] = -FC_INFINITY;
    top_index[j] = FC_INT_MAX;
  }
  for (int i = tid; i < V; i += threads) {
    const float x = FC_TO_FLOAT(logits[base + i]);
    int at = KMAX;
    for (int j = KMAX - 1; j >= 0; --j) {
      if (x > top_value[j] || top_index[j] == FC_INT_MAX) at = j;
    }
    if (at < KMAX) {
      for (int j = KMAX - 1; j > at; --j) {
        top_value[j] = top_value[j - 1];
        top_index[j] = top_index[j - 1];
      }
      top_value[at] = x;
      top_index[at] = i;
    }
  }

  // K rounds: the threadgroup's best head (value descending, id ascending) wins; its owner
  // pops it.
  int head = 0;
  for (int r = 0; r < K; ++r) {
    const float value = head < KMAX ? top_value[head] : -FC_INFINITY;
    const int index = head < KMAX ? top_index[head] : FC_INT_MAX;
    const float best = FC_SIMD_MAX(index == FC_INT_MAX ? -FC_INFINITY : value);
    const int best_index = FC_SIMD_MIN(index != FC_INT_MAX && value == best ? index : FC_INT_MAX);
    FC_BARRIER();  // the previous round's readers are done with simd_value / simd_index
    if (lane == 0) {
      simd_value[sg] = best;
      simd_index[sg] = best_index;
    }
    FC_BARRIER();
    float win_value = -FC_INFINITY;
    int win_index = FC_INT_MAX;
    for (int s = 0; s < simds; ++s) {
      const float x = simd_value[s];
      const int idx = simd_index[s];
      if (idx != FC_INT_MAX &&
          (win_index == FC_INT_MAX || x > win_value || (x == win_value && idx < win_index))) {
        win_value = x;
        win_index = idx;
      }
    }
    if (index == win_index && index != FC_INT_MAX) head += 1;
    if (tid == 0) {
      tokens[row * K + r] = win_index == FC_INT_MAX ? 0 : win_index;
      probs[row * K + r] = win_index == FC_INT_MAX || win_value == -FC_INFINITY
                               ? 0.0f
                               : FC_EXP(win_value - row_max) / row_sum;
    }
  }
  // FC_BODY_END
}

// probs [P, K] (the top-k probabilities), hits and trials [(max_depth + 1) * bins] (one
// source's calibration counts), params = {P, K, bins, max_depth}, fparams = {prior weight};
// accept [P, K] (the estimates a), score [P, K].
[[kernel]] void fc_path_scores(
    const device float* probs [[buffer(0)]],
    const device float* hits [[buffer(1)]],
    const device float* trials [[buffer(2)]],
    const device int* params [[buffer(3)]],
    const device float* fparams [[buffer(4)]],
    device float* accept [[buffer(5)]],
    device float* score [[buffer(6)]],
    uint3 threads_per_threadgroup [[threads_per_threadgroup]],
    uint thread_index_in_threadgroup [[thread_index_in_threadgroup]]) {
  // FC_BODY_BEGIN
  const int P = params[0];
  const int K = params[1];
  const int bins = params[2];
  const int max_depth = params[3];
  const float w = fparams[0];
  const int tid = int(FC_THREAD_INDEX);
  const int threads = int(FC_THREADS_PER_TG);
  for (int e = tid; e < P * K; e += threads) {
    const float p = probs[e];
    const int depth = FC_MIN(e / K + 1, max_depth);
    const int bin = FC_MAX(0, FC_MIN(int(p * float(bins)), bins - 1));
    const int cell = depth * bins + bin;
    accept[e] = (hits[cell] + w * p) / (trials[cell] + w);
  }
  FC_BARRIER_DEVICE();  // every estimate written before any path reads them
  for (int e = tid; e < P * K; e += threads) {
    const int d = e / K;
    float prefix = 1.0f;
    for (int j = 0; j < d; ++j) prefix *= accept[j * K];
    score[e] = prefix * accept[e];
  }
  // FC_BODY_END
}

// Instantiations for a standalone compile of this file (MLX instantiates its own).
template [[host_name("fc_topk_half_8")]] [[kernel]] decltype(fc_topk<half, 8>) fc_topk<half, 8>;
template [[host_name("fc_topk_float_8")]] [[kernel]] decltype(fc_topk<float, 8>) fc_topk<float, 8>;
