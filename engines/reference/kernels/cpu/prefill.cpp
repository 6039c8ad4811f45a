// The reference engine's causal prefill for fresh prompts, built with ops.cpp by
// engines/reference/kernels/cpu_ops.py and registered as torch.ops.llmperf.causal_prefill
// (attention=cpu's steps of fresh prompts, engines/reference/attention/cpu.py).

#include "vec.h"

namespace {

using namespace llmperf_cpu;

// Causal attention of fresh prompts (no cached context) over the step's own K and V, as CPU
// SDPA's flash kernel computes it when a prompt fits one of its key blocks (512): fp32 scores,
// an fp32 softmax, the probabilities rounded to T for the weighted sum of the values (as SDPA
// does for bf16 and fp16), fp32 sums, the output divided by the fp32 total. A job is one
// (sequence, kv head): its keys transposed and its values widened to fp32 once, then every
// query head of the group in blocks of kRowBlock rows, each block's scores as a register tile
// of rows x 16-key vectors (no horizontal sums), its keys stopping at the block's last row.
constexpr int kRowBlock = 6;

template <int R, int NV>
inline void score_tile(const float* qf, int64_t d_len, const float* kt, int64_t kt_stride, float* p, int64_t p_stride) {
  Vec acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c) acc[r][c] = vzero();
  for (int64_t d = 0; d < d_len; ++d) {
    Vec kv[NV];
    for (int c = 0; c < NV; ++c) kv[c] = vload(kt + d * kt_stride + c * kLanes);
    for (int r = 0; r < R; ++r) {
      const Vec qb = vset(qf[r * d_len + d]);
      for (int c = 0; c < NV; ++c) acc[r][c] = vfma(qb, kv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c) vstore(p + r * p_stride + c * kLanes, acc[r][c]);
}

// out rows (R of them, head_dim = C vectors) = p rows . values, over keys [0, n).
template <int R, int C>
inline void value_tile(const float* p, int64_t p_stride, const float* vf, int64_t n, const float* inv, float* o) {
  Vec acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = vzero();
  for (int64_t j = 0; j < n; ++j) {
    Vec vv[C];
    for (int c = 0; c < C; ++c) vv[c] = vload(vf + j * C * kLanes + c * kLanes);
    for (int r = 0; r < R; ++r) {
      const Vec pb = vset(p[r * p_stride + j]);
      for (int c = 0; c < C; ++c) acc[r][c] = vfma(pb, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) vstore(o + (r * C + c) * kLanes, vmul(acc[r][c], vset(inv[r])));
}

template <int R>
inline void score_block(int nv, const float* qf, int64_t d_len, const float* kt, int64_t kt_stride, float* p,
                        int64_t p_stride) {
  for (int c0 = 0; c0 < nv; c0 += 4) {
    const float* k0 = kt + c0 * kLanes;
    float* p0 = p + c0 * kLanes;
    switch (std::min(4, nv - c0)) {
      case 1: score_tile<R, 1>(qf, d_len, k0, kt_stride, p0, p_stride); break;
      case 2: score_tile<R, 2>(qf, d_len, k0, kt_stride, p0, p_stride); break;
      case 3: score_tile<R, 3>(qf, d_len, k0, kt_stride, p0, p_stride); break;
      default: score_tile<R, 4>(qf, d_len, k0, kt_stride, p0, p_stride); break;
    }
  }
}

template <int C>
inline void value_block(const float* p, int64_t p_stride, const float* vf, int64_t n, const float* inv, float* o) {
  constexpr int R = std::max(1, std::min(kRowBlock, 24 / C));  // R x C accumulators stay in registers
  for (int r0 = 0; r0 < kRowBlock; r0 += R) {
    if constexpr (kRowBlock % R == 0) {
      value_tile<R, C>(p + r0 * p_stride, p_stride, vf, n, inv + r0, o + r0 * C * kLanes);
    } else {
      for (int r = r0; r < std::min(kRowBlock, r0 + R); ++r)
        value_tile<1, C>(p + r * p_stride, p_stride, vf, n, inv + r, o + r * C * kLanes);
    }
  }
}

template <typename T, int C>
void causal_prefill_rows(const T* q, int64_t q_tok, const T* k, int64_t k_tok, const T* v, int64_t v_tok,
                         const int64_t* starts, const int64_t* lens, int64_t num_seqs, T* out, int64_t num_heads,
                         int64_t num_kv_heads, float scale) {
  constexpr int64_t d_len = C * kLanes;
  const int64_t group = num_heads / num_kv_heads;
  at::parallel_for(0, num_seqs * num_kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> kt, vf, qf, p, o(kRowBlock * d_len);
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job / num_kv_heads, h = job % num_kv_heads;
      const int64_t start = starts[b], len = lens[b];
      const int64_t rows_pad = (len + kRowBlock - 1) / kRowBlock * kRowBlock;
      const int64_t keys_pad = (rows_pad + kLanes - 1) / kLanes * kLanes;
      kt.assign(d_len * keys_pad, 0.f);  // keys transposed: [d][key], zero past the prompt
      vf.assign(keys_pad * d_len, 0.f);
      qf.assign(rows_pad * d_len, 0.f);
      p.resize(kRowBlock * keys_pad);
      for (int64_t j = 0; j < len; ++j) {
        const T* kr = k + (start + j) * k_tok + h * d_len;
        const T* vr = v + (start + j) * v_tok + h * d_len;
        for (int64_t d = 0; d < d_len; ++d) kt[d * keys_pad + j] = ld(kr[d]);
        for (int64_t d = 0; d < d_len; ++d) vf[j * d_len + d] = ld(vr[d]);
      }
      for (int64_t g = 0; g < group; ++g) {
        const int64_t head = h * group + g;
        for (int64_t i = 0; i < len; ++i) {
          const T* qr = q + (start + i) * q_tok + head * d_len;
          for (int64_t d = 0; d < d_len; ++d) qf[i * d_len + d] = ld(qr[d]);
        }
        for (int64_t i0 = 0; i0 < len; i0 += kRowBlock) {
          const int64_t n = std::min<int64_t>(i0 + kRowBlock, len);  // keys the block's last row sees
          const int nv = static_cast<int>((n + kLanes - 1) / kLanes);
          score_block<kRowBlock>(nv, qf.data() + i0 * d_len, d_len, kt.data(), keys_pad, p.data(), keys_pad);
          float inv[kRowBlock];
          for (int r = 0; r < kRowBlock; ++r) {
            float* s = p.data() + r * keys_pad;
            const int64_t seen = std::min(i0 + r + 1, n);  // causal: keys 0..i
            float top = s[0] * scale;
            for (int64_t j = 1; j < seen; ++j) top = std::max(top, s[j] * scale);
            float total = 0.f;
#pragma omp simd reduction(+ : total)
            for (int64_t j = 0; j < seen; ++j) {
              const float e = std::exp(s[j] * scale - top);
              total += e;
              s[j] = rt<T>(e);
            }
            for (int64_t j = seen; j < n; ++j) s[j] = 0.f;
            inv[r] = 1.f / total;
          }
          value_block<C>(p.data(), keys_pad, vf.data(), n, inv, o.data());
          for (int64_t r = 0; r < std::min<int64_t>(kRowBlock, len - i0); ++r) {
            T* dst = out + ((start + i0 + r) * num_heads + head) * d_len;
            for (int c = 0; c < C; ++c) vstore_as(dst + c * kLanes, vload(o.data() + (r * C + c) * kLanes));
          }
        }
      }
    }
  });
}

#if defined(__AVX512BF16__)
// The same for bf16 on a CPU with AVX512_BF16: both products by `vdpbf16ps` (two bf16 products
// added into each fp32 lane) straight from the bf16 values, no widening. The keys are laid out
// as [d pair][key] (each lane a key's two adjacent dims), the values as [key pair][d] (each lane
// two adjacent keys' value in one dim); the probabilities are rounded to bf16 as above.
template <int R, int NV>
inline void score_tile_bf16(const uint32_t* q2, int64_t pairs, const uint32_t* kt2, int64_t kt_stride, float* p,
                            int64_t p_stride) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t d = 0; d < pairs; ++d) {
    __m512i kv[NV];
    for (int c = 0; c < NV; ++c) kv[c] = _mm512_loadu_si512(kt2 + d * kt_stride + c * kLanes);
    for (int r = 0; r < R; ++r) {
      const __m512i qb = _mm512_set1_epi32(static_cast<int>(q2[r * pairs + d]));
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], as_bh(qb), as_bh(kv[c]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(p + r * p_stride + c * kLanes, acc[r][c]);
}

template <int R, int C>
inline void value_tile_bf16(const uint32_t* p2, int64_t p2_stride, const uint32_t* vt2, int64_t key_pairs,
                            const float* inv, float* o) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t j = 0; j < key_pairs; ++j) {
    __m512i vv[C];
    for (int c = 0; c < C; ++c) vv[c] = _mm512_loadu_si512(vt2 + (j * C + c) * kLanes);
    for (int r = 0; r < R; ++r) {
      const __m512i pb = _mm512_set1_epi32(static_cast<int>(p2[r * p2_stride + j]));
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], as_bh(pb), as_bh(vv[c]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      _mm512_storeu_ps(o + (r * C + c) * kLanes, _mm512_mul_ps(acc[r][c], _mm512_set1_ps(inv[r])));
}

template <int C>
void causal_prefill_bf16(const c10::BFloat16* q, int64_t q_tok, const c10::BFloat16* k, int64_t k_tok,
                         const c10::BFloat16* v, int64_t v_tok, const int64_t* starts, const int64_t* lens,
                         int64_t num_seqs, c10::BFloat16* out, int64_t num_heads, int64_t num_kv_heads, float scale) {
  constexpr int64_t d_len = C * kLanes, pairs = d_len / 2;
  const int64_t group = num_heads / num_kv_heads;
  at::parallel_for(0, num_seqs * num_kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<uint32_t> kt2, vt2, q2, p2;
    std::vector<float> p, o(kRowBlock * d_len);
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job / num_kv_heads, h = job % num_kv_heads;
      const int64_t start = starts[b], len = lens[b];
      const int64_t rows_pad = (len + kRowBlock - 1) / kRowBlock * kRowBlock;
      const int64_t keys_pad = (rows_pad + kLanes - 1) / kLanes * kLanes;
      kt2.assign(pairs * keys_pad, 0u);
      vt2.resize(keys_pad / 2 * d_len);
      q2.assign(rows_pad * pairs, 0u);
      p.resize(kRowBlock * keys_pad);
      p2.resize(kRowBlock * keys_pad / 2);
      for (int64_t j = 0; j < len; ++j) {
        const auto* kr = reinterpret_cast<const uint32_t*>(k + (start + j) * k_tok + h * d_len);
        for (int64_t d = 0; d < pairs; ++d) kt2[d * keys_pad + j] = kr[d];
      }
      for (int64_t j = 0; j < len; j += 2) {  // two keys' values interleaved, a lane per dim
        const c10::BFloat16* even = v + (start + j) * v_tok + h * d_len;
        const c10::BFloat16* odd = even + v_tok;
        uint32_t* dst = vt2.data() + j / 2 * d_len;
        for (int64_t d = 0; d < d_len; d += kLanes) {
          const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(even + d)));
          const __m512i hi = j + 1 < len
              ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(odd + d)))
              : _mm512_setzero_si512();
          _mm512_storeu_si512(dst + d, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        const int64_t head = h * group + g;
        for (int64_t i = 0; i < len; ++i)
          std::memcpy(q2.data() + i * pairs, q + (start + i) * q_tok + head * d_len, d_len * sizeof(uint16_t));
        for (int64_t i0 = 0; i0 < len; i0 += kRowBlock) {
          const int64_t n = std::min<int64_t>(i0 + kRowBlock, len);
          const int nv = static_cast<int>((n + kLanes - 1) / kLanes);
          for (int c0 = 0; c0 < nv; c0 += 4) {
            const uint32_t* k0 = kt2.data() + c0 * kLanes;
            float* p0 = p.data() + c0 * kLanes;
            const uint32_t* qr = q2.data() + i0 * pairs;
            switch (std::min(4, nv - c0)) {
              case 1: score_tile_bf16<kRowBlock, 1>(qr, pairs, k0, keys_pad, p0, keys_pad); break;
              case 2: score_tile_bf16<kRowBlock, 2>(qr, pairs, k0, keys_pad, p0, keys_pad); break;
              case 3: score_tile_bf16<kRowBlock, 3>(qr, pairs, k0, keys_pad, p0, keys_pad); break;
              default: score_tile_bf16<kRowBlock, 4>(qr, pairs, k0, keys_pad, p0, keys_pad); break;
            }
          }
          const int64_t key_pairs = (n + 1) / 2;
          float inv[kRowBlock];
          for (int r = 0; r < kRowBlock; ++r) {
            const int64_t seen = std::min(i0 + r + 1, n);
            inv[r] = 1.f / softmax_row_bf16(p.data() + r * keys_pad, seen, n, scale,
                                            reinterpret_cast<uint16_t*>(p2.data() + r * keys_pad / 2));
          }
          constexpr int RV = std::max(1, std::min(kRowBlock, 24 / C));
          for (int r0 = 0; r0 < kRowBlock; r0 += RV) {
            if constexpr (kRowBlock % RV == 0) {
              value_tile_bf16<RV, C>(p2.data() + r0 * keys_pad / 2, keys_pad / 2, vt2.data(), key_pairs, inv + r0,
                                     o.data() + r0 * d_len);
            } else {
              for (int r = r0; r < std::min(kRowBlock, r0 + RV); ++r)
                value_tile_bf16<1, C>(p2.data() + r * keys_pad / 2, keys_pad / 2, vt2.data(), key_pairs, inv + r,
                                      o.data() + r * d_len);
            }
          }
          for (int64_t r = 0; r < std::min<int64_t>(kRowBlock, len - i0); ++r) {
            c10::BFloat16* dst = out + ((start + i0 + r) * num_heads + head) * d_len;
            for (int c = 0; c < C; ++c) vstore_as(dst + c * kLanes, vload(o.data() + (r * C + c) * kLanes));
          }
        }
      }
    }
  });
}
#endif

}  // namespace

