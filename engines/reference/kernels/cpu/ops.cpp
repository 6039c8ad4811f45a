// The reference engine's C++ CPU operators, built on first use by
// engines/reference/kernels/cpu_ops.py (torch.utils.cpp_extension, -march=native) and
// registered under torch.ops.llmperf:
//
//   paged_decode   decode attention over the paged KV cache, read in place (attention=cpu)
//   causal_prefill fresh prompts' causal attention over the step's own K and V (prefill.cpp)
//   rms_norm, add_rms_norm, rotary, silu_mul, store_kv
//                  a decoder layer's elementwise steps and its K/V cache write, each one pass
//                  over its rows instead of one or several torch ops (engine.fused_ops); each
//                  rounds to the model's dtype where the torch code it replaces does, so bf16
//                  results match it.
//
// paged_decode: one query per sequence, no gather into a padded batch, no padding attended
// to. Caches are [num_blocks, block_size, num_kv_heads, head_dim] (float32, bfloat16 or
// float16); sequence b's position t sits in block block_tables[b][t / block_size]. Every
// (sequence, kv head) pair is one job: for each query head of that kv head's group, the
// scores of all its positions (fp32), a softmax, then the weighted sum of the values.
// Arithmetic is fp32 throughout; 16-float vectors are AVX-512 registers where the CPU has
// them, plain arrays (auto-vectorized) otherwise.

#include "vec.h"

namespace {

using namespace llmperf_cpu;

// CHUNKS = head_dim / 16 when known at compile time (the common 64 and 128), 0: read at run time.
// q, the caches and out are all T. A job is one sequence (all its kv heads: each cached
// position's row is read whole, front to back) when there are sequences enough to keep every
// thread busy, else one (sequence, kv head) pair.
template <typename T, int CHUNKS>
void decode(const T* q, const T* k_cache, const T* v_cache, const int32_t* tables, const int32_t* lens, T* out,
            int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, int64_t block_size,
            int64_t table_stride, int64_t max_len, float scale, int64_t q_stride) {
  const int chunks = CHUNKS ? CHUNKS : static_cast<int>(head_dim / kLanes);
  const int64_t group = num_heads / num_kv_heads;
  const int64_t row_stride = num_kv_heads * head_dim;  // between positions of a block
  const int64_t block_stride = block_size * row_stride;
  const bool whole_rows = num_seqs >= 4 * at::get_num_threads();
  const int64_t heads_per_job = whole_rows ? num_kv_heads : 1;
  const int64_t jobs = num_seqs * (num_kv_heads / heads_per_job);
  const int64_t job_heads = heads_per_job * group;  // query heads of a job
  at::parallel_for(0, jobs, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(job_heads * max_len);
    std::vector<Vec> qv(job_heads * chunks);
    std::vector<Vec> acc(job_heads * chunks);
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job * heads_per_job / num_kv_heads;
      const int64_t h0 = job * heads_per_job % num_kv_heads;  // the job's first kv head
      const int64_t len = lens[b];
      const int64_t num_blocks = (len + block_size - 1) / block_size;
      const int32_t* table = tables + b * table_stride;
      const T* qb = q + b * q_stride + h0 * group * head_dim;  // the job's query heads, in a row
      // f(position, kv head within the job, its row as vectors) for each cached position, in
      // order through the blocks, every kv head of the job in turn.
      auto each_position = [&](const T* cache, auto&& f) {
        for (int64_t blk = 0; blk < num_blocks; ++blk) {
          const T* base = cache + table[blk] * block_stride + h0 * head_dim;
          const int64_t n = std::min(block_size, len - blk * block_size);
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t h = 0; h < heads_per_job; ++h) {
              const T* row = base + t * row_stride + h * head_dim;
              Vec vecs[kMaxChunks];
              for (int c = 0; c < chunks; ++c) vecs[c] = vload(row + c * kLanes);
              f(blk * block_size + t, h, vecs);
            }
          }
        }
      };
      for (int64_t i = 0; i < job_heads * chunks; ++i) qv[i] = vmul(vload(qb + i * kLanes), vset(scale));
      // Scores: each cached key read once, dotted with every query head of its kv head's group.
      each_position(k_cache, [&](int64_t t, int64_t h, const Vec* kv) {
        for (int64_t g = 0; g < group; ++g) {
          const Vec* qg = qv.data() + (h * group + g) * chunks;
          Vec dot = vmul(qg[0], kv[0]);
          for (int c = 1; c < chunks; ++c) dot = vfma(qg[c], kv[c], dot);
          scores[(h * group + g) * max_len + t] = vsum(dot);
        }
      });
      // Softmax numerators per query head; the sums normalize the output at the end.
      float totals[kMaxJobHeads];
      for (int64_t j = 0; j < job_heads; ++j) {
        float* s = scores.data() + j * max_len;
        float top = s[0];
        for (int64_t t = 1; t < len; ++t) top = std::max(top, s[t]);
        float total = 0.f;
#pragma omp simd reduction(+ : total)
        for (int64_t t = 0; t < len; ++t) {
          s[t] = std::exp(s[t] - top);
          total += s[t];
        }
        totals[j] = total;
      }
      // The values weighted by those numerators, each cached value read once.
      for (auto& a : acc) a = vzero();
      each_position(v_cache, [&](int64_t t, int64_t h, const Vec* vv) {
        for (int64_t g = 0; g < group; ++g) {
          const Vec p = vset(scores[(h * group + g) * max_len + t]);
          Vec* a = acc.data() + (h * group + g) * chunks;
          for (int c = 0; c < chunks; ++c) a[c] = vfma(p, vv[c], a[c]);
        }
      });
      for (int64_t j = 0; j < job_heads; ++j) {
        const Vec inv = vset(1.f / totals[j]);
        T* o = out + (b * num_heads + h0 * group + j) * head_dim;
        for (int c = 0; c < chunks; ++c) vstore_as(o + c * kLanes, vmul(acc[j * chunks + c], inv));
      }
    }
  });
}

