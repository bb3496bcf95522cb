/* The product with MLX's affine-quantized weights, on the CPU.
 *
 * y[m, n] = sum_k x[m, k] * w[n, k], where w[n, k] = scale[n, g] * q[n, k] + bias[n, g] for the
 * group g = k / group: MLX's layout for `mx.quantize` / `mlx_lm.convert -q` (4 or 8 bits, groups
 * of 32, 64 or 128 along k; q packed little-endian into uint32 words, 32 / bits values a word).
 *
 * Decoding reads every weight once per token, so the weights' bytes are the time: 4-bit weights
 * are an eighth of float32's. Each block of weights is unpacked once and used for all m rows of
 * x while it is in registers (m = 1 decoding, up to 32 verifying a draft tree, more in prefill).
 *
 * Two ways to multiply:
 *
 * - With AVX-512 VNNI (Intel since Ice Lake and Cascade Lake, AMD since Zen 4) or AVX2 (Intel
 *   since Haswell, AMD since Zen), x is quantized as llama.cpp quantizes activations: per row
 *   and group, int8 values and one float step d = max|x| / 127. Then
 *   sum_k q x ~ d * sum_k q * round(x / d) is integer dot products of unsigned weight bytes
 *   and signed activation bytes, summed into int32 lanes (vpdpbusd; vpmaddubsw + vpmaddwd).
 *   The rounding error is weighted by q, so the weights are centred first: with c the middle
 *   value (8 or 128), w = scale * (q - c) + (bias + c * scale), and since
 *   sum (q - c) round(x/d) = sum q round(x/d) - c * sum round(x/d), the same integer dots serve
 *   and the error is x's rounding weighted by |q - c|, half as large:
 *   |error| <= sum over groups of |scale| * d / 2 * sum |q - c| (tests/engine_mlx/cpu checks
 *   it). The bias term uses the exact float sum of x in the group.
 * - Elsewhere (SSE, NEON), or when asked for, the weights are unpacked to floats and x
 *   stays float: the product equals the dequantized weights' within float rounding.
 *
 * Either way every output element accumulates in the same order whatever m is and however the
 * threads split the columns (lanes over k in k order, then a fixed reduction tree, then the bias
 * term), so a row's bits do not depend on the rows beside it: plain decoding and verification
 * agree exactly, as with the float32 product (small_gemm.c).
 *
 * Built at run time with -march=native (engine_mlx/cpu/quant_gemm.py); GCC/Clang vector
 * extensions make the float path AVX-512, AVX2, SSE or NEON code. Threads come from the float32
 * product's pool (fq_set_pool): one pool for both, so their workers never compete.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vectors.h"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define INT8_DOTS 1
#define CHUNK 64 /* weight bytes per chunk: one 512-bit vector */
#elif defined(__AVX2__)
#define INT8_DOTS 1
#define CHUNK 32 /* one 256-bit vector */
#else
#define INT8_DOTS 0
#endif
#if INT8_DOTS && CHUNK == 32
#define PANELS_BUILD 1 /* the AVX2 int8 path: weights in panels (quant_panels.c) */
#else
#define PANELS_BUILD 0
#endif
#define PANEL 8 /* weight rows in a panel: the int32 lanes of an AVX2 vector */

typedef struct {
  int m, n, k, bits, group, int8;
  int panel;           /* 0: MLX's row layout; PANEL: q, scales and biases in panels (quant_panels.c) */
  const float *x;      /* [m, k] */
  const uint8_t *q;    /* [n, k * bits / 8] */
  const void *scales;  /* [n, k / group]: float32, or float16 where ``half`` */
  const void *biases;  /* [n, k / group], the same type */
  int half;
  float *y;            /* [m, n] */
  /* The int8 path's view of x (see quantize_rows). */
  const int8_t *xq;  /* [m, chunks * 2 * CHUNK] */
  const float *xd;   /* [m, chunks * LANES]: each lane's step d */
  const float *xsum; /* [m, k / group]: each group's exact sum */
  const float *xres; /* [m, k / group]: that sum less d times the sum of the rounded values */
  int lane_group[16]; /* a chunk's lane l lies in its (lane_group[l])th group */
  int chunk_groups;   /* how many groups a chunk touches */
} product;

/* Scales and biases are float32, or float16 where the model file holds them as float16 (every
 * mlx-community file; the loader checks they convert exactly): at 4 bits in groups of 64 they
 * are a fifth of the bytes as float32, a ninth as float16. Float16 arrays end with at least 32
 * spare entries (quant_gemm.py pads them), so a vector load may run past a row's last group. */
static inline float param(const void *v, int half, size_t i) {
  return half ? (float)((const _Float16 *)v)[i] : ((const float *)v)[i];
}

/* The pool that runs a product's parts (small_gemm.c's fc_parallel), or none: one thread. */
static parallel_fn parallel;

#define COLS 4 /* weight rows a thread's share is cut into (and a register tile's width) */
#define ROWS 4 /* rows of x per register tile (AVX2's 16 registers too: measured best) */
/* Weight rows ahead to prefetch: the hardware prefetcher alone left a 2.7 MB matrix at half the
 * memory's speed (4864x896, 4 bits, 2-core Xeon: 0.15 -> 0.08 ms). */
#define AHEAD 8

