// Token-view attention on the CPU: each query attends a list of KV slots of a token-major
// pool kv_rows[slot, kv_head, 2 * head_size] (K | V). Written for vtoken; compiled lazily by
// vtoken/plugin/token_attention.py with torch.utils.cpp_extension.
//
// One "query" is one token of one request that attends the first `len` entries of that
// request's token-view row (a decode token attends the whole row; extend token i attends
// prefix + i + 1 entries). Work item = (query, kv_head, kv split); within it, the GQA group of
// query heads sharing the kv head is processed together, so each K/V row is converted to
// float once per group. Softmax is online (per block of BLOCK rows) and all arithmetic is
// float32. Split partials are merged in a second pass, which also finalizes the optional
// attention mass (probabilities summed over heads and over a request's queries) and the
// optional log-sum-exp of every (query, head) (for merging with attention over other keys).

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
constexpr int MAX_GROUP = 16;

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

// Sums of each of a[0..7] as one vector.
inline __m256 hsum8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#endif

struct Problem {
  const float* q;          // [num_q, H, D], already scaled
  const int32_t* table;    // req_to_token
  int64_t table_stride;
  const int64_t* q_req;    // [num_q] request (table row) of each query
  const int64_t* q_len;    // [num_q] entries attended
  int64_t row_stride, head_stride;
  int H, Hkv, G, D;
  int splits;              // kv splits per (query, kv_head)
  int64_t split_rows;      // rows per split (multiple of BLOCK)
  // partials: [num_q, Hkv, splits, G] m and l, [.., G, D] acc
  float* part_m;
  float* part_l;
  float* part_acc;
  // mass scratch (nullptr when no mass): p[num_q, Hkv, G, max_len] and block maxima
  float* p;
  float* bmax;             // [num_q, Hkv, G, num_blocks]
  int64_t max_len, num_blocks;
};

template <typename T>
void attend_split(const Problem& P, const T* kv, int64_t qi, int h, int sp) {
  const int G = P.G, D = P.D;
  const int64_t len = P.q_len[qi];
  const int64_t j0 = sp * P.split_rows;
  const int64_t j1 = std::min<int64_t>(len, j0 + P.split_rows);
  const int32_t* slots = P.table + P.q_req[qi] * P.table_stride;
  const float* q = P.q + (qi * P.H + int64_t(h) * G) * D;
  const int64_t part = (qi * P.Hkv + h) * P.splits + sp;
  float* acc = P.part_acc + part * G * D;
  float m[MAX_GROUP], l[MAX_GROUP];
  for (int g = 0; g < G; ++g) { m[g] = -std::numeric_limits<float>::infinity(); l[g] = 0.f; }
  std::fill(acc, acc + G * D, 0.f);

  std::vector<float> rows(size_t(BLOCK) * 2 * D);
  float s[MAX_GROUP][BLOCK];
  for (int64_t b0 = j0; b0 < j1; b0 += BLOCK) {
    const int n = int(std::min<int64_t>(BLOCK, j1 - b0));
    for (int j = 0; j < n; ++j) {
      const T* src = kv + int64_t(slots[b0 + j]) * P.row_stride + int64_t(h) * P.head_stride;
      to_float(src, rows.data() + size_t(j) * 2 * D, 2 * D);
    }
    for (int g = 0; g < G; ++g) {
      const float* qg = q + g * D;
      float bm = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < n; ++j) {
        const float* k = rows.data() + size_t(j) * 2 * D;
        float dot = 0.f;
        for (int d = 0; d < D; ++d) dot += qg[d] * k[d];
        s[g][j] = dot;
        bm = std::max(bm, dot);
      }
      const float m_new = std::max(m[g], bm);
      const float alpha = std::exp(m[g] - m_new);  // 0 on the first block
      m[g] = m_new;
      float sum = 0.f;
      for (int j = 0; j < n; ++j) {
        s[g][j] = std::exp(s[g][j] - m_new);
        sum += s[g][j];
      }
      l[g] = l[g] * alpha + sum;
      float* ag = acc + g * D;
      for (int d = 0; d < D; ++d) ag[d] *= alpha;
      for (int j = 0; j < n; ++j) {
        const float pj = s[g][j];
        const float* v = rows.data() + size_t(j) * 2 * D + D;
        for (int d = 0; d < D; ++d) ag[d] += pj * v[d];
      }
      if (P.p) {
        const int64_t base = (qi * P.Hkv + h) * G + g;
        std::memcpy(P.p + base * P.max_len + b0, s[g], n * sizeof(float));
        P.bmax[base * P.num_blocks + b0 / BLOCK] = m_new;
      }
    }
  }
  float* pm = P.part_m + part * G;
  float* pl = P.part_l + part * G;
  for (int g = 0; g < G; ++g) { pm[g] = m[g]; pl[g] = l[g]; }
}

