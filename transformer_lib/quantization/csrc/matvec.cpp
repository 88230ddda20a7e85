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
// Three paths, chosen at run time (kernels.py's `path`; "auto" takes the fastest this CPU runs):
//   avx512    16 weights per instruction; for int8 x, AVX-512 VNNI (see below)
//   avx2      AVX2 + FMA, 8 weights per instruction; for int8 x, vpmaddubsw + vpmaddwd: what most
//             laptops have (Intel consumer CPUs, many AMD)
//   portable  plain loops, any CPU and any group size
// The two vector paths are one set of loops (matvec_simd.h) compiled twice, for each instruction
// set, with a target attribute: one build serves every x86-64 CPU. They take group sizes that are
// multiples of 32 (llama.cpp's is 32). The block sums of x for q4_1's minimum are computed once.
//
// The *_q8x ops are llama.cpp's way (its Q8_0 x Q4_1 / Q8_0 dot products): x is quantized once per
// call, per block of gs values, to int8 codes qx with a float32 scale dx = max|x| / 127 (and
// sx = dx * sum qx for q4_1's minimum). A block's dot product is then exact integer arithmetic,
//   sum_j q_j qx_j   (|q_j qx_j| <= 127 * 127, 32 of them: far inside int32),
// one VNNI instruction (vpdpbusd: 32 byte products summed into 8 int32) for 32 weights (AVX2: two,
// vpmaddubsw and vpmaddwd), and one float multiply-add by d * dx per block. The result is exactly
// x^ @ W^T for x^ = dx * qx, up to the order of the float additions over blocks; the error against
// float x is that of x^.
// ATen/core/Tensor.h and the three operators used, not all of ATen/ATen.h: about 5 s less of
// compiler time per build
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/mm.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <torch/library.h>  // registered as torch.ops.tlib_quant.*: no Python headers needed

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <string>
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
// One block's share of a row's dot product with x; xsum (q4_1 only) is the sum of x over the block.
struct Q8Block {  // [d: f16][q: gs x int8]: d * sum q x
  static int64_t bytes(int64_t gs) { return 2 + gs; }
  static float dot(const uint8_t* blk, const float* xg, int64_t gs, float) {
    const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
    float acc = 0.0f;
    for (int64_t j = 0; j < gs; ++j) acc += static_cast<float>(q[j]) * xg[j];
    return half_at(blk) * acc;
  }
};

struct Q41Block {  // [d: f16][m: f16][gs / 2 bytes: low nibbles first half, high second]
  static int64_t bytes(int64_t gs) { return 4 + gs / 2; }
  static float dot(const uint8_t* blk, const float* xg, int64_t gs, float xsum) {
    const uint8_t* qs = blk + 4;
    const int64_t half = gs / 2;
    float acc = 0.0f;
    for (int64_t j = 0; j < half; ++j)
      acc += static_cast<float>(qs[j] & 15) * xg[j] + static_cast<float>(qs[j] >> 4) * xg[j + half];
    return half_at(blk) * acc + half_at(blk + 2) * xsum;  // d * sum q x + m * sum x
  }
};

template <class Block>
void rows_portable(const float* X, const float* XS, int64_t B, int64_t K, const uint8_t* W, int64_t gs, float* O,
                   int64_t N, int64_t n0, int64_t n1) {
  const int64_t G = K / gs, bpb = Block::bytes(gs);  // blocks per row, bytes per block
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = W + n * G * bpb;
    for (int64_t b = 0; b < B; ++b) {
      float total = 0.0f;
      for (int64_t g = 0; g < G; ++g) total += Block::dot(row + g * bpb, X + b * K + g * gs, gs, XS[b * G + g]);
      O[b * N + n] = total;
    }
  }
}

