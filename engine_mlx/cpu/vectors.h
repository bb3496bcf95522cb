/* What the CPU kernels share: the vector width this build has, a vector of floats, unaligned
 * loads, the fixed reduction tree, and the type of the thread pool's entry (small_gemm.c's
 * fc_parallel). The build hashes this header with each source (engine_mlx/cpu/small_gemm.py). */
#ifndef FLASHCHAT_VECTORS_H
#define FLASHCHAT_VECTORS_H

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

/* With the intrinsics where there are some: GCC copies a 4-aligned 32-byte vector as two
 * 16-byte halves through the stack, and the 32-byte reload of the two stores stalls (AVX2 code
 * ran 6x slower than SSE code for it). */
static inline vf load(const float *p) {
#if VW == 16
  return (vf)_mm512_loadu_ps(p);
#elif VW == 8 && defined(__AVX__)
  return (vf)_mm256_loadu_ps(p);
#elif VW == 4 && defined(__SSE__)
  return (vf)_mm_loadu_ps(p);
#else
  vf v;
  memcpy(&v, p, sizeof(v));
  return v;
#endif
}

static inline void store_vector(float *p, vf v) {
#if VW == 16
  _mm512_storeu_ps(p, (__m512)v);
#elif VW == 8 && defined(__AVX__)
  _mm256_storeu_ps(p, (__m256)v);
#elif VW == 4 && defined(__SSE__)
  _mm_storeu_ps(p, (__m128)v);
#else
  memcpy(p, &v, sizeof(v));
#endif
}

/* The fixed reduction tree: halves added until one lane is left. */
static inline float reduce(vf v) {
  float lanes[VW];
  memcpy(lanes, &v, sizeof(lanes));
  for (int width = VW / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; i++) lanes[i] += lanes[i + width];
  return lanes[0];
}

/* Part ``index`` of ``parts`` of a job; a pool runs ``parts`` of them at once. */
typedef void (*part_fn)(const void *ctx, int index, int parts);
typedef void (*parallel_fn)(part_fn fn, const void *ctx, int parts);

#endif
