// paged_decode (ops.cpp) for bf16 caches on a CPU with AVX512_BF16: the same attention, read
// from the cache in place, with both products by `vdpbf16ps` (two bf16 products added into each
// fp32 lane) straight from the bf16 rows, no widening:
//
// - scores: each position's key row dotted with a query head in head_dim / 32 instructions,
//   sixteen positions' dot vectors summed into one vector of sixteen scores by a transpose tree
//   (sum16: 45 instructions, against 16 horizontal sums of 8 each);
// - softmax in fp32 (vec.h's exp512), its numerators rounded to bf16 for the weighted sum of
//   the values, as CPU SDPA's flash kernel and the causal prefill (prefill.cpp) do;
// - values: two positions' rows interleaved (each lane a pair of positions' value in one dim)
//   and weighted by the pair of their numerators in one instruction; sums in fp32, the output
//   divided by the fp32 total.
//
// Jobs as ops.cpp's kernel: a sequence (all its kv heads) when there are sequences enough for
// every thread, else a (sequence, kv head) pair.

#include "vec.h"

#if defined(__AVX512BF16__)

namespace llmperf_cpu {

namespace {

// Lane i of the result: the sum of a[i]'s sixteen lanes.
inline __m512 sum16(const __m512* a) {
  __m512 b[8], c[4];
  for (int i = 0; i < 8; ++i)
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  for (int j = 0; j < 4; ++j)
    c[j] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  auto lanes = [](__m512 x, __m512 y) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
  };
  return lanes(lanes(c[0], c[1]), lanes(c[2], c[3]));
}

constexpr int64_t kMaxDim = kLanes * kMaxChunks;

// The next job's cached rows, K and V position by position, fetched into the caches a few
// lines at a time while this job computes (a sequence's rows lie in blocks anywhere in the
// caches: left to the hardware, each block is a cold start).
class Ahead {
 public:
  Ahead(const uint16_t* k, const uint16_t* v, int64_t row_bytes) : k_(k), v_(v), lines_(row_bytes / 64) {}
  // The rows at `offset` (elements, -1 past the end) of positions [0, len).
  void start(const int64_t* offset, int64_t len) { offset_ = offset, len_ = len, t_ = 0, line_ = 0; }
  // The next `lines` lines: position t's K row, then its V row, then position t + 1's.
  void step(int lines) {
    for (int n = 0; n < lines && t_ < len_; ++n) {
      const uint16_t* base = line_ < lines_ ? k_ : v_;
      const int64_t line = line_ < lines_ ? line_ : line_ - lines_;
      _mm_prefetch(reinterpret_cast<const char*>(base + offset_[t_]) + line * 64, _MM_HINT_T0);
      if (++line_ == 2 * lines_) line_ = 0, ++t_;
    }
  }

 private:
  const uint16_t *k_, *v_;
  int64_t lines_, len_ = 0, t_ = 0, line_ = 0;
  const int64_t* offset_ = nullptr;
};
alignas(64) const uint16_t kZeroRow[kMaxDim] = {};  // positions past a sequence's end read this

// Query heads [0, G) of a block: out rows = their numerators (bf16, [head][position], rows
// len_pad apart) . the values, over positions [0, len), divided by their totals.
template <int W, int G, typename Row>
inline void weigh_values(const Row& row, const uint16_t* v_cache, int64_t len, const uint16_t* p, int64_t len_pad,
                         const float* totals, uint16_t* out, Ahead& ahead) {
  // Output lanes in order from the interleaved sums: lane L*4+i of `lo` is dim L*8+i, of `hi` L*8+4+i.
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  __m512 lo[G][W], hi[G][W];
  for (int g = 0; g < G; ++g)
    for (int w = 0; w < W; ++w) lo[g][w] = hi[g][w] = _mm512_setzero_ps();
  for (int64_t t = 0; t < len; t += 2) {
    const __m512i* v0 = row(v_cache, t);
    const __m512i* v1 = row(v_cache, t + 1);
    ahead.step(2);
    __m512i vlo[W], vhi[W];
    for (int w = 0; w < W; ++w) {
      const __m512i a = _mm512_loadu_si512(v0 + w), c = _mm512_loadu_si512(v1 + w);
      vlo[w] = _mm512_unpacklo_epi16(a, c);
      vhi[w] = _mm512_unpackhi_epi16(a, c);
    }
    for (int g = 0; g < G; ++g) {
      uint32_t pair;
      std::memcpy(&pair, p + g * len_pad + t, sizeof pair);
      const __m512bh pp = as_bh(_mm512_set1_epi32(static_cast<int>(pair)));
      for (int w = 0; w < W; ++w) {
        lo[g][w] = _mm512_dpbf16_ps(lo[g][w], pp, as_bh(vlo[w]));
        hi[g][w] = _mm512_dpbf16_ps(hi[g][w], pp, as_bh(vhi[w]));
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    const __m512 inv = _mm512_set1_ps(1.f / totals[g]);
    uint16_t* o = out + g * 32 * W;
    for (int w = 0; w < W; ++w) {
      const __m512 x = _mm512_mul_ps(_mm512_permutex2var_ps(lo[g][w], first, hi[g][w]), inv);
      const __m512 y = _mm512_mul_ps(_mm512_permutex2var_ps(lo[g][w], second, hi[g][w]), inv);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32 * w), (__m256i)_mm512_cvtneps_pbh(x));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32 * w + 16), (__m256i)_mm512_cvtneps_pbh(y));
    }
  }
}

