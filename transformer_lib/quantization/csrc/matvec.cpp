// Weight-only quantized matrix-vector products: out (B, N) = x (B, K) @ W^T, with W (N, K) kept as
// llama.cpp's blocks and never written out in float32. Built by transformer_lib/quantization/kernels.py
// with torch.utils.cpp_extension the first time it is needed; read quantization/formats.py first (the
// two block layouts, in Python) and kernels.py's matvec_reference (the same product, readable).
//
// One row of W is G = K / gs blocks. A block of gs weights:
//   q8_0: float16 d, then gs int8 q                 w_j = d * q_j
//   q4_1: float16 d, float16 m, then gs/2 bytes     w_j = d * q_j + m, q_j in 0..15; byte j holds
//         q_j in its low four bits and q_{j+gs/2} in its high four bits (llama.cpp's order)
// Per block and batch row b the kernel adds d * sum_j q_j x_bj (+ m * sum_j x_bj for q4_1): the
// weights are turned into floats in registers, used for all B rows, and thrown away. One pass over
// the packed weights; the rows of W are shared out over torch's threads with at::parallel_for.
//
// Two paths: AVX-512 (16 weights per instruction; chosen at run time when this CPU has it) and a
// portable scalar loop (any CPU, any gs). The block sums of x for q4_1's minimum are computed once.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <torch/library.h>  // registered as torch.ops.tlib_quant.*: no Python headers needed

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define TLIB_X86 1
#endif

namespace {

inline float half_at(const uint8_t* p) {  // a little-endian float16 at p, as float32
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

// ---- portable path: plain loops, any group size --------------------------------------------
void q8_0_rows_portable(const float* X, int64_t B, int64_t K, const uint8_t* W, int64_t gs, float* O,
                        int64_t N, int64_t n0, int64_t n1) {
  const int64_t G = K / gs, bpb = 2 + gs;  // blocks per row, bytes per block
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = W + n * G * bpb;
    for (int64_t b = 0; b < B; ++b) {
      const float* x = X + b * K;
      float total = 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* blk = row + g * bpb;
        const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
        float acc = 0.0f;
        for (int64_t j = 0; j < gs; ++j) acc += static_cast<float>(q[j]) * x[g * gs + j];
        total += half_at(blk) * acc;
      }
      O[b * N + n] = total;
    }
  }
}

void q4_1_rows_portable(const float* X, const float* XS, int64_t B, int64_t K, const uint8_t* W, int64_t gs,
                        float* O, int64_t N, int64_t n0, int64_t n1) {
  const int64_t G = K / gs, half = gs / 2, bpb = 4 + half;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = W + n * G * bpb;
    for (int64_t b = 0; b < B; ++b) {
      const float* x = X + b * K;
      float total = 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* blk = row + g * bpb;
        const uint8_t* qs = blk + 4;
        const float* xg = x + g * gs;
        float acc = 0.0f;
        for (int64_t j = 0; j < half; ++j)
          acc += static_cast<float>(qs[j] & 15) * xg[j] + static_cast<float>(qs[j] >> 4) * xg[j + half];
        total += half_at(blk) * acc + half_at(blk + 2) * XS[b * G + g];  // d * sum q x + m * sum x
      }
      O[b * N + n] = total;
    }
  }
}

#ifdef TLIB_X86
// ---- AVX-512 path: 16 weights per step, gs a multiple of 32 ---------------------------------
__attribute__((target("avx512f,f16c,fma"))) inline float half_f16c(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return _cvtsh_ss(bits);
}

