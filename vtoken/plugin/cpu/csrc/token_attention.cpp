// Token-view attention on the CPU: each query attends a list of KV slots of a token-major
// pool kv_rows[slot, kv_head, 2 * head_size] (K | V). Written for vtoken; compiled lazily by
// vtoken/plugin/cpu/extension.py with torch.utils.cpp_extension, called by
// vtoken/plugin/token_attention.py (attention, the KV write) and vtoken/plugin/relocation.py (relocate).
//
// One "query" is one token of one request that attends the first `len` entries of that
// request's token-view row (a decode token attends the whole row; extend token i attends
// prefix + i + 1 entries). Work item = (query, kv split) over every kv head: per block of
// BLOCK entries the kv heads are taken in turn, so the block's token-major rows (all heads of
// a slot are one contiguous row) are swept once, and the GQA group of query heads sharing a kv
// head is processed together, so each K/V row is converted to float once. Softmax is online (per block of BLOCK rows) and all arithmetic is
// float32; queries (scaled here) and outputs may be float32, bfloat16 or float16 with any row
// strides, so the caller passes its tensors as they are. Split partials are merged in a
// second pass, which also finalizes the optional attention mass (probabilities summed over
// heads and over a request's queries: the exponentials of the first pass, kept per block with
// the block's running maximum, rescaled by the final denominator; the keys are read once)
// and the optional log-sum-exp of every (query, head) (for merging with attention over other
// keys).

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include <omp.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

namespace {

constexpr int BLOCK = 64;   // rows per online-softmax step
constexpr int MAX_HEAD = 256;  // head size limit (stack buffers)

// Row conversion to float32 (plain loops: the compiler vectorizes them).
inline void to_float(const float* src, float* dst, int n) { std::memcpy(dst, src, n * sizeof(float)); }

inline void to_float(const at::BFloat16* src, float* dst, int n) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
  for (int i = 0; i < n; ++i) d[i] = uint32_t(s[i]) << 16;
}

