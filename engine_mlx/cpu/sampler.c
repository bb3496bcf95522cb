/* The sampler's filters on the CPU: repetition penalty, temperature, top-k, top-p, min-p and the
 * draw, each row in one pass over its logits (engine_mlx/decoding/filters.py and sampling.py
 * define them; engine_mlx/cpu/sampler.py loads this).
 *
 * With top-k, one pass keeps the k best penalised logits in a heap. Most of a vocabulary is far
 * below the k-th best, so a few vectors of logits are skipped by comparing them with the heap's
 * worst; only a vector that may hold a candidate is looked at token by token, the penalty applied
 * there (a penalty above 1 only lowers a logit; below 1 it raises it to at most max(x / p, x * p)).
 * Ids are visited in order and a token enters only when strictly better than the worst kept, so
 * among tokens tied at the k-th value the lowest ids are kept, as the MLX definition keeps them.
 * Temperature, top-p and min-p then run on the k survivors, in double precision.
 *
 * Without top-k (temperature alone, top-p, min-p), the kept set is every token at or above one
 * value: top-p's is found by sorting only the tokens within a factor c of the most likely one,
 * c shrinking until they hold the mass top-p asks for (the tokens left out cannot be kept then).
 *
 * The draw is by inverse CDF from a given uniform: the first token whose cumulative probability
 * exceeds u times the total; without top-k over per-chunk sums first. Every row is computed
 * alone, the same way whatever rows are beside it, so one row and a many-row verification keep
 * the same tokens; rows are shared among the float32 product's threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vector_exp.h"
#include "vectors.h"

typedef struct {
  const float *logits; /* [rows, vocab], rows ``stride`` floats apart */
  long stride;
  int rows, vocab;
  const uint8_t *seen;   /* [vocab]: 1 for a token of the committed context; NULL: none */
  const int32_t *extra;  /* [rows, n_extra]: each row's further context (repeats allowed) */
  int n_extra;
  const int32_t *forced; /* [rows]: the token a row is reduced to, or -1; NULL: none */
  float penalty, temperature;
  int top_k; /* 0: no top-k (0 < top_k < vocab otherwise) */
  float top_p, min_p;
  const float *uniforms; /* [rows] in [0, 1): draw a token per row; NULL: no draw */
  int32_t *tokens;       /* [rows]: the drawn tokens */
  int32_t *ids;          /* [rows, top_k]: the k best, best first (with top-k) */
  float *logprobs;       /* [rows, top_k]: their log-probabilities, -inf where removed */
  float *dense;          /* [rows, vocab]: the distribution over the vocabulary; or NULL */
  int failed;
} request;

typedef struct {
  float v;
  int32_t id;
} candidate;

typedef int vi __attribute__((vector_size(VW * sizeof(int))));

#define CHUNK 1024 /* tokens per partial sum of the full-vocabulary draw */

/* Per-thread buffers kept between calls: a fresh vocabulary-sized block would cost its page
 * faults on every call. */
static _Thread_local float *scaled;
static _Thread_local size_t scaled_cap;
static _Thread_local candidate *cands;
static _Thread_local size_t cands_cap;

static int candidate_room(size_t n) {
  if (n <= cands_cap) return 1;
  size_t cap = cands_cap ? cands_cap : 256;
  while (cap < n) cap *= 2;
  candidate *grown = realloc(cands, cap * sizeof(candidate));
  if (!grown) return 0;
  cands = grown, cands_cap = cap;
  return 1;
}

static inline vf splat(float v) {
  vf out;
  for (int i = 0; i < VW; i++) out[i] = v;
  return out;
}

static inline vf pick(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }

/* A comparison's lanes as bits (NaN is never above anything). */
static inline unsigned lanes(vi m) {
#if VW == 16
  return _mm512_test_epi32_mask((__m512i)m, (__m512i)m);
#elif VW == 8 && defined(__AVX__)
  return (unsigned)_mm256_movemask_ps((__m256)m);
#elif VW == 4 && defined(__SSE__)
  return (unsigned)_mm_movemask_ps((__m128)m);
#else
  unsigned bits = 0;
  for (int i = 0; i < VW; i++) bits |= (m[i] != 0) << i;
  return bits;
#endif
}