// R rows of W times NB rows of x per pass, R and NB fixed at compile time so that every
// accumulator lives in a register. Per block, the codes (as floats) times x are summed unscaled
// into `blk`, then one multiply-add adds d times that sum to the row's total: one scale per block,
// not one per weight. R = 4 rows give four independent chains of multiply-adds at batch 1 (a
// multiply-add takes 4 cycles and two can start per cycle).
template <int R, int NB>
__attribute__((target("avx512f,f16c,fma"))) void q8_0_tile(const float* X, int64_t K, const uint8_t* W,
                                                           int64_t gs, float* O, int64_t N, int64_t n) {
  const int64_t G = K / gs, bpb = 2 + gs;
  __m512 total[R][NB];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) total[r][b] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = W + ((n + r) * G + g) * bpb;
      __m512 acc[NB];
      for (int b = 0; b < NB; ++b) acc[b] = _mm512_setzero_ps();
      for (int64_t j = 0; j < gs; j += 16) {
        // 16 int8 -> 16 int32 -> 16 float: the codes of 16 weights
        const __m512 w = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2 + j))));
        for (int b = 0; b < NB; ++b) acc[b] = _mm512_fmadd_ps(w, _mm512_loadu_ps(X + b * K + g * gs + j), acc[b]);
      }
      const __m512 d = _mm512_set1_ps(half_f16c(blk));
      for (int b = 0; b < NB; ++b) total[r][b] = _mm512_fmadd_ps(d, acc[b], total[r][b]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) O[b * N + n + r] = _mm512_reduce_add_ps(total[r][b]);
}

template <int R, int NB>
__attribute__((target("avx512f,f16c,fma"))) void q4_1_tile(const float* X, const float* XS, int64_t K,
                                                           const uint8_t* W, int64_t gs, float* O, int64_t N,
                                                           int64_t n) {
  const int64_t G = K / gs, half = gs / 2, bpb = 4 + half;
  const __m512i low4 = _mm512_set1_epi32(15);
  __m512 total[R][NB];
  float mins[R][NB] = {};
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) total[r][b] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = W + ((n + r) * G + g) * bpb;
      __m512 acc[NB];
      for (int b = 0; b < NB; ++b) acc[b] = _mm512_setzero_ps();
      for (int64_t j = 0; j < half; j += 16) {
        // 16 bytes -> 16 int32; low nibbles are the codes of weights j.., high nibbles of j + gs/2..
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4 + j)));
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, low4));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
        for (int b = 0; b < NB; ++b) {
          const float* xg = X + b * K + g * gs;
          acc[b] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xg + j), acc[b]);
          acc[b] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xg + j + half), acc[b]);
        }
      }
      const __m512 d = _mm512_set1_ps(half_f16c(blk));
      const float m = half_f16c(blk + 2);
      for (int b = 0; b < NB; ++b) {
        total[r][b] = _mm512_fmadd_ps(d, acc[b], total[r][b]);  // d * sum q x
        mins[r][b] += m * XS[b * G + g];                         // m * sum x
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) O[b * N + n + r] = _mm512_reduce_add_ps(total[r][b]) + mins[r][b];
}

// Rows n0..n1 of W against all B rows of x: 4 rows of W at a time for one row of x (batch 1, the
// decoding case), 1 row of W for 2, 4 or 8 rows of x at a time otherwise.
template <int R, int NB, bool Q4>
__attribute__((target("avx512f,f16c,fma"))) void rows_avx512_fixed(const float* X, const float* XS, int64_t K,
                                                                   const uint8_t* W, int64_t gs, float* O,
                                                                   int64_t N, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + R <= n1; n += R) {
    if (Q4) q4_1_tile<R, NB>(X, XS, K, W, gs, O, N, n);
    else q8_0_tile<R, NB>(X, K, W, gs, O, N, n);
  }
  for (; n < n1; ++n) {
    if (Q4) q4_1_tile<1, NB>(X, XS, K, W, gs, O, N, n);
    else q8_0_tile<1, NB>(X, K, W, gs, O, N, n);
  }
}

template <bool Q4>
void rows_avx512(const float* X, const float* XS, int64_t B, int64_t K, const uint8_t* W, int64_t gs, float* O,
                 int64_t N, int64_t n0, int64_t n1) {
  const int64_t G = K / gs;
  int64_t b = 0;
  for (; b + 8 <= B; b += 8) rows_avx512_fixed<1, 8, Q4>(X + b * K, XS + b * G, K, W, gs, O + b * N, N, n0, n1);
  if (b + 4 <= B) { rows_avx512_fixed<1, 4, Q4>(X + b * K, XS + b * G, K, W, gs, O + b * N, N, n0, n1); b += 4; }
  if (b + 2 <= B) { rows_avx512_fixed<1, 2, Q4>(X + b * K, XS + b * G, K, W, gs, O + b * N, N, n0, n1); b += 2; }
  if (b < B) rows_avx512_fixed<4, 1, Q4>(X + b * K, XS + b * G, K, W, gs, O + b * N, N, n0, n1);
}

bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c") &&
                          __builtin_cpu_supports("fma");
  return has;
}
#else
bool cpu_has_avx512() { return false; }
#endif

void check_args(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& out, int64_t gs, int64_t bpb) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x: contiguous (B, K) float32");
  TORCH_CHECK(blocks.dim() == 2 && blocks.scalar_type() == at::kByte && blocks.is_contiguous(),
              "blocks: contiguous (N, bytes) uint8");
  TORCH_CHECK(gs > 0 && x.size(1) % gs == 0, "K must be a multiple of the group size");
  TORCH_CHECK(blocks.size(1) == (x.size(1) / gs) * bpb, "blocks has the wrong number of bytes per row");
  TORCH_CHECK(out.dim() == 2 && out.size(0) == x.size(0) && out.size(1) == blocks.size(0) &&
              out.scalar_type() == at::kFloat && out.is_contiguous(), "out: contiguous (B, N) float32");
}

// The rows of W go to threads in chunks of `grain` rows (a few KB of weights each).
constexpr int64_t kGrain = 16;

}  // namespace

// out (B, N) = x (B, K) @ W^T for W as q8_0 blocks (N, K / gs * (2 + gs)) uint8.
void q8_0_matvec(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& out, int64_t gs, bool simd) {
  check_args(x, blocks, out, gs, 2 + gs);
  const int64_t B = x.size(0), K = x.size(1), N = blocks.size(0);
  const float* X = x.data_ptr<float>();
  const uint8_t* W = blocks.data_ptr<uint8_t>();
  float* O = out.data_ptr<float>();
  const bool fast = simd && cpu_has_avx512() && gs % 16 == 0;
  at::parallel_for(0, N, kGrain, [&](int64_t n0, int64_t n1) {
#ifdef TLIB_X86
    if (fast) return rows_avx512<false>(X, nullptr, B, K, W, gs, O, N, n0, n1);
#endif
    q8_0_rows_portable(X, B, K, W, gs, O, N, n0, n1);
  });
}

// out (B, N) = x (B, K) @ W^T for W as q4_1 blocks (N, K / gs * (4 + gs / 2)) uint8.
void q4_1_matvec(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& out, int64_t gs, bool simd) {
  TORCH_CHECK(gs % 2 == 0, "q4_1 needs an even group size");
  check_args(x, blocks, out, gs, 4 + gs / 2);
  const int64_t B = x.size(0), K = x.size(1), N = blocks.size(0), G = K / gs;
  const float* X = x.data_ptr<float>();
  const uint8_t* W = blocks.data_ptr<uint8_t>();
  float* O = out.data_ptr<float>();
  std::vector<float> xsum(static_cast<size_t>(B * G));  // sum of x over each block: for the minimum
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g) {
      float s = 0.0f;
      for (int64_t j = 0; j < gs; ++j) s += X[b * K + g * gs + j];
      xsum[b * G + g] = s;
    }
  const float* XS = xsum.data();
  const bool fast = simd && cpu_has_avx512() && gs % 32 == 0;
  at::parallel_for(0, N, kGrain, [&](int64_t n0, int64_t n1) {
#ifdef TLIB_X86
    if (fast) return rows_avx512<true>(X, XS, B, K, W, gs, O, N, n0, n1);
#endif
    q4_1_rows_portable(X, XS, B, K, W, gs, O, N, n0, n1);
  });
}

bool has_avx512() { return cpu_has_avx512(); }

TORCH_LIBRARY(tlib_quant, m) {
  // out is written in place (a!); called eagerly from kernels.py only
  m.def("q8_0_matvec(Tensor x, Tensor blocks, Tensor(a!) out, int group_size, bool simd) -> ()");
  m.def("q4_1_matvec(Tensor x, Tensor blocks, Tensor(a!) out, int group_size, bool simd) -> ()");
  m.def("has_avx512() -> bool", TORCH_FN(has_avx512));
  m.impl("q8_0_matvec", c10::DispatchKey::CPU, TORCH_FN(q8_0_matvec));
  m.impl("q4_1_matvec", c10::DispatchKey::CPU, TORCH_FN(q4_1_matvec));
}