#ifdef TLIB_X86
// ---- vector paths: the loops of matvec_simd.h, compiled once per instruction set ------------
// Each namespace below defines its instruction set's struct, then includes matvec_simd.h inside a
// target region (GCC: #pragma GCC target; clang: #pragma clang attribute), so the loops are
// compiled for those instructions only there, and the rest of the library for any x86-64 CPU.
#define TLIB_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define TLIB_TARGET_BEGIN(isa) TLIB_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define TLIB_TARGET_END TLIB_PRAGMA(clang attribute pop)
#else
#define TLIB_TARGET_BEGIN(isa) TLIB_PRAGMA(GCC push_options) TLIB_PRAGMA(GCC target(isa))
#define TLIB_TARGET_END TLIB_PRAGMA(GCC pop_options)
#endif

// AVX-512 (float x): 16 floats per register, 32 registers.
namespace avx512 {
TLIB_TARGET_BEGIN("avx512f,avx512vl,avx512bw,avx2,fma,f16c")
struct V {
  using F = __m512;
  static constexpr int kLanes = 16, kBatch = 8;  // kBatch rows of x: 2 x 8 accumulators of 32 registers
  static F zero() { return _mm512_setzero_ps(); }
  static F splat(float v) { return _mm512_set1_ps(v); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(F v) { return _mm512_reduce_add_ps(v); }
  // 16 int8 codes -> 16 int32 (sign-extended) -> 16 floats
  static F q8(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  // 16 bytes -> 16 int32 (zero-extended); the low four bits of each, and the high four, as floats
  static void q4(const uint8_t* p, F& lo, F& hi) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)));
    hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
  }
};
#include "matvec_simd.h"
TLIB_TARGET_END
}  // namespace avx512

// AVX-512 VNNI (int8 x): vpdpbusd multiplies 32 unsigned bytes by 32 signed bytes and adds each
// four neighbouring products into one of 8 int32 lanes, in one instruction.
namespace vnni {
TLIB_TARGET_BEGIN("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")
struct V {
  static __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
};
#include "matvec_simd.h"
TLIB_TARGET_END
}  // namespace vnni

// AVX2 + FMA (both kinds of x): 8 floats per register, 16 registers; most x86-64 laptops.
namespace avx2 {
TLIB_TARGET_BEGIN("avx2,fma,f16c")
struct V {
  using F = __m256;
  static constexpr int kLanes = 8, kBatch = 4;  // 2 x 4 accumulators leave room in 16 registers
  static F zero() { return _mm256_setzero_ps(); }
  static F splat(float v) { return _mm256_set1_ps(v); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static float sum(F v);  // hsum8, defined in matvec_simd.h
  static __m128i bytes8(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }
  // 8 int8 codes -> 8 int32 (sign-extended) -> 8 floats
  static F q8(const uint8_t* p) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes8(p))); }
  // 8 bytes -> 8 int32 (zero-extended); the low four bits of each, and the high four, as floats
  static void q4(const uint8_t* p, F& lo, F& hi) {
    const __m256i v = _mm256_cvtepu8_epi32(bytes8(p));
    lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
    hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
  }
  // No VNNI: vpmaddubsw multiplies unsigned by signed bytes and adds neighbouring pairs into 16
  // int16 (at most 2 * 128 * 127 = 32,512: no saturation, which is why x's codes stop at -127 and
  // q8_0's sign moves onto x), then vpmaddwd by ones adds neighbouring int16 pairs into 8 int32.
  static __m256i dot(__m256i acc, __m256i u, __m256i s) {
    const __m256i pairs = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};
#include "matvec_simd.h"
float V::sum(F v) { return hsum8(v); }
TLIB_TARGET_END
}  // namespace avx2
#endif  // TLIB_X86

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

// ---- choosing a path at run time ---------------------------------------------------------------
// "auto" takes the fastest path this CPU runs: AVX-512 (for int8 x: with VNNI), else AVX2 + FMA,
// else the portable loops; a group size that is no multiple of 32 always takes the portable loops.
// A named path ("avx512", "avx2", "portable") is taken or refused: kernels.py checks the name first
// and raises ValueError; these checks are the backstop.
enum class Path { kPortable, kAvx2, kAvx512 };

