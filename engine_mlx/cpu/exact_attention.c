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
 * rows of d floats) for the slots below ``split``, and k2, v2 [kv_heads, *, d] (``head_stride2``)
 * for the slots from ``split`` on: the forward's own new rows, read where they were computed
 * before the cache has taken them; idx: row r's keys are idx[starts[r] .. starts[r + 1]). Heads share kv
 * heads in groups of heads / kv_heads. out [rows, heads, d]. d a multiple of the vector width.
 * Built like the other kernels (engine_mlx/cpu/exact_attention.py).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vector_exp.h"
#include "vectors.h"

/* The lane sums of VW vectors, as one vector (lane l: the sum of vector l's lanes), each by a
 * fixed tree of additions over its own vector's lanes only: a key's score does not depend on
 * the keys beside it. */
static inline vf lane_sums(vf *v) {
#if VW == 16
  __m512 t[8], u[4];
  for (int i = 0; i < 8; i++) {
    const __m512 a = (__m512)v[2 * i], b = (__m512)v[2 * i + 1];
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  }
  for (int i = 0; i < 4; i++)
    u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 x0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88),
                                  _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 x1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88),
                                  _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return (vf)_mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, 0x88), _mm512_shuffle_f32x4(x0, x1, 0xDD));
#elif VW == 8 && defined(__AVX__)
  /* hadd sums neighbouring lanes of one vector: vector l's lanes (0+1, 2+3, ...) in t, then
   * ((0+1)+(2+3)) and ((4+5)+(6+7)) of each in u's two halves, added last. */
  __m256 t[4], u[2];
  for (int i = 0; i < 4; i++) t[i] = _mm256_hadd_ps((__m256)v[2 * i], (__m256)v[2 * i + 1]);
  for (int i = 0; i < 2; i++) u[i] = _mm256_hadd_ps(t[2 * i], t[2 * i + 1]);
  return (vf)_mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20),
                           _mm256_permute2f128_ps(u[0], u[1], 0x31));
#else
  float lanes[VW][VW], out[VW];
  memcpy(lanes, v, sizeof(lanes));
  for (int l = 0; l < VW; l++) {
    for (int width = VW / 2; width >= 1; width /= 2)
      for (int i = 0; i < width; i++) lanes[l][i] += lanes[l][i + width];
    out[l] = lanes[l][0];
  }
  vf sums;
  memcpy(&sums, out, sizeof(sums));
  return sums;
#endif
}

/* Where a slot's row of d floats lies: in the cache below ``split``, among the new rows from it. */
typedef struct {
  const float *k, *v, *k2, *v2;
  int split;
} slots;

static inline const float *key_row(const slots *s, int slot, int d) {
  return slot < s->split ? s->k + (size_t)slot * d : s->k2 + (size_t)(slot - s->split) * d;
}

static inline const float *value_row(const slots *s, int slot, int d) {
  return slot < s->split ? s->v + (size_t)slot * d : s->v2 + (size_t)(slot - s->split) * d;
}

