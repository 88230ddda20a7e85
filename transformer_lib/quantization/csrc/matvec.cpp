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
//
// The *_q8x ops are llama.cpp's way (its Q8_0 x Q4_1 / Q8_0 dot products): x is quantized once per
// call, per block of gs values, to int8 codes qx with a float32 scale dx = max|x| / 127 (and
// sx = dx * sum qx for q4_1's minimum). A block's dot product is then exact integer arithmetic,
//   sum_j q_j qx_j   (|q_j qx_j| <= 127 * 127, 32 of them: far inside int32),
// one VNNI instruction (vpdpbusd: 32 byte products summed into 8 int32) for 32 weights, and one
// float multiply-add by d * dx per block. The result is exactly x^ @ W^T for x^ = dx * qx, up to
// the order of the float additions over blocks; the error against float x is that of x^.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <torch/library.h>  // registered as torch.ops.tlib_quant.*: no Python headers needed

#include <algorithm>
#include <cmath>
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
  const int64_t rowb = K / gs * (Q4 ? 4 + gs / 2 : 2 + gs);
  int64_t n = n0;
  for (; n + R <= n1; n += R) {
    for (int64_t p = 0; p < R * rowb; p += 64)  // the next R rows, while these are computed
      _mm_prefetch(reinterpret_cast<const char*>(W + (n + R) * rowb + p), _MM_HINT_T0);
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


// ---- int8 activations (the *_q8x ops) --------------------------------------------------------
// x (B, K) -> codes QX (B, K) int8, scales DX (B, G) and, for q4_1, SX = DX * sum of the block's codes.
// dx = amax / 127 and qx = round-half-even(x * (1 / dx)), the float32 operations of kernels.py's
// quantize_activations, so both give the same codes bit for bit.
void quantize_x(const float* X, int64_t B, int64_t K, int64_t gs, int8_t* QX, float* DX, float* SX) {
  const int64_t G = K / gs;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g) {
      const float* xg = X + b * K + g * gs;
      int8_t* qg = QX + b * K + g * gs;
      float amax = 0.0f;
      for (int64_t j = 0; j < gs; ++j) amax = std::max(amax, std::fabs(xg[j]));
      const float d = amax / 127.0f;
      const float id = d > 0.0f ? 1.0f / d : 0.0f;
      int32_t sum = 0;
      for (int64_t j = 0; j < gs; ++j) {
        const float q = std::min(127.0f, std::max(-127.0f, std::nearbyint(xg[j] * id)));
        qg[j] = static_cast<int8_t>(q);
        sum += static_cast<int32_t>(q);
      }
      DX[b * G + g] = d;
      SX[b * G + g] = d * static_cast<float>(sum);
    }
}

// portable: integer dot product per block, any gs
template <bool Q4>
void rows_q8x_portable(const int8_t* QX, const float* DX, const float* SX, int64_t B, int64_t K, const uint8_t* W,
                       int64_t gs, float* O, int64_t N, int64_t n0, int64_t n1) {
  const int64_t G = K / gs, half = gs / 2, bpb = Q4 ? 4 + half : 2 + gs;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = W + n * G * bpb;
    for (int64_t b = 0; b < B; ++b) {
      float total = 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* blk = row + g * bpb;
        const int8_t* qx = QX + b * K + g * gs;
        int32_t dot = 0;  // exact
        if (Q4) {
          for (int64_t j = 0; j < half; ++j) dot += (blk[4 + j] & 15) * qx[j] + (blk[4 + j] >> 4) * qx[j + half];
          total += half_at(blk) * DX[b * G + g] * static_cast<float>(dot) + half_at(blk + 2) * SX[b * G + g];
        } else {
          const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
          for (int64_t j = 0; j < gs; ++j) dot += q[j] * qx[j];
          total += half_at(blk) * DX[b * G + g] * static_cast<float>(dot);
        }
      }
      O[b * N + n] = total;
    }
  }
}

#ifdef TLIB_X86
#define TLIB_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