// TLIB_QUANT_MAX_PATH=avx2 (or portable) caps the paths as if the CPU had no faster one, like
// ATen's ATEN_CPU_CAPABILITY: an AVX-512 machine then shows what an AVX2-only laptop gets.
Path max_path() {
  static const Path cap = [] {
    const char* v = std::getenv("TLIB_QUANT_MAX_PATH");
    const std::string s = v ? v : "";
    return s == "portable" ? Path::kPortable : s == "avx2" ? Path::kAvx2 : Path::kAvx512;
  }();
  return cap;
}

bool cpu_runs(Path p, bool int8_x) {
  if (static_cast<int>(p) > static_cast<int>(max_path())) return false;
#ifdef TLIB_X86
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           __builtin_cpu_supports("f16c");
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                             __builtin_cpu_supports("avx512bw");
  static const bool vnni = avx512 && __builtin_cpu_supports("avx512vnni");
  if (p == Path::kAvx512) return int8_x ? vnni : avx512;
  if (p == Path::kAvx2) return avx2;
#endif
  return p == Path::kPortable;
}

Path choose(const std::string& path, bool int8_x, int64_t gs) {
  const bool whole_chunks = gs % 32 == 0;
  if (path == "auto") {
    for (Path p : {Path::kAvx512, Path::kAvx2})
      if (whole_chunks && cpu_runs(p, int8_x)) return p;
    return Path::kPortable;
  }
  const Path p = path == "avx512" ? Path::kAvx512 : path == "avx2" ? Path::kAvx2 : Path::kPortable;
  TORCH_CHECK(p != Path::kPortable || path == "portable", "path: auto, avx512, avx2 or portable, not ", path);
  TORCH_CHECK(cpu_runs(p, int8_x), "path ", path, " does not run on this CPU");
  TORCH_CHECK(p == Path::kPortable || whole_chunks, "path ", path, " needs a group size that is a multiple of 32");
  return p;
}

// The paths this CPU runs, fastest first (for int8 x, "avx512" means AVX-512 VNNI).
std::vector<std::string> kernel_paths(bool int8_x) {
  std::vector<std::string> names;
  if (cpu_runs(Path::kAvx512, int8_x)) names.push_back("avx512");
  if (cpu_runs(Path::kAvx2, int8_x)) names.push_back("avx2");
  names.push_back("portable");
  return names;
}

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

// out (B, N) = x (B, K) @ W^T for W as q8_0 blocks (N, K / gs * (2 + gs)) or q4_1 blocks
// (N, K / gs * (4 + gs / 2)) uint8, on the path `path` names (see choose above).
template <bool Q4>
void matvec_f32(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& out, int64_t gs,
                const std::string& path) {
  TORCH_CHECK(!Q4 || gs % 2 == 0, "q4_1 needs an even group size");
  check_args(x, blocks, out, gs, Q4 ? 4 + gs / 2 : 2 + gs);
  const int64_t B = x.size(0), K = x.size(1), N = blocks.size(0), G = K / gs;
  const float* X = x.data_ptr<float>();
  const uint8_t* W = blocks.data_ptr<uint8_t>();
  float* O = out.data_ptr<float>();
  std::vector<float> xsum(static_cast<size_t>(B * G));  // sum of x over each block: for q4_1's minimum
  for (int64_t b = 0; Q4 && b < B; ++b)
    for (int64_t g = 0; g < G; ++g) {
      float s = 0.0f;
      for (int64_t j = 0; j < gs; ++j) s += X[b * K + g * gs + j];
      xsum[b * G + g] = s;
    }
  const float* XS = xsum.data();
  const Path p = choose(path, false, gs);
  at::parallel_for(0, N, grain_rows(blocks.size(1)), [&](int64_t n0, int64_t n1) {
#ifdef TLIB_X86
    if (p == Path::kAvx512) return avx512::rows_f32<avx512::V, Q4>(X, XS, B, K, W, gs, O, N, n0, n1);
    if (p == Path::kAvx2) return avx2::rows_f32<avx2::V, Q4>(X, XS, B, K, W, gs, O, N, n0, n1);
#endif
    if (Q4) rows_portable<Q41Block>(X, XS, B, K, W, gs, O, N, n0, n1);
    else rows_portable<Q8Block>(X, XS, B, K, W, gs, O, N, n0, n1);
  });
}

