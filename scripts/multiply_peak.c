/* The most int8 multiply-adds one core can do with AVX2's vpmaddubsw, the instruction the
 * quantized product's int8 path is built on (engine_mlx/cpu/quant_gemm.c): twelve independent
 * chains (each result the next one's input), so only the multiplier's throughput limits it. Gives the floor under a few-row
 * product's time on this CPU, whatever the kernel (docs/quantized.md).
 *
 *   cc -O2 -mavx2 scripts/multiply_peak.c -o multiply_peak && ./multiply_peak
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define CHAINS 12

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  __m256i acc[CHAINS];
  for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_set1_epi8((char)(i + 1));
  __m256i x = _mm256_set1_epi8(3);
  const long rounds = 50000000;
  double best = 1e30;
  for (int trial = 0; trial < 3; trial++) {
    const double start = now();
    for (long n = 0; n < rounds; n++) {
#pragma GCC unroll 12
      for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_maddubs_epi16(acc[i], x);
      __asm__ volatile("" : "+x"(x)); /* keeps the loop from being folded away */
    }
    const double seconds = now() - start;
    best = seconds < best ? seconds : best;
  }
  __m256i sum = acc[0];
  for (int i = 1; i < CHAINS; i++) sum = _mm256_add_epi16(sum, acc[i]);
  const double per_second = (double)rounds * CHAINS / best;
  printf("vpmaddubsw: %.2f G/s on one core = %.1f G int8 multiply-adds/s (check %d)\n",
         per_second / 1e9, per_second * 32 / 1e9, _mm256_extract_epi16(sum, 0));
  return 0;
}