inline void to_float(const at::Half* src, float* dst, int n) {
  const _Float16* s = reinterpret_cast<const _Float16*>(src);
  for (int i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
}

#if defined(__AVX2__) && defined(__FMA__)
#define VT_AVX2 1
// ---- AVX2 helpers --------------------------------------------------------------------------

inline void cvt8(const float* src, float* dst) { _mm256_storeu_ps(dst, _mm256_loadu_ps(src)); }
inline void cvt8(const at::BFloat16* src, float* dst) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  _mm256_storeu_ps(dst, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
}
inline void cvt8(const at::Half* src, float* dst) {
#if defined(__F16C__)
  _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
#else
  to_float(src, dst, 8);
#endif
}

// exp(x) for x <= 0 (softmax arguments): 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2], with a
// degree-7 Taylor-type polynomial (relative error ~1e-7 on that interval). Arguments below
// -87 are clamped (result ~1e-38, i.e. zero next to the row's maximum term, which is 1).
inline __m256 exp256(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);  // ln2 high part
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);  // ln2 low part
  __m256 p = _mm256_set1_ps(1.f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// max(s[0..n)), n >= 1, s padded to a multiple of 8.
inline float row_max(const float* s, int n) {
  __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int j = 0;
  for (; j + 8 <= n; j += 8) mv = _mm256_max_ps(mv, _mm256_load_ps(s + j));
  alignas(32) float t[8];
  _mm256_store_ps(t, mv);
  float m = t[0];
  for (int i = 1; i < 8; ++i) m = std::max(m, t[i]);
  for (; j < n; ++j) m = std::max(m, s[j]);
  return m;
}

// Sums of each of a[0..7] as one vector.
inline __m256 hsum8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#endif

// Instruction sets of the block loops (head sizes 64 and 128; others always take the generic one).
enum { ISA_GENERIC = 1, ISA_AVX2 = 2, ISA_AVX512 = 3 };

// A float32, bfloat16 or float16 tensor [tokens, heads, D] with unit last stride.
struct Rows {
  void* data;
  at::ScalarType dtype;
  int64_t token_stride, head_stride;
};

struct Problem {
  Rows q;                  // [num_tokens, H, D] queries, scaled by `scale` when loaded
  float scale;
  const int64_t* q_tok;    // [num_q] row of query qi in q / out / lse (nullptr: qi itself)
  const int32_t* table;    // req_to_token
  int64_t table_stride;
  const int64_t* q_req;    // [num_q] request (table row) of each query
  const int64_t* q_len;    // [num_q] entries attended
  int64_t row_stride, head_stride;
  int H, Hkv, G, D;
  int splits;              // kv splits per query
  int64_t split_rows;      // rows per split (multiple of BLOCK)
  // partials: [num_q, splits, H] m and l, [num_q, splits, H, D] acc
  float* part_m;
  float* part_l;
  float* part_acc;
  // mass scratch (nullptr when no mass): p[num_q, H, max_len] and block maxima
  float* p;
  float* bmax;             // [num_q, H, num_blocks]
  int64_t max_len, num_blocks;
  int isa;                 // ISA_* : the widest compiled in, or a narrower one (tests)
};

inline int64_t token_of(const Problem& P, int64_t qi) { return P.q_tok ? P.q_tok[qi] : qi; }

// The G query heads of kv head h of query qi as float32 [G, D], times the softmax scale.
inline void load_query(const Problem& P, int64_t qi, int h, float* dst) {
  const int64_t tok = token_of(P, qi);
  for (int g = 0; g < P.G; ++g) {
    const int64_t off = tok * P.q.token_stride + int64_t(h * P.G + g) * P.q.head_stride;
    float* d = dst + g * P.D;
    if (P.q.dtype == at::kFloat) to_float(static_cast<const float*>(P.q.data) + off, d, P.D);
    else if (P.q.dtype == at::kBFloat16) to_float(static_cast<const at::BFloat16*>(P.q.data) + off, d, P.D);
    else to_float(static_cast<const at::Half*>(P.q.data) + off, d, P.D);
    for (int i = 0; i < P.D; ++i) d[i] *= P.scale;
  }
}

// Write the float32 vector src[D] as row (token, head) of `out`, converting to its dtype.
inline void store_row(const Rows& out, int64_t token, int64_t head, const float* src, int D) {
  const int64_t off = token * out.token_stride + head * out.head_stride;
  if (out.dtype == at::kFloat) {
    std::memcpy(static_cast<float*>(out.data) + off, src, D * sizeof(float));
  } else if (out.dtype == at::kBFloat16) {
    at::BFloat16* d = static_cast<at::BFloat16*>(out.data) + off;
    for (int i = 0; i < D; ++i) d[i] = at::BFloat16(src[i]);
  } else {
    at::Half* d = static_cast<at::Half*>(out.data) + off;
    for (int i = 0; i < D; ++i) d[i] = at::Half(src[i]);
  }
}

// One work item is (query qi, kv split sp) over every kv head: for each block of BLOCK rows,
// the heads are taken one after the other, so a block's K|V rows (all heads of a slot are one
// contiguous row of the token-major pool) are read in one sweep instead of once per head.
// The online-softmax state of query head hg lives in the item's partials: m = part_m[hg],
// l = part_l[hg], acc = part_acc[hg * D ..] (item base (qi * splits + sp) * H).
struct Item {
  const float* q;          // [H, D] scaled queries
  float* m;                // [H]
  float* l;                // [H]
  float* acc;              // [H, D]
  const int32_t* slots;    // the query's table row
  int64_t qi;
};

inline int64_t item_base(const Problem& P, int64_t qi, int sp) { return (qi * P.splits + sp) * P.H; }

// Mass scratch of one block for query head hg: the block's exponentials (relative to m_new).
inline void keep_block(const Problem& P, const Item& it, int hg, int64_t b0, const float* e, int n, float m_new) {
  const int64_t base = it.qi * P.H + hg;
  std::memcpy(P.p + base * P.max_len + b0, e, n * sizeof(float));
  P.bmax[base * P.num_blocks + b0 / BLOCK] = m_new;
}

// Block [b0, b0 + n) of kv head h, any head size (plain loops: the compiler vectorizes them).
template <typename T>
void block_generic(const Problem& P, const T* kv, const Item& it, int h, int64_t b0, int n, float* rows) {
  const int G = P.G, D = P.D;
  for (int j = 0; j < n; ++j) {
    const T* src = kv + int64_t(it.slots[b0 + j]) * P.row_stride + int64_t(h) * P.head_stride;
    to_float(src, rows + size_t(j) * 2 * D, 2 * D);
  }
  float s[BLOCK];
  for (int g = 0; g < G; ++g) {
    const int hg = h * G + g;
    const float* qg = it.q + hg * D;
    float bm = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < n; ++j) {
      const float* k = rows + size_t(j) * 2 * D;
      float dot = 0.f;
      for (int d = 0; d < D; ++d) dot += qg[d] * k[d];
      s[j] = dot;
      bm = std::max(bm, dot);
    }
    const float m_new = std::max(it.m[hg], bm);
    const float alpha = std::exp(it.m[hg] - m_new);  // 0 on the first block
    it.m[hg] = m_new;
    float sum = 0.f;
    for (int j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - m_new);
      sum += s[j];
    }
    it.l[hg] = it.l[hg] * alpha + sum;
    float* ag = it.acc + hg * D;
    for (int d = 0; d < D; ++d) ag[d] *= alpha;
    for (int j = 0; j < n; ++j) {
      const float* v = rows + size_t(j) * 2 * D + D;
      for (int d = 0; d < D; ++d) ag[d] += s[j] * v[d];
    }
    if (P.p) keep_block(P, it, hg, b0, s, n, m_new);
  }
}