TLIB_VNNI inline float hsum8(__m256 v) {  // the sum of 8 floats
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// R consecutive rows of W (gs = 32) against every row of x. Per block and row: one 32-byte load
// of codes (q4_1: 16 bytes, nibbles split by a shift and a mask), one vpdpbusd (unsigned x signed
// bytes, four products summed per int32 lane), one int -> float conversion and one multiply-add by
// d * dx. The block of x's codes is loaded once for the R rows; the R rows (a few KB) stay in L1
// for the B rows of x. The next rows are prefetched while these are computed.
template <int R, bool Q4>
TLIB_VNNI void tile_q8x(const int8_t* QX, const float* DX, const float* SX, int64_t B, int64_t K, const uint8_t* W,
                        float* O, int64_t N, int64_t n) {
  constexpr int64_t gs = 32, bpb = Q4 ? 20 : 34;
  const int64_t G = K / gs, rowb = G * bpb;
  const uint8_t* tile = W + n * rowb;
  for (int64_t p = 0; p < R * rowb; p += 64) _mm_prefetch(reinterpret_cast<const char*>(tile + R * rowb + p), _MM_HINT_T0);
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int64_t b = 0; b < B; ++b) {
    const int8_t* qx = QX + b * K;
    const float* dx = DX + b * G;
    const float* sx = SX + b * G;
    __m256 acc[R];
    float mins[R];
    for (int r = 0; r < R; ++r) { acc[r] = _mm256_setzero_ps(); mins[r] = 0.0f; }
    for (int64_t g = 0; g < G; ++g) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + g * gs));
      for (int r = 0; r < R; ++r) {
        const uint8_t* blk = tile + r * rowb + g * bpb;
        __m256i dot;
        if (Q4) {  // bytes 0..15: low nibbles = q_0..q_15; bytes 16..31: high nibbles = q_16..q_31
          const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
          const __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), low4);
          dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, xv);  // codes 0..15 are unsigned
        } else {  // signed x signed: |w| (unsigned) times x with w's sign
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
          dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(xv, w));
        }
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(half_f16c(blk) * dx[g]), acc[r]);
        if (Q4) mins[r] += half_f16c(blk + 2) * sx[g];
      }
    }
    for (int r = 0; r < R; ++r) O[b * N + n + r] = hsum8(acc[r]) + mins[r];
  }
}

template <bool Q4>
TLIB_VNNI void rows_q8x_vnni(const int8_t* QX, const float* DX, const float* SX, int64_t B, int64_t K,
                             const uint8_t* W, float* O, int64_t N, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) tile_q8x<4, Q4>(QX, DX, SX, B, K, W, O, N, n);
  for (; n < n1; ++n) tile_q8x<1, Q4>(QX, DX, SX, B, K, W, O, N, n);
}

bool cpu_has_vnni() {
  static const bool has = cpu_has_avx512() && __builtin_cpu_supports("avx2") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}
#else
bool cpu_has_vnni() { return false; }
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

// The rows of W go to threads in chunks of at least 32 KB of weights (at least 16 rows): a
// 576 x 576 int4 matrix (207 KB) is split in a few chunks, not in 36, so waking the second thread
// costs less than the half of the rows it takes.
int64_t grain_rows(int64_t row_bytes) { return std::max<int64_t>(16, (32 * 1024) / std::max<int64_t>(1, row_bytes)); }

}  // namespace