template <typename T>
void dispatch_head_dim(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                       const torch::Tensor& tables, const torch::Tensor& lens, torch::Tensor& out,
                       int64_t max_len, float scale) {
  const int64_t head_dim = q.size(2);
#if defined(__AVX512BF16__)
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    if (head_dim == 64 || head_dim == 128 || head_dim == 256) {  // decode_bf16.cpp
      paged_decode_bf16(static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k_cache.data_ptr()),
                        static_cast<const T*>(v_cache.data_ptr()), tables.data_ptr<int32_t>(),
                        lens.data_ptr<int32_t>(), static_cast<T*>(out.data_ptr()), q.size(0), q.size(1),
                        k_cache.size(2), head_dim, k_cache.size(1), tables.stride(0), max_len, scale, q.stride(0));
      return;
    }
  }
#endif
  auto kernel = head_dim == 64 ? decode<T, 4> : head_dim == 128 ? decode<T, 8> : decode<T, 0>;
  kernel(static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k_cache.data_ptr()),
         static_cast<const T*>(v_cache.data_ptr()), tables.data_ptr<int32_t>(), lens.data_ptr<int32_t>(),
         static_cast<T*>(out.data_ptr()), q.size(0), q.size(1), k_cache.size(2), head_dim, k_cache.size(1),
         tables.stride(0), max_len, scale, q.stride(0));
}

// Rows per parallel task: small steps (a decode of a few rows) stay on the calling thread.
inline int64_t grain(int64_t row_elements) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, row_elements)); }

// weight * T(x * rsqrt(mean(x^2) + eps)) over rows of n, as RMSNorm.forward: statistics in fp32,
// the normalized row rounded to T, then multiplied by the weight in T. `sum_in` non-null:
// x is first replaced by T(x + sum_in) (the residual add), written to `sum_out`.
template <typename T>
void rms_norm_rows(const T* x, int64_t x_stride, const T* sum_in, int64_t sum_stride, T* sum_out,
                   const T* weight, T* out, int64_t rows, int64_t n, float eps) {
  at::parallel_for(0, rows, grain(n), [&](int64_t begin, int64_t end) {
    std::vector<float> row(n);
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * x_stride;
      float* v = row.data();
      if (sum_in) {
        const T* a = sum_in + r * sum_stride;
        T* s = sum_out + r * n;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
          const float total = rt<T>(ld(xr[i]) + ld(a[i]));
          s[i] = st<T>(total);
          v[i] = total;
        }
      } else {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) v[i] = ld(xr[i]);
      }
      float squares = 0.f;
#pragma omp simd reduction(+ : squares)
      for (int64_t i = 0; i < n; ++i) squares += v[i] * v[i];
      const float inv = 1.f / std::sqrt(squares / static_cast<float>(n) + eps);
      T* o = out + r * n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = st<T>(ld(weight[i]) * rt<T>(v[i] * inv));
    }
  });
}

