/* A cblas_sgemm for the few-row products of decoding and verification on the CPU.
 *
 * MLX's CPU backend sends every fp32 matrix product to cblas_sgemm. A linear layer is
 * x[M,K] @ W[N,K]^T, and while decoding M is 1 (one token) to ~32 (a verify block). General
 * BLAS kernels pack W into panels before multiplying, so a product over 8 rows reads and writes
 * the whole weight again and costs ~2x a one-row product; here each row of W is read once,
 * straight from memory, and dotted with all M rows of x while it is in cache. That is the
 * memory-bound shape a Mac GPU has for free.
 *
 * Loaded globally before the real BLAS, this library's cblas_sgemm is the one MLX resolves.
 * It takes row-major products with M <= FC_MAX_ROWS and hands every other call to the real
 * BLAS (whose cblas_sgemm the loader passes in with fc_set_fallback).
 *
 * Each output element is accumulated in the same order whatever M is (lanes over K, in K
 * order, then a fixed reduction tree), so a row's result does not depend on how many rows
 * were multiplied with it: plain decoding (M = 1) and verification (M = 8) compute the same
 * bits for the same prefix.
 *
 * Built at run time by the system C compiler with -march=native (engine_mlx/cpu/small_gemm.py);
 * written with GCC/Clang vector extensions so the same source is AVX-512, AVX2 or NEON code.
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "vectors.h"

#define FC_MAX_ROWS 32
#define FC_MAX_THREADS 64
#define SPLIT_WORK 65536 /* multiply-adds below which one thread does it all */
/* Register tiles: ROW_BLOCK rows of x by COL_BLOCK rows of W accumulate in registers (AVX-512
 * has 32 vector registers; AVX2 and NEON-sized builds 16, hence smaller tiles there). One- and
 * two-row products, which are memory-bound, take WIDE_COLS rows of W at once instead. */
#define ROW_BLOCK 4
#if VW == 16
#define COL_BLOCK 4
#define WIDE_COLS 8
#else
#define COL_BLOCK 2
#define WIDE_COLS 4
#endif

/* CBLAS enums, as every CBLAS defines them. */
enum { RowMajor = 101, ColMajor = 102 };
enum { NoTrans = 111, Trans = 112 };

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);

static sgemm_fn fallback_sgemm;
static int max_rows = FC_MAX_ROWS;
static atomic_long handled_calls, forwarded_calls;

/* Keeps a loaded vector in a register: without it the compiler folds the load into every
 * multiply-add that uses it, which doubles the loads of a register tile. */
static inline vf in_register(vf v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__aarch64__))
  __asm__("" : "+x"(v));
#endif
  return v;
}

static inline void store(float *c, float value, float alpha, float beta) {
  *c = beta == 0.0f ? alpha * value : alpha * value + beta * *c;
}

typedef struct {
  int m, n, k;
  float alpha, beta;
  const float *a;
  int lda;
  const float *b;
  int ldb;
  float *c;
  int ldc;
} product;

/* Reduces J accumulators at once to J sums, by the same tree as reduce() (lane l plus lane
 * l + width, width halving), J a multiple of four: each level pairs two vectors and adds their
 * lower and upper halves side by side. */
#if VW == 16
#define HALVES(a, b, lo, hi)                                                              \
  (__builtin_shufflevector(a, b, lo) + __builtin_shufflevector(a, b, hi))
#define L1A 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define L1B 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define L2A 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27
#define L2B 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31
#define L3A 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29
#define L3B 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31
#define L4A 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#define L4B 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31
#endif