// Fresh prompts packed one after another (sequence i: tokens starts[i] .. starts[i] + lens[i]),
// each attending causally to its own new K and V. q [tokens, num_heads, head_dim], k and v
// [tokens, num_kv_heads, head_dim], each token's heads contiguous (token rows may be a view
// apart: the model's q, k and v are slices of one qkv row). Returns [tokens, num_heads,
// head_dim] in q's dtype; rows outside the sequences are left unwritten.
torch::Tensor causal_prefill(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor starts,
                             torch::Tensor lens, double scale) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && k.sizes() == v.sizes() && k.size(0) == q.size(0),
              "causal_prefill: q [tokens, heads, d], k and v [tokens, kv_heads, d]");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), "causal_prefill: dtypes differ");
  const int64_t head_dim = q.size(2), num_heads = q.size(1), num_kv_heads = k.size(1);
  TORCH_CHECK(k.size(2) == head_dim && head_dim % kLanes == 0 && head_dim <= kLanes * kMaxChunks,
              "causal_prefill: head_dim must be a multiple of 16, at most 256, got ", head_dim);
  TORCH_CHECK(num_heads % num_kv_heads == 0, "causal_prefill: query heads not a multiple of kv heads");
  auto heads_in_rows = [&](const torch::Tensor& x) {
    return x.stride(2) == 1 && x.stride(1) == head_dim ? x : x.contiguous();
  };
  auto qc = heads_in_rows(q), kc = heads_in_rows(k), vc = heads_in_rows(v);
  auto st_ = starts.to(torch::kLong).contiguous();
  auto ln = lens.to(torch::kLong).contiguous();
  TORCH_CHECK(st_.numel() == ln.numel(), "causal_prefill: one start per length");
  const int64_t* s = st_.data_ptr<int64_t>();
  const int64_t* l = ln.data_ptr<int64_t>();
  for (int64_t i = 0; i < ln.numel(); ++i)
    TORCH_CHECK(l[i] >= 1 && s[i] >= 0 && s[i] + l[i] <= q.size(0), "causal_prefill: sequence ", i,
                " outside the tokens");
  auto out = torch::empty({q.size(0), num_heads, head_dim}, q.options());
  const float sc = static_cast<float>(scale);
  by_dtype(q.scalar_type(), "causal_prefill", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    auto run = [&](auto chunks) {
#if defined(__AVX512BF16__)
      if constexpr (std::is_same_v<T, c10::BFloat16>) {
        causal_prefill_bf16<decltype(chunks)::value>(
            static_cast<const T*>(qc.data_ptr()), qc.stride(0), static_cast<const T*>(kc.data_ptr()), kc.stride(0),
            static_cast<const T*>(vc.data_ptr()), vc.stride(0), s, l, ln.numel(), static_cast<T*>(out.data_ptr()),
            num_heads, num_kv_heads, sc);
        return;
      }
#endif
      causal_prefill_rows<T, decltype(chunks)::value>(
          static_cast<const T*>(qc.data_ptr()), qc.stride(0), static_cast<const T*>(kc.data_ptr()), kc.stride(0),
          static_cast<const T*>(vc.data_ptr()), vc.stride(0), s, l, ln.numel(), static_cast<T*>(out.data_ptr()),
          num_heads, num_kv_heads, sc);
    };
    switch (head_dim / kLanes) {
      case 1: run(std::integral_constant<int, 1>{}); break;
      case 2: run(std::integral_constant<int, 2>{}); break;
      case 3: run(std::integral_constant<int, 3>{}); break;
      case 4: run(std::integral_constant<int, 4>{}); break;
      case 5: run(std::integral_constant<int, 5>{}); break;
      case 6: run(std::integral_constant<int, 6>{}); break;
      case 7: run(std::integral_constant<int, 7>{}); break;
      case 8: run(std::integral_constant<int, 8>{}); break;
      case 10: run(std::integral_constant<int, 10>{}); break;
      case 12: run(std::integral_constant<int, 12>{}); break;
      case 16: run(std::integral_constant<int, 16>{}); break;
      default: TORCH_CHECK(false, "causal_prefill: head_dim ", head_dim, " is not one of 16-128, 160, 192 or 256");
    }
  });
  return out;
}

TORCH_LIBRARY_FRAGMENT(llmperf, m) {
  m.def("causal_prefill(Tensor q, Tensor k, Tensor v, Tensor starts, Tensor lens, float scale) -> Tensor",
        &causal_prefill);
}