#ifdef TLIB_X86
namespace vnni_gemm {  // defined with the int8 prefill below (AVX-512)
void quantize_x32(const float* X, int64_t B, int64_t K, int8_t* QX, float* DX, float* SX, int32_t* CX);
}
#endif

// The same products with x quantized to int8 per block of gs first (see the top of the file).
// The codes of x live in buffers kept between calls (this thread's; resized only when x grows).
template <bool Q4>
void matvec_q8x(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& out, int64_t gs,
                const std::string& path) {
  TORCH_CHECK(gs % 2 == 0, "the group size must be even");
  check_args(x, blocks, out, gs, Q4 ? 4 + gs / 2 : 2 + gs);
  const int64_t B = x.size(0), K = x.size(1), N = blocks.size(0), G = K / gs;
  thread_local std::vector<int8_t> qx;
  thread_local std::vector<float> dx, sx;
  thread_local std::vector<int32_t> cx;
  if (qx.size() < static_cast<size_t>(B * K)) qx.resize(B * K);
  if (dx.size() < static_cast<size_t>(B * G)) { dx.resize(B * G); sx.resize(B * G); cx.resize(B * G); }
#ifdef TLIB_X86
  if (gs == 32 && cpu_runs(Path::kAvx512, true))  // the same codes, 32 values per two instructions
    vnni_gemm::quantize_x32(x.data_ptr<float>(), B, K, qx.data(), dx.data(), sx.data(), cx.data());
  else
#endif
    quantize_x(x.data_ptr<float>(), B, K, gs, qx.data(), dx.data(), sx.data());
  const int8_t* QX = qx.data();
  const float *DX = dx.data(), *SX = sx.data();
  const uint8_t* W = blocks.data_ptr<uint8_t>();
  float* O = out.data_ptr<float>();
  const Path p = choose(path, true, gs);
  at::parallel_for(0, N, grain_rows(blocks.size(1)), [&](int64_t n0, int64_t n1) {
#ifdef TLIB_X86
    if (p == Path::kAvx512) return vnni::rows_q8x<vnni::V, Q4>(QX, DX, SX, B, K, W, gs, O, N, n0, n1);
    if (p == Path::kAvx2) return avx2::rows_q8x<avx2::V, Q4>(QX, DX, SX, B, K, W, gs, O, N, n0, n1);
#endif
    rows_q8x_portable<Q4>(QX, DX, SX, B, K, W, gs, O, N, n0, n1);
  });
}