static inline void reduce_many(const vf *acc, int count, float *out) {
#if VW == 16
  int i = 0;
  for (; i + 16 <= count; i += 16) {
    vf l1[8], l2[4], l3[2];
    for (int q = 0; q < 8; q++) l1[q] = HALVES(acc[i + 2 * q], acc[i + 2 * q + 1], L1A, L1B);
    for (int q = 0; q < 4; q++) l2[q] = HALVES(l1[2 * q], l1[2 * q + 1], L2A, L2B);
    for (int q = 0; q < 2; q++) l3[q] = HALVES(l2[2 * q], l2[2 * q + 1], L3A, L3B);
    const vf l4 = HALVES(l3[0], l3[1], L4A, L4B);
    store_vector(out + i, l4);
  }
  for (; i < count; i++) out[i] = reduce(acc[i]);
#else
  for (int i = 0; i < count; i++) out[i] = reduce(acc[i]);
#endif
}

/* C[r0:r0+R, j0:j0+J]; R and J are compile-time in the specialisations below, so the
 * accumulators live in registers. */
#define TILE(R, J) TILE_(R, J)
#define TILE_(R, J)                                                                   \
  static void tile_##R##_##J(const product *p, int r0, int j0) {                    \
    vf acc[R * J];                                                                    \
    for (int i = 0; i < R * J; i++) acc[i] = (vf){0};                                 \
    const int kv = p->k - p->k % VW;                                                  \
    const float *xr[R], *wr[J];                                                       \
    for (int r = 0; r < R; r++) xr[r] = p->a + (size_t)(r0 + r) * p->lda;             \
    for (int j = 0; j < J; j++) wr[j] = p->b + (size_t)(j0 + j) * p->ldb;             \
    for (int kk = 0; kk < kv; kk += VW) {                                             \
      vf w[J], x[R];                                                                  \
      for (int j = 0; j < J; j++) w[j] = in_register(load(wr[j] + kk));               \
      for (int r = 0; r < R; r++) x[r] = in_register(load(xr[r] + kk));               \
      for (int r = 0; r < R; r++)                                                     \
        for (int j = 0; j < J; j++) acc[r * J + j] += x[r] * w[j];                    \
    }                                                                                 \
    float sums[R * J];                                                                \
    reduce_many(acc, R * J, sums);                                                    \
    for (int r = 0; r < R; r++)                                                       \
      for (int j = 0; j < J; j++) {                                                   \
        float sum = sums[r * J + j];                                                  \
        for (int kk = kv; kk < p->k; kk++) sum += xr[r][kk] * wr[j][kk];              \
        store(p->c + (size_t)(r0 + r) * p->ldc + j0 + j, sum, p->alpha, p->beta);     \
      }                                                                               \
  }

TILE(1, 1)
TILE(1, WIDE_COLS) TILE(2, WIDE_COLS)
TILE(1, COL_BLOCK) TILE(2, COL_BLOCK) TILE(3, COL_BLOCK) TILE(4, COL_BLOCK)

#define TILE_NAME(R, J) TILE_NAME_(R, J)
#define TILE_NAME_(R, J) tile_##R##_##J

static void rows_block(const product *p, int r0, int rows, int j0, int cols) {
  if (cols == COL_BLOCK) {
    switch (rows) {
      case 4: TILE_NAME(4, COL_BLOCK)(p, r0, j0); return;
      case 3: TILE_NAME(3, COL_BLOCK)(p, r0, j0); return;
      case 2: TILE_NAME(2, COL_BLOCK)(p, r0, j0); return;
      default: TILE_NAME(1, COL_BLOCK)(p, r0, j0); return;
    }
  }
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) tile_1_1(p, r0 + r, j0 + j);
}

/* Columns [j_begin, j_end) of C, in chunks of W rows small enough to stay in the core's L2
 * cache: a chunk is read from memory once, by the first block of x rows, and from cache by
 * the others; each block of x rows stays in L1 while it sweeps the chunk. */
