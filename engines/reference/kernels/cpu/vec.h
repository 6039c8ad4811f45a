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