#if INT8_DOTS
/* ---- int8 dot products ----
 *
 * k is cut into chunks of CHUNK weight bytes: 2 * CHUNK weights at 4 bits, CHUNK at 8. A chunk's
 * int32 lane l sums the 4 bytes 4l..4l+3, so it holds 8 (4-bit) or 4 (8-bit) consecutive
 * weights, all in one group; a lane's float factor is its group's weight scale times x's step.
 * At 4 bits byte b holds weights 2b (low nibble) and 2b + 1 (high): x's chunk is stored as its
 * CHUNK even-indexed values, then its CHUNK odd-indexed ones, so both nibble vectors meet their
 * activations.
 *
 * - AVX-512 VNNI: one vpdpbusd (unsigned weight bytes times signed activation bytes, four
 *   summed into each int32 lane) per nibble vector.
 * - AVX2 (Intel since Haswell, AMD since Zen): vpmaddubsw sums pairs into int16 lanes, which
 *   cannot overflow for nibbles (2 * 15 * 127, twice), then vpmaddwd by ones sums pairs of
 *   those into int32. Bytes (8 bits) would overflow int16 (2 * 255 * 127), so they are split
 *   into their two nibbles: sum q x = sum lo x + 16 sum hi x. */
#define LANES (CHUNK / 4)

static inline int chunk_weights(int bits) { return bits == 4 ? 2 * CHUNK : CHUNK; }

/* x's int8 view, row by row: each group's step, rounded values, exact sum and residual.
 * Portable code, the same bits on every build that has the int8 path: round to nearest even
 * (cvtss2si, as the vector conversion rounds), the group's sum by the fixed tree. */
static void quantize_row(const product *p, const float *x, int8_t *xq, float *xd, float *xsum,
                         float *xres) {
  const int k = p->k, group = p->group, groups = k / group, per_chunk = chunk_weights(p->bits);
  const int chunks = (k + per_chunk - 1) / per_chunk;
  int8_t plain[2 * CHUNK];
  float steps[groups];
  long rounded[groups];
  for (int g = 0; g < groups; g++) {
    const float *v = x + (size_t)g * group;
    vf sum = {0};
    float top = 0;
    for (int i = 0; i < group; i += VW) sum += load(v + i);
    for (int i = 0; i < group; i++) top = __builtin_fabsf(v[i]) > top ? __builtin_fabsf(v[i]) : top;
    steps[g] = top / 127.0f;
    xsum[g] = reduce(sum);
    rounded[g] = 0;
  }
  for (int c = 0; c < chunks; c++) {
    const int begin = c * per_chunk, end = begin + per_chunk < k ? begin + per_chunk : k;
    for (int i = begin; i < end; i++) {
      const float d = steps[i / group];
      long r = _mm_cvtss_si32(_mm_set_ss(x[i] * (d ? 1.0f / d : 0.0f)));
      r = r > 127 ? 127 : r < -127 ? -127 : r;
      rounded[i / group] += r;
      plain[i - begin] = (int8_t)r;
    }
    memset(plain + (end - begin), 0, (size_t)(per_chunk - (end - begin)));
    int8_t *out = xq + (size_t)c * 2 * CHUNK;
    if (p->bits == 4) {
      for (int b = 0; b < CHUNK; b++) {
        out[b] = plain[2 * b];
        out[CHUNK + b] = plain[2 * b + 1];
      }
    } else {
      memcpy(out, plain, CHUNK);
    }
    const int first = begin / group;
    for (int l = 0; l < LANES; l++) {
      const int g = first + p->lane_group[l];
      xd[(size_t)c * LANES + l] = g < groups ? steps[g] : 0.0f;
    }
  }
  for (int g = 0; g < groups; g++) xres[g] = xsum[g] - steps[g] * (float)rounded[g];
}

/* x's int8 view for every row, in one block the caller frees; NULL when out of memory. */
static char *quantize_rows(product *p) {
  const int m = p->m, k = p->k, chunks = (k * p->bits / 8 + CHUNK - 1) / CHUNK;
  const int groups = k / p->group;
  const size_t xq_bytes = (size_t)m * chunks * 2 * CHUNK, xd_floats = (size_t)m * chunks * LANES;
  char *scratch = malloc(xq_bytes + sizeof(float) * (xd_floats + 2 * (size_t)m * groups));
  if (!scratch) return NULL;
  int8_t *xq = (int8_t *)scratch;
  float *xd = (float *)(scratch + xq_bytes), *xsum = xd + xd_floats;
  float *xres = xsum + (size_t)m * groups;
  const int per_chunk = chunk_weights(p->bits), per_lane = per_chunk / LANES;
  for (int l = 0; l < LANES; l++) p->lane_group[l] = per_lane * l / p->group;
  p->chunk_groups = per_chunk > p->group ? per_chunk / p->group : 1;
  for (int r = 0; r < m; r++)
    quantize_row(p, p->x + (size_t)r * k, xq + (size_t)r * chunks * 2 * CHUNK,
                 xd + (size_t)r * chunks * LANES, xsum + (size_t)r * groups,
                 xres + (size_t)r * groups);
  p->xq = xq;
  p->xd = xd;
  p->xsum = xsum;
  p->xres = xres;
  return scratch;
}

/* How many of a chunk's groups a row has from ``available`` on: past its last one lies the next
 * row, or unmapped memory whose NaN, times a zero dot product, is still NaN. */
static inline int live_groups(const product *p, int available) {
  return available < p->chunk_groups ? available : p->chunk_groups;
}

#if CHUNK == 64
typedef __m512 dots_f;
typedef __m512i dots_i;
#define F_ZERO _mm512_setzero_ps
#define F_LOAD _mm512_loadu_ps
#define F_MUL _mm512_mul_ps
#define F_FMA _mm512_fmadd_ps
#define I_TO_F _mm512_cvtepi32_ps
#define I_LOAD(p) _mm512_loadu_si512((const void *)(p))

