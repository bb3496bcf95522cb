/* A quantized decoder layer's few-row work between the attention's inputs and outputs, in C.
 *
 * Decoding one token through Python-level layers paid for ~15 numpy operations and 7 calls into
 * the product per layer (about 10 ms a token on the 2-core EPYC VM, a third of a forward): the
 * arithmetic between the products is tiny, the calls are not. Here a layer is two calls:
 *
 * - fq_layer_inputs: input norm, the q/k/v products (x quantized once, one parallel job for the
 *   three), their biases, Qwen3's per-head q/k norms, the rotary embedding (its cos/sin per row
 *   computed once per forward by the caller) -> queries [rows, heads, d], keys and values
 *   [kv_heads, rows, d]: what the row-by-row attention (exact_attention.c) takes.
 * - fq_layer_outputs: the output product and residual, the MLP's norm, gate and up (one job, x
 *   quantized once), silu(gate) * up, the down product and residual.
 *
 * The attention itself stays with exact_attention.c and the cache with MLX, called in between.
 * Every step works row by row in a fixed order (the product's guarantee, norms summed by the
 * fixed reduction tree, the same exp), so a row's bits do not depend on the rows beside it:
 * plain decoding and verification agree exactly. Built like the product, which it includes
 * (engine_mlx/cpu/quant_gemm.py loads this library for both).
 */
#include "quant_gemm.c"
#include "vector_exp.h"

/* One weight matrix in MLX's layout, as quant_gemm.c takes it (bits 16: float16 weights, q
 * pointing at them, group k); bias: [n] or NULL. */
typedef struct {
  const uint32_t *q;
  const void *scales, *biases; /* float32, or float16 where ``half`` (see quant_gemm.c) */
  const float *bias;
  int n, k, bits, group, half, panel; /* panel: in panels of 8 rows (quant_panels.c), or 0 */
} fq_matrix;

/* A pre-norm decoder layer (llama, qwen2, qwen3): its shapes, norms and seven products. */
typedef struct {
  int hidden, heads, kv_heads, head_dim, rope_dims, rope_traditional;
  float input_eps, mlp_eps, q_eps, k_eps;
  const float *input_norm, *mlp_norm, *q_norm, *k_norm; /* q_norm, k_norm: NULL without */
  fq_matrix q, k, v, o, gate, up, down;
} fq_layer;

/* Up to three products of the same x, one parallel job: the column blocks of all the matrices
 * are shared out among the threads as if they were one matrix. */
typedef struct {
  product p[3];
  int count;
} products;

static int column_blocks(const product *p) { return (p->n + block_width(p) - 1) / block_width(p); }

static void products_part(const void *ctx, int index, int parts) {
  const products *s = ctx;
  int total = 0;
  for (int i = 0; i < s->count; i++) total += column_blocks(&s->p[i]);
  const int begin = (int)((long)total * index / parts), end = (int)((long)total * (index + 1) / parts);
  int first = 0; /* the first block of matrix i in the shared numbering */
  for (int i = 0; i < s->count; i++) {
    const product *p = &s->p[i];
    const int blocks = column_blocks(p), lo = begin > first ? begin : first;
    const int hi = end < first + blocks ? end : first + blocks;
    if (lo < hi) {
      const int stop = (hi - first) * block_width(p);
      columns(p, (lo - first) * block_width(p), stop < p->n ? stop : p->n);
    }
    first += blocks;
  }
}

/* y_i = x @ W_i^T (+ bias_i) for ``count`` matrices sharing k, bits and group. 0, or -2 out of
 * memory. */
