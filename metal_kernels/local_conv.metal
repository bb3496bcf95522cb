// The DFlash2 drafter's local convolution: depthwise and causal along the block axis,
// out[b, t, h] = bias[h] + sum_i x[b, t - (K-1) + i, h] * weight[h, i] (zero before t = 0).
// One thread per (channel, sequence) slides a K-wide window down the block, so each input is
// read once; neighbouring threads take neighbouring channels (coalesced). Accumulates in fp32.
#include "prelude_metal.h"

// x [B, L, H], weight [H, K], bias [H], params = {B, L, H}; out [B, L, H].
template <typename T, int K>
[[kernel]] void fc_local_conv(
    const device T* x [[buffer(0)]],
    const device T* weight [[buffer(1)]],
    const device T* bias [[buffer(2)]],
    const device int* params [[buffer(3)]],
    device T* out [[buffer(4)]],
    uint3 thread_position_in_grid [[thread_position_in_grid]]) {
  // FC_BODY_BEGIN
  const int L = params[1];
  const int H = params[2];
  const int h = int(FC_GID_X);
  const int b = int(FC_GID_Y);
  if (h < H) {
    float w[K];
    float window[K];
    for (int i = 0; i < K; ++i) {
      w[i] = FC_TO_FLOAT(weight[h * K + i]);
      window[i] = 0.0f;
    }
    const float shift = FC_TO_FLOAT(bias[h]);
    for (int t = 0; t < L; ++t) {
      for (int i = 0; i + 1 < K; ++i) window[i] = window[i + 1];
      window[K - 1] = FC_TO_FLOAT(x[(b * L + t) * H + h]);
      float acc = shift;
      for (int i = 0; i < K; ++i) acc += window[i] * w[i];
      out[(b * L + t) * H + h] = FC_CAST(T, acc);
    }
  }
  // FC_BODY_END
}

// Instantiations for a standalone compile of this file (MLX instantiates its own).
template [[host_name("fc_local_conv_half_4")]] [[kernel]]
decltype(fc_local_conv<half, 4>) fc_local_conv<half, 4>;
