// Shared by the C++ CPU operators (ops.cpp, prefill.cpp): scalars in and out of the model's
// dtype and 16-float vectors (AVX-512 registers where the CPU has them, plain arrays that the
// compiler vectorizes otherwise).
#pragma once

#include <ATen/Parallel.h>
#include <torch/library.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace llmperf_cpu {

constexpr int kLanes = 16;
constexpr int kMaxChunks = 16;  // head_dim up to 256
constexpr int kMaxJobHeads = 256;  // query heads a job may hold (all of a sequence's)

// Scalars in and out of the model's dtype. bf16 is the top half of a float32: rounding to
// nearest even by integer arithmetic (no NaN handling needed here) keeps the loops vectorized.
inline float ld(float x) { return x; }
inline float ld(c10::BFloat16 x) {
  uint32_t bits = static_cast<uint32_t>(x.x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline float ld(c10::Half x) { return static_cast<float>(x); }
template <typename T>
inline T st(float f);
template <>
inline float st<float>(float f) { return f; }
template <>
inline c10::BFloat16 st<c10::BFloat16>(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits += 0x7FFF + ((bits >> 16) & 1);
  c10::BFloat16 out;
  out.x = static_cast<uint16_t>(bits >> 16);
  return out;
}
template <>
inline c10::Half st<c10::Half>(float f) { return c10::Half(f); }
// Round to T and back: where the torch code materializes an intermediate in the model's dtype.
template <typename T>
inline float rt(float f) { return ld(st<T>(f)); }

#if defined(__AVX512F__)
struct Vec {
  __m512 r;
};
inline Vec vzero() { return {_mm512_setzero_ps()}; }
inline Vec vset(float x) { return {_mm512_set1_ps(x)}; }
inline Vec vmul(Vec a, Vec b) { return {_mm512_mul_ps(a.r, b.r)}; }
inline Vec vfma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.r, b.r, c.r)}; }
inline float vsum(Vec a) { return _mm512_reduce_add_ps(a.r); }
inline void vstore(float* p, Vec a) { _mm512_storeu_ps(p, a.r); }
inline Vec vload(const float* p) { return {_mm512_loadu_ps(p)}; }
inline Vec vload(const c10::BFloat16* p) {
  // bfloat16 is the top half of a float32: widen the 16-bit words and shift them up.
  __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16))};
}
inline Vec vload(const c10::Half* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
#else
struct Vec {
  float r[kLanes];
};
inline Vec vset(float x) {
  Vec v;
  for (int i = 0; i < kLanes; ++i) v.r[i] = x;
  return v;
}
inline Vec vzero() { return vset(0.f); }
inline Vec vmul(Vec a, Vec b) {
  for (int i = 0; i < kLanes; ++i) a.r[i] *= b.r[i];
  return a;
}
inline Vec vfma(Vec a, Vec b, Vec c) {
  for (int i = 0; i < kLanes; ++i) c.r[i] += a.r[i] * b.r[i];
  return c;
}
inline float vsum(Vec a) {
  float s = 0.f;
  for (int i = 0; i < kLanes; ++i) s += a.r[i];
  return s;
}
inline void vstore(float* p, Vec a) { std::memcpy(p, a.r, sizeof a.r); }
template <typename T>
inline Vec vload(const T* p) {
  Vec v;
  for (int i = 0; i < kLanes; ++i) v.r[i] = static_cast<float>(p[i]);
  return v;
}
#endif

inline void vstore_as(float* p, Vec a) { vstore(p, a); }
template <typename T>
inline void vstore_as(T* p, Vec a) {
  float row[kLanes];
  vstore(row, a);
  for (int i = 0; i < kLanes; ++i) p[i] = st<T>(row[i]);
}

#if defined(__AVX512BF16__)
// bf16 on a CPU with AVX512_BF16 (prefill.cpp, decode_bf16.cpp): `vdpbf16ps` adds two bf16
// products into each fp32 lane.
inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

// e^x as Cephes' expf (a degree-6 polynomial on x - n ln2, |error| ~1 ulp), scaled by 2^n with
// vscalefps, which gives 0 far below the range as expf does.
inline __m512 exp512(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_scalef_ps(y, n);
}

// A row's softmax numerators over keys [0, seen) of its scores s (unscaled), as bf16 into pr,
// zero for keys [seen, n) and up to the next 16; returns their fp32 sum.
inline float softmax_row_bf16(const float* s, int64_t seen, int64_t n, float scale, uint16_t* pr) {
  const __m512 sc = _mm512_set1_ps(scale);
  auto live = [&](int64_t j) {
    return static_cast<__mmask16>(j + kLanes <= seen ? 0xFFFF : (j < seen ? (1u << (seen - j)) - 1 : 0));
  };
  __m512 top = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < seen; j += kLanes)
    top = _mm512_mask_max_ps(top, live(j), top, _mm512_mul_ps(_mm512_loadu_ps(s + j), sc));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(top));
  __m512 total = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += kLanes) {
    const __m512 e = _mm512_maskz_mov_ps(live(j), exp512(_mm512_fmsub_ps(_mm512_loadu_ps(s + j), sc, m)));
    total = _mm512_add_ps(total, e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pr + j), (__m256i)_mm512_cvtneps_pbh(e));
  }
  return _mm512_reduce_add_ps(total);
}

// The paged decode of bf16 caches (decode_bf16.cpp); ops.cpp's paged_decode calls it.
void paged_decode_bf16(const c10::BFloat16* q, const c10::BFloat16* k_cache, const c10::BFloat16* v_cache,
                       const int32_t* tables, const int32_t* lens, c10::BFloat16* out, int64_t num_seqs,
                       int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, int64_t block_size,
                       int64_t table_stride, int64_t max_len, float scale, int64_t q_stride);
#endif

template <typename F>
void by_dtype(at::ScalarType dtype, const char* op, F&& f) {
  switch (dtype) {
    case at::kFloat: f(static_cast<float*>(nullptr)); break;
    case at::kBFloat16: f(static_cast<c10::BFloat16*>(nullptr)); break;
    case at::kHalf: f(static_cast<c10::Half*>(nullptr)); break;
    default: TORCH_CHECK(false, op, ": dtype ", dtype, " is not float32, bfloat16 or float16");
  }
}

}  // namespace llmperf_cpu