/* Per-lane copies of a chunk's per-group values, from its first group's entry ``v``. */
static inline __m512 halves(const void *v, size_t i) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)v + i)));
}
static inline __m512 spread(const product *p, const void *v, size_t i, int available) {
  const __mmask16 live = (__mmask16)((1u << live_groups(p, available)) - 1);
  const __m512 values = p->half ? halves(v, i) : _mm512_maskz_loadu_ps(live, (const float *)v + i);
  return _mm512_permutexvar_ps(_mm512_loadu_si512(p->lane_group), values);
}

static inline __mmask16 first_lanes(int n) { return n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1); }
#define MASKED_LOAD(n, v) _mm512_maskz_loadu_ps(first_lanes(n), v)
#define F_SET1 _mm512_set1_ps
static inline float f_sum(__m512 v) { return _mm512_reduce_add_ps(v); }

/* A chunk's packed weight bytes (the last one may be short: its first ``bytes`` only). */
static inline __m512i weight_bytes(const uint8_t *w, int bytes) {
  return _mm512_maskz_loadu_epi8(bytes >= 64 ? ~0ull : ~0ull >> (64 - bytes), w);
}
static inline __m512i low_nibbles(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
static inline __m512i high_nibbles(__m512i v) {
  return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
}
/* int32 lanes of sum q x over a chunk: nibbles lo/hi times activations even/odd (4 bits), or
 * the bytes themselves (``lo``, unsplit) times x (8 bits). */
static inline __m512i dot4(__m512i lo, __m512i hi, __m512i even, __m512i odd) {
  return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, even), hi, odd);
}
static inline __m512i dot8(__m512i bytes, __m512i unused, __m512i x) {
  (void)unused;
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), bytes, x);
}
/* 8-bit weights go to dot8 whole and unsigned: sum q x. */
static inline __m512i byte_operand(__m512i packed) { return packed; }
static inline __m512i byte_magnitudes(__m512i packed) { return packed; }
#define CENTRED_BYTES 0
#else
typedef __m256 dots_f;
typedef __m256i dots_i;
#define F_ZERO _mm256_setzero_ps
#define F_LOAD _mm256_loadu_ps
#define F_MUL _mm256_mul_ps
#define F_FMA _mm256_fmadd_ps
#define I_TO_F _mm256_cvtepi32_ps
#define I_LOAD(p) _mm256_loadu_si256((const __m256i *)(p))

static inline __m256i first_ints(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline __m256 halves(const void *v, size_t i) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)v + i)));
}
static inline __m256 spread(const product *p, const void *v, size_t i, int available) {
  const __m256 values = p->half ? halves(v, i)
                                : _mm256_maskload_ps((const float *)v + i,
                                                     first_ints(live_groups(p, available)));
  return _mm256_permutevar8x32_ps(values, _mm256_loadu_si256((const __m256i *)p->lane_group));
}
#define MASKED_LOAD(n, v) _mm256_maskload_ps(v, first_ints(n))
#define F_SET1 _mm256_set1_ps
/* The lanes' sum by a fixed tree: lane i + lane i + 4, then + 2, then + 1 (in registers: a
 * sum through an array in memory stalled on store forwarding, 12% of a product's time). */
static inline float f_sum(__m256 v) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

/* Rows are k / 2 or k bytes, k a multiple of 32: a short last chunk is whole int32 words. */
static inline __m256i weight_bytes(const uint8_t *w, int bytes) {
  return _mm256_maskload_epi32((const int *)w, first_ints(bytes / 4));
}
static inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
static inline __m256i high_nibbles(__m256i v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
}
static inline __m256i dot4(__m256i lo, __m256i hi, __m256i even, __m256i odd) {
  const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, even), _mm256_maddubs_epi16(hi, odd));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}
/* 8 bits: vpmaddubsw's pair sums would overflow int16 with unsigned bytes (2 * 255 * 127), so
 * the weights are centred, q - 128 (the byte with its top bit flipped, as int8), and multiplied
 * as llama.cpp multiplies Q8_0: |q - 128| (at most 128, unsigned) times x with the weight's
 * sign, 2 * 128 * 127 at most. One vpmaddubsw and one vpmaddwd per 32 weights and row, half of
 * splitting the bytes into nibbles; the dot is then sum (q - 128) x, and ``finish`` adds the
 * centre's share through x's exact group sums (CENTRED_BYTES). */
static inline __m256i byte_operand(__m256i packed) {
  return _mm256_xor_si256(packed, _mm256_set1_epi8((char)0x80));
}
static inline __m256i byte_magnitudes(__m256i packed) {
  const __m256i centred = byte_operand(packed);
  return _mm256_sign_epi8(centred, centred);
}
static inline __m256i dot8(__m256i centred, __m256i magnitudes, __m256i x) {
  const __m256i pairs = _mm256_maddubs_epi16(magnitudes, _mm256_sign_epi8(x, centred));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}
#define CENTRED_BYTES 1
#endif

/* A block of LANES groups' scales or biases from entry ``i``, as floats. */
static inline dots_f group_values(const product *p, const void *v, size_t i, int live) {
  return p->half ? halves(v, i) : MASKED_LOAD(live, (const float *)v + i);
}

/* The tile's outputs from their accumulators ``acc[rows][cols]``: the bias term and the
 * centring's correction (see the top of the file) added lane-wise over the groups, then the
 * lanes summed. Each output gets the same operations in the same order whatever the tile's
 * shape; a column's scales and biases are converted once for all the rows, and a row's sums
 * loaded once for all the columns. Vector work throughout: a scalar chain of one multiply-add
 * per group cost more than the product itself. (Lanes past the row's groups meet zero sums:
 * whatever finite values they read add nothing.) */