#ifdef VT_AVX2
// Prefetch the K and V halves of rows [a, b) of kv head h into L2 (one line each; the
// hardware prefetcher follows the rest of a half row). Prefetching every line into L1 was
// slower: the fill buffers filled up and the prefetches evicted the block being computed.
template <typename T>
inline void prefetch_rows(const Problem& P, const T* kv, const int32_t* slots, int h, int64_t a, int64_t b) {
  for (int64_t j = a; j < b; ++j) {
    const T* row = kv + int64_t(slots[j]) * P.row_stride + int64_t(h) * P.head_stride;
    _mm_prefetch(reinterpret_cast<const char*>(row), _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(row + P.D), _MM_HINT_T1);
  }
}

// Online-softmax step of query head hg over scores s[0..n) (padded to n8, a multiple of 8):
// s becomes exp(s - m_new) (zero in the padding), m and l are updated; returns the factor
// alpha = exp(m_old - m_new) by which the accumulator must be scaled.
inline float softmax_block(const Item& it, int hg, float* s, int n, int n8) {
  float bm = row_max(s, n);
  const float m_old = it.m[hg];
  const float m_new = std::max(m_old, bm);
  const float alpha = m_old == -std::numeric_limits<float>::infinity() ? 0.f : std::exp(m_old - m_new);
  it.m[hg] = m_new;
  const __m256 mv = _mm256_set1_ps(m_new);
  __m256 sumv = _mm256_setzero_ps();
  for (int jb = 0; jb < n8; jb += 8) {
    __m256 e = exp256(_mm256_sub_ps(_mm256_load_ps(s + jb), mv));
    if (jb + 8 > n) {  // zero the padding rows
      const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(jb), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      e = _mm256_and_ps(e, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx)));
    }
    _mm256_store_ps(s + jb, e);
    sumv = _mm256_add_ps(sumv, e);
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, sumv);
  float sum = 0.f;
  for (int i = 0; i < 8; ++i) sum += tmp[i];
  it.l[hg] = it.l[hg] * alpha + sum;
  return alpha;
}

// Block [b0, b0 + n) of kv head h for head size D (a multiple of 8), with AVX2/FMA; rows
// [BLOCK][2D] is 32-byte aligned scratch. Rows of the next block (same head) are prefetched
// while this one is computed (a token view's rows are scattered).
template <typename T, int D>
void block_avx2(const Problem& P, const T* kv, const Item& it, int h, int64_t b0, int n, int64_t j1, float* rows_) {
  constexpr int NV = D / 8;        // vectors per half row
  constexpr int CH = NV < 8 ? NV : 8;  // accumulator vectors kept in registers
  float (*rows)[2 * D] = reinterpret_cast<float (*)[2 * D]>(rows_);
  const int G = P.G;
  const int n8 = (n + 7) & ~7;
  prefetch_rows(P, kv, it.slots, h, b0 + BLOCK, std::min<int64_t>(j1, b0 + 2 * BLOCK));
  for (int j = 0; j < n; ++j) {
    const T* src = kv + int64_t(it.slots[b0 + j]) * P.row_stride + int64_t(h) * P.head_stride;
    for (int c = 0; c < 2 * D; c += 8) cvt8(src + c, rows[j] + c);
  }
  for (int j = n; j < n8; ++j) std::fill(rows[j], rows[j] + 2 * D, 0.f);
  alignas(32) float s[BLOCK];
  for (int g = 0; g < G; ++g) {
    const int hg = h * G + g;
    const float* qg = it.q + hg * D;
    // Scores of 8 rows at a time.
    for (int jb = 0; jb < n8; jb += 8) {
      __m256 a[8];
      for (int r = 0; r < 8; ++r) a[r] = _mm256_setzero_ps();
      for (int c = 0; c < NV; ++c) {
        const __m256 qc = _mm256_loadu_ps(qg + 8 * c);
        for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(qc, _mm256_load_ps(rows[jb + r] + 8 * c), a[r]);
      }
      _mm256_store_ps(s + jb, hsum8(a));
    }
    const float alpha = softmax_block(it, hg, s, n, n8);
    float* ag = it.acc + hg * D;
    const __m256 av = _mm256_set1_ps(alpha);
    for (int c0 = 0; c0 < NV; c0 += CH) {
      __m256 o[CH];
      for (int c = 0; c < CH; ++c) o[c] = _mm256_mul_ps(_mm256_loadu_ps(ag + 8 * (c0 + c)), av);
      for (int j = 0; j < n; ++j) {
        const __m256 pj = _mm256_set1_ps(s[j]);
        for (int c = 0; c < CH; ++c) o[c] = _mm256_fmadd_ps(pj, _mm256_load_ps(rows[j] + D + 8 * (c0 + c)), o[c]);
      }
      for (int c = 0; c < CH; ++c) _mm256_storeu_ps(ag + 8 * (c0 + c), o[c]);
    }
    if (P.p) keep_block(P, it, hg, b0, s, n, it.m[hg]);
  }
}
#endif