// SwiGLU's middle: rows of [gate | up] (2n) -> T(T(silu(gate)) * up), as F.silu(gate) * up.
template <typename T>
void silu_mul_rows(const T* x, int64_t x_stride, T* out, int64_t rows, int64_t n) {
  at::parallel_for(0, rows, grain(2 * n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* g = x + r * x_stride;
      const T* u = g + n;
      T* o = out + r * n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float a = ld(g[i]);
        o[i] = st<T>(rt<T>(a / (1.f + std::exp(-a))) * ld(u[i]));
      }
    }
  });
}

// RoPE on rows of heads x d, as apply_rotary: T(T(x * cos) + T(rotate_half(x) * sin)).
// x [tokens, heads, d] with any token and head strides; cos, sin [tokens, d] contiguous rows.
template <typename T>
void rotary_rows(const T* x, int64_t token_stride, int64_t head_stride, const T* cos, const T* sin, T* out,
                 int64_t tokens, int64_t heads, int64_t d) {
  const int64_t half = d / 2;
  at::parallel_for(0, tokens, grain(heads * d), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* c = cos + t * d;
      const T* s = sin + t * d;
      for (int64_t h = 0; h < heads; ++h) {
        const T* xr = x + t * token_stride + h * head_stride;
        T* o = out + (t * heads + h) * d;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          o[i] = st<T>(rt<T>(ld(xr[i]) * ld(c[i])) + rt<T>(-ld(xr[i + half]) * ld(s[i])));
          o[i + half] = st<T>(rt<T>(ld(xr[i + half]) * ld(c[i + half])) + rt<T>(ld(xr[i]) * ld(s[i + half])));
        }
      }
    }
  });
}

// A 2-D view whose rows are contiguous (any row stride): [rows, n].
torch::Tensor rows_of(const torch::Tensor& x, const char* op) {
  auto rows = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});
  TORCH_CHECK(rows.stride(-1) == 1, op, ": rows must be contiguous");
  return rows;
}
}  // namespace

// q [num_seqs, num_heads, head_dim]; caches [num_blocks, block_size, num_kv_heads, head_dim];
// block_tables int [num_seqs, >= blocks of the longest]; seq_lens int [num_seqs], each >= 1.
// Returns [num_seqs, num_heads, head_dim] in q's dtype.
torch::Tensor paged_decode(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor block_tables,
                           torch::Tensor seq_lens, double scale) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4 && k_cache.sizes() == v_cache.sizes(), "paged_decode: bad shapes");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "paged_decode: the caches must be contiguous");
  TORCH_CHECK(k_cache.scalar_type() == v_cache.scalar_type(), "paged_decode: K and V caches differ in dtype");
  const int64_t head_dim = q.size(2), num_kv_heads = k_cache.size(2);
  TORCH_CHECK(k_cache.size(3) == head_dim && head_dim % kLanes == 0 && head_dim <= kLanes * kMaxChunks,
              "paged_decode: head_dim must be a multiple of 16, at most 256, got ", head_dim);
  TORCH_CHECK(q.size(1) % num_kv_heads == 0, "paged_decode: query heads not a multiple of kv heads");
  TORCH_CHECK(q.size(1) <= kMaxJobHeads, "paged_decode: at most ", kMaxJobHeads, " query heads");
  // In the cache's dtype, as sdpa's decode; a row's heads contiguous (the rows may be a view
  // apart, as the rotated q of a qkv row is), so the model's q goes in without a copy.
  auto qc = q.to(k_cache.scalar_type());
  if (qc.stride(2) != 1 || qc.stride(1) != head_dim) qc = qc.contiguous();
  auto tables = block_tables.to(torch::kInt).contiguous();
  auto lens = seq_lens.to(torch::kInt).contiguous();
  TORCH_CHECK(tables.size(0) == q.size(0) && lens.size(0) == q.size(0), "paged_decode: one table and length per row");
  const int32_t* l = lens.data_ptr<int32_t>();
  int64_t max_len = 1;
  for (int64_t i = 0; i < lens.size(0); ++i) {
    TORCH_CHECK(l[i] >= 1 && l[i] <= tables.size(1) * k_cache.size(1), "paged_decode: length ", l[i],
                " out of the block table's range");
    max_len = std::max<int64_t>(max_len, l[i]);
  }
  auto out = torch::empty({qc.size(0), qc.size(1), head_dim}, qc.options());
  const float s = static_cast<float>(scale);
  switch (k_cache.scalar_type()) {
    case at::kFloat: dispatch_head_dim<float>(qc, k_cache, v_cache, tables, lens, out, max_len, s); break;
    case at::kBFloat16: dispatch_head_dim<c10::BFloat16>(qc, k_cache, v_cache, tables, lens, out, max_len, s); break;
    case at::kHalf: dispatch_head_dim<c10::Half>(qc, k_cache, v_cache, tables, lens, out, max_len, s); break;
    default: TORCH_CHECK(false, "paged_decode: KV cache dtype ", k_cache.scalar_type(), " is not float32, bfloat16 or float16");
  }
  return out.to(q.scalar_type());
}


torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
  auto rows = rows_of(x, "rms_norm");
  auto w = weight.contiguous();
  TORCH_CHECK(w.scalar_type() == x.scalar_type() && w.numel() == rows.size(1), "rms_norm: weight");
  auto out = torch::empty({rows.size(0), rows.size(1)}, x.options());
  by_dtype(x.scalar_type(), "rms_norm", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    rms_norm_rows<T>(static_cast<const T*>(rows.data_ptr()), rows.stride(0), nullptr, 0, nullptr,
                     static_cast<const T*>(w.data_ptr()), static_cast<T*>(out.data_ptr()), rows.size(0), rows.size(1),
                     static_cast<float>(eps));
  });
  return out.view(x.sizes());
}

// (rms_norm(T(x + residual)), T(x + residual)): the residual add and the next norm in one pass.
std::tuple<torch::Tensor, torch::Tensor> add_rms_norm(torch::Tensor x, torch::Tensor residual, torch::Tensor weight,
                                                      double eps) {
  TORCH_CHECK(x.sizes() == residual.sizes() && x.scalar_type() == residual.scalar_type(), "add_rms_norm: shapes");
  auto rows = rows_of(x, "add_rms_norm");
  auto res = rows_of(residual, "add_rms_norm");
  auto w = weight.contiguous();
  TORCH_CHECK(w.scalar_type() == x.scalar_type() && w.numel() == rows.size(1), "add_rms_norm: weight");
  auto out = torch::empty({rows.size(0), rows.size(1)}, x.options());
  auto sum = torch::empty({rows.size(0), rows.size(1)}, x.options());
  by_dtype(x.scalar_type(), "add_rms_norm", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    rms_norm_rows<T>(static_cast<const T*>(rows.data_ptr()), rows.stride(0), static_cast<const T*>(res.data_ptr()),
                     res.stride(0), static_cast<T*>(sum.data_ptr()), static_cast<const T*>(w.data_ptr()),
                     static_cast<T*>(out.data_ptr()), rows.size(0), rows.size(1), static_cast<float>(eps));
  });
  return {out.view(x.sizes()), sum.view(x.sizes())};
}

torch::Tensor silu_mul(torch::Tensor x) {
  auto rows = rows_of(x, "silu_mul");
  TORCH_CHECK(rows.size(1) % 2 == 0, "silu_mul: the last dim holds gate and up, so it must be even");
  const int64_t n = rows.size(1) / 2;
  auto out = torch::empty({rows.size(0), n}, x.options());
  by_dtype(x.scalar_type(), "silu_mul", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    silu_mul_rows<T>(static_cast<const T*>(rows.data_ptr()), rows.stride(0), static_cast<T*>(out.data_ptr()),
                     rows.size(0), n);
  });
  auto sizes = x.sizes().vec();
  sizes.back() = n;
  return out.view(sizes);
}