static inline void finish(const product *p, int bits, int r0, int rows, int j0, int cols,
                          dots_f *acc) {
  const int groups = p->k / p->group;
  const dots_f middle = F_SET1(bits == 4 ? 8.0f : 128.0f);
  for (int g = 0; g < groups; g += LANES) {
    const int live = groups - g;
    dots_f bias[COLS], correction[COLS];
    for (int j = 0; j < cols; j++) {
      const size_t first = (size_t)(j0 + j) * groups + g;
      bias[j] = group_values(p, p->biases, first, live);
      correction[j] = F_MUL(group_values(p, p->scales, first, live), middle);
    }
    for (int r = 0; r < rows; r++) {
      const size_t row = (size_t)(r0 + r) * groups + g;
      const dots_f sums = MASKED_LOAD(live, p->xsum + row), res = MASKED_LOAD(live, p->xres + row);
      const dots_f centred = bits == 8 && CENTRED_BYTES ? sums : res; /* the dot's centre */
      for (int j = 0; j < cols; j++) {
        const dots_f total = F_FMA(bias[j], sums, acc[r * cols + j]);
        acc[r * cols + j] = F_FMA(correction[j], centred, total);
      }
    }
  }
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) p->y[(size_t)(r0 + r) * p->n + j0 + j] = f_sum(acc[r * cols + j]);
}

/* y[r0 : r0 + R, j0 : j0 + J]: the accumulators in registers, chunk by chunk; each weight
 * vector unpacked once and multiplied by the R rows' activations. */
#define DOT_TILE(BITS, R, J) DOT_TILE_(BITS, R, J) /* COLS expanded first */
#define DOT_TILE_(BITS, R, J)                                                                  \
  static void dot_tile_##BITS##_##R##_##J(const product *p, int r0, int j0) {                \
    const int groups = p->k / p->group, row_bytes = p->k * BITS / 8;                          \
    const int chunks = (row_bytes + CHUNK - 1) / CHUNK, tail = row_bytes - (chunks - 1) * CHUNK; \
    const int shift = __builtin_ctz((unsigned)p->group);                                      \
    const uint8_t *w[J];                                                                      \
    size_t s[J]; /* each weight row's first scale */                                          \
    for (int j = 0; j < J; j++) {                                                             \
      w[j] = p->q + (size_t)(j0 + j) * row_bytes;                                             \
      s[j] = (size_t)(j0 + j) * groups;                                                       \
    }                                                                                         \
    const int8_t *xr[R];                                                                      \
    const float *dr[R];                                                                       \
    for (int r = 0; r < R; r++) {                                                             \
      xr[r] = p->xq + (size_t)(r0 + r) * chunks * 2 * CHUNK;                                  \
      dr[r] = p->xd + (size_t)(r0 + r) * chunks * LANES;                                      \
    }                                                                                         \
    dots_f acc[R][J];                                                                         \
    for (int r = 0; r < R; r++)                                                               \
      for (int j = 0; j < J; j++) acc[r][j] = F_ZERO();                                       \
    for (int c = 0; c < chunks; c++) {                                                        \
      const int bytes = c < chunks - 1 ? CHUNK : tail;                                        \
      const int first = (c * chunk_weights(BITS)) >> shift;                                   \
      for (int j = 0; j < J; j++) {                                                           \
        _mm_prefetch((const char *)(w[j] + (size_t)c * CHUNK + AHEAD * row_bytes), _MM_HINT_T0); \
        const dots_i packed = weight_bytes(w[j] + (size_t)c * CHUNK, bytes);                  \
        const dots_i lo = BITS == 8 ? byte_operand(packed) : low_nibbles(packed);             \
        const dots_i hi = BITS == 8 ? byte_magnitudes(packed) : high_nibbles(packed);         \
        const dots_f scale = spread(p, p->scales, s[j] + first, groups - first);              \
        for (int r = 0; r < R; r++) {                                                         \
          const int8_t *xc = xr[r] + (size_t)c * 2 * CHUNK;                                   \
          const dots_i even = I_LOAD(xc);                                                     \
          const dots_i dot = BITS == 4 ? dot4(lo, hi, even, I_LOAD(xc + CHUNK))               \
                                       : dot8(lo, hi, even);                                  \
          const dots_f f = F_MUL(I_TO_F(dot), F_LOAD(dr[r] + (size_t)c * LANES));             \
          acc[r][j] = F_FMA(f, scale, acc[r][j]);                                             \
        }                                                                                     \
      }                                                                                       \
    }                                                                                         \
    finish(p, BITS, r0, R, j0, J, &acc[0][0]);                                                \
  }

#define DOT_TILES(BITS)                                                                     \
  DOT_TILE(BITS, 1, 1) DOT_TILE(BITS, 1, COLS) DOT_TILE(BITS, 2, COLS)                      \
  DOT_TILE(BITS, 3, COLS) DOT_TILE(BITS, 4, COLS)                                           \
  static void dot_block_##BITS(const product *p, int r0, int rows, int j0, int cols) {      \
    if (cols == COLS) {                                                                     \
      switch (rows) {                                                                       \
        case 4: dot_tile_##BITS##_4_4(p, r0, j0); return;                                   \
        case 3: dot_tile_##BITS##_3_4(p, r0, j0); return;                                   \
        case 2: dot_tile_##BITS##_2_4(p, r0, j0); return;                                   \
        default: dot_tile_##BITS##_1_4(p, r0, j0); return;                                  \
      }                                                                                     \
    }                                                                                       \
    for (int r = 0; r < rows; r++)                                                          \
      for (int j = 0; j < cols; j++) dot_tile_##BITS##_1_1(p, r0 + r, j0 + j);              \
  }

DOT_TILES(4)
DOT_TILES(8)