#if defined(VT_AVX2) && defined(__AVX512F__)
#define VT_AVX512 1
inline void cvt16(const float* src, float* dst) { _mm512_store_ps(dst, _mm512_loadu_ps(src)); }
inline void cvt16(const at::BFloat16* src, float* dst) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  _mm512_store_ps(dst, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
}
inline void cvt16(const at::Half* src, float* dst) {
  _mm512_store_ps(dst, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))));
}

// block_avx2 with 16-wide conversion, dot products and accumulation (same arithmetic up to
// summation order); rows must be 64-byte aligned.
template <typename T, int D>
void block_avx512(const Problem& P, const T* kv, const Item& it, int h, int64_t b0, int n, int64_t j1, float* rows_) {
  constexpr int NV = D / 16;  // 512-bit vectors per half row (4 or 8: all kept in registers)
  float (*rows)[2 * D] = reinterpret_cast<float (*)[2 * D]>(rows_);
  const int n8 = (n + 7) & ~7;
  prefetch_rows(P, kv, it.slots, h, b0 + BLOCK, std::min<int64_t>(j1, b0 + 2 * BLOCK));
  for (int j = 0; j < n; ++j) {
    const T* src = kv + int64_t(it.slots[b0 + j]) * P.row_stride + int64_t(h) * P.head_stride;
    for (int c = 0; c < 2 * D; c += 16) cvt16(src + c, rows[j] + c);
  }
  for (int j = n; j < n8; ++j) std::fill(rows[j], rows[j] + 2 * D, 0.f);
  alignas(64) float s[BLOCK];
  for (int g = 0; g < P.G; ++g) {
    const int hg = h * P.G + g;
    const float* qg = it.q + hg * D;
    __m512 qv[NV];
    for (int c = 0; c < NV; ++c) qv[c] = _mm512_loadu_ps(qg + 16 * c);
    for (int jb = 0; jb < n8; jb += 8) {
      __m256 a[8];
      for (int r = 0; r < 8; ++r) {
        __m512 acc = _mm512_mul_ps(qv[0], _mm512_load_ps(rows[jb + r]));
        for (int c = 1; c < NV; ++c) acc = _mm512_fmadd_ps(qv[c], _mm512_load_ps(rows[jb + r] + 16 * c), acc);
        a[r] = _mm256_add_ps(_mm512_castps512_ps256(acc),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
      }
      _mm256_store_ps(s + jb, hsum8(a));
    }
    const float alpha = softmax_block(it, hg, s, n, n8);
    float* ag = it.acc + hg * D;
    const __m512 av = _mm512_set1_ps(alpha);
    __m512 o[NV];
    for (int c = 0; c < NV; ++c) o[c] = _mm512_mul_ps(_mm512_loadu_ps(ag + 16 * c), av);
    for (int j = 0; j < n; ++j) {
      const __m512 pj = _mm512_set1_ps(s[j]);
      for (int c = 0; c < NV; ++c) o[c] = _mm512_fmadd_ps(pj, _mm512_load_ps(rows[j] + D + 16 * c), o[c]);
    }
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(ag + 16 * c, o[c]);
    if (P.p) keep_block(P, it, hg, b0, s, n, it.m[hg]);
  }
}
#endif

// Work item (qi, sp): entries [sp * split_rows, min(len, (sp + 1) * split_rows)) of query qi's
// row, every kv head, blocks outer and heads inner.
template <typename T>
void attend(const Problem& P, const T* kv, int64_t qi, int sp) {
  const int H = P.H, D = P.D;
  const int64_t len = P.q_len[qi];
  const int64_t j0 = sp * P.split_rows;
  const int64_t j1 = std::min<int64_t>(len, j0 + P.split_rows);
  thread_local std::vector<float> q, rows;  // per thread, grown once
  q.resize(size_t(H) * D);
  rows.resize(size_t(BLOCK) * 2 * D + 16);
  float* rows64 = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(rows.data()) + 63) & ~uintptr_t(63));
  for (int h = 0; h < P.Hkv; ++h) load_query(P, qi, h, q.data() + size_t(h) * P.G * D);
  const int64_t base = item_base(P, qi, sp);
  const Item it{q.data(), P.part_m + base, P.part_l + base, P.part_acc + base * D,
                P.table + P.q_req[qi] * P.table_stride, qi};
  std::fill(it.m, it.m + H, -std::numeric_limits<float>::infinity());
  std::fill(it.l, it.l + H, 0.f);
  std::fill(it.acc, it.acc + size_t(H) * D, 0.f);
  const bool simd = P.isa != ISA_GENERIC && (D == 64 || D == 128);
#ifdef VT_AVX2
  if (simd) {
    for (int h = 0; h < P.Hkv; ++h) prefetch_rows(P, kv, it.slots, h, j0, std::min<int64_t>(j1, j0 + BLOCK));
  }