// W = head_dim / 32: a row's 512-bit words.
template <int W>
void decode(const uint16_t* q, const uint16_t* k_cache, const uint16_t* v_cache, const int32_t* tables,
            const int32_t* lens, uint16_t* out, int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads,
            int64_t block_size, int64_t table_stride, int64_t max_len, float scale, int64_t q_stride) {
  constexpr int64_t head_dim = 32 * W;
  const int64_t group = num_heads / num_kv_heads;
  const int64_t row_stride = num_kv_heads * head_dim, block_stride = block_size * row_stride;
  const bool whole_rows = num_seqs >= 4 * at::get_num_threads();
  const int64_t heads_per_job = whole_rows ? num_kv_heads : 1;
  const int64_t jobs = num_seqs * (num_kv_heads / heads_per_job);
  const int64_t len_pad = (max_len + kLanes - 1) / kLanes * kLanes;
  at::parallel_for(0, jobs, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> s(group * len_pad), totals(group);
    std::vector<uint16_t> p(group * len_pad);
    std::vector<int64_t> offset(len_pad + 1), next(len_pad + 1);
    // Each position's row (kv head 0) in the caches; -1 past the end: the zero row.
    auto rows_of = [&](int64_t job, std::vector<int64_t>& at) {
      const int64_t b = job * heads_per_job / num_kv_heads, len = lens[b];
      const int32_t* table = tables + b * table_stride;
      for (int64_t t = 0; t <= len_pad; ++t)
        at[t] = t < len ? table[t / block_size] * block_stride + t % block_size * row_stride : -1;
    };
    Ahead ahead(k_cache, v_cache, row_stride * 2);
    rows_of(begin, next);
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job * heads_per_job / num_kv_heads;
      const int64_t h0 = job * heads_per_job % num_kv_heads;
      const int64_t len = lens[b], tiles = (len + kLanes - 1) / kLanes;
      std::swap(offset, next);
      if (job + 1 < end) {
        rows_of(job + 1, next);
        ahead.start(next.data(), lens[(job + 1) * heads_per_job / num_kv_heads]);
      } else {
        ahead.start(next.data(), 0);
      }
      for (int64_t h = h0; h < h0 + heads_per_job; ++h) {
        auto row = [&](const uint16_t* cache, int64_t t) {
          return reinterpret_cast<const __m512i*>(offset[t] < 0 ? kZeroRow : cache + offset[t] + h * head_dim);
        };
        const uint16_t* qh = q + b * q_stride + h * group * head_dim;
        for (int64_t g = 0; g < group; ++g) {
          __m512i qv[W];
          for (int w = 0; w < W; ++w) qv[w] = _mm512_loadu_si512(qh + g * head_dim + 32 * w);
          float* sg = s.data() + g * len_pad;
          for (int64_t t0 = 0; t0 < tiles * kLanes; t0 += kLanes) {
            __m512 dots[kLanes];
            for (int i = 0; i < kLanes; ++i) {
              const __m512i* k = row(k_cache, t0 + i);
              ahead.step(1);
              __m512 acc = _mm512_setzero_ps();
              for (int w = 0; w < W; ++w) acc = _mm512_dpbf16_ps(acc, as_bh(qv[w]), as_bh(_mm512_loadu_si512(k + w)));
              dots[i] = acc;
            }
            _mm512_storeu_ps(sg + t0, sum16(dots));
          }
          totals[g] = softmax_row_bf16(sg, len, tiles * kLanes, scale, p.data() + g * len_pad);
        }
        constexpr int64_t kBlock = 8 / W > 0 ? 8 / W : 1;  // query heads' sums in registers at once
        for (int64_t g0 = 0; g0 < group; g0 += kBlock) {
          const uint16_t* pg = p.data() + g0 * len_pad;
          uint16_t* o = out + (b * num_heads + h * group + g0) * head_dim;
          switch (std::min<int64_t>(kBlock, group - g0)) {
            case 1: weigh_values<W, 1>(row, v_cache, len, pg, len_pad, totals.data() + g0, o, ahead); break;
            case 2: weigh_values<W, 2>(row, v_cache, len, pg, len_pad, totals.data() + g0, o, ahead); break;
            case 3: weigh_values<W, 3>(row, v_cache, len, pg, len_pad, totals.data() + g0, o, ahead); break;
            default: weigh_values<W, kBlock < 4 ? kBlock : 4>(row, v_cache, len, pg, len_pad, totals.data() + g0, o, ahead); break;
          }
        }
      }
    }
  });
}

}  // namespace

void paged_decode_bf16(const c10::BFloat16* q, const c10::BFloat16* k_cache, const c10::BFloat16* v_cache,
                       const int32_t* tables, const int32_t* lens, c10::BFloat16* out, int64_t num_seqs,
                       int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, int64_t block_size,
                       int64_t table_stride, int64_t max_len, float scale, int64_t q_stride) {
  auto u = [](const c10::BFloat16* x) { return reinterpret_cast<const uint16_t*>(x); };
  auto run = [&](auto words) {
    decode<decltype(words)::value>(u(q), u(k_cache), u(v_cache), tables, lens, reinterpret_cast<uint16_t*>(out),
                                   num_seqs, num_heads, num_kv_heads, block_size, table_stride, max_len, scale,
                                   q_stride);
  };
  switch (head_dim) {
    case 64: run(std::integral_constant<int, 2>{}); break;
    case 128: run(std::integral_constant<int, 4>{}); break;
    case 256: run(std::integral_constant<int, 8>{}); break;
    default: TORCH_CHECK(false, "paged_decode_bf16: head_dim ", head_dim, " is not 64, 128 or 256");
  }
}

}  // namespace llmperf_cpu

#endif