#if CHUNK == 32
/* ---- AVX2, 4 bits: four weight rows folded into one vector ----
 *
 * AVX2 has no int8 dot product, and its multiplier ports bound a few-row product: two
 * vpmaddubsw and a vpmaddwd per 64 weights and row in dot4 (scripts/multiply_peak.c measures
 * them). Here the four weight rows' int16 pair sums are folded by two vphaddw (|sum| <= 4 *
 * 7620 < 32767) and one vpmaddwd into a single int32 vector: lane h * 4 + j holds weight row
 * j's dot over the chunk's half h (16 bytes, 32 weights, within one group since groups are 32
 * or more). So 2.25 multiplier instructions per 64 weights and row instead of 3, one
 * conversion and two float operations for four outputs instead of one, and one accumulator a
 * row of x instead of four (dot_tile's 4 x 4 accumulators alone fill AVX2's 16 registers, so
 * they spilled). Eight rows measured 9-13% faster, one row 1-7%. A row's arithmetic is the
 * same whatever the rows beside it, as everywhere in this file. */

/* The four weight rows' scales for a chunk, lane h * 4 + j: row j's group ``first`` (half 0)
 * and ``second`` (half 1, the next group when groups are 32). */
static inline __m256 four_scales(const product *p, size_t s0, int groups, int first, int second) {
  if (p->half) {
    /* Each row's entries first and first + 1 in one 32-bit load (float16 arrays end with spare
     * entries, so the last row's may run past its last group). */
    const uint16_t *h = (const uint16_t *)p->scales + s0 + first;
    int32_t pairs[4];
    for (int j = 0; j < 4; j++) memcpy(&pairs[j], h + (size_t)j * groups, sizeof pairs[j]);
    const __m256 values = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)pairs));
    const __m256i order = second != first ? _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)
                                          : _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    return _mm256_permutevar8x32_ps(values, order);
  }
  const float *f = (const float *)p->scales + s0;
  float lanes[8];
  for (int j = 0; j < 4; j++) {
    lanes[j] = f[(size_t)j * groups + first];
    lanes[4 + j] = f[(size_t)j * groups + second];
  }
  return _mm256_loadu_ps(lanes);
}

#define FOLD_TILE(R)                                                                           \
  static void fold_tile_##R(const product *p, int r0, int j0) {                              \
    const int groups = p->k / p->group, row_bytes = p->k / 2;                                  \
    const int chunks = (row_bytes + CHUNK - 1) / CHUNK, tail = row_bytes - (chunks - 1) * CHUNK; \
    const int shift = __builtin_ctz((unsigned)p->group);                                      \
    const uint8_t *w = p->q + (size_t)j0 * row_bytes;                                          \
    const size_t s0 = (size_t)j0 * groups;                                                     \
    const __m256i ones = _mm256_set1_epi16(1);                                                 \
    __m256 acc[R];                                                                             \
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();                                  \
    for (int c = 0; c < chunks; c++) {                                                         \
      const int bytes = c < chunks - 1 ? CHUNK : tail;                                         \
      const int first = (c * 2 * CHUNK) >> shift;                                              \
      const int second = p->group == 32 && first + 1 < groups ? first + 1 : first;             \
      __m256i lo[4], hi[4];                                                                    \
      for (int j = 0; j < 4; j++) {                                                            \
        const uint8_t *row = w + (size_t)j * row_bytes + (size_t)c * CHUNK;                    \
        _mm_prefetch((const char *)(row + AHEAD * row_bytes), _MM_HINT_T0);                    \
        const __m256i packed = weight_bytes(row, bytes);                                       \
        lo[j] = low_nibbles(packed);                                                           \
        hi[j] = high_nibbles(packed);                                                          \
      }                                                                                        \
      const __m256 scale = four_scales(p, s0, groups, first, second);                          \
      for (int r = 0; r < R; r++) {                                                            \
        const size_t row = (size_t)(r0 + r) * chunks;                                          \
        const int8_t *xc = p->xq + (row + c) * 2 * CHUNK;                                      \
        const __m256i even = I_LOAD(xc), odd = I_LOAD(xc + CHUNK);                             \
        __m256i pairs[4];                                                                      \
        for (int j = 0; j < 4; j++)                                                            \
          pairs[j] = _mm256_add_epi16(_mm256_maddubs_epi16(lo[j], even),                       \
                                      _mm256_maddubs_epi16(hi[j], odd));                       \
        const __m256i folded = _mm256_hadd_epi16(_mm256_hadd_epi16(pairs[0], pairs[1]),        \
                                                 _mm256_hadd_epi16(pairs[2], pairs[3]));       \
        const __m256 dots = _mm256_cvtepi32_ps(_mm256_madd_epi16(folded, ones));               \
        const __m256 steps = F_LOAD(p->xd + (row + c) * LANES);                                \
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dots, steps), scale, acc[r]);                   \
      }                                                                                        \
    }                                                                                          \
    __m256 totals[R * 4]; /* finish's layout: one accumulator an output, its two lanes kept */ \
    for (int r = 0; r < R; r++)                                                                \
      for (int j = 0; j < 4; j++) {                                                            \
        const __m256i mine = _mm256_setr_epi32(-(j == 0), -(j == 1), -(j == 2), -(j == 3),    \
                                               -(j == 0), -(j == 1), -(j == 2), -(j == 3));   \
        totals[r * 4 + j] = _mm256_and_ps(acc[r], _mm256_castsi256_ps(mine));                 \
      }                                                                                        \
    finish(p, 4, r0, R, j0, 4, totals);                                                        \
  }

FOLD_TILE(1) FOLD_TILE(2) FOLD_TILE(3) FOLD_TILE(4)
#define FOLDS 1