#endif
  for (int64_t b0 = j0; b0 < j1; b0 += BLOCK) {
    const int n = int(std::min<int64_t>(BLOCK, j1 - b0));
    for (int h = 0; h < P.Hkv; ++h) {
#ifdef VT_AVX512
      if (simd && P.isa == ISA_AVX512) {
        if (D == 64) block_avx512<T, 64>(P, kv, it, h, b0, n, j1, rows64);
        else block_avx512<T, 128>(P, kv, it, h, b0, n, j1, rows64);
        continue;
      }
#endif
#ifdef VT_AVX2
      if (simd) {
        if (D == 64) block_avx2<T, 64>(P, kv, it, h, b0, n, j1, rows64);
        else block_avx2<T, 128>(P, kv, it, h, b0, n, j1, rows64);
        continue;
      }
#endif
      block_generic(P, kv, it, h, b0, n, rows64);
    }
  }
}

// Merge the splits of every (query, head) into out; add the mass of request r's queries to
// mass[r]; write lse[qi, head] = log(sum_j exp(score_j)) (scores already scaled) when lse is
// given. lse_other[qi, head] (optional) is the log-denominator of keys attended outside this
// call: the mass is then the probability under the joint softmax over both key sets (out and
// lse stay those of this call's keys alone). A query attending nothing gets a zero output
// and lse -inf. Called inside a parallel region: its loop over requests is shared out.
void finalize(const Problem& P, const int64_t* req_qstart, int64_t num_reqs, const Rows& out,
              float* mass, int64_t mass_stride, float* lse, int64_t lse_stride,
              const float* lse_other, int64_t other_stride) {
  const int D = P.D;
#pragma omp for schedule(dynamic, 1)
  for (int64_t r = 0; r < num_reqs; ++r) {
    alignas(32) float o[MAX_HEAD];
    for (int64_t qi = req_qstart[r]; qi < req_qstart[r + 1]; ++qi) {
      const int64_t len = P.q_len[qi];
      const int64_t tok = token_of(P, qi);
      if (len <= 0) {
        std::fill(o, o + D, 0.f);
        for (int64_t head = 0; head < P.H; ++head) {
          store_row(out, tok, head, o, D);
          if (lse) lse[tok * lse_stride + head] = -std::numeric_limits<float>::infinity();
        }
        continue;
      }
      const int used = int((len + P.split_rows - 1) / P.split_rows);
      {
        for (int64_t head = 0; head < P.H; ++head) {
          float M = -std::numeric_limits<float>::infinity();
          for (int sp = 0; sp < used; ++sp) M = std::max(M, P.part_m[item_base(P, qi, sp) + head]);
          float L = 0.f;
          for (int sp = 0; sp < used; ++sp) {
            const int64_t i = item_base(P, qi, sp) + head;
            L += P.part_l[i] * std::exp(P.part_m[i] - M);
          }
          const float inv = 1.f / L;
          std::fill(o, o + D, 0.f);
          for (int sp = 0; sp < used; ++sp) {
            const int64_t i = item_base(P, qi, sp) + head;
            const float w = std::exp(P.part_m[i] - M) * inv;
            const float* a = P.part_acc + i * D;
            for (int d = 0; d < D; ++d) o[d] += w * a[d];
          }
          store_row(out, tok, head, o, D);
          if (lse) lse[tok * lse_stride + head] = M + std::log(L);
          if (mass) {
            const int64_t base = qi * P.H + head;
            const float* p = P.p + base * P.max_len;
            const float* bm = P.bmax + base * P.num_blocks;
            float* mr = mass + r * mass_stride;
            // Joint denominator with the outside keys: L + exp(lse_other - M).
            const float minv = lse_other ? 1.f / (L + std::exp(lse_other[tok * other_stride + head] - M)) : inv;
            for (int64_t b0 = 0; b0 < len; b0 += BLOCK) {
              const float w = std::exp(bm[b0 / BLOCK] - M) * minv;
              const int64_t b1 = std::min<int64_t>(len, b0 + BLOCK);
              for (int64_t j = b0; j < b1; ++j) mr[j] += w * p[j];
            }
          }
        }
      }
    }
  }
}

// Rows per kv split: a (query, kv head) item is split only when the items are too few to keep
// every thread busy (two items per thread), and then into pieces of at least 4 blocks.
int64_t auto_split_rows(int64_t num_items, int64_t max_len) {
  const int64_t threads = std::max(1, omp_get_max_threads());
  const int64_t whole = std::max<int64_t>(BLOCK, (max_len + BLOCK - 1) / BLOCK * BLOCK);
  if (num_items >= 2 * threads) return whole;
  const int64_t want = (2 * threads + std::max<int64_t>(num_items, 1) - 1) / std::max<int64_t>(num_items, 1);
  const int64_t rows = std::max<int64_t>(4 * BLOCK, (max_len + want - 1) / want);
  return std::min(whole, (rows + BLOCK - 1) / BLOCK * BLOCK);
}

int widest_isa() {
#if defined(VT_AVX512)
  return ISA_AVX512;
#elif defined(VT_AVX2)
  return ISA_AVX2;
#else
  return ISA_GENERIC;
#endif
}