/* ---- the penalty ---- */

static inline float penalised(float x, float p) { return x > 0 ? x / p : x * p; }

static inline int penalises(const request *r) {
  return r->penalty != 1.0f && (r->seen || (r->extra && r->n_extra > 0));
}

static int seen_in_row(const request *r, int row, int id) {
  if (r->seen && r->seen[id]) return 1;
  const int32_t *e = r->extra ? r->extra + (size_t)row * r->n_extra : NULL;
  for (int i = 0; e && i < r->n_extra; i++)
    if (e[i] == id) return 1;
  return 0;
}

/* Token ``id``'s logit after the penalty; NaN counts as -inf. */
static inline float value(const request *r, int row, const float *x, int id) {
  float v = x[id];
  if (r->penalty != 1.0f && seen_in_row(r, row, id)) v = penalised(v, r->penalty);
  return v == v ? v : -INFINITY;
}

/* ---- top-k: a heap of the k best, its root the worst kept ---- */

static inline int worse(candidate a, candidate b) {
  return a.v < b.v || (a.v == b.v && a.id > b.id);
}

static void sift_down(candidate *h, int n, int at) {
  for (;;) {
    int worst = at;
    const int left = 2 * at + 1, right = left + 1;
    if (left < n && worse(h[left], h[worst])) worst = left;
    if (right < n && worse(h[right], h[worst])) worst = right;
    if (worst == at) return;
    const candidate t = h[at];
    h[at] = h[worst], h[worst] = t;
    at = worst;
  }
}

static inline void offer(const request *r, int row, const float *x, int id, candidate *h) {
  const float y = value(r, row, x, id);
  if (y > h[0].v) { /* an equal value has a higher id than every kept one: it stays out */
    h[0].v = y, h[0].id = id;
    sift_down(h, r->top_k, 0);
  }
}

/* The k best penalised logits of a row, best first (ties: the lower id). */
static void top_k(const request *r, int row, const float *x, candidate *h) {
  const int k = r->top_k, vocab = r->vocab;
  for (int i = 0; i < k; i++) h[i].v = value(r, row, x, i), h[i].id = i;
  for (int i = k / 2 - 1; i >= 0; i--) sift_down(h, k, i);
  const int raise = penalises(r) && r->penalty < 1.0f; /* else the raw logit bounds it */
  const vf p = splat(r->penalty);
  int i = k;
  for (; i + 4 * VW <= vocab; i += 4 * VW) {
    const vf t = splat(h[0].v);
    vi above[4], any = {0};
    for (int v = 0; v < 4; v++) {
      const vf a = load(x + i + v * VW);
      above[v] = raise ? (a > t) | (a / p > t) | (a * p > t) : a > t;
      any |= above[v];
    }
    if (!lanes(any)) continue;
    for (int v = 0; v < 4; v++)
      for (unsigned bits = lanes(above[v]); bits; bits &= bits - 1)
        offer(r, row, x, i + v * VW + __builtin_ctz(bits), h);
  }
  for (; i < vocab; i++) offer(r, row, x, i, h);
  for (int n = k - 1; n > 0; n--) { /* heap sort: the worst goes last */
    const candidate t = h[0];
    h[0] = h[n], h[n] = t;
    sift_down(h, n, 0);
  }
}

/* ---- the filters on candidates sorted best first ---- */

static double log_sum_exp(const candidate *c, int n) {
  if (n == 0 || c[0].v == -INFINITY) return -INFINITY;
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += exp((double)c[i].v - c[0].v);
  return (double)c[0].v + log(sum);
}

/* How many of the sorted scaled logits top-p keeps, each token's probability exp(v - lse): a
 * group of equal values is kept when the tokens before it hold less than ``top_p``. */
static int top_p_count(const candidate *c, int n, double lse, float top_p) {
  if (top_p >= 1.0f) return n;
  double mass = 0.0;
  for (int i = 0; i < n; i++) {
    if (i > 0 && c[i].v != c[i - 1].v && mass >= top_p) return i;
    mass += exp((double)c[i].v - lse);
  }
  return n;
}