#include "quant_panels.c"
#else
#define FOLDS 0
#endif

#endif

/* ---- float activations: weights unpacked to floats ---- */

typedef uint8_t vb __attribute__((vector_size(VW), aligned(1)));
typedef uint8_t vh __attribute__((vector_size(VW / 2), aligned(1)));

/* VW bytes, zero-extended, as floats. With intrinsics on x86: GCC 12 turns a vector conversion
 * from bytes into one scalar extract and insert a lane (~8x slower than vpmovzxbd). */
static inline vf widen(vb b) {
#if VW == 16
  __m128i v;
  memcpy(&v, &b, sizeof(v));
  return (vf)_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
#elif VW == 8 && defined(__AVX2__)
  int64_t word;
  memcpy(&word, &b, sizeof(word));
  return (vf)_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(word)));
#elif VW == 4 && defined(__SSE2__)
  int32_t word;
  memcpy(&word, &b, sizeof(word));
  const __m128i zero = _mm_setzero_si128();
  const __m128i wide = _mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(word), zero), zero);
  return (vf)_mm_cvtepi32_ps(wide);
#else
  float lanes[VW];
  for (int i = 0; i < VW; i++) lanes[i] = (float)b[i];
  vf v;
  memcpy(&v, lanes, sizeof(v));
  return v;
#endif
}

static inline vf splat(float s) { return (vf){0} + s; }

/* VW consecutive 4-bit values from VW / 2 bytes: the low nibble of each byte comes first. */
static inline vf nibbles(const uint8_t *p) {
  vh b;
  memcpy(&b, p, sizeof(b));
  const vh lo = b & 0xF, hi = b >> 4;
#if VW == 16
  const vb both = __builtin_shufflevector(lo, hi, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6,
                                          14, 7, 15);
#elif VW == 8
  const vb both = __builtin_shufflevector(lo, hi, 0, 4, 1, 5, 2, 6, 3, 7);
#else
  const vb both = __builtin_shufflevector(lo, hi, 0, 2, 1, 3);
#endif
  return widen(both);
}

static inline vf bytes(const uint8_t *p) {
  vb b;
  memcpy(&b, p, sizeof(b));
  return widen(b);
}

/* y[r0 : r0 + R, j0 : j0 + J] for BITS-bit weights, the accumulators in registers; group by
 * group, each group's scale and bias read once. */
#define TILE(BITS, R, J) TILE_(BITS, R, J)
#define TILE_(BITS, R, J)                                                                 \
  static void tile_##BITS##_##R##_##J(const product *p, int r0, int j0) {                 \
    vf acc[R * J];                                                                        \
    for (int i = 0; i < R * J; i++) acc[i] = (vf){0};                                     \
    const int groups = p->k / p->group;                                                   \
    const uint8_t *qr[J];                                                                 \
    size_t first[J]; /* each weight row's first scale and bias */                         \
    for (int j = 0; j < J; j++) {                                                         \
      qr[j] = p->q + (size_t)(j0 + j) * p->k * BITS / 8;                                  \
      first[j] = (size_t)(j0 + j) * groups;                                               \
    }                                                                                     \
    const float *xr[R];                                                                   \
    for (int r = 0; r < R; r++) xr[r] = p->x + (size_t)(r0 + r) * p->k;                   \
    for (int g = 0; g < groups; g++) {                                                    \
      vf scale[J], bias[J];                                                               \
      for (int j = 0; j < J; j++) {                                                       \
        scale[j] = splat(param(p->scales, p->half, first[j] + g));                        \
        bias[j] = splat(param(p->biases, p->half, first[j] + g));                         \
      }                                                                                   \
      const int end = (g + 1) * p->group;                                                 \
      for (int kk = g * p->group; kk < end; kk += VW) {                                   \
        vf x[R];                                                                          \
        for (int r = 0; r < R; r++) x[r] = load(xr[r] + kk);                              \
        for (int j = 0; j < J; j++) {                                                     \
          const vf q = BITS == 4 ? nibbles(qr[j] + kk / 2) : bytes(qr[j] + kk);           \
          const vf w = q * scale[j] + bias[j];                                            \
          for (int r = 0; r < R; r++) acc[r * J + j] += x[r] * w;                         \
        }                                                                                 \
      }                                                                                   \
    }                                                                                     \
    for (int r = 0; r < R; r++)                                                           \
      for (int j = 0; j < J; j++)                                                         \
        p->y[(size_t)(r0 + r) * p->n + j0 + j] = reduce(acc[r * J + j]);                 \
  }

#define TILES(BITS)                                                                       \
  TILE(BITS, 1, 1) TILE(BITS, 1, COLS) TILE(BITS, 2, COLS) TILE(BITS, 3, COLS)            \
  TILE(BITS, 4, COLS)                                                                     \
  static void block_##BITS(const product *p, int r0, int rows, int j0, int cols) {        \
    if (cols == COLS) {                                                                   \
      switch (rows) {                                                                     \
        case 4: tile_##BITS##_4_4(p, r0, j0); return;                                     \
        case 3: tile_##BITS##_3_4(p, r0, j0); return;                                     \
        case 2: tile_##BITS##_2_4(p, r0, j0); return;                                     \
        default: tile_##BITS##_1_4(p, r0, j0); return;                                    \
      }                                                                                   \
    }                                                                                     \
    for (int r = 0; r < rows; r++)                                                        \
      for (int j = 0; j < cols; j++) tile_##BITS##_1_1(p, r0 + r, j0 + j);                \
  }

TILES(4)
TILES(8)