static int multiply_shared(const fq_matrix *const *w, float *const *y, int count, int m,
                           const float *x, int threads, int int8) {
  products s = {.count = count};
  for (int i = 0; i < count; i++)
    if (w[i]->panel && !valid_panel(w[i]->n, w[i]->bits, int8)) return -1;
  for (int i = 0; i < count; i++)
    s.p[i] = (product){.m = m, .n = w[i]->n, .k = w[i]->k, .bits = w[i]->bits,
                       .group = w[i]->group, .int8 = int8 && INT8_DOTS && w[i]->bits != 16, .x = x,
                       .q = (const uint8_t *)w[i]->q, .scales = w[i]->scales,
                       .biases = w[i]->biases, .half = w[i]->half, .y = y[i],
                       .panel = w[i]->panel};
  char *scratch = 0;
#if INT8_DOTS
  if (s.p[0].int8) {
    if (!(scratch = quantize_rows(&s.p[0]))) return -2;
    for (int i = 1; i < count; i++) {
      s.p[i].xq = s.p[0].xq;
      s.p[i].xd = s.p[0].xd;
      s.p[i].xsum = s.p[0].xsum;
      s.p[i].xres = s.p[0].xres;
      memcpy(s.p[i].lane_group, s.p[0].lane_group, sizeof(s.p[0].lane_group));
      s.p[i].chunk_groups = s.p[0].chunk_groups;
    }
  }
#endif
  long work = 0;
  for (int i = 0; i < count; i++) work += (long)m * s.p[i].n * s.p[i].k;
  if (parallel && threads > 1 && work >= SPLIT_WORK)
    parallel(products_part, &s, threads);
  else
    products_part(&s, 0, 1);
  free(scratch);
  for (int i = 0; i < count; i++)
    if (w[i]->bias)
      for (int r = 0; r < m; r++)
        for (int j = 0; j < w[i]->n; j++) y[i][(size_t)r * w[i]->n + j] += w[i]->bias[j];
  return 0;
}

/* Whether matrices can share one quantization of x (and one job). */
static int shareable(const fq_matrix *a, const fq_matrix *b) {
  return a->k == b->k && a->bits == b->bits && a->group == b->group;
}

static int multiply_all(const fq_matrix *const *w, float *const *y, int count, int m,
                        const float *x, int threads, int int8) {
  int together = 1;
  for (int i = 1; i < count; i++) together = together && shareable(w[0], w[i]);
  if (together) return multiply_shared(w, y, count, m, x, threads, int8);
  for (int i = 0; i < count; i++) {
    const int status = multiply_shared(&w[i], &y[i], 1, m, x, threads, int8);
    if (status) return status;
  }
  return 0;
}

/* out = x / sqrt(mean(x^2) + eps) * weight, one row of n (the sum by the fixed tree). */
static void rms_norm_row(const float *x, int n, const float *weight, float eps, float *out) {
  vf sum = {0};
  int i = 0;
  for (; i + VW <= n; i += VW) {
    const vf v = load(x + i);
    sum += v * v;
  }
  float total = reduce(sum);
  for (; i < n; i++) total += x[i] * x[i];
  const float scale = 1.0f / sqrtf(total / (float)n + eps);
  for (i = 0; i < n; i++) out[i] = x[i] * scale * weight[i];
}

/* One head's vector rotated by its row's angles (cos, sin: rope_dims / 2 each). */
static void rotate(const fq_layer *L, float *x, const float *cos_, const float *sin_) {
  const int half = L->rope_dims / 2;
  for (int i = 0; i < half; i++) {
    const int a = L->rope_traditional ? 2 * i : i, b = L->rope_traditional ? 2 * i + 1 : i + half;
    const float first = x[a], second = x[b];
    x[a] = first * cos_[i] - second * sin_[i];
    x[b] = first * sin_[i] + second * cos_[i];
  }
}

/* h [rows, hidden] -> queries [rows, heads, d], keys and values [kv_heads, rows, d], rotated by
 * cos/sin [rows, rope_dims / 2]. 0, -1 for a layer it cannot run, -2 out of memory. */