#ifdef VT_AVX2
template <typename T>
inline void prefetch_rows(const Problem& P, const T* kv, const int32_t* slots, int h, int64_t a, int64_t b) {
  const int64_t bytes = 2 * int64_t(P.D) * sizeof(T);
  for (int64_t j = a; j < b; ++j) {
    const char* row = reinterpret_cast<const char*>(kv + int64_t(slots[j]) * P.row_stride + int64_t(h) * P.head_stride);
    for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(row + off, _MM_HINT_T0);
  }
}
#endif

#ifdef VT_AVX2
// attend_split for head size D (a multiple of 8), vectorized with AVX2/FMA.
template <typename T, int D>
void attend_split_avx2(const Problem& P, const T* kv, int64_t qi, int h, int sp) {
  constexpr int NV = D / 8;        // vectors per half row
  constexpr int CH = NV < 8 ? NV : 8;  // accumulator vectors kept in registers
  const int G = P.G;
  const int64_t len = P.q_len[qi];
  const int64_t j0 = sp * P.split_rows;
  const int64_t j1 = std::min<int64_t>(len, j0 + P.split_rows);
  const int32_t* slots = P.table + P.q_req[qi] * P.table_stride;
  const float* q = P.q + (qi * P.H + int64_t(h) * G) * D;
  const int64_t part = (qi * P.Hkv + h) * P.splits + sp;
  float* acc = P.part_acc + part * G * D;
  float m[MAX_GROUP], l[MAX_GROUP];
  for (int g = 0; g < G; ++g) { m[g] = -std::numeric_limits<float>::infinity(); l[g] = 0.f; }
  std::fill(acc, acc + G * D, 0.f);

  alignas(32) float rows[BLOCK][2 * D];
  alignas(32) float s[BLOCK];
  for (int64_t b0 = j0; b0 < j1; b0 += BLOCK) {
    const int n = int(std::min<int64_t>(BLOCK, j1 - b0));
    const int n8 = (n + 7) & ~7;
    if (b0 == j0) prefetch_rows(P, kv, slots, h, b0, std::min<int64_t>(j1, b0 + BLOCK));
    // Next block's rows are fetched while this one is computed (rows are scattered).
    prefetch_rows(P, kv, slots, h, b0 + BLOCK, std::min<int64_t>(j1, b0 + 2 * BLOCK));
    for (int j = 0; j < n; ++j) {
      const T* src = kv + int64_t(slots[b0 + j]) * P.row_stride + int64_t(h) * P.head_stride;
      for (int c = 0; c < 2 * D; c += 8) cvt8(src + c, rows[j] + c);
    }
    for (int j = n; j < n8; ++j) std::fill(rows[j], rows[j] + 2 * D, 0.f);
    for (int g = 0; g < G; ++g) {
      const float* qg = q + g * D;
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
      float bm = s[0];
      for (int j = 1; j < n; ++j) bm = std::max(bm, s[j]);
      const float m_new = std::max(m[g], bm);
      const float alpha = m[g] == -std::numeric_limits<float>::infinity() ? 0.f : std::exp(m[g] - m_new);
      m[g] = m_new;
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
      l[g] = l[g] * alpha + sum;
      float* ag = acc + g * D;
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
      if (P.p) {
        const int64_t base = (qi * P.Hkv + h) * G + g;
        std::memcpy(P.p + base * P.max_len + b0, s, n * sizeof(float));
        P.bmax[base * P.num_blocks + b0 / BLOCK] = m_new;
      }
    }
  }
  float* pm = P.part_m + part * G;
  float* pl = P.part_l + part * G;
  for (int g = 0; g < G; ++g) { pm[g] = m[g]; pl[g] = l[g]; }
}
#endif

template <typename T>
void attend(const Problem& P, const T* kv, int64_t qi, int h, int sp) {
#ifdef VT_AVX2
  if (P.D == 64) return attend_split_avx2<T, 64>(P, kv, qi, h, sp);
  if (P.D == 128) return attend_split_avx2<T, 128>(P, kv, qi, h, sp);
#endif
  attend_split(P, kv, qi, h, sp);
}

