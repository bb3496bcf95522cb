/* AVX2, 4 bits: the product over weights stored in panels of eight rows (quant_gemm.c includes
 * this file inside its AVX2 int8 section).
 *
 * Why: in MLX's layout each weight row is its own stream, so a register tile of four rows had
 * to fold their int16 pair sums together with vphaddw (slow on AVX2 cores) and kept one
 * accumulator per output, spilling AVX2's 16 registers. A panel stores the 4-byte words of
 * eight consecutive weight rows side by side: word d of the panel is rows 0-7's bytes 4d..4d+3
 * (weights 8d..8d+7 of each row), 32 bytes. One load is then eight rows' weights for the same
 * eight activations, so x's 4-byte word is broadcast, the int32 lanes of one vpmaddwd are the
 * eight outputs, and a row of x needs one float accumulator for eight outputs. Per 64 weights
 * and row: two vpmaddubsw, two adds and two broadcast loads, no shuffles. Measured on a 2-core
 * AMD EPYC (Zen 3), one thread, 4864 x 896 in groups of 64 and 1536 x 576 in groups of 32,
 * cache-cold: one row 1.0-1.3x, four to sixteen rows 1.2-1.35x faster than fold_tile.
 *
 * Each output's arithmetic is fixed: the integer dot over a group is exact in any order, and
 * per group one conversion and the same three fused multiply-adds follow, whatever the tile's
 * rows and however the threads split the panels, so a row's bits do not depend on the rows
 * beside it. The panel's scales and biases are stored the same way: eight rows' entries for a
 * group side by side (QuantizedMatrix packs all three at load time). */

/* Eight rows' scales or biases for a group, entry ``i`` on, as floats. */
static inline __m256 panel_values(const product *p, const void *v, size_t i) {
  return p->half ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)v + i)))
                 : _mm256_loadu_ps((const float *)v + i);
}

/* x's four int8 values at ``at``, broadcast to every lane. */
static inline __m256i broadcast_word(const int8_t *at) {
  int32_t v;
  memcpy(&v, at, sizeof v);
  return _mm256_set1_epi32(v);
}

/* y[r0 : r0 + R, j0 : j0 + 8] from the panel holding rows j0..j0 + 7. Within a group, int16
 * pair sums over four words at most (4 * 2 * 2 * 15 * 127 < 32767), then int32. The four
 * words' loop stays a loop: unrolled (GCC does by default) its registers spill, 9-11% slower
 * at four rows and more. The prefetch runs 2 KB ahead, 6-8% faster at one row than 1 KB. */
#define PANEL_TILE(R)                                                                         \
  static void panel_tile_##R(const product *p, int r0, int j0) {                            \
    const int groups = p->k / p->group, words = p->k / 8, per = p->group / 8;               \
    const int chunks = (p->k / 2 + CHUNK - 1) / CHUNK;                                      \
    const size_t panel = (size_t)(j0 / PANEL), s0 = panel * groups * PANEL;                 \
    const __m256i *w = (const __m256i *)(p->q + panel * words * 32);                        \
    const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);                \
    const int8_t *xr[R];                                                                    \
    const float *steps[R], *sums[R], *residuals[R];                                         \
    for (int r = 0; r < R; r++) {                                                           \
      xr[r] = p->xq + (size_t)(r0 + r) * chunks * 2 * CHUNK;                                \
      steps[r] = p->xd + (size_t)(r0 + r) * chunks * LANES; /* a word's group's step */     \
      sums[r] = p->xsum + (size_t)(r0 + r) * groups;                                        \
      residuals[r] = p->xres + (size_t)(r0 + r) * groups;                                   \
    }                                                                                       \
    __m256 acc[R];                                                                          \
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();                               \
    for (int g = 0; g < groups; g++) {                                                      \
      __m256i dots[R];                                                                      \
      for (int r = 0; r < R; r++) dots[r] = _mm256_setzero_si256();                         \
      for (int d0 = g * per; d0 < (g + 1) * per; d0 += 4) {                                 \
        /* x's even values for words d0..d0 + 3 (their chunk's even half), odd CHUNK on */    \
        const size_t at = (size_t)d0 * 4 + (size_t)(d0 / LANES) * CHUNK;                    \
        __m256i pairs[R];                                                                   \
        for (int r = 0; r < R; r++) pairs[r] = _mm256_setzero_si256();                      \
        _mm_prefetch((const char *)(w + d0) + AHEAD * 256, _MM_HINT_T0);                    \
        _mm_prefetch((const char *)(w + d0 + 2) + AHEAD * 256, _MM_HINT_T0);                \
        _Pragma("GCC unroll 1") for (int i = 0; i < 4; i++) {                               \
          const __m256i packed = _mm256_loadu_si256(w + d0 + i);                            \
          const __m256i lo = _mm256_and_si256(packed, low);                                 \
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);           \
          for (int r = 0; r < R; r++) {                                                     \
            const int8_t *x = xr[r] + at + (size_t)i * 4;                                   \
            const __m256i even = _mm256_maddubs_epi16(lo, broadcast_word(x));               \
            const __m256i odd = _mm256_maddubs_epi16(hi, broadcast_word(x + CHUNK));        \
            pairs[r] = _mm256_add_epi16(pairs[r], _mm256_add_epi16(even, odd));             \
          }                                                                                 \
        }                                                                                   \
        for (int r = 0; r < R; r++)                                                         \
          dots[r] = _mm256_add_epi32(dots[r], _mm256_madd_epi16(pairs[r], ones));           \
      }                                                                                     \
      const __m256 scale = panel_values(p, p->scales, s0 + (size_t)g * PANEL);              \
      const __m256 bias = panel_values(p, p->biases, s0 + (size_t)g * PANEL);               \
      for (int r = 0; r < R; r++) {                                                         \
        /* scale * (d * sum q x + 8 * residual) + bias * sum x: the centred product as     \
         * finish() adds it (see the top of quant_gemm.c) */                                \
        const __m256 centred = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[r]),                 \
                                               _mm256_set1_ps(steps[r][g * per]),           \
                                               _mm256_set1_ps(8.0f * residuals[r][g]));     \
        acc[r] = _mm256_fmadd_ps(scale, centred, acc[r]);                                   \
        acc[r] = _mm256_fmadd_ps(bias, _mm256_set1_ps(sums[r][g]), acc[r]);                 \
      }                                                                                     \
    }                                                                                       \
    for (int r = 0; r < R; r++) _mm256_storeu_ps(p->y + (size_t)(r0 + r) * p->n + j0, acc[r]); \
  }

PANEL_TILE(1) PANEL_TILE(2) PANEL_TILE(3) PANEL_TILE(4)

static void panel_block(const product *p, int r0, int rows, int j0) {
  switch (rows) {
    case 4: panel_tile_4(p, r0, j0); return;
    case 3: panel_tile_3(p, r0, j0); return;
    case 2: panel_tile_2(p, r0, j0); return;
    default: panel_tile_1(p, r0, j0); return;
  }
}