// the four ops: (weights' format) x (float or int8 x)
void q8_0_matvec(const at::Tensor& x, const at::Tensor& b, const at::Tensor& o, int64_t gs, std::string path) {
  matvec_f32<false>(x, b, o, gs, path);
}
void q4_1_matvec(const at::Tensor& x, const at::Tensor& b, const at::Tensor& o, int64_t gs, std::string path) {
  matvec_f32<true>(x, b, o, gs, path);
}
void q8_0_matvec_q8x(const at::Tensor& x, const at::Tensor& b, const at::Tensor& o, int64_t gs, std::string path) {
  matvec_q8x<false>(x, b, o, gs, path);
}
void q4_1_matvec_q8x(const at::Tensor& x, const at::Tensor& b, const at::Tensor& o, int64_t gs, std::string path) {
  matvec_q8x<true>(x, b, o, gs, path);
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
    if (int8_x) (q4 ? q4_1_matvec_q8x : q8_0_matvec_q8x)(in, w, out, 32, "auto");
    else (q4 ? q4_1_matvec : q8_0_matvec)(in, w, out, 32, "auto");
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

std::vector<std::string> paths(bool int8_x) { return kernel_paths(int8_x); }

// ---- prefill: many rows of x at once (kernels.py's matmul) --------------------------------------
// A prompt of B tokens multiplies each W by B rows: 2 B flops per weight, so for a long prompt the
// arithmetic, not the bytes, is the limit, and the matrix-vector loops above (which decode every
// weight again for each group of kBatch rows) lose to BLAS. Here W is cut into tiles of T rows;
// each tile is decoded to float32 once (matvec_simd.h's decode_rows; T x K floats, about 128 KB:
// it stays in the core's cache) and multiplied with all B rows of x by one BLAS call,
// out[:, n0:n1] = x @ tile^T. The decoding costs a few instructions per weight, once, beside the
// matmul's 2 B flops per weight, and no float32 copy of all of W is written; the tiles are shared out
// over the threads (each BLAS call runs on its own thread).
namespace {

template <bool Q4>
void decode_tile_portable(const uint8_t* W, int64_t G, int64_t gs, int64_t rows, float* dst) {
  const int64_t bpb = Q4 ? 4 + gs / 2 : 2 + gs, half = gs / 2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* blk = W + (r * G + g) * bpb;
      float* w = dst + (r * G + g) * gs;
      const float d = half_at(blk);
      if (Q4) {
        const float m = half_at(blk + 2);
        const uint8_t* qs = blk + 4;
        for (int64_t j = 0; j < half; ++j) {  // w_j = d q_j + m, the same float32 steps as formats.py
          w[j] = d * static_cast<float>(qs[j] & 15) + m;
          w[j + half] = d * static_cast<float>(qs[j] >> 4) + m;
        }
      } else {
        const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
        for (int64_t j = 0; j < gs; ++j) w[j] = d * static_cast<float>(q[j]);
      }
    }
}



// rows of W per tile: about 128 KB of decoded floats, a multiple of 16, at least 16
int64_t tile_rows(int64_t K) { return std::max<int64_t>(16, (128 * 1024 / (4 * K)) / 16 * 16); }

}  // namespace

template <bool Q4>
void matmul_tiles(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& out, int64_t gs) {
  TORCH_CHECK(!Q4 || gs % 2 == 0, "q4_1 needs an even group size");
  check_args(x, blocks, out, gs, Q4 ? 4 + gs / 2 : 2 + gs);
  const int64_t K = x.size(1), N = blocks.size(0), G = K / gs, T = tile_rows(K);
  const int64_t row_bytes = blocks.size(1), tiles = (N + T - 1) / T;
  const uint8_t* W = blocks.data_ptr<uint8_t>();
  const Path p = choose("auto", false, gs);
  at::parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> buf(static_cast<size_t>(T * K));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * T, rows = std::min(T, N - n0);
      const uint8_t* tile_blocks = W + n0 * row_bytes;
#ifdef TLIB_X86
      if (p == Path::kAvx512) avx512::decode_rows<avx512::V, Q4>(tile_blocks, G, gs, rows, buf.data());
      else if (p == Path::kAvx2) avx2::decode_rows<avx2::V, Q4>(tile_blocks, G, gs, rows, buf.data());
      else
#endif
        decode_tile_portable<Q4>(tile_blocks, G, gs, rows, buf.data());
      const at::Tensor tile = at::from_blob(buf.data(), {rows, K}, at::kFloat);  // (rows, K), decoded once
      at::Tensor cols = out.narrow(1, n0, rows);  // (B, rows): a strided view of out, written by BLAS
      at::mm_out(cols, x, tile.t());  // (B, K) @ (K, rows) -> (B, rows)
    }
  });
}

void q8_0_matmul(const at::Tensor& x, const at::Tensor& b, const at::Tensor& o, int64_t gs) {
  matmul_tiles<false>(x, b, o, gs);
}
void q4_1_matmul(const at::Tensor& x, const at::Tensor& b, const at::Tensor& o, int64_t gs) {
  matmul_tiles<true>(x, b, o, gs);
}