// x [tokens, heads, d] (last dim contiguous), cos and sin [tokens, 1, d] or [tokens, d] -> rotated x.
torch::Tensor rotary(torch::Tensor x, torch::Tensor cos, torch::Tensor sin) {
  TORCH_CHECK(x.dim() == 3 && x.stride(2) == 1 && x.size(2) % 2 == 0, "rotary: x must be [tokens, heads, even d]");
  const int64_t tokens = x.size(0), heads = x.size(1), d = x.size(2);
  auto c = cos.reshape({tokens, d}).contiguous();
  auto s = sin.reshape({tokens, d}).contiguous();
  TORCH_CHECK(c.scalar_type() == x.scalar_type() && s.scalar_type() == x.scalar_type(), "rotary: tables' dtype");
  auto out = torch::empty({tokens, heads, d}, x.options());
  by_dtype(x.scalar_type(), "rotary", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    rotary_rows<T>(static_cast<const T*>(x.data_ptr()), x.stride(0), x.stride(1), static_cast<const T*>(c.data_ptr()),
                   static_cast<const T*>(s.data_ptr()), static_cast<T*>(out.data_ptr()), tokens, heads, d);
  });
  return out;
}

// The step's new K and V ([tokens, num_kv_heads, head_dim], each token's heads contiguous) into
// their cache slots (flat: block * block_size + offset), as index_copy_ does, a row a memcpy.
void store_kv(torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor k, torch::Tensor v, torch::Tensor slots) {
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && k_cache.sizes() == v_cache.sizes() &&
                  k_cache.dim() == 4 && k_cache.scalar_type() == v_cache.scalar_type(),
              "store_kv: the caches must be contiguous [blocks, block_size, kv_heads, head_dim] of one dtype");
  const int64_t width = k_cache.size(2) * k_cache.size(3), capacity = k_cache.size(0) * k_cache.size(1);
  auto rows = [&](const torch::Tensor& x) {
    auto r = x.to(k_cache.scalar_type()).reshape({-1, width});
    return r.stride(1) == 1 ? r : r.contiguous();
  };
  auto kr = rows(k), vr = rows(v);
  auto s = slots.to(torch::kLong).contiguous();
  const int64_t tokens = s.numel();
  TORCH_CHECK(kr.size(0) == tokens && vr.size(0) == tokens, "store_kv: one slot per token");
  const int64_t* slot = s.data_ptr<int64_t>();
  for (int64_t i = 0; i < tokens; ++i)
    TORCH_CHECK(slot[i] >= 0 && slot[i] < capacity, "store_kv: slot ", slot[i], " outside the cache");
  const int64_t bytes = width * k_cache.element_size();
  auto* kc = static_cast<char*>(k_cache.data_ptr());
  auto* vc = static_cast<char*>(v_cache.data_ptr());
  const auto* ks = static_cast<const char*>(kr.data_ptr());
  const auto* vs = static_cast<const char*>(vr.data_ptr());
  const int64_t k_stride = kr.stride(0) * k_cache.element_size(), v_stride = vr.stride(0) * k_cache.element_size();
  at::parallel_for(0, tokens, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, bytes)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      std::memcpy(kc + slot[i] * bytes, ks + i * k_stride, bytes);
      std::memcpy(vc + slot[i] * bytes, vs + i * v_stride, bytes);
    }
  });
}

// Operators, not Python functions: torch.profiler's op tables show them as llmperf::NAME.
TORCH_LIBRARY(llmperf, m) {
  m.def("paged_decode(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, Tensor seq_lens, float scale) -> Tensor",
        &paged_decode);
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor", &rms_norm);
  m.def("add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)", &add_rms_norm);
  m.def("silu_mul(Tensor x) -> Tensor", &silu_mul);
  m.def("rotary(Tensor x, Tensor cos, Tensor sin) -> Tensor", &rotary);
  m.def("store_kv(Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor k, Tensor v, Tensor slots) -> ()", &store_kv);
}