/* How many of the sorted scaled logits min-p keeps: those at least min_p times the first. */
static int min_p_count(const candidate *c, int n, float min_p) {
  if (min_p <= 0.0f) return n;
  const double floor = log((double)min_p);
  for (int i = 1; i < n; i++)
    if ((double)c[i].v - (double)c[0].v < floor) return i;
  return n;
}

/* The inverse CDF over ``lp[0..n)`` (the last token with any probability if rounding leaves
 * the target beyond the total). */
static int draw_sorted(const float *lp, int n, float u) {
  double total = 0.0, cum = 0.0;
  for (int i = 0; i < n; i++) total += exp((double)lp[i]);
  const double target = (double)u * total;
  int last = 0;
  for (int i = 0; i < n; i++) {
    const double w = exp((double)lp[i]);
    if (w > 0) last = i;
    cum += w;
    if (cum > target && w > 0) return i;
  }
  return last;
}

/* A row with top-k: the survivors and their log-probabilities, the draw, the dense row. */
static void top_k_row(const request *r, int row, const float *x, candidate *h) {
  const int k = r->top_k;
  top_k(r, row, x, h);
  for (int i = 0; i < k; i++) h[i].v = h[i].v / r->temperature; /* float32, as defined */
  int kept = top_p_count(h, k, log_sum_exp(h, k), r->top_p);
  kept = h[0].v == -INFINITY ? 1 : min_p_count(h, kept, r->min_p);
  const double lse = log_sum_exp(h, kept);
  int32_t *ids = r->ids + (size_t)row * k;
  float *lp = r->logprobs + (size_t)row * k;
  for (int i = 0; i < k; i++) {
    ids[i] = h[i].id;
    lp[i] = i >= kept ? -INFINITY : h[0].v == -INFINITY ? 0.0f : (float)((double)h[i].v - lse);
  }
  if (r->uniforms) r->tokens[row] = ids[draw_sorted(lp, kept, r->uniforms[row])];
  if (r->dense) {
    float *out = r->dense + (size_t)row * r->vocab;
    for (int i = 0; i < r->vocab; i++) out[i] = -INFINITY;
    for (int i = 0; i < k; i++) out[ids[i]] = lp[i];
  }
}

/* ---- without top-k: every token at or above one scaled value ---- */

static inline int kept(float y, float floor) { return y >= floor && y > -INFINITY; }

static inline void penalise_scaled(const request *r, const float *x, float *y, int id) {
  const float v = x[id]; /* from the raw logit: a repeat changes nothing */
  y[id] = v == v ? penalised(v, r->penalty) / r->temperature : -INFINITY;
}

/* y = the row's penalised logits over the temperature (NaN: -inf); returns their largest. The
 * penalised tokens are few: they are redone after the one division of the whole row. */
static float scale_row(const request *r, int row, const float *x, float *y) {
  const int vocab = r->vocab;
  const vf t = splat(r->temperature), low = splat(-INFINITY);
  int i = 0;
  for (; i + VW <= vocab; i += VW) {
    const vf v = load(x + i);
    store_vector(y + i, pick(v == v, v / t, low));
  }
  for (; i < vocab; i++) y[i] = x[i] == x[i] ? x[i] / r->temperature : -INFINITY;
  if (penalises(r) && r->seen) {
    for (i = 0; i + 8 <= vocab; i += 8) {
      uint64_t any;
      memcpy(&any, r->seen + i, sizeof(any));
      for (int j = i; any && j < i + 8; j++)
        if (r->seen[j]) penalise_scaled(r, x, y, j);
    }
    for (; i < vocab; i++)
      if (r->seen[i]) penalise_scaled(r, x, y, i);
  }
  if (penalises(r) && r->extra)
    for (int j = 0; j < r->n_extra; j++) penalise_scaled(r, x, y, r->extra[(size_t)row * r->n_extra + j]);
  vf m[4] = {low, low, low, low}; /* four chains: one would wait on each comparison */
  for (i = 0; i + 4 * VW <= vocab; i += 4 * VW)
    for (int c = 0; c < 4; c++) {
      const vf v = load(y + i + c * VW);
      m[c] = pick(v > m[c], v, m[c]);
    }
  float top = -INFINITY;
  for (int c = 0; c < 4; c++)
    for (int l = 0; l < VW; l++) top = m[c][l] > top ? m[c][l] : top;
  for (; i < vocab; i++) top = y[i] > top ? y[i] : top;
  return top;
}