// ---- prefill with int8 x: an int8 GEMM on AVX-512 VNNI (kernels.py's matmul, activations="int8") ---
// x is quantized per block of 32 as for the *_q8x ops (quantize_x: codes qx, scale dx). W is cut
// into tiles of 16 rows; each tile is unpacked once into bytes laid out for vpdpbusd,
//   tile[g][s][r][0..3] = codes 4s..4s+3 of block g of row r   (64 bytes per (g, s): one register),
// with the 16 rows' scales d (and minima m) side by side. Then for 8 rows of x at a time, per block
// g and step s, one register of weights times x's 4 codes 4s..4s+3 broadcast to every lane is one
// vpdpbusd: 16 rows x 4 codes, 64 byte products summed into 16 int32 (exact). After the 8 steps of
// a block, the 16 integer sums are scaled at once, acc += float(dot) * (d * dx) (+ m * sx for q4_1):
// 512 multiply-adds in 8 integer instructions and 3 float ones per row of x, against 32 float
// multiply-adds for the same work in float32, and the tile (a few KB) is reused for every row of x.
// vpdpbusd multiplies unsigned by signed bytes: q4_1's codes 0..15 are unsigned as they are;
// q8_0's signed codes are stored as q + 128, and 128 * (sum of x's codes) is taken off the sum.
#ifdef TLIB_X86
namespace vnni_gemm {
TLIB_TARGET_BEGIN("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")
constexpr int kRows = 16, kCols = 8;  // rows of W per tile (one register of int32), rows of x per pass

// rows n0..n0+15 of W (rows past N: zeros, scale 0) -> the tile layout above
template <bool Q4>
void unpack_tile(const uint8_t* W, int64_t N, int64_t n0, int64_t G, uint8_t* tw, float* td, float* tm) {
  const int64_t bpb = Q4 ? 20 : 34, rowb = G * bpb;
  uint32_t* dst = reinterpret_cast<uint32_t*>(tw);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t g = 0; g < G; ++g) {
      alignas(32) uint32_t codes[8] = {};  // the block's 32 codes, 4 to a word
      float d = 0.0f, m = 0.0f;
      if (n0 + r < N) {
        const uint8_t* blk = W + (n0 + r) * rowb + g * bpb;
        d = vnni::half_f16c(blk);
        if (Q4) {  // low nibbles: codes 0..15, high nibbles: codes 16..31
          m = vnni::half_f16c(blk + 2);
          const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
          const __m128i low4 = _mm_set1_epi8(15);
          _mm_store_si128(reinterpret_cast<__m128i*>(codes), _mm_and_si128(v, low4));
          _mm_store_si128(reinterpret_cast<__m128i*>(codes + 4), _mm_and_si128(_mm_srli_epi16(v, 4), low4));
        } else {  // q + 128: unsigned
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
          _mm256_store_si256(reinterpret_cast<__m256i*>(codes), _mm256_xor_si256(v, _mm256_set1_epi8(-128)));
        }
      }
      for (int s = 0; s < 8; ++s) dst[(g * 8 + s) * kRows + r] = codes[s];
      td[g * kRows + r] = d;
      if (Q4) tm[g * kRows + r] = m;
    }
  }
}

// NB rows of x (from b0) against the unpacked tile: out[b0 + b, n0 .. n0 + valid)
template <bool Q4, int NB>
void tile_cols(const uint8_t* tw, const float* td, const float* tm, const int8_t* QX, const float* DX,
               const float* SX, const int32_t* CX, int64_t K, int64_t G, int64_t b0, float* O, int64_t N,
               int64_t n0, int64_t valid) {
  __m512 acc[NB];
  for (int b = 0; b < NB; ++b) acc[b] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m512i dot[NB];
    for (int b = 0; b < NB; ++b)  // q8_0: start from -128 * (sum of x's codes), the offset's share
      dot[b] = Q4 ? _mm512_setzero_si512() : _mm512_set1_epi32(-CX[(b0 + b) * G + g]);
    const uint8_t* wg = tw + g * 8 * 64;
    const int8_t* xg = QX + b0 * K + g * 32;
    for (int s = 0; s < 8; ++s) {
      const __m512i w = _mm512_loadu_si512(wg + s * 64);  // 16 rows x codes 4s..4s+3
      for (int b = 0; b < NB; ++b) {
        int32_t four;  // x's codes 4s..4s+3 of row b0 + b
        std::memcpy(&four, xg + b * K + s * 4, 4);
        dot[b] = _mm512_dpbusd_epi32(dot[b], w, _mm512_set1_epi32(four));
      }
    }
    const __m512 d = _mm512_loadu_ps(td + g * kRows);
    for (int b = 0; b < NB; ++b) {
      const int64_t i = (b0 + b) * G + g;
      acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[b]), _mm512_mul_ps(d, _mm512_set1_ps(DX[i])), acc[b]);
      if (Q4) acc[b] = _mm512_fmadd_ps(_mm512_loadu_ps(tm + g * kRows), _mm512_set1_ps(SX[i]), acc[b]);
    }
  }
  const __mmask16 mask = valid >= kRows ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1);
  for (int b = 0; b < NB; ++b) _mm512_mask_storeu_ps(O + (b0 + b) * N + n0, mask, acc[b]);
}

