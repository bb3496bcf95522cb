/* e^x for x <= 0, in place, a vector at a time with AVX-512 or AVX2 (2^n times a polynomial in
 * the rest, about 2 ulp); the scalar expf elsewhere. Either way the same function for every row
 * and every element: the attention's softmax and the MLP's gate (quant_layer.c) share it. Inputs
 * below -87 are taken as -87 (e^-87 is still a normal float). */
#ifndef FLASHCHAT_VECTOR_EXP_H
#define FLASHCHAT_VECTOR_EXP_H

#include <math.h>

#include "vectors.h"

#if VW == 16 || (defined(__AVX2__) && defined(__FMA__))
static const float EXP_POLY[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                  4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
#endif

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
    __m512 p = _mm512_set1_ps(EXP_POLY[0]);
    for (int c = 1; c < 6; c++) p = _mm512_fmadd_ps(p, a, _mm512_set1_ps(EXP_POLY[c]));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(a, a), _mm512_add_ps(a, _mm512_set1_ps(1.0f)));
    _mm512_storeu_ps(x + i, _mm512_scalef_ps(p, m));
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 log2e = _mm256_set1_ps(1.44269504f), ln2_hi = _mm256_set1_ps(0.693359375f);
  const __m256 ln2_lo = _mm256_set1_ps(-2.12194440e-4f), floor_ = _mm256_set1_ps(-87.0f);
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_max_ps(_mm256_loadu_ps(x + i), floor_);
    const __m256 m = _mm256_round_ps(_mm256_mul_ps(a, log2e),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    a = _mm256_fnmadd_ps(m, ln2_hi, a);
    a = _mm256_fnmadd_ps(m, ln2_lo, a);
    __m256 p = _mm256_set1_ps(EXP_POLY[0]);
    for (int c = 1; c < 6; c++) p = _mm256_fmadd_ps(p, a, _mm256_set1_ps(EXP_POLY[c]));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(a, a), _mm256_add_ps(a, _mm256_set1_ps(1.0f)));
    /* 2^m from its exponent bits: m >= -126 here (x >= -87), a normal number */
    const __m256i two_m = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(m), _mm256_set1_epi32(127)), 23);
    _mm256_storeu_ps(x + i, _mm256_mul_ps(p, _mm256_castsi256_ps(two_m)));
  }
#endif
  for (; i < n; i++) x[i] = expf(x[i] < -87.0f ? -87.0f : x[i]);
}

#endif