/* ---- float16 weights (bits 16): a float16 checkpoint computed in float32 ----
 *
 * A float model's decoding reads every weight once a token, as a quantized one does; kept as
 * the checkpoint's float16 (exactly its values, half of float32's bytes) and widened in
 * registers, the same tiles serve, without groups, scales or biases. */

/* VW consecutive float16 values as floats. */
static inline vf half_floats(const uint16_t *h) {
#if VW == 16
  return (vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
#elif VW == 8 && defined(__F16C__)
  return (vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
#elif VW == 4 && defined(__F16C__)
  return (vf)_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)h));
#else
  float lanes[VW];
  for (int i = 0; i < VW; i++) {
    _Float16 value;
    memcpy(&value, h + i, sizeof(value));
    lanes[i] = (float)value;
  }
  vf v;
  memcpy(&v, lanes, sizeof(v));
  return v;
#endif
}

#define HALF_TILE(R, J) HALF_TILE_(R, J)
#define HALF_TILE_(R, J)                                                                  \
  static void half_tile_##R##_##J(const product *p, int r0, int j0) {                     \
    vf acc[R * J];                                                                        \
    for (int i = 0; i < R * J; i++) acc[i] = (vf){0};                                     \
    const uint16_t *wr[J];                                                                \
    for (int j = 0; j < J; j++) wr[j] = (const uint16_t *)p->q + (size_t)(j0 + j) * p->k; \
    const float *xr[R];                                                                   \
    for (int r = 0; r < R; r++) xr[r] = p->x + (size_t)(r0 + r) * p->k;                   \
    for (int kk = 0; kk < p->k; kk += VW) {                                               \
      vf x[R];                                                                            \
      for (int r = 0; r < R; r++) x[r] = load(xr[r] + kk);                                \
      for (int j = 0; j < J; j++) {                                                       \
        const vf w = half_floats(wr[j] + kk);                                             \
        for (int r = 0; r < R; r++) acc[r * J + j] += x[r] * w;                           \
      }                                                                                   \
    }                                                                                     \
    for (int r = 0; r < R; r++)                                                           \
      for (int j = 0; j < J; j++)                                                         \
        p->y[(size_t)(r0 + r) * p->n + j0 + j] = reduce(acc[r * J + j]);                 \
  }

HALF_TILE(1, 1) HALF_TILE(1, COLS) HALF_TILE(2, COLS) HALF_TILE(3, COLS) HALF_TILE(4, COLS)

static void block_16(const product *p, int r0, int rows, int j0, int cols) {
  if (cols == COLS) {
    switch (rows) {
      case 4: half_tile_4_4(p, r0, j0); return;
      case 3: half_tile_3_4(p, r0, j0); return;
      case 2: half_tile_2_4(p, r0, j0); return;
      default: half_tile_1_4(p, r0, j0); return;
    }
  }
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) half_tile_1_1(p, r0 + r, j0 + j);
}

static void block(const product *p, int r0, int rows, int j0, int cols) {
#if PANELS_BUILD
  if (p->panel) {
    panel_block(p, r0, rows, j0);
    return;
  }
#endif
  if (p->bits == 16) {
    block_16(p, r0, rows, j0, cols);
    return;
  }
#if INT8_DOTS
  if (p->int8) {
#if FOLDS
    if (p->bits == 4 && cols == 4) {
      switch (rows) {
        case 4: fold_tile_4(p, r0, j0); return;
        case 3: fold_tile_3(p, r0, j0); return;
        case 2: fold_tile_2(p, r0, j0); return;
        default: fold_tile_1(p, r0, j0); return;
      }
    }
#endif
    if (p->bits == 4)
      dot_block_4(p, r0, rows, j0, cols);
    else
      dot_block_8(p, r0, rows, j0, cols);
    return;
  }
#endif
  if (p->bits == 4)
    block_4(p, r0, rows, j0, cols);
  else
    block_8(p, r0, rows, j0, cols);
}

/* The output columns a block covers: a panel's eight, or COLS. */
static inline int block_width(const product *p) { return p->panel ? p->panel : COLS; }

/* Output columns [begin, end): each group of COLS weight rows (or a panel) is unpacked once per
 * block of ROWS rows of x (the weights of a few columns stay in cache across the row blocks). */
static void columns(const product *p, int begin, int end) {
  const int width = block_width(p);
  for (int j = begin; j < end; j += width) {
    const int cols = end - j < width ? end - j : width;
    for (int r = 0; r < p->m; r += ROWS) block(p, r, p->m - r < ROWS ? p->m - r : ROWS, j, cols);
  }
}

/* Part ``index`` of ``parts``: equal runs of the n columns, on block boundaries. */
static void part(const void *ctx, int index, int parts) {
  const product *p = ctx;
  const int width = block_width(p), blocks = (p->n + width - 1) / width;
  const int begin = (int)((long)blocks * index / parts) * width;
  int end = (int)((long)blocks * (index + 1) / parts) * width;
  if (end > p->n) end = p->n;
  if (begin < end) columns(p, begin, end);
}

/* Below this many weights x rows a second thread costs more than it saves. */
#define SPLIT_WORK 65536

/* Whether k, bits and group are a layout the product holds: 4 or 8 bits in groups of 32, 64
 * or 128 along k, or float16 weights (bits 16, group k) with k whole vectors. */
static int valid_shape(int k, int bits, int group) {
  if (bits == 16) return k >= VW && k % VW == 0 && group == k;
  return k >= 1 && (bits == 4 || bits == 8) && group >= 32 && group <= 128 &&
         (group & (group - 1)) == 0 && k % group == 0;
}

/* Whether a product can take weights in panels: 4 bits, int8 activations on the AVX2 build,
 * whole panels. */