// quantize_x for group size 32, 32 values in two registers: the same float32 steps (amax / 127,
// 1 / d, x * (1 / d) rounded half to even by the default rounding mode, clamped), so the same codes
// bit for bit; also CX = 128 * the sum of each block's codes. Rows shared out over the threads.
void quantize_x32(const float* X, int64_t B, int64_t K, int8_t* QX, float* DX, float* SX, int32_t* CX) {
  const int64_t G = K / 32;
  at::parallel_for(0, B, 16, [&](int64_t b0, int64_t b1) {
    const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    for (int64_t i = b0 * G; i < b1 * G; ++i) {  // block i: row i / G, group i % G
      const __m512 a = _mm512_loadu_ps(X + i * 32), b = _mm512_loadu_ps(X + i * 32 + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
      const float d = amax / 127.0f;
      const __m512 id = _mm512_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
      const __m512i qa = _mm512_cvtps_epi32(_mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_mul_ps(a, id))));
      const __m512i qb = _mm512_cvtps_epi32(_mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_mul_ps(b, id))));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(QX + i * 32), _mm512_cvtepi32_epi8(qa));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(QX + i * 32 + 16), _mm512_cvtepi32_epi8(qb));
      const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
      DX[i] = d;
      SX[i] = d * static_cast<float>(sum);
      CX[i] = 128 * sum;
    }
  });
}

template <bool Q4>
void matmul(const int8_t* QX, const float* DX, const float* SX, const int32_t* CX, int64_t B, int64_t K,
            const uint8_t* W, int64_t N, float* O) {
  const int64_t G = K / 32, tiles = (N + kRows - 1) / kRows;
  at::parallel_for(0, tiles, 4, [&](int64_t t0, int64_t t1) {
    std::vector<uint8_t> tw(static_cast<size_t>(G * 8 * 64));
    std::vector<float> td(static_cast<size_t>(G * kRows)), tm(static_cast<size_t>(G * kRows));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * kRows, valid = std::min<int64_t>(kRows, N - n0);
      unpack_tile<Q4>(W, N, n0, G, tw.data(), td.data(), tm.data());
      int64_t b = 0;
      for (; b + kCols <= B; b += kCols)
        tile_cols<Q4, kCols>(tw.data(), td.data(), tm.data(), QX, DX, SX, CX, K, G, b, O, N, n0, valid);
      for (; b < B; ++b) tile_cols<Q4, 1>(tw.data(), td.data(), tm.data(), QX, DX, SX, CX, K, G, b, O, N, n0, valid);
    }
  });
}
TLIB_TARGET_END
}  // namespace vnni_gemm
#endif  // TLIB_X86