#define CHUNK_COLS 64
static void columns(const product *p, int j_begin, int j_end) {
  int j = j_begin;
  if (p->m == 1) {
    for (; j + WIDE_COLS <= j_end; j += WIDE_COLS) TILE_NAME(1, WIDE_COLS)(p, 0, j);
  } else if (p->m == 2) {
    for (; j + WIDE_COLS <= j_end; j += WIDE_COLS) TILE_NAME(2, WIDE_COLS)(p, 0, j);
  }
  for (; j < j_end; j += CHUNK_COLS) {
    const int chunk_end = j_end - j < CHUNK_COLS ? j_end : j + CHUNK_COLS;
    for (int r = 0; r < p->m; r += ROW_BLOCK) {
      const int rows = p->m - r < ROW_BLOCK ? p->m - r : ROW_BLOCK;
      for (int jj = j; jj < chunk_end; jj += COL_BLOCK)
        rows_block(p, r, rows, jj, chunk_end - jj < COL_BLOCK ? chunk_end - jj : COL_BLOCK);
    }
  }
}

/* ---- a small pool of worker threads: one per core, spinning briefly, then sleeping ---- */

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static int threads = 0; /* 0: one per core available to the process */
static atomic_uint generation;
/* The job in hand: part ``index`` of ``parts`` of it is ``job_fn(job_ctx, index, parts)``.
 * Its parts are claimed from ``ticket`` by whichever thread comes first, the calling thread
 * included: a worker the OS has not scheduled yet (a busy machine) leaves its part to the
 * others instead of holding the product up. ``ticket`` packs the job's parts (bits 32-39) and
 * the next part to claim (0-31), so one atomic add claims a part and reads its job's count. */
static part_fn job_fn;
static const void *job_ctx;
static _Atomic uint64_t ticket;
static atomic_int parts_done;

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static void part(const void *ctx, int index, int parts) {
  const product *p = ctx;
  /* Split N into equal runs on COL_BLOCK boundaries (WIDE_COLS for one-row products). */
  const int step = p->m <= 2 ? WIDE_COLS : CHUNK_COLS;
  const int blocks = (p->n + step - 1) / step;
  const int begin = (int)((long)blocks * index / parts) * step;
  int end = (int)((long)blocks * (index + 1) / parts) * step;
  if (end > p->n) end = p->n;
  if (begin < end) columns(p, begin, end);
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Spin for the next product for this long before sleeping: the products of one forward come
 * tens of microseconds apart, and waking a sleeping thread costs about as much. */
#define SPIN_SECONDS 1e-3

/* Run the job's parts not claimed yet; a claim past its last part ends it. A successful claim
 * means the job is not finished, so its function and context are still the ones published. */
static void claim_parts(void) {
  for (;;) {
    const uint64_t t = atomic_fetch_add(&ticket, 1);
    const int index = (int)(uint32_t)t, parts = (int)((t >> 32) & 0xff);
    if (index >= parts) return;
    job_fn(job_ctx, index, parts);
    atomic_fetch_add(&parts_done, 1);
  }
}

/* The cores the process may use, read when the library is loaded: the engine then pins its
 * decoding thread (and so MLX's stream thread) to one core, but the workers must spread out. */
static cpu_set_t process_cores;
static int process_cores_known;

__attribute__((constructor)) static void read_process_cores(void) {
  process_cores_known = sched_getaffinity(0, sizeof(process_cores), &process_cores) == 0;
}

static void *worker(void *arg) {
  (void)arg;
  unsigned seen = 0;
  if (process_cores_known)
    pthread_setaffinity_np(pthread_self(), sizeof(process_cores), &process_cores);
  for (;;) {
    unsigned now;
    const double until = seconds() + SPIN_SECONDS;
    for (int spin = 1; (now = atomic_load(&generation)) == seen; spin++) {
      relax();
      if (spin % 64 == 0 && seconds() > until) break;
    }
    if (now == seen) {
      pthread_mutex_lock(&wake_lock);
      while ((now = atomic_load(&generation)) == seen) pthread_cond_wait(&wake, &wake_lock);
      pthread_mutex_unlock(&wake_lock);
    }
    seen = now;
    claim_parts();
  }
  return NULL;
}

static void start_pool(void) {
  int cores = process_cores_known ? CPU_COUNT(&process_cores) : 1;
  if (threads <= 0 || threads > cores) threads = cores;
  if (threads > FC_MAX_THREADS) threads = FC_MAX_THREADS;
  for (int i = 1; i < threads; i++) {
    pthread_t id;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&id, &attr, worker, (void *)(intptr_t)i) != 0) threads = i;
    pthread_attr_destroy(&attr);
  }
}