/* One row, one head: scores over the row's keys, softmax, weighted sum of values. */
static void attend_one(int d, const float *q, const slots *kv, const int *idx, int count,
                       float scale, float *scores, float *out) {
  int j = 0;
  for (; j + VW <= count; j += VW) { /* VW keys at a time, their dot products side by side */
    vf acc[VW];
    for (int l = 0; l < VW; l++) {
      const float *key = key_row(kv, idx[j + l], d);
      acc[l] = (vf){0};
      for (int c = 0; c < d; c += VW) acc[l] += load(q + c) * load(key + c);
    }
    const vf block = lane_sums(acc) * scale;
    store_vector(scores + j, block);
  }
  if (j < count) { /* the last keys as a block too, the missing ones zero */
    vf acc[VW];
    for (int l = 0; l < VW; l++) {
      acc[l] = (vf){0};
      if (j + l >= count) continue;
      const float *key = key_row(kv, idx[j + l], d);
      for (int c = 0; c < d; c += VW) acc[l] += load(q + c) * load(key + c);
    }
    const vf block = lane_sums(acc) * scale;
    memcpy(scores + j, &block, sizeof(float) * (size_t)(count - j));
  }
  float top = -INFINITY;
  for (j = 0; j < count; j++)
    if (scores[j] > top) top = scores[j];
  for (int j = 0; j < count; j++) scores[j] -= top;
  exp_in_place(scores, count);
  vf sums = (vf){0};
  for (j = 0; j + VW <= count; j += VW) sums += load(scores + j);
  float total = reduce(sums);
  for (; j < count; j++) total += scores[j];
  const float inverse = 1.0f / total;
  enum { MAX_D = 512 };
  vf acc[MAX_D / VW];
  for (int c = 0; c < d / VW; c++) acc[c] = (vf){0};
  for (j = 0; j < count; j++) {
    const float *value = value_row(kv, idx[j], d);
    const vf weight = (vf){0} + scores[j];
    for (int c = 0; c < d / VW; c++) acc[c] += weight * load(value + c * VW);
  }
  for (int c = 0; c < d / VW; c++) {
    store_vector(out + c * VW, acc[c] * inverse);
  }
}

int ea_vector_width(void) { return VW; }

/* The pool that runs the parts (small_gemm.c's fc_parallel), or none: one thread. */
static parallel_fn parallel;

void ea_set_pool(parallel_fn fn) { parallel = fn; }

typedef struct {
  int rows, heads, kv_heads, d, longest;
  const float *q, *k, *v, *k2, *v2;
  long head_stride, head_stride2;
  int split;
  const int *idx, *starts;
  float scale;
  float *out;
  int failed;
} job;

/* The (row, head) pairs of part ``index`` of ``parts``, each with its own scores buffer. */
static void attend_part(const void *ctx, int index, int parts) {
  job *w = (job *)ctx;
  const int pairs = w->rows * w->heads, group = w->heads / w->kv_heads;
  const int begin = (int)((long)pairs * index / parts), end = (int)((long)pairs * (index + 1) / parts);
  float *scores = malloc(sizeof(float) * (size_t)(w->longest > 0 ? w->longest : 1));
  if (!scores) {
    w->failed = 1;
    return;
  }
  for (int pair = begin; pair < end; pair++) {
    const int r = pair / w->heads, h = pair % w->heads;
    const size_t at = (size_t)(h / group) * (size_t)w->head_stride;
    const size_t at2 = (size_t)(h / group) * (size_t)w->head_stride2;
    const slots kv = {w->k + at, w->v + at, w->k2 + at2, w->v2 + at2, w->split};
    attend_one(w->d, w->q + ((size_t)r * w->heads + h) * w->d, &kv, w->idx + w->starts[r],
               w->starts[r + 1] - w->starts[r], w->scale, scores,
               w->out + ((size_t)r * w->heads + h) * w->d);
  }
  free(scores);
}

/* 0 on success; -1 for a head size this cannot take, -2 out of memory. Rows and heads are
 * shared among ``threads`` (each pair computed whole by one thread: the bits do not change). */
int ea_attend(int rows, int heads, int kv_heads, int d, const float *q, const float *k,
              const float *v, long head_stride, const float *k2, const float *v2,
              long head_stride2, int split, const int *idx, const int *starts, float scale,
              float *out, int threads) {
  if (d % VW != 0 || d > 512 || kv_heads < 1 || heads % kv_heads != 0) return -1;
  int longest = 0;
  long work = 0;
  for (int r = 0; r < rows; r++) {
    const int count = starts[r + 1] - starts[r];
    if (count > longest) longest = count;
    work += (long)count * heads * d;
  }
  job w = {rows,  heads,        kv_heads, d,     longest, q,      k,     v,   k2,
           v2,    head_stride,  head_stride2, split, idx,     starts, scale, out, 0};
  if (parallel && threads > 1 && work >= 65536)
    parallel(attend_part, &w, threads);
  else
    attend_part(&w, 0, 1);
  return w.failed ? -2 : 0;
}