// out (B, N) = x^ @ W^T with x^ = x quantized per block of 32 (as the *_q8x ops), on AVX-512 VNNI.
// kernels.py calls it only where vnni_available() and the group size is 32; elsewhere it computes
// the same product from x^ decoded and the tiles of matmul_tiles.
template <bool Q4>
void matmul_q8x(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& out, int64_t gs) {
  check_args(x, blocks, out, gs, Q4 ? 4 + gs / 2 : 2 + gs);
  TORCH_CHECK(gs == 32 && cpu_runs(Path::kAvx512, true), "the int8 prefill op needs AVX-512 VNNI and group size 32");
#ifdef TLIB_X86
  const int64_t B = x.size(0), K = x.size(1), N = blocks.size(0), G = K / gs;
  std::vector<int8_t> qx(static_cast<size_t>(B * K));
  std::vector<float> dx(static_cast<size_t>(B * G)), sx(static_cast<size_t>(B * G));
  std::vector<int32_t> cx(static_cast<size_t>(B * G));
  vnni_gemm::quantize_x32(x.data_ptr<float>(), B, K, qx.data(), dx.data(), sx.data(), cx.data());
  vnni_gemm::matmul<Q4>(qx.data(), dx.data(), sx.data(), cx.data(), B, K, blocks.data_ptr<uint8_t>(), N,
                        out.data_ptr<float>());
#endif
}

void q8_0_matmul_q8x(const at::Tensor& x, const at::Tensor& b, const at::Tensor& o, int64_t gs) {
  matmul_q8x<false>(x, b, o, gs);
}
void q4_1_matmul_q8x(const at::Tensor& x, const at::Tensor& b, const at::Tensor& o, int64_t gs) {
  matmul_q8x<true>(x, b, o, gs);
}


TORCH_LIBRARY(tlib_quant, m) {
  // out is written in place (a!); called eagerly from kernels.py only
  m.def("q8_0_matvec(Tensor x, Tensor blocks, Tensor(a!) out, int group_size, str path) -> ()");
  m.def("q4_1_matvec(Tensor x, Tensor blocks, Tensor(a!) out, int group_size, str path) -> ()");
  m.def("q8_0_matvec_q8x(Tensor x, Tensor blocks, Tensor(a!) out, int group_size, str path) -> ()");
  m.def("q4_1_matvec_q8x(Tensor x, Tensor blocks, Tensor(a!) out, int group_size, str path) -> ()");
  m.def("decode_step(Tensor(a!) x, Tensor[] weights, Tensor[] norms, Tensor(b!)[] keys, Tensor(c!)[] values, "
        "int pos, Tensor cos, Tensor sin, int num_heads, int num_kv_heads, float eps, bool q4, bool int8_x) -> ()");
  m.def("q8_0_matmul(Tensor x, Tensor blocks, Tensor(a!) out, int group_size) -> ()");
  m.def("q4_1_matmul(Tensor x, Tensor blocks, Tensor(a!) out, int group_size) -> ()");
  m.def("q8_0_matmul_q8x(Tensor x, Tensor blocks, Tensor(a!) out, int group_size) -> ()");
  m.def("q4_1_matmul_q8x(Tensor x, Tensor blocks, Tensor(a!) out, int group_size) -> ()");
  m.def("paths(bool int8_x) -> str[]", TORCH_FN(paths));
  m.impl("q8_0_matvec", c10::DispatchKey::CPU, TORCH_FN(q8_0_matvec));
  m.impl("q4_1_matvec", c10::DispatchKey::CPU, TORCH_FN(q4_1_matvec));
  m.impl("q8_0_matvec_q8x", c10::DispatchKey::CPU, TORCH_FN(q8_0_matvec_q8x));
  m.impl("q4_1_matvec_q8x", c10::DispatchKey::CPU, TORCH_FN(q4_1_matvec_q8x));
  m.impl("decode_step", c10::DispatchKey::CPU, TORCH_FN(decode_step));
  m.impl("q8_0_matmul", c10::DispatchKey::CPU, TORCH_FN(q8_0_matmul));
  m.impl("q4_1_matmul", c10::DispatchKey::CPU, TORCH_FN(q4_1_matmul));
  m.impl("q8_0_matmul_q8x", c10::DispatchKey::CPU, TORCH_FN(q8_0_matmul_q8x));
  m.impl("q4_1_matmul_q8x", c10::DispatchKey::CPU, TORCH_FN(q4_1_matmul_q8x));
}