// out (B, N) = x (B, K) @ W^T for W as q8_0 blocks (N, K / gs * (2 + gs)) uint8.
void q8_0_matvec(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& out, int64_t gs, bool simd) {
  check_args(x, blocks, out, gs, 2 + gs);
  const int64_t B = x.size(0), K = x.size(1), N = blocks.size(0);
  const float* X = x.data_ptr<float>();
  const uint8_t* W = blocks.data_ptr<uint8_t>();
  float* O = out.data_ptr<float>();
  const bool fast = simd && cpu_has_avx512() && gs % 16 == 0;
  at::parallel_for(0, N, grain_rows(blocks.size(1)), [&](int64_t n0, int64_t n1) {
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
  at::parallel_for(0, N, grain_rows(blocks.size(1)), [&](int64_t n0, int64_t n1) {
#ifdef TLIB_X86
    if (fast) return rows_avx512<true>(X, XS, B, K, W, gs, O, N, n0, n1);
#endif
    q4_1_rows_portable(X, XS, B, K, W, gs, O, N, n0, n1);
  });
}


// The same products with x quantized to int8 per block of gs first (see the top of the file).
// The codes of x live in buffers kept between calls (this thread's; resized only when x grows).
template <bool Q4>
void matvec_q8x(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& out, int64_t gs, bool simd) {
  TORCH_CHECK(gs % 2 == 0, "the group size must be even");
  check_args(x, blocks, out, gs, Q4 ? 4 + gs / 2 : 2 + gs);
  const int64_t B = x.size(0), K = x.size(1), N = blocks.size(0), G = K / gs;
  thread_local std::vector<int8_t> qx;
  thread_local std::vector<float> dx, sx;
  if (qx.size() < static_cast<size_t>(B * K)) qx.resize(B * K);
  if (dx.size() < static_cast<size_t>(B * G)) { dx.resize(B * G); sx.resize(B * G); }
  quantize_x(x.data_ptr<float>(), B, K, gs, qx.data(), dx.data(), sx.data());
  const int8_t* QX = qx.data();
  const float *DX = dx.data(), *SX = sx.data();
  const uint8_t* W = blocks.data_ptr<uint8_t>();
  float* O = out.data_ptr<float>();
  const bool fast = simd && cpu_has_vnni() && gs == 32;
  at::parallel_for(0, N, grain_rows(blocks.size(1)), [&](int64_t n0, int64_t n1) {
#ifdef TLIB_X86
    if (fast) return rows_q8x_vnni<Q4>(QX, DX, SX, B, K, W, O, N, n0, n1);
#endif
    rows_q8x_portable<Q4>(QX, DX, SX, B, K, W, gs, O, N, n0, n1);
  });
}

void q8_0_matvec_q8x(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& out, int64_t gs, bool simd) {
  matvec_q8x<false>(x, blocks, out, gs, simd);
}
void q4_1_matvec_q8x(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& out, int64_t gs, bool simd) {
  matvec_q8x<true>(x, blocks, out, gs, simd);
}

// ---- one decoding step of a Llama-style model, batch 1 (quantization/fused.py) ---------------
// Chapter 17's LlamaBlock, for one new token, in one call for all the layers. Per layer:
//   h = RMSNorm(x) * w_attn                                   (D)
//   q | k | v = h @ W_qkv^T                                   one kernel pass over q, k, v's rows
//   q, k = rope(q), rope(k) at position pos                   pairs (i, i + d/2): style "halves"
//   K[pos], V[pos] = k, v                                     written into the KV cache's buffers
//   a_h = softmax(q_h . K_j / sqrt(d)) V_j, j = h / g          over positions 0..pos (GQA)
//   x = x + a @ W_o^T
//   h = RMSNorm(x) * w_ffn
//   gate | up = h @ W_gu^T                                    one kernel pass over both
//   x = x + (silu(gate) * up) @ W_down^T
// The products are the kernels above (threads inside them); the rest is a few thousand flops a
// layer, single-threaded. fused.py's decode_step_reference is the same step in PyTorch, and
// tests/test_quantization.py holds the two (and the model's own modules) equal.
namespace {

void rms_norm(const float* x, const float* w, float* out, int64_t D, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < D; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
  for (int64_t i = 0; i < D; ++i) out[i] = w[i] * (x[i] * inv);
}

void rope_halves(float* v, const float* cos, const float* sin, int64_t d) {  // one head, in place
  const int64_t h = d / 2;
  for (int64_t i = 0; i < h; ++i) {
    const float x1 = v[i], x2 = v[i + h];
    v[i] = x1 * cos[i] - x2 * sin[i];
    v[i + h] = x1 * sin[i] + x2 * cos[i];
  }
}

// one query head (d) against positions 0..T-1 of its key/value head (rows of d floats)
void attend(const float* q, const float* K, const float* V, int64_t T, int64_t d, float* scores, float* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float top = -INFINITY;
  for (int64_t t = 0; t < T; ++t) {
    float s = 0.0f;
    for (int64_t i = 0; i < d; ++i) s += q[i] * K[t * d + i];
    scores[t] = s * scale;
    top = std::max(top, scores[t]);
  }
  float total = 0.0f;
  for (int64_t t = 0; t < T; ++t) { scores[t] = std::exp(scores[t] - top); total += scores[t]; }
  for (int64_t i = 0; i < d; ++i) out[i] = 0.0f;
  for (int64_t t = 0; t < T; ++t) {
    const float p = scores[t] / total;
    for (int64_t i = 0; i < d; ++i) out[i] += p * V[t * d + i];
  }
}

}  // namespace

// x (1, D): the new token's residual stream, updated in place through every layer.
// weights: 4 per layer (W_qkv, W_o, W_gate_up, W_down, blocks of one format); norms: 2 per layer.
// keys/values: one (1, H_kv, capacity, d) float32 buffer per layer; position pos is written.
void decode_step(const at::Tensor& x, at::TensorList weights, at::TensorList norms, at::TensorList keys,
                 at::TensorList values, int64_t pos, const at::Tensor& cos, const at::Tensor& sin,
                 int64_t num_heads, int64_t num_kv_heads, double eps, bool q4, bool int8_x) {
  const int64_t L = keys.size(), D = x.size(1);
  TORCH_CHECK(x.dim() == 2 && x.size(0) == 1 && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "x: contiguous (1, D) float32");
  TORCH_CHECK(static_cast<int64_t>(weights.size()) == 4 * L && static_cast<int64_t>(norms.size()) == 2 * L &&
              static_cast<int64_t>(values.size()) == L, "4 weights, 2 norms, keys and values per layer");
  const int64_t d = keys[0].size(3), Hq = num_heads, Hkv = num_kv_heads, g = Hq / Hkv;
  const int64_t F = weights[2].size(0) / 2, Nqkv = weights[0].size(0);
  TORCH_CHECK(Nqkv == (Hq + 2 * Hkv) * d && Hq % Hkv == 0, "W_qkv has (H + 2 H_kv) * d rows");
  TORCH_CHECK(cos.numel() == d / 2 && sin.numel() == d / 2 && cos.is_contiguous() && sin.is_contiguous() &&
              cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat, "cos, sin: d / 2 float32 each");
  auto f32 = x.options();
  const at::Tensor h = at::empty({1, D}, f32), qkv = at::empty({1, Nqkv}, f32), att = at::empty({1, Hq * d}, f32),
                   o = at::empty({1, D}, f32), gu = at::empty({1, 2 * F}, f32), act = at::empty({1, F}, f32);
  std::vector<float> scores(static_cast<size_t>(pos + 1));
  auto product = [&](const at::Tensor& in, const at::Tensor& w, const at::Tensor& out) {
    if (int8_x) (q4 ? q4_1_matvec_q8x : q8_0_matvec_q8x)(in, w, out, 32, true);
    else (q4 ? q4_1_matvec : q8_0_matvec)(in, w, out, 32, true);
  };
  float* X = x.data_ptr<float>();
  const float *C = cos.data_ptr<float>(), *S = sin.data_ptr<float>();
  for (int64_t l = 0; l < L; ++l) {
    const at::Tensor &K = keys[l], &V = values[l];
    TORCH_CHECK(K.dim() == 4 && K.size(0) == 1 && K.size(1) == Hkv && K.size(2) > pos && K.size(3) == d &&
                K.is_contiguous() && K.scalar_type() == at::kFloat && V.sizes() == K.sizes() && V.is_contiguous() &&
                V.scalar_type() == at::kFloat, "keys/values: contiguous (1, H_kv, > pos, d) float32 buffers");
    const int64_t cap = K.size(2);
    float *Kb = K.data_ptr<float>(), *Vb = V.data_ptr<float>();
    // attention
    rms_norm(X, norms[2 * l].data_ptr<float>(), h.data_ptr<float>(), D, static_cast<float>(eps));
    product(h, weights[4 * l], qkv);
    float* Q = qkv.data_ptr<float>();  // q (Hq d), then k (Hkv d), then v (Hkv d)
    for (int64_t j = 0; j < Hq + Hkv; ++j) rope_halves(Q + j * d, C, S, d);  // the q heads and the k heads
    for (int64_t j = 0; j < Hkv; ++j) {
      std::memcpy(Kb + (j * cap + pos) * d, Q + (Hq + j) * d, d * sizeof(float));
      std::memcpy(Vb + (j * cap + pos) * d, Q + (Hq + Hkv + j) * d, d * sizeof(float));
    }
    float* A = att.data_ptr<float>();
    for (int64_t hq = 0; hq < Hq; ++hq) {
      const int64_t j = hq / g;
      attend(Q + hq * d, Kb + j * cap * d, Vb + j * cap * d, pos + 1, d, scores.data(), A + hq * d);
    }
    product(att, weights[4 * l + 1], o);
    const float* Op = o.data_ptr<float>();
    for (int64_t i = 0; i < D; ++i) X[i] += Op[i];
    // feed-forward (SwiGLU)
    rms_norm(X, norms[2 * l + 1].data_ptr<float>(), h.data_ptr<float>(), D, static_cast<float>(eps));
    product(h, weights[4 * l + 2], gu);
    const float* G = gu.data_ptr<float>();  // gate (F), then up (F)
    float* Ap = act.data_ptr<float>();
    for (int64_t i = 0; i < F; ++i) Ap[i] = G[i] / (1.0f + std::exp(-G[i])) * G[F + i];
    product(act, weights[4 * l + 3], o);
    for (int64_t i = 0; i < D; ++i) X[i] += Op[i];
  }
}

bool has_vnni() { return cpu_has_vnni(); }
bool has_avx512() { return cpu_has_avx512(); }

TORCH_LIBRARY(tlib_quant, m) {
  // out is written in place (a!); called eagerly from kernels.py only
  m.def("q8_0_matvec(Tensor x, Tensor blocks, Tensor(a!) out, int group_size, bool simd) -> ()");
  m.def("q4_1_matvec(Tensor x, Tensor blocks, Tensor(a!) out, int group_size, bool simd) -> ()");
  m.def("q8_0_matvec_q8x(Tensor x, Tensor blocks, Tensor(a!) out, int group_size, bool simd) -> ()");
  m.def("q4_1_matvec_q8x(Tensor x, Tensor blocks, Tensor(a!) out, int group_size, bool simd) -> ()");
  m.def("decode_step(Tensor(a!) x, Tensor[] weights, Tensor[] norms, Tensor(b!)[] keys, Tensor(c!)[] values, "
        "int pos, Tensor cos, Tensor sin, int num_heads, int num_kv_heads, float eps, bool q4, bool int8_x) -> ()");
  m.def("has_avx512() -> bool", TORCH_FN(has_avx512));
  m.def("has_vnni() -> bool", TORCH_FN(has_vnni));
  m.impl("q8_0_matvec", c10::DispatchKey::CPU, TORCH_FN(q8_0_matvec));
  m.impl("q4_1_matvec", c10::DispatchKey::CPU, TORCH_FN(q4_1_matvec));
  m.impl("q8_0_matvec_q8x", c10::DispatchKey::CPU, TORCH_FN(q8_0_matvec_q8x));
  m.impl("q4_1_matvec_q8x", c10::DispatchKey::CPU, TORCH_FN(q4_1_matvec_q8x));
  m.impl("decode_step", c10::DispatchKey::CPU, TORCH_FN(decode_step));
}