int fq_layer_inputs(const fq_layer *L, int rows, const float *h, const float *cos_,
                    const float *sin_, float *queries, float *keys, float *values, int threads,
                    int int8) {
  const int d = L->head_dim, half = L->rope_dims / 2, kv = L->kv_heads * d;
  if (rows < 1 || L->rope_dims > d || L->rope_dims % 2) return -1;
  float *x = malloc(sizeof(float) * (size_t)rows * (L->hidden + 2 * kv));
  if (!x) return -2;
  float *k = x + (size_t)rows * L->hidden, *v = k + (size_t)rows * kv;
  for (int r = 0; r < rows; r++)
    rms_norm_row(h + (size_t)r * L->hidden, L->hidden, L->input_norm, L->input_eps,
                 x + (size_t)r * L->hidden);
  const fq_matrix *w[3] = {&L->q, &L->k, &L->v};
  float *y[3] = {queries, k, v};
  const int status = multiply_all(w, y, 3, rows, x, threads, int8);
  if (status) {
    free(x);
    return status;
  }
  for (int r = 0; r < rows; r++) {
    const float *c = cos_ + (size_t)r * half, *s = sin_ + (size_t)r * half;
    for (int head = 0; head < L->heads; head++) {
      float *qh = queries + ((size_t)r * L->heads + head) * d;
      if (L->q_norm) rms_norm_row(qh, d, L->q_norm, L->q_eps, qh);
      rotate(L, qh, c, s);
    }
    for (int head = 0; head < L->kv_heads; head++) {
      float *kh = k + (size_t)r * kv + (size_t)head * d;
      if (L->k_norm) rms_norm_row(kh, d, L->k_norm, L->k_eps, kh);
      rotate(L, kh, c, s);
      memcpy(keys + ((size_t)head * rows + r) * d, kh, sizeof(float) * d);
      memcpy(values + ((size_t)head * rows + r) * d, v + (size_t)r * kv + (size_t)head * d,
             sizeof(float) * d);
    }
  }
  free(x);
  return 0;
}

/* silu(g) * u in place of g: g * sigmoid(g), from e^-|g| (the exp's range). */
static void gated(float *g, const float *u, float *e, int n) {
  for (int i = 0; i < n; i++) e[i] = -__builtin_fabsf(g[i]);
  exp_in_place(e, n);
  for (int i = 0; i < n; i++) {
    const float sigmoid = g[i] >= 0 ? 1.0f / (1.0f + e[i]) : e[i] / (1.0f + e[i]);
    g[i] = g[i] * sigmoid * u[i];
  }
}

/* out [rows, hidden] = h + o(attention), then + down(silu(gate(x)) * up(x)) for x its norm.
 * attention [rows, heads * d]. 0, or -2 out of memory. */
int fq_layer_outputs(const fq_layer *L, int rows, const float *h, const float *attention,
                     float *out, int threads, int int8) {
  const int hidden = L->hidden, wide = L->gate.n;
  float *x = malloc(sizeof(float) * (size_t)rows * (hidden + 3 * (size_t)wide));
  if (!x) return -2;
  float *g = x + (size_t)rows * hidden, *u = g + (size_t)rows * wide, *e = u + (size_t)rows * wide;
  const fq_matrix *o[1] = {&L->o}, *gate_up[2] = {&L->gate, &L->up}, *down[1] = {&L->down};
  float *y[2] = {out, 0};
  int status = multiply_all(o, y, 1, rows, attention, threads, int8);
  for (size_t i = 0; !status && i < (size_t)rows * hidden; i++) out[i] += h[i];
  for (int r = 0; !status && r < rows; r++)
    rms_norm_row(out + (size_t)r * hidden, hidden, L->mlp_norm, L->mlp_eps, x + (size_t)r * hidden);
  y[0] = g;
  y[1] = u;
  if (!status) status = multiply_all(gate_up, y, 2, rows, x, threads, int8);
  if (!status) gated(g, u, e, rows * wide);
  y[0] = x; /* the norm is spent: x takes down's rows */
  if (!status) status = multiply_all(down, y, 1, rows, g, threads, int8);
  for (size_t i = 0; !status && i < (size_t)rows * hidden; i++) out[i] += x[i];
  free(x);
  return status;
}