/* exp(y - top) for y[begin..begin + n) (n <= CHUNK) into w, 0 where not kept. */
static void chunk_weights(const float *y, int begin, int n, float top, float floor, float *w) {
  for (int i = 0; i < n; i++) w[i] = y[begin + i] - top;
  exp_in_place(w, n);
  for (int i = 0; i < n; i++) w[i] = kept(y[begin + i], floor) ? w[i] : 0.0f;
}

/* Each chunk's sum of the kept tokens' exp(y - top) into ``sums``; returns the total. */
static double chunk_sums(const float *y, int vocab, float top, float floor, double *sums) {
  float w[CHUNK];
  double total = 0.0;
  for (int begin = 0, c = 0; begin < vocab; begin += CHUNK, c++) {
    const int n = vocab - begin < CHUNK ? vocab - begin : CHUNK;
    chunk_weights(y, begin, n, top, floor, w);
    vf acc = splat(0.0f);
    int i = 0;
    for (; i + VW <= n; i += VW) acc += load(w + i);
    double sum = reduce(acc);
    for (; i < n; i++) sum += w[i];
    sums[c] = sum, total += sum;
  }
  return total;
}

static int by_value(const void *a, const void *b) {
  const candidate *u = a, *v = b;
  if (u->v != v->v) return u->v > v->v ? -1 : 1;
  return u->id < v->id ? -1 : 1;
}

/* The lowest scaled value top-p keeps (``top``: the largest; ``lse``: the row's log-sum-exp),
 * -inf when it keeps every token; 0 when out of memory. */
static int top_p_floor(const float *y, int vocab, float top, double lse, float top_p,
                       float *floor) {
  *floor = -INFINITY;
  if (top_p >= 1.0f) return 1;
  for (double c = 1e-3;; c *= 1e-3) {
    const int all = c < 1e-30;
    const float at = all ? -INFINITY : (float)((double)top + log(c));
    const vf a = splat(at);
    size_t n = 0;
    for (int i = 0; i < vocab; i += VW) {
      if (i + VW <= vocab && !lanes(load(y + i) >= a)) continue;
      for (int j = i; j < i + VW && j < vocab; j++) {
        if (!(y[j] >= at)) continue;
        if (!candidate_room(n + 1)) return 0;
        cands[n].v = y[j], cands[n].id = j, n++;
      }
    }
    qsort(cands, n, sizeof(candidate), by_value);
    const int count = top_p_count(cands, (int)n, lse, top_p);
    /* A boundary among the collected tokens holds for the rest too (each is less likely than
     * every collected one); else every collected token is kept and the rest decide. */
    if (count < (int)n || all) {
      *floor = count < (int)n ? cands[count - 1].v : -INFINITY;
      return 1;
    }
  }
}

/* The smallest float f with (double)f >= t. */
static float float_at_least(double t) {
  float f = (float)t;
  return (double)f < t ? nextafterf(f, INFINITY) : f;
}