static int valid_panel(int n, int bits, int int8) {
  return PANELS_BUILD && int8 && bits == 4 && n % PANEL == 0;
}

/* ---- dequantization, for prefill: float32 rows of W for the BLAS ---- */

typedef struct {
  int rows, k, bits, group;
  const uint8_t *q;
  const void *scales, *biases;
  int half, panel;
  float *out; /* [rows, k] */
} unpacking;

/* Row ``n`` of a panel matrix (4 bits) in MLX's layout: its bytes into ``q``, its scales and
 * biases as floats. */
static void panel_row(const unpacking *u, int n, uint8_t *q, float *scales, float *biases) {
  const int words = u->k / 8, groups = u->k / u->group;
  const size_t panel = (size_t)(n / PANEL), lane = (size_t)(n % PANEL);
  for (int d = 0; d < words; d++) memcpy(q + (size_t)d * 4, u->q + ((panel * words + d) * PANEL + lane) * 4, 4);
  for (int g = 0; g < groups; g++) {
    const size_t i = (panel * groups + g) * PANEL + lane;
    scales[g] = param(u->scales, u->half, i);
    biases[g] = param(u->biases, u->half, i);
  }
}

static void unpack_part(const void *ctx, int index, int parts) {
  const unpacking *u = ctx;
  const int begin = (int)((long)u->rows * index / parts), end = (int)((long)u->rows * (index + 1) / parts);
  const int groups = u->k / u->group, row_bytes = u->k * u->bits / 8;
  uint8_t gathered[u->panel ? row_bytes : 1];
  float gathered_params[u->panel ? 2 * groups : 1];
  for (int n = begin; n < end; n++) {
    const uint8_t *q = u->q + (size_t)n * row_bytes;
    const void *scales = u->scales, *biases = u->biases;
    size_t first = (size_t)n * groups; /* the row's first scale and bias */
    int half = u->half;
    if (u->panel) {
      panel_row(u, n, gathered, gathered_params, gathered_params + groups);
      q = gathered;
      scales = gathered_params;
      biases = gathered_params + groups;
      first = 0;
      half = 0;
    }
    float *out = u->out + (size_t)n * u->k;
    if (u->bits == 16) {
      for (int kk = 0; kk < u->k; kk += VW) store_vector(out + kk, half_floats((const uint16_t *)q + kk));
      continue;
    }
    for (int g = 0; g < groups; g++) {
      const vf scale = splat(param(scales, half, first + g));
      const vf bias = splat(param(biases, half, first + g));
      for (int kk = g * u->group; kk < (g + 1) * u->group; kk += VW) {
        store_vector(out + kk, (u->bits == 4 ? nibbles(q + kk / 2) : bytes(q + kk)) * scale + bias);
      }
    }
  }
}

/* Rows [0, rows) of W as float32 into ``out`` ([rows, k]): mx.dequantize's values, within a
 * rounding (scale * q + bias fused). Prefill's many rows are faster through the BLAS than
 * through the few-row product. ``panel``: W in panels, q starting at a panel's first row. */
int fq_dequantize(int rows, int k, int bits, int group, const uint32_t *q, const void *scales,
                  const void *biases, int half, float *out, int threads, int panel) {
  if (!valid_shape(k, bits, group)) return -1;
  if (rows < 1 || (panel && !valid_panel((rows + 7) / 8 * 8, bits, 1))) return -1;
  const unpacking u = {rows, k, bits, group, (const uint8_t *)q, scales, biases, half,
                       panel ? PANEL : 0, out};
  if (parallel && threads > 1 && (long)rows * k >= SPLIT_WORK)
    parallel(unpack_part, &u, threads);
  else
    unpack_part(&u, 0, 1);
  return 0;
}

int fq_vector_width(void) { return VW; }

/* The width in bits of this build's int8 dot products (512: AVX-512 VNNI, 256: AVX2), 0 when
 * activations stay float. */
int fq_int8_activations(void) {
#if INT8_DOTS
  return CHUNK * 8;
#else
  return 0;
#endif
}

void fq_set_pool(parallel_fn fn) { parallel = fn; }

/* The weight rows of a panel this build multiplies (8: the AVX2 int8 path), 0 where it keeps
 * MLX's row layout (quant_panels.c). */
int fq_panel_width(void) { return PANELS_BUILD ? PANEL : 0; }

/* The product; 0 on success, -1 for a shape this layout cannot hold, -2 out of memory.
 * ``threads`` > 1 splits the n output columns over the pool (when one is set); ``int8`` asks
 * for int8 activations, where the build has them; ``panel``: the weights are in panels
 * (fq_panel_width), which only int8 activations read. */
int fq_gemm(int m, int n, int k, int bits, int group, const float *x, const uint32_t *q,
            const void *scales, const void *biases, int half, float *y, int threads, int int8,
            int panel) {
  if (m < 1 || n < 1 || !valid_shape(k, bits, group)) return -1;
  if (panel && !valid_panel(n, bits, int8)) return -1;
  product p = {.m = m, .n = n, .k = k, .bits = bits, .group = group,
               .int8 = int8 && INT8_DOTS && bits != 16, .panel = panel ? PANEL : 0,
               .x = x, .q = (const uint8_t *)q, .scales = scales, .biases = biases,
               .half = half, .y = y};
  char *scratch = 0;
#if INT8_DOTS
  if (p.int8 && !(scratch = quantize_rows(&p))) return -2;
#endif
  const long work = (long)m * n * k;
  if (parallel && threads > 1 && work >= SPLIT_WORK)
    parallel(part, &p, threads);
  else
    part(&p, 0, 1);
  free(scratch);
  return 0;
}
