/* The few-row product with MLX's affine-quantized weights, on the CPU.
 *
 * y[m, n] = sum_k x[m, k] * w[n, k], where w[n, k] = scale[n, g] * q[n, k] + bias[n, g] for the
 * group g = k / group: MLX's layout for `mx.quantize` / `mlx_lm.convert -q` (4 or 8 bits, groups
 * of 32, 64 or 128 along k; q packed little-endian into uint32 words, 32 / bits values a word).
 *
 * Decoding reads every weight once per token, so the weights' bytes are the time: 4-bit weights
 * are an eighth of float32's. Each weight vector is unpacked and scaled once and used for all
 * m rows of x while it is in registers (m = 1 decoding, up to 32 verifying a draft tree).
 *
 * Every output element accumulates in the same order whatever m is (vector lanes over k in k
 * order, then a fixed reduction tree), so a row's bits do not depend on the rows beside it:
 * plain decoding and verification agree exactly, as with the float32 product (small_gemm.c).
 *
 * Built at run time with -march=native (engine_mlx/cpu/quant_gemm.py); GCC/Clang vector
 * extensions make the one source AVX-512, AVX2, SSE or NEON code.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif

typedef float vf __attribute__((vector_size(VW * sizeof(float)), aligned(4)));
typedef uint8_t vb __attribute__((vector_size(VW), aligned(1)));
typedef uint8_t vh __attribute__((vector_size(VW / 2), aligned(1)));

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

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

#define MAX_ROWS 32
#define ROWS 4 /* rows of x per register tile */
#define COLS 4 /* rows of w per register tile */
#define MAX_THREADS 16

static inline vf load(const float *p) {
  vf v;
  memcpy(&v, p, sizeof(v));
  return v;
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

/* The fixed reduction tree: halves added until one lane is left. */
static inline float reduce(vf v) {
  float lanes[VW];
  memcpy(lanes, &v, sizeof(lanes));
  for (int width = VW / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; i++) lanes[i] += lanes[i + width];
  return lanes[0];
}

typedef struct {
  int m, n, k, bits, group;
  const float *x;        /* [m, k] */
  const uint8_t *q;      /* [n, k * bits / 8] */
  const float *scales;   /* [n, k / group] */
  const float *biases;   /* [n, k / group] */
  float *y;              /* [m, n] */
} product;

/* y[r0 : r0 + R, j0 : j0 + J] for BITS-bit weights, the accumulators in registers; group by
 * group, each group's scale and bias read once. */
#define TILE(BITS, R, J) TILE_(BITS, R, J)
#define TILE_(BITS, R, J)                                                                 \
  static void tile_##BITS##_##R##_##J(const product *p, int r0, int j0) {                 \
    vf acc[R * J];                                                                        \
    for (int i = 0; i < R * J; i++) acc[i] = (vf){0};                                     \
    const int groups = p->k / p->group;                                                   \
    const uint8_t *qr[J];                                                                 \
    const float *sr[J], *br[J];                                                           \
    for (int j = 0; j < J; j++) {                                                         \
      qr[j] = p->q + (size_t)(j0 + j) * p->k * BITS / 8;                                  \
      sr[j] = p->scales + (size_t)(j0 + j) * groups;                                      \
      br[j] = p->biases + (size_t)(j0 + j) * groups;                                      \
    }                                                                                     \
    const float *xr[R];                                                                   \
    for (int r = 0; r < R; r++) xr[r] = p->x + (size_t)(r0 + r) * p->k;                   \
    for (int g = 0; g < groups; g++) {                                                    \
      vf scale[J], bias[J];                                                               \
      for (int j = 0; j < J; j++) {                                                       \
        scale[j] = splat(sr[j][g]);                                                       \
        bias[j] = splat(br[j][g]);                                                        \
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

static void block(const product *p, int r0, int rows, int j0, int cols) {
  if (p->bits == 4)
    block_4(p, r0, rows, j0, cols);
  else
    block_8(p, r0, rows, j0, cols);
}

/* Output columns [begin, end): each group of COLS weight rows is unpacked once per block of
 * ROWS rows of x (the weights of a few columns stay in cache across the row blocks). */
static void columns(const product *p, int begin, int end) {
  for (int j = begin; j < end; j += COLS) {
    const int cols = end - j < COLS ? end - j : COLS;
    for (int r = 0; r < p->m; r += ROWS) block(p, r, p->m - r < ROWS ? p->m - r : ROWS, j, cols);
  }
}

typedef struct {
  const product *p;
  int begin, end;
} share;

static void *run_share(void *arg) {
  const share *s = arg;
  columns(s->p, s->begin, s->end);
  return NULL;
}

int fq_vector_width(void) { return VW; }

/* The product; 0 on success, -1 for a shape this layout cannot hold. ``threads`` split the n
 * output columns (the caller's thread takes the first share). */
int fq_gemm(int m, int n, int k, int bits, int group, const float *x, const uint32_t *q,
            const float *scales, const float *biases, float *y, int threads) {
  if (m < 1 || m > MAX_ROWS || n < 1 || k < 1 || (bits != 4 && bits != 8) || group < VW ||
      group % VW != 0 || k % group != 0)
    return -1;
  const product p = {m, n, k, bits, group, x, (const uint8_t *)q, scales, biases, y};
  if (threads < 1) threads = 1;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  const int blocks = (n + COLS - 1) / COLS;
  if (threads > blocks) threads = blocks;
  pthread_t ids[MAX_THREADS];
  share shares[MAX_THREADS];
  int started = 0;
  for (int t = 0; t < threads; t++) {
    const int begin = (int)((long)blocks * t / threads) * COLS;
    int end = (int)((long)blocks * (t + 1) / threads) * COLS;
    shares[t] = (share){&p, begin, end > n ? n : end};
  }
  for (int t = 1; t < threads; t++)
    if (pthread_create(&ids[t], NULL, run_share, &shares[t]) == 0) started = t;
    else break;
  columns(&p, shares[0].begin, shares[0].end);
  for (int t = 1; t <= started; t++) pthread_join(ids[t], NULL);
  for (int t = started + 1; t < threads; t++) columns(&p, shares[t].begin, shares[t].end);
  return 0;
}