/* A row without top-k; ``y`` is scratch for its scaled logits. 0 when out of memory. */
static int full_row(const request *r, int row, const float *x, float *y, double *sums) {
  const int vocab = r->vocab;
  const float top = scale_row(r, row, x, y);
  float floor = -INFINITY;
  double total = chunk_sums(y, vocab, top, floor, sums);
  if (top > -INFINITY && (r->top_p < 1.0f || r->min_p > 0.0f)) {
    if (!top_p_floor(y, vocab, top, (double)top + log(total), r->top_p, &floor)) return 0;
    if (r->min_p > 0.0f) {
      const float at = float_at_least((double)top + log((double)r->min_p));
      floor = at > floor ? at : floor;
    }
    if (floor > -INFINITY) total = chunk_sums(y, vocab, top, floor, sums);
  }
  if (r->uniforms) {
    const double target = (double)r->uniforms[row] * total;
    double cum = 0.0;
    int chosen = -1;
    for (int begin = 0, c = 0; begin < vocab && chosen < 0; begin += CHUNK, c++) {
      if (cum + sums[c] <= target) {
        cum += sums[c];
        continue;
      }
      float w[CHUNK];
      const int n = vocab - begin < CHUNK ? vocab - begin : CHUNK;
      chunk_weights(y, begin, n, top, floor, w);
      for (int i = 0; i < n && chosen < 0; i++)
        if (w[i] > 0 && (cum += w[i]) > target) chosen = begin + i;
    }
    for (int i = vocab - 1; i >= 0 && chosen < 0; i--) /* rounding: the last kept token */
      if (kept(y[i], floor)) chosen = i;
    r->tokens[row] = chosen < 0 ? 0 : chosen;
  }
  if (r->dense) {
    const float lse = (float)((double)top + log(total));
    const vf f = splat(floor), low = splat(-INFINITY), l = splat(lse);
    float *out = r->dense + (size_t)row * vocab;
    int i = 0;
    for (; i + VW <= vocab; i += VW) {
      const vf v = load(y + i);
      store_vector(out + i, pick((v >= f) & (v > low), v - l, low));
    }
    for (; i < vocab; i++) out[i] = kept(y[i], floor) ? y[i] - lse : -INFINITY;
  }
  return 1;
}

/* ---- rows ---- */

static void forced_row(const request *r, int row, int token) {
  if (r->uniforms) r->tokens[row] = token;
  for (int i = 0; i < r->top_k; i++) { /* distinct ids: the forced one first, alone kept */
    r->ids[(size_t)row * r->top_k + i] = (token + i) % r->vocab;
    r->logprobs[(size_t)row * r->top_k + i] = i == 0 ? 0.0f : -INFINITY;
  }
  if (r->dense) {
    float *out = r->dense + (size_t)row * r->vocab;
    for (int i = 0; i < r->vocab; i++) out[i] = -INFINITY;
    out[token] = 0.0f;
  }
}

static void rows_part(const void *ctx, int index, int parts) {
  request *r = (request *)ctx;
  const int begin = (int)((long)r->rows * index / parts);
  const int end = (int)((long)r->rows * (index + 1) / parts);
  candidate *heap = NULL;
  double *sums = NULL;
  if (r->top_k > 0) {
    heap = malloc(sizeof(candidate) * (size_t)r->top_k);
  } else {
    if ((size_t)r->vocab > scaled_cap) {
      free(scaled);
      scaled = malloc(sizeof(float) * (size_t)r->vocab);
      scaled_cap = scaled ? (size_t)r->vocab : 0;
    }
    sums = malloc(sizeof(double) * (size_t)((r->vocab + CHUNK - 1) / CHUNK));
  }
  if (r->top_k > 0 ? !heap : !scaled || !sums) {
    r->failed = 1;
  } else {
    for (int row = begin; row < end; row++) {
      const float *x = r->logits + (size_t)row * (size_t)r->stride;
      if (r->forced && r->forced[row] >= 0)
        forced_row(r, row, r->forced[row]);
      else if (r->top_k > 0)
        top_k_row(r, row, x, heap);
      else if (!full_row(r, row, x, scaled, sums))
        r->failed = 1;
    }
  }
  free(heap);
  free(sums);
}

/* The pool that runs the parts (small_gemm.c's fc_parallel), or none: one thread. */
static parallel_fn parallel;

void fs_set_pool(parallel_fn fn) { parallel = fn; }

/* 0 on success, -1 out of memory, -2 a token id outside the vocabulary. */
int fs_sample(request *r) {
  for (long i = 0; r->extra && i < (long)r->rows * r->n_extra; i++)
    if (r->extra[i] < 0 || r->extra[i] >= r->vocab) return -2;
  for (int i = 0; r->forced && i < r->rows; i++)
    if (r->forced[i] < -1 || r->forced[i] >= r->vocab) return -2;
  r->failed = 0;
  if (parallel && r->rows > 1)
    parallel(rows_part, r, r->rows);
  else
    rows_part(r, 0, 1);
  return r->failed ? -1 : 0;
}