// Merge the splits of every (query, head); add the mass of request r's queries to mass[r];
// write lse[qi, head] = log(sum_j exp(score_j)) (scores already scaled) when lse is given.
// lse_other[qi, head] (optional) is the log-denominator of keys attended outside this call:
// the mass is then the probability under the joint softmax over both key sets (out and lse
// stay those of this call's keys alone).
void finalize(const Problem& P, const int64_t* req_qstart, int64_t num_reqs, float* out,
              float* mass, int64_t mass_stride, float* lse, const float* lse_other) {
  const int G = P.G, D = P.D;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t r = 0; r < num_reqs; ++r) {
    for (int64_t qi = req_qstart[r]; qi < req_qstart[r + 1]; ++qi) {
      const int64_t len = P.q_len[qi];
      if (len <= 0) {
        if (lse) std::fill(lse + qi * P.H, lse + (qi + 1) * P.H, -std::numeric_limits<float>::infinity());
        continue;
      }
      const int used = int((len + P.split_rows - 1) / P.split_rows);
      for (int h = 0; h < P.Hkv; ++h) {
        for (int g = 0; g < G; ++g) {
          const int64_t part0 = (qi * P.Hkv + h) * P.splits;
          float M = -std::numeric_limits<float>::infinity();
          for (int sp = 0; sp < used; ++sp) M = std::max(M, P.part_m[(part0 + sp) * G + g]);
          float L = 0.f;
          for (int sp = 0; sp < used; ++sp)
            L += P.part_l[(part0 + sp) * G + g] * std::exp(P.part_m[(part0 + sp) * G + g] - M);
          const float inv = 1.f / L;
          float* o = out + (qi * P.H + int64_t(h) * G + g) * D;
          std::fill(o, o + D, 0.f);
          for (int sp = 0; sp < used; ++sp) {
            const float w = std::exp(P.part_m[(part0 + sp) * G + g] - M) * inv;
            const float* a = P.part_acc + ((part0 + sp) * G + g) * D;
            for (int d = 0; d < D; ++d) o[d] += w * a[d];
          }
          const int64_t head = qi * P.H + int64_t(h) * G + g;
          if (lse) lse[head] = M + std::log(L);
          if (mass) {
            const int64_t base = (qi * P.Hkv + h) * G + g;
            const float* p = P.p + base * P.max_len;
            const float* bm = P.bmax + base * P.num_blocks;
            float* mr = mass + r * mass_stride;
            // Joint denominator with the outside keys: L + exp(lse_other - M).
            const float minv = lse_other ? 1.f / (L + std::exp(lse_other[head] - M)) : inv;
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

}  // namespace

// query: float32 [num_q, H, D] (scaled by the caller); kv_rows: [slots, Hkv, 2D] float/bf16/fp16
// with unit last stride; req_to_token: int32 [rows, >= max len]; q_req/q_len: int64 [num_q];
// req_qstart: int64 [num_reqs + 1] (queries of request r are req_qstart[r]..req_qstart[r+1],
// and q_req of those is r); out: float32 [num_q, H, D]; mass: float32 [num_reqs, >= max len]
// or an empty tensor; lse: float32 [num_q, H] written (natural log of the softmax
// denominator over the attended keys, scale included; -inf for a query attending nothing) or
// empty; lse_other: float32 [num_q, H] log-denominator of keys outside this call that the
// mass is normalised against jointly (-inf: none) or empty.
void token_attention(at::Tensor query, at::Tensor kv_rows, at::Tensor req_to_token,
                     at::Tensor q_req, at::Tensor q_len, at::Tensor req_qstart,
                     at::Tensor out, at::Tensor mass, at::Tensor lse, at::Tensor lse_other,
                     int64_t split_rows) {
  TORCH_CHECK(query.dtype() == at::kFloat && query.is_contiguous(), "query: contiguous float32");
  TORCH_CHECK(out.dtype() == at::kFloat && out.is_contiguous(), "out: contiguous float32");
  TORCH_CHECK(req_to_token.dtype() == at::kInt && req_to_token.stride(1) == 1, "req_to_token: int32 rows");
  TORCH_CHECK(kv_rows.dim() == 3 && kv_rows.stride(2) == 1, "kv_rows: [slots, kv_heads, 2*D], unit last stride");
  TORCH_CHECK(q_req.is_contiguous() && q_len.is_contiguous() && req_qstart.is_contiguous(), "index tensors");
  const int64_t num_q = query.size(0);
  const int H = int(query.size(1)), D = int(query.size(2));
  const int Hkv = int(kv_rows.size(1));
  TORCH_CHECK(kv_rows.size(2) == 2 * D && H % Hkv == 0 && H / Hkv <= MAX_GROUP, "shapes");
  TORCH_CHECK(split_rows > 0 && split_rows % BLOCK == 0, "split_rows must be a multiple of ", BLOCK);
  const auto dtype = kv_rows.scalar_type();
  TORCH_CHECK(dtype == at::kBFloat16 || dtype == at::kHalf || dtype == at::kFloat,
              "kv_rows: bfloat16, float16 or float32, not ", dtype);
  const int64_t num_reqs = req_qstart.size(0) - 1;
  if (num_q == 0) return;

  Problem P{};
  P.q = query.data_ptr<float>();
  P.table = req_to_token.data_ptr<int32_t>();
  P.table_stride = req_to_token.stride(0);
  P.q_req = q_req.data_ptr<int64_t>();
  P.q_len = q_len.data_ptr<int64_t>();
  P.row_stride = kv_rows.stride(0);
  P.head_stride = kv_rows.stride(1);
  P.H = H; P.Hkv = Hkv; P.G = H / Hkv; P.D = D;
  int64_t max_len = 0;
  for (int64_t i = 0; i < num_q; ++i) max_len = std::max(max_len, P.q_len[i]);
  P.split_rows = split_rows;
  P.splits = int(std::max<int64_t>(1, (max_len + split_rows - 1) / split_rows));
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  auto part_m = at::empty({num_q * Hkv * P.splits * P.G}, f32);
  auto part_l = at::empty({num_q * Hkv * P.splits * P.G}, f32);
  auto part_acc = at::empty({num_q * Hkv * P.splits * P.G * D}, f32);
  P.part_m = part_m.data_ptr<float>();
  P.part_l = part_l.data_ptr<float>();
  P.part_acc = part_acc.data_ptr<float>();
  const bool with_mass = mass.numel() > 0;
  at::Tensor p, bmax;
  P.max_len = max_len;
  P.num_blocks = (max_len + BLOCK - 1) / BLOCK;
  if (with_mass) {
    TORCH_CHECK(mass.dtype() == at::kFloat && mass.stride(1) == 1 && mass.size(0) >= num_reqs &&
                    mass.size(1) >= max_len, "mass: float32 [num_reqs, >= max len]");
    p = at::empty({num_q * H * max_len}, f32);
    bmax = at::empty({num_q * H * P.num_blocks}, f32);
    P.p = p.data_ptr<float>();
    P.bmax = bmax.data_ptr<float>();
  }

  const bool with_lse = lse.numel() > 0, with_other = lse_other.numel() > 0;
  if (with_lse)
    TORCH_CHECK(lse.dtype() == at::kFloat && lse.is_contiguous() && lse.numel() == num_q * H,
                "lse: contiguous float32 [num_q, H]");
  if (with_other)
    TORCH_CHECK(lse_other.dtype() == at::kFloat && lse_other.is_contiguous() && lse_other.numel() == num_q * H,
                "lse_other: contiguous float32 [num_q, H]");

  const int64_t tasks = num_q * Hkv * P.splits;
  const void* kv = kv_rows.data_ptr();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int sp = int(t % P.splits);
    const int h = int((t / P.splits) % Hkv);
    const int64_t qi = t / (int64_t(P.splits) * Hkv);
    if (int64_t(sp) * split_rows >= P.q_len[qi]) continue;
    if (dtype == at::kBFloat16) attend(P, static_cast<const at::BFloat16*>(kv), qi, h, sp);
    else if (dtype == at::kHalf) attend(P, static_cast<const at::Half*>(kv), qi, h, sp);
    else attend(P, static_cast<const float*>(kv), qi, h, sp);
  }
  finalize(P, req_qstart.data_ptr<int64_t>(), num_reqs, out.data_ptr<float>(),
           with_mass ? mass.data_ptr<float>() : nullptr, with_mass ? mass.stride(0) : 0,
           with_lse ? lse.data_ptr<float>() : nullptr, with_other ? lse_other.data_ptr<float>() : nullptr);
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

TORCH_LIBRARY(vtoken_token_attention, m) {
  m.def("token_attention(Tensor query, Tensor kv_rows, Tensor req_to_token, Tensor q_req, Tensor q_len, "
        "Tensor req_qstart, Tensor(a!) out, Tensor(b!) mass, Tensor(c!) lse, Tensor lse_other, "
        "int split_rows) -> ()");
  m.def("relocate(Tensor(a!) pool, int num_layers, int layer_stride, int row_bytes, Tensor src, Tensor dst) -> ()");
}

TORCH_LIBRARY_IMPL(vtoken_token_attention, CPU, m) {
  m.impl("token_attention", &token_attention);
  m.impl("relocate", &relocate);
}
