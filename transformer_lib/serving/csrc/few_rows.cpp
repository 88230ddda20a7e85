// out (M, N) = x (M, K) @ W^T for a few rows of x (M <= 8), float32, W (N, K) read once as it is.
// Built by transformer_lib/serving/packed_linear.py with torch.utils.cpp_extension the first time it
// is needed; read that module's docstring first (why a decoding step of a few rows needs this).
//
// For each row n of W, one pass over its K weights: 16 weights at a time are loaded into two AVX2
// registers and multiplied into 2 * M accumulators (x's M rows, read from the L1 cache), so each
// weight leaves memory once and is used M times. Two accumulators per row of x keep 2M independent
// chains of fused multiply-adds in flight (one chain per row would wait on the FMA's latency).
// Each output is then one float32 dot product of K terms summed in a fixed order: 8 lanes x 2
// partial sums, then the lanes; the order does not depend on the thread count (rows of W are shared
// out over torch's threads, never the K of one output).
#include <ATen/core/Tensor.h>  // not all of ATen/ATen.h (no operator is called): about 5 s less to compile
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define TLIB_X86 1
#endif

namespace {

#ifdef TLIB_X86
__attribute__((target("avx2,fma"))) inline float lanes_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}

template <int M>
__attribute__((target("avx2,fma"))) void rows_avx2(const float* x, const float* w, float* out, int64_t N,
                                                   int64_t K, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* wn = w + n * K;
    __m256 a[M], b[M];
    for (int m = 0; m < M; ++m) {
      a[m] = _mm256_setzero_ps();
      b[m] = _mm256_setzero_ps();
    }
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(wn + k + 256), _MM_HINT_T0);  // 1 KB ahead
      const __m256 w0 = _mm256_loadu_ps(wn + k), w1 = _mm256_loadu_ps(wn + k + 8);
      for (int m = 0; m < M; ++m) {
        a[m] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + m * K + k), a[m]);
        b[m] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + m * K + k + 8), b[m]);
      }
    }
    for (; k + 8 <= K; k += 8) {
      const __m256 w0 = _mm256_loadu_ps(wn + k);
      for (int m = 0; m < M; ++m) a[m] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + m * K + k), a[m]);
    }
    for (int m = 0; m < M; ++m) {
      float s = lanes_sum(_mm256_add_ps(a[m], b[m]));
      for (int64_t j = k; j < K; ++j) s += wn[j] * x[m * K + j];  // K not a multiple of 8
      out[m * N + n] = s;
    }
  }
}
#endif

bool has_avx2() {
#ifdef TLIB_X86
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

void linear_rows(const at::Tensor& x, const at::Tensor& w, const at::Tensor& out) {
  TORCH_CHECK(has_avx2(), "linear_rows: this CPU has no AVX2 + FMA");
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && out.dim() == 2, "linear_rows: x, w, out must be 2-D");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat && out.scalar_type() == at::kFloat,
              "linear_rows: float32 only");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && out.is_contiguous(), "linear_rows: contiguous tensors only");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(M >= 1 && M <= 8, "linear_rows: 1 to 8 rows of x, got ", M);
  TORCH_CHECK(w.size(1) == K && out.size(0) == M && out.size(1) == N, "linear_rows: shapes do not match");
#ifdef TLIB_X86
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = const_cast<float*>(out.data_ptr<float>());
  at::parallel_for(0, N, 64, [&](int64_t n0, int64_t n1) {
    switch (M) {
      case 1: rows_avx2<1>(xp, wp, op, N, K, n0, n1); break;
      case 2: rows_avx2<2>(xp, wp, op, N, K, n0, n1); break;
      case 3: rows_avx2<3>(xp, wp, op, N, K, n0, n1); break;
      case 4: rows_avx2<4>(xp, wp, op, N, K, n0, n1); break;
      case 5: rows_avx2<5>(xp, wp, op, N, K, n0, n1); break;
      case 6: rows_avx2<6>(xp, wp, op, N, K, n0, n1); break;
      case 7: rows_avx2<7>(xp, wp, op, N, K, n0, n1); break;
      default: rows_avx2<8>(xp, wp, op, N, K, n0, n1); break;
    }
  });
#endif
}

bool avx2_available() { return has_avx2(); }

}  // namespace

TORCH_LIBRARY(tlib_rows, m) {
  // out is written in place (a!); called eagerly from serving/packed_linear.py only
  m.def("linear_rows(Tensor x, Tensor w, Tensor(a!) out) -> ()");
  m.def("avx2_available() -> bool", TORCH_FN(avx2_available));
  m.impl("linear_rows", c10::DispatchKey::CPU, TORCH_FN(linear_rows));
}