/* Run ``fn`` in ``parts`` parts (at most one per thread; 1 runs it here), the calling thread
 * claiming parts like the workers and then waiting only for the parts under way. While another
 * product holds the pool, this one runs on the calling thread. */
void fc_parallel(part_fn fn, const void *ctx, int parts) {
  pthread_once(&pool_once, start_pool);
  if (parts > threads) parts = threads;
  if (parts <= 1 || pthread_mutex_trylock(&pool_lock) != 0) {
    fn(ctx, 0, 1);
    return;
  }
  job_fn = fn;
  job_ctx = ctx;
  atomic_store(&parts_done, 0);
  atomic_store(&ticket, (uint64_t)parts << 32);
  pthread_mutex_lock(&wake_lock);
  atomic_fetch_add(&generation, 1);
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&wake_lock);
  claim_parts();
  while (atomic_load(&parts_done) < parts) relax();
  pthread_mutex_unlock(&pool_lock);
}

static void run(const product *p) {
  /* Below ~64k multiply-adds a second thread costs more than it saves. */
  const long work = (long)p->m * p->n * p->k;
  fc_parallel(part, p, work < SPLIT_WORK ? 1 : FC_MAX_THREADS);
}

/* ---- the entry points ---- */

void fc_set_fallback(sgemm_fn fn) { fallback_sgemm = fn; }

/* Threads for the pool (0: one per core available to the process); before the first call. */
void fc_set_threads(int n) { threads = n; }

/* Products with at most this many rows are taken here (0 sends every call to the BLAS). */
void fc_set_max_rows(int n) { max_rows = n < 0 ? 0 : (n > FC_MAX_ROWS ? FC_MAX_ROWS : n); }

int fc_vector_width(void) { return VW; }

long fc_handled_calls(void) { return atomic_load(&handled_calls); }
long fc_forwarded_calls(void) { return atomic_load(&forwarded_calls); }

/* The product itself, for tests: row-major C = alpha * A @ B^T + beta * C. */
void fc_small_gemm(int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                   int ldb, float beta, float *c, int ldc) {
  const product p = {m, n, k, alpha, beta, a, lda, b, ldb, c, ldc};
  run(&p);
}

/* Every other product when no BLAS could be loaded to take it: slow, but never wrong. */
static void naive_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      float sum = 0.0f;
      for (int q = 0; q < k; q++) {
        /* element (i, q) of op(A) and (q, j) of op(B), in either storage order */
        const int a_row_major = (order == RowMajor) == (trans_a == NoTrans);
        const int b_row_major = (order == RowMajor) == (trans_b == NoTrans);
        const float av = a_row_major ? a[(size_t)i * lda + q] : a[(size_t)q * lda + i];
        const float bv = b_row_major ? b[(size_t)q * ldb + j] : b[(size_t)j * ldb + q];
        sum += av * bv;
      }
      float *out = order == RowMajor ? c + (size_t)i * ldc + j : c + (size_t)j * ldc + i;
      *out = beta == 0.0f ? alpha * sum : alpha * sum + beta * *out;
    }
}

void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c,
                 int ldc) {
  if (order == RowMajor && trans_a == NoTrans && trans_b == Trans && m >= 1 &&
      m <= max_rows && n >= 1 && k >= 1) {
    atomic_fetch_add(&handled_calls, 1);
    fc_small_gemm(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  atomic_fetch_add(&forwarded_calls, 1);
  if (!fallback_sgemm) {
    naive_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  fallback_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
