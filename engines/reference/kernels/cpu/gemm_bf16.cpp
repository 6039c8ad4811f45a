// bf16 Linears on a CPU with AVX512_BF16 (engine.cpu_bf16_matmul=kernel; engines/reference/
// cpu_layout.py's PairedLinear), registered as torch.ops.llmperf:
//
//   pack_bf16_pairs(w)                  w [N, K] bf16 -> [ceil(N/32), K/2, 32] int32: panels of 32
//                                       output columns, each lane a column's two adjacent k (the
//                                       pair `vdpbf16ps` multiplies), zero columns past N
//   linear_bf16_pairs(x, packed, n, b)  x [..., K] bf16 -> x . w^T (+ b) [..., n] bf16
//   bf16_pairs_built()                  whether this build has them (compiled for AVX512_BF16)
//
// A register tile of 12 rows x 32 columns (24 fp32 accumulators): per pair of k, two loads of
// the panel, one broadcast of each row's pair of x, 24 `vdpbf16ps`; the sums in fp32 over k in
// order, the bias added in fp32, then rounded to bf16 to nearest even: all but about 1 in
// 1,000 outputs are bitwise oneDNN's bf16 inner product's, the rest one bf16 unit apart
// (tests/test_cpu_gemm.py). The threads split the panels. At 64 rows the decode step's four
// Linears of a 576-wide Llama ran 1.2x faster than oneDNN's (docs/kernels.md).

#include "vec.h"

namespace {

#if defined(__AVX512BF16__)

using namespace llmperf_cpu;

constexpr int kPanel = 32;  // output columns a panel
constexpr int kRows = 12;   // rows of a register tile

// out[r][0, cols) = x[r] . panel (+ bias), r in [0, R); x rows `x_stride` pairs apart.
template <int R>
inline void tile(const uint32_t* x, int64_t x_stride, const uint32_t* panel, int64_t pairs, const float* bias,
                 int64_t cols, uint16_t* out, int64_t out_stride) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t kp = 0; kp < pairs; ++kp) {
    const __m512bh w0 = as_bh(_mm512_loadu_si512(panel + kp * kPanel));
    const __m512bh w1 = as_bh(_mm512_loadu_si512(panel + kp * kPanel + 16));
    for (int r = 0; r < R; ++r) {
      const __m512bh xb = as_bh(_mm512_set1_epi32(static_cast<int>(x[r * x_stride + kp])));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], xb, w0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], xb, w1);
    }
  }
  const __mmask16 m0 = cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : static_cast<__mmask16>((1u << (cols - 16)) - 1);
  const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) {
    uint16_t* o = out + r * out_stride;
    _mm256_mask_storeu_epi16(o, m0, (__m256i)_mm512_cvtneps_pbh(_mm512_add_ps(acc[r][0], b0)));
    _mm256_mask_storeu_epi16(o + 16, m1, (__m256i)_mm512_cvtneps_pbh(_mm512_add_ps(acc[r][1], b1)));
  }
}

template <int R>
void rows_tile(const uint32_t* x, int64_t xs, const uint32_t* p, int64_t pairs, const float* b, int64_t cols,
               uint16_t* o, int64_t n) {
  tile<R>(x, xs, p, pairs, b, cols, o, n);
}

using TileFn = void (*)(const uint32_t*, int64_t, const uint32_t*, int64_t, const float*, int64_t, uint16_t*, int64_t);
constexpr TileFn kTails[kRows] = {nullptr, rows_tile<1>, rows_tile<2>, rows_tile<3>, rows_tile<4>, rows_tile<5>,
                                  rows_tile<6>, rows_tile<7>, rows_tile<8>, rows_tile<9>, rows_tile<10>, rows_tile<11>};

#endif

bool bf16_pairs_built() {
#if defined(__AVX512BF16__)
  return true;
#else
  return false;
#endif
}

torch::Tensor pack_bf16_pairs(torch::Tensor w) {
  TORCH_CHECK(bf16_pairs_built(), "pack_bf16_pairs: this build has no AVX512_BF16");
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kBFloat16, "pack_bf16_pairs: a 2-D bf16 weight");
  TORCH_CHECK(w.size(1) % 2 == 0, "pack_bf16_pairs: in_features must be even, got ", w.size(1));
  auto wc = w.contiguous();
  const int64_t n = wc.size(0), k = wc.size(1), panels = (n + 31) / 32;
  auto out = torch::zeros({panels, k / 2, 32}, torch::dtype(torch::kInt32));
  const auto* src = reinterpret_cast<const uint32_t*>(wc.data_ptr());  // a row's pairs, as uint32
  auto* dst = reinterpret_cast<uint32_t*>(out.data_ptr());
  at::parallel_for(0, panels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p)
      for (int64_t c = 0; c < 32 && p * 32 + c < n; ++c)
        for (int64_t kp = 0; kp < k / 2; ++kp) dst[(p * (k / 2) + kp) * 32 + c] = src[(p * 32 + c) * (k / 2) + kp];
  });
  return out;
}

torch::Tensor linear_bf16_pairs(torch::Tensor x, torch::Tensor packed, int64_t n, c10::optional<torch::Tensor> bias) {
  TORCH_CHECK(bf16_pairs_built(), "linear_bf16_pairs: this build has no AVX512_BF16");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && packed.dim() == 3 && packed.size(2) == 32 &&
                  x.size(-1) == 2 * packed.size(1) && n > 0 && n <= 32 * packed.size(0),
              "linear_bf16_pairs: x [..., K] bf16 against a weight packed by pack_bf16_pairs");
  const int64_t k = x.size(-1);
  auto rows = x.reshape({-1, k});
  if (rows.stride(1) != 1 || rows.stride(0) % 2 != 0) rows = rows.contiguous();
  const int64_t m = rows.size(0), panels = packed.size(0);
  torch::Tensor b;
  if (bias.has_value() && bias->defined()) {
    b = bias->to(at::kFloat).contiguous();
    TORCH_CHECK(b.numel() == n, "linear_bf16_pairs: bias of ", b.numel(), " for ", n, " outputs");
  }
  auto out = torch::empty({m, n}, x.options());
#if defined(__AVX512BF16__)
  const auto* xp = reinterpret_cast<const uint32_t*>(rows.data_ptr());
  const int64_t xs = rows.stride(0) / 2, pairs = k / 2;
  const auto* wp = reinterpret_cast<const uint32_t*>(packed.data_ptr());
  auto* op = reinterpret_cast<uint16_t*>(out.data_ptr());
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  at::parallel_for(0, panels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const uint32_t* panel = wp + p * pairs * kPanel;
      const int64_t c0 = p * kPanel, cols = std::min<int64_t>(kPanel, n - c0);
      const float* pb = bp ? bp + c0 : nullptr;
      int64_t r = 0;
      for (; r + kRows <= m; r += kRows) tile<kRows>(xp + r * xs, xs, panel, pairs, pb, cols, op + r * n + c0, n);
      if (r < m) kTails[m - r](xp + r * xs, xs, panel, pairs, pb, cols, op + r * n + c0, n);
    }
  });
#endif
  auto sizes = x.sizes().vec();
  sizes.back() = n;
  return out.view(sizes);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llmperf, m) {
  m.def("pack_bf16_pairs(Tensor w) -> Tensor", &pack_bf16_pairs);
  m.def("linear_bf16_pairs(Tensor x, Tensor packed, int n, Tensor? bias) -> Tensor", &linear_bf16_pairs);
  m.def("bf16_pairs_built() -> bool", &bf16_pairs_built);
}
