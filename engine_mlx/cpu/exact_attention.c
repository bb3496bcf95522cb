/* Attention whose every row is computed alone: the same bits for a token whether it is decoded
 * by itself or verified among a tree of drafts.
 *
 * A verification row at position p attends to the prompt and to its ancestors in the tree; plain
 * decoding at p attends to the same keys, stored contiguously. Fused kernels and BLAS products
 * sum in orders that depend on how many rows and keys they are given, so the two differ in the
 * last bits, and activations rounded to int8 (quant_gemm.c) turn those bits into different
 * tokens. Here each row takes its keys in position order (``idx``: the allowed cache slots,
 * ascending), and each score, the softmax and the weighted sum run in one fixed order.
 *
 * q [rows, heads, d]; k, v: a cache [kv_heads, slots, d] (``head_stride`` floats between heads,
 * rows of d floats); idx: row r's keys are idx[starts[r] .. starts[r + 1]). Heads share kv
 * heads in groups of heads / kv_heads. out [rows, heads, d]. d a multiple of the vector width.
 * Built like the other kernels (engine_mlx/cpu/exact_attention.py).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

typedef float vf __attribute__((vector_size(VW * sizeof(float)), aligned(4)));

static inline vf load(const float *p) {
  vf v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static inline float reduce(vf v) {
  float lanes[VW];
  memcpy(lanes, &v, sizeof(lanes));
  for (int width = VW / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; i++) lanes[i] += lanes[i + width];
  return lanes[0];
}

/* e^x for x <= 0, VW at a time where AVX-512 is there (2^n * a polynomial in the rest, about
 * 2 ulp); the scalar expf elsewhere. Either way the same function for every row. */
static void exp_in_place(float *x, int n) {
  int i = 0;
#if VW == 16
  const __m512 log2e = _mm512_set1_ps(1.44269504f), ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f), floor_ = _mm512_set1_ps(-87.0f);
  for (; i + 16 <= n; i += 16) {
    __m512 a = _mm512_max_ps(_mm512_loadu_ps(x + i), floor_);
    const __m512 m = _mm512_roundscale_ps(_mm512_mul_ps(a, log2e), _MM_FROUND_TO_NEAREST_INT);
    a = _mm512_fnmadd_ps(m, ln2_hi, a);
    a = _mm512_fnmadd_ps(m, ln2_lo, a);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, a, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, a, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, a, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, a, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, a, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(a, a), _mm512_add_ps(a, _mm512_set1_ps(1.0f)));
    _mm512_storeu_ps(x + i, _mm512_scalef_ps(p, m));
  }
#endif
  for (; i < n; i++) x[i] = expf(x[i] < -87.0f ? -87.0f : x[i]);
}

/* One row, one head: scores over the row's keys, softmax, weighted sum of values. */
static void attend_one(int d, const float *q, const float *k, const float *v, const int *idx,
                       int count, float scale, float *scores, float *out) {
  float top = -INFINITY;
  for (int j = 0; j < count; j++) {
    const float *key = k + (size_t)idx[j] * d;
    vf acc = (vf){0};
    for (int c = 0; c < d; c += VW) acc += load(q + c) * load(key + c);
    scores[j] = reduce(acc) * scale;
    if (scores[j] > top) top = scores[j];
  }
  for (int j = 0; j < count; j++) scores[j] -= top;
  exp_in_place(scores, count);
  vf sums = (vf){0};
  int j = 0;
  for (; j + VW <= count; j += VW) sums += load(scores + j);
  float total = reduce(sums);
  for (; j < count; j++) total += scores[j];
  const float inverse = 1.0f / total;
  enum { MAX_D = 512 };
  vf acc[MAX_D / VW];
  for (int c = 0; c < d / VW; c++) acc[c] = (vf){0};
  for (j = 0; j < count; j++) {
    const float *value = v + (size_t)idx[j] * d;
    const vf weight = (vf){0} + scores[j];
    for (int c = 0; c < d / VW; c++) acc[c] += weight * load(value + c * VW);
  }
  for (int c = 0; c < d / VW; c++) {
    const vf scaled = acc[c] * inverse;
    memcpy(out + c * VW, &scaled, sizeof(scaled));
  }
}

int ea_vector_width(void) { return VW; }

/* 0 on success; -1 for a head size this cannot take, -2 out of memory. */
int ea_attend(int rows, int heads, int kv_heads, int d, const float *q, const float *k,
              const float *v, long head_stride, const int *idx, const int *starts, float scale,
              float *out) {
  if (d % VW != 0 || d > 512 || kv_heads < 1 || heads % kv_heads != 0) return -1;
  int longest = 0;
  for (int r = 0; r < rows; r++)
    if (starts[r + 1] - starts[r] > longest) longest = starts[r + 1] - starts[r];
  float *scores = malloc(sizeof(float) * (size_t)(longest > 0 ? longest : 1));
  if (!scores) return -2;
  const int group = heads / kv_heads;
  for (int r = 0; r < rows; r++)
    for (int h = 0; h < heads; h++) {
      const size_t kv = (size_t)(h / group) * (size_t)head_stride;
      attend_one(d, q + ((size_t)r * heads + h) * d, k + kv, v + kv, idx + starts[r],
                 starts[r + 1] - starts[r], scale, scores, out + ((size_t)r * heads + h) * d);
    }
  free(scores);
  return 0;
}