bool float_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

Rows rows_of(const at::Tensor& t) { return Rows{t.data_ptr(), t.scalar_type(), t.stride(0), t.stride(1)}; }

}  // namespace

// A "query" qi is one token of one request. query: [num_tokens, H, D] float32 / bfloat16 /
// float16, unit last stride, any other strides (unscaled: `scale` is applied here); kv_rows:
// [slots, Hkv, 2D] of the same dtypes, unit last stride; req_to_token: int32 [rows, >= max
// len], unit last stride. q_tok: int64 [num_q] token (row of query / out / lse / lse_other)
// of each query, or empty (num_q = num_tokens, query qi is token qi); q_len: int64 [>= num_q]
// entries attended by each query; q_req: int64 [num_q] table row of each query and
// req_qstart: int64 [num_reqs + 1] (queries of request r are req_qstart[r]..req_qstart[r+1],
// in that order, and their q_req is r; a request may have none) -- or both empty for a decode
// batch (query i is request i's only query, table row i). out: like query, written only at the
// queries' tokens; mass: float32 [num_reqs, >= max len], unit last stride, added to, or empty;
// lse: float32 [num_tokens, H], unit last stride, written (natural log of the softmax
// denominator over the attended keys, scale included; -inf for a query attending nothing) or
// empty; lse_other: float32 [num_tokens, H], unit last stride, log-denominator of keys outside
// this call that the mass is normalised against jointly (-inf: none), or empty; split_rows:
// rows per kv split, a multiple of BLOCK, or 0 to choose from the thread count; isa: the
// block loops' instruction set, 0 for the widest compiled in (ISA_GENERIC = 1, ISA_AVX2 = 2,
// ISA_AVX512 = 3; tests compare them).
void token_attention(at::Tensor query, at::Tensor kv_rows, at::Tensor req_to_token, at::Tensor q_tok,
                     at::Tensor q_req, at::Tensor q_len, at::Tensor req_qstart,
                     at::Tensor out, at::Tensor mass, at::Tensor lse, at::Tensor lse_other,
                     double scale, int64_t split_rows, int64_t isa) {
  TORCH_CHECK(query.dim() == 3 && query.stride(2) == 1 && float_dtype(query.scalar_type()),
              "query: [num_q, H, D] float32/bfloat16/float16 with unit last stride");
  TORCH_CHECK(out.sizes() == query.sizes() && out.stride(2) == 1 && float_dtype(out.scalar_type()),
              "out: like query, float32/bfloat16/float16 with unit last stride");
  TORCH_CHECK(req_to_token.dtype() == at::kInt && req_to_token.dim() == 2 && req_to_token.stride(1) == 1,
              "req_to_token: int32 rows with unit last stride");
  TORCH_CHECK(kv_rows.dim() == 3 && kv_rows.stride(2) == 1, "kv_rows: [slots, kv_heads, 2*D], unit last stride");
  const int64_t num_tokens = query.size(0);
  const bool all_tokens = q_tok.numel() == 0;
  if (!all_tokens)
    TORCH_CHECK(q_tok.dtype() == at::kLong && q_tok.dim() == 1 && q_tok.is_contiguous(), "q_tok: contiguous int64");
  const int64_t num_q = all_tokens ? num_tokens : q_tok.size(0);
  const int H = int(query.size(1)), D = int(query.size(2));
  const int Hkv = int(kv_rows.size(1));
  TORCH_CHECK(kv_rows.size(2) == 2 * D && H % Hkv == 0 && D <= MAX_HEAD, "shapes");
  TORCH_CHECK(split_rows >= 0 && split_rows % BLOCK == 0, "split_rows must be 0 or a multiple of ", BLOCK);
  TORCH_CHECK(isa >= 0 && isa <= widest_isa(), "isa: 0 (widest compiled in) up to ", widest_isa(), ", not ", isa);
  const auto dtype = kv_rows.scalar_type();
  TORCH_CHECK(float_dtype(dtype), "kv_rows: bfloat16, float16 or float32, not ", dtype);
  TORCH_CHECK(q_len.dtype() == at::kLong && q_len.dim() == 1 && q_len.stride(0) == 1 && q_len.size(0) >= num_q,
              "q_len: contiguous int64 [>= num_q]");
  const bool decode = q_req.numel() == 0 && req_qstart.numel() == 0;
  std::vector<int64_t> identity;
  if (decode) {
    identity.resize(num_q + 1);
    for (int64_t i = 0; i <= num_q; ++i) identity[i] = i;
  } else {
    TORCH_CHECK(q_req.dtype() == at::kLong && q_req.is_contiguous() && q_req.numel() == num_q &&
                    req_qstart.dtype() == at::kLong && req_qstart.is_contiguous() && req_qstart.numel() >= 1,
                "q_req: contiguous int64 [num_q], req_qstart: contiguous int64 [num_reqs + 1]");
  }
  const int64_t num_reqs = decode ? num_q : req_qstart.size(0) - 1;
  const int64_t* qstart = decode ? identity.data() : req_qstart.data_ptr<int64_t>();
  if (num_q == 0) return;

  Problem P{};
  P.q = rows_of(query);
  P.scale = float(scale);
  P.isa = isa ? int(isa) : widest_isa();
  P.q_tok = all_tokens ? nullptr : q_tok.data_ptr<int64_t>();
  P.table = req_to_token.data_ptr<int32_t>();
  P.table_stride = req_to_token.stride(0);
  P.q_req = decode ? identity.data() : q_req.data_ptr<int64_t>();
  P.q_len = q_len.data_ptr<int64_t>();
  P.row_stride = kv_rows.stride(0);
  P.head_stride = kv_rows.stride(1);
  P.H = H; P.Hkv = Hkv; P.G = H / Hkv; P.D = D;
  int64_t max_len = 0;
  for (int64_t i = 0; i < num_q; ++i) max_len = std::max(max_len, P.q_len[i]);
  TORCH_CHECK(max_len <= req_to_token.size(1), "req_to_token: ", req_to_token.size(1),
              " columns, a query attends ", max_len, " entries");
  P.split_rows = split_rows ? split_rows : auto_split_rows(num_q, max_len);
  P.splits = int(std::max<int64_t>(1, (max_len + P.split_rows - 1) / P.split_rows));
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  auto part_m = at::empty({num_q * P.splits * H}, f32);
  auto part_l = at::empty({num_q * P.splits * H}, f32);
  auto part_acc = at::empty({num_q * P.splits * H * D}, f32);
  P.part_m = part_m.data_ptr<float>();
  P.part_l = part_l.data_ptr<float>();
  P.part_acc = part_acc.data_ptr<float>();
  const bool with_mass = mass.numel() > 0;
  at::Tensor p, bmax;
  P.max_len = max_len;
  P.num_blocks = (max_len + BLOCK - 1) / BLOCK;
  if (with_mass) {
    TORCH_CHECK(mass.dtype() == at::kFloat && mass.dim() == 2 && mass.stride(1) == 1 && mass.size(0) >= num_reqs &&
                    mass.size(1) >= max_len, "mass: float32 [num_reqs, >= max len], unit last stride");
    p = at::empty({num_q * H * max_len}, f32);
    bmax = at::empty({num_q * H * P.num_blocks}, f32);
    P.p = p.data_ptr<float>();
    P.bmax = bmax.data_ptr<float>();
  }

  const bool with_lse = lse.numel() > 0, with_other = lse_other.numel() > 0;
  if (with_lse)
    TORCH_CHECK(lse.dtype() == at::kFloat && lse.dim() == 2 && lse.size(0) == num_tokens && lse.size(1) == H &&
                    lse.stride(1) == 1, "lse: float32 [num_tokens, H], unit last stride");
  if (with_other)
    TORCH_CHECK(lse_other.dtype() == at::kFloat && lse_other.dim() == 2 && lse_other.size(0) == num_tokens &&
                    lse_other.size(1) == H && lse_other.stride(1) == 1,
                "lse_other: float32 [num_tokens, H], unit last stride");

  const int64_t tasks = num_q * P.splits;
  const void* kv = kv_rows.data_ptr();
  const Rows out_rows = rows_of(out);
  float* mass_ptr = with_mass ? mass.data_ptr<float>() : nullptr;
  float* lse_ptr = with_lse ? lse.data_ptr<float>() : nullptr;
  const float* other_ptr = with_other ? lse_other.data_ptr<float>() : nullptr;
  // One parallel region: the items, then (after the implicit barrier) the merge.
#pragma omp parallel
  {
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int sp = int(t % P.splits);
      const int64_t qi = t / P.splits;
      if (int64_t(sp) * P.split_rows >= P.q_len[qi]) continue;
      if (dtype == at::kBFloat16) attend(P, static_cast<const at::BFloat16*>(kv), qi, sp);
      else if (dtype == at::kHalf) attend(P, static_cast<const at::Half*>(kv), qi, sp);
      else attend(P, static_cast<const float*>(kv), qi, sp);
    }
    finalize(P, qstart, num_reqs, out_rows, mass_ptr, with_mass ? mass.stride(0) : 0,
             lse_ptr, with_lse ? lse.stride(0) : 0, other_ptr, with_other ? lse_other.stride(0) : 0);
  }
}

// Relocation (vtoken/plugin/relocation.py): copy the K|V row of every layer from slot
// src[i] to slot dst[i]. `pool` is layer 0's rows; layer l starts `layer_stride` bytes after
// it (vLLM allocates all layers in one buffer). All sources are read into a scratch buffer
// before any destination is written, so a destination may be a slot another move vacates.
void relocate(at::Tensor pool, int64_t num_layers, int64_t layer_stride, int64_t row_bytes,
              at::Tensor src, at::Tensor dst) {
  TORCH_CHECK(src.scalar_type() == at::kLong && dst.scalar_type() == at::kLong && src.numel() == dst.numel(),
              "relocate: src and dst must be int64 of equal length");
  const int64_t n = src.numel();
  if (n == 0) return;
  auto* base = static_cast<uint8_t*>(pool.data_ptr());
  const int64_t* s = src.data_ptr<int64_t>();
  const int64_t* d = dst.data_ptr<int64_t>();
  // Layers are independent: each thread gathers one layer's rows into its own scratch (a few
  // MB, reused, not zero-filled) and scatters them before the next layer.
#pragma omp parallel
  {
    std::unique_ptr<uint8_t[]> scratch(new uint8_t[static_cast<size_t>(n * row_bytes)]);
#pragma omp for schedule(static)
    for (int64_t l = 0; l < num_layers; ++l) {
      uint8_t* layer = base + l * layer_stride;
      for (int64_t i = 0; i < n; ++i) std::memcpy(scratch.get() + i * row_bytes, layer + s[i] * row_bytes, row_bytes);
      for (int64_t i = 0; i < n; ++i) std::memcpy(layer + d[i] * row_bytes, scratch.get() + i * row_bytes, row_bytes);
    }
  }
}

// KV write (vtoken/plugin/attention.py): token i's K and V of every KV head go to row
// slots[i] of one layer's pool, K in the first half of each head's row, V in the second; a
// negative slot is padding and is skipped. key / value are [n, H, D] with unit stride in D
// (slices of the QKV projection), kv_rows [num_slots, H, 2D]; all three of one dtype.
void write_rows(at::Tensor kv_rows, at::Tensor key, at::Tensor value, at::Tensor slots) {
  TORCH_CHECK(key.dim() == 3 && value.dim() == 3 && kv_rows.dim() == 3, "write_rows: 3-D tensors expected");
  TORCH_CHECK(key.scalar_type() == kv_rows.scalar_type() && value.scalar_type() == kv_rows.scalar_type(),
              "write_rows: key, value and kv_rows must share one dtype");
  TORCH_CHECK(key.stride(2) == 1 && value.stride(2) == 1 && kv_rows.stride(2) == 1,
              "write_rows: the head dimension must be contiguous");
  TORCH_CHECK(slots.scalar_type() == at::kLong || slots.scalar_type() == at::kInt, "write_rows: int slots");
  const int64_t n = slots.numel(), heads = key.size(1), d = key.size(2);
  TORCH_CHECK(key.size(0) >= n && value.size(0) >= n && value.size(1) == heads && value.size(2) == d &&
                  kv_rows.size(1) == heads && kv_rows.size(2) == 2 * d,
              "write_rows: shapes do not match");
  const int64_t es = kv_rows.element_size(), num_slots = kv_rows.size(0), part = d * es;
  auto* dst = static_cast<uint8_t*>(kv_rows.data_ptr());
  const auto* k = static_cast<const uint8_t*>(key.data_ptr());
  const auto* v = static_cast<const uint8_t*>(value.data_ptr());
  const int64_t rs0 = kv_rows.stride(0) * es, rs1 = kv_rows.stride(1) * es;
  const int64_t ks0 = key.stride(0) * es, ks1 = key.stride(1) * es, vs0 = value.stride(0) * es, vs1 = value.stride(1) * es;
  const bool wide = slots.scalar_type() == at::kLong;
  const int64_t* s64 = wide ? slots.data_ptr<int64_t>() : nullptr;
  const int32_t* s32 = wide ? nullptr : slots.data_ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = wide ? s64[i] : s32[i];
    if (slot < 0) continue;
    TORCH_CHECK(slot < num_slots, "write_rows: slot ", slot, " outside the pool of ", num_slots, " slots");
    for (int64_t h = 0; h < heads; ++h) {
      uint8_t* row = dst + slot * rs0 + h * rs1;
      std::memcpy(row, k + i * ks0 + h * ks1, part);
      std::memcpy(row + part, v + i * vs0 + h * vs1, part);
    }
  }
}

TORCH_LIBRARY(vtoken_token_attention, m) {
  m.def("token_attention(Tensor query, Tensor kv_rows, Tensor req_to_token, Tensor q_tok, Tensor q_req, "
        "Tensor q_len, "
        "Tensor req_qstart, Tensor(a!) out, Tensor(b!) mass, Tensor(c!) lse, Tensor lse_other, "
        "float scale, int split_rows, int isa) -> ()");
  m.def("relocate(Tensor(a!) pool, int num_layers, int layer_stride, int row_bytes, Tensor src, Tensor dst) -> ()");
  m.def("write_rows(Tensor(a!) kv_rows, Tensor key, Tensor value, Tensor slots) -> ()");
}

TORCH_LIBRARY_IMPL(vtoken_token_attention, CPU, m) {
  m.impl("token_attention", &token_attention);
  m.impl("relocate", &relocate);
  m.impl("write_rows", &write_rows);
}
