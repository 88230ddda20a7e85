// The sliding window, fused: each block of queries goes through its whole tile in one pass while
// the tile's scores are still in the cache. Built by transformer_lib/sparse/fused.py with
// torch.utils.cpp_extension the first time kernel="fused" is used; the method is the one of
// tiles.py (read it first): scores in base 2, no row max, row sums returned so that Python can
// check them and redo the rows that left float32's range, division after the product with v.
// The check happens here too: a row whose sum left [2^-60, 2^100] or whose output is not finite
// gets a NaN sum and is counted in `bad`, and Python redoes it with the max subtracted (a
// finite output needs no bound on |v|; tiles.py checks the sums against 2^100 / max|v| instead).
#include <ATen/core/Tensor.h>  // not all of ATen/ATen.h (no operator is called): about 5 s less to compile
#include <ATen/Parallel.h>
#include <torch/library.h>  // registered as torch.ops.tlib_window.window_fused: no Python headers needed

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

// BLAS's single-precision matrix product (column-major, Fortran calling convention). PyTorch's
// CPU library exports it (from MKL or OpenBLAS); inside our parallel loop it runs on one thread.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);

// 2^x, relative error about 2e-8 (plus float32 rounding) for -126 <= x <= 127: x = n + f with n
// an integer and |f| <= 1/2, 2^f from a degree-6 polynomial fitted to it on [-1/2, 1/2] (least
// squares on Chebyshev nodes, relative error 1.6e-8), 2^n put straight into the exponent bits.
// Written without branches so that the compiler vectorizes the loop that calls it.
static inline float exp2_approx(float x) {
  x = std::min(std::max(x, -126.0f), 127.0f);  // 2^-126: a weight that small never matters
  const float n = std::nearbyint(x);
  const float f = x - n;
  const float p = 1.0f + f * (0.6931471824645996f + f * (0.24022646248340607f + f * (0.05550329014658928f +
                  f * (0.009618519805371761f + f * (0.0013399859890341759f + f * 0.00015337577497120947f)))));
  int32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += static_cast<int32_t>(n) << 23;  // multiply by 2^n
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// q, k: (BH, L, d); v, out: (BH, L, d_v); sums: (BH, L); all contiguous float32; bad: one int64.
// Query i sees keys i - half .. i + right. `c` is the score scale times log2(e).
void window_fused(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                  const at::Tensor& sums, const at::Tensor& bad, int64_t half, int64_t right, int64_t block,
                  double c) {
  const int64_t BH = q.size(0), L = q.size(1);
  const int d = static_cast<int>(q.size(2)), dv = static_cast<int>(v.size(2));
  const int64_t blocks = (L + block - 1) / block;
  const float* Q = q.data_ptr<float>();
  const float* K = k.data_ptr<float>();
  const float* V = v.data_ptr<float>();
  float* O = out.data_ptr<float>();
  float* SUM = sums.data_ptr<float>();
  int64_t* BAD = bad.data_ptr<int64_t>();
  *BAD = 0;
  const float low = std::ldexp(1.0f, -60), high = std::ldexp(1.0f, 100);
  const float scale = static_cast<float>(c), zero = 0.0f, one = 1.0f;
  at::parallel_for(0, BH * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> S(static_cast<size_t>(block) * (block + half + right));  // one tile's weights
    int64_t bad_rows = 0;
    for (int64_t job = begin; job < end; ++job) {
      const int64_t bh = job / blocks, s = (job % blocks) * block;  // head, first query of the block
      const int rows = static_cast<int>(std::min(block, L - s));
      const int64_t ks = std::max<int64_t>(0, s - half), ke = std::min<int64_t>(L, s + rows + right);
      const int W = static_cast<int>(ke - ks);  // the keys this block can see: [ks, ke)
      const float* Qb = Q + (bh * L + s) * d;
      const float* Kb = K + (bh * L + ks) * d;
      const float* Vb = V + (bh * L + ks) * dv;
      float* Ob = O + (bh * L + s) * dv;
      float* Sb = SUM + bh * L + s;
      // S (rows x W, row-major) = scale * Qb Kb^T; in BLAS's column-major terms S^T = Kb Qb^T
      sgemm_("T", "N", &W, &rows, &d, &scale, Kb, &d, Qb, &d, &zero, S.data(), &W);
      for (int r = 0; r < rows; ++r) {
        float* row = S.data() + static_cast<size_t>(r) * W;
        const int64_t i = s + r;
        const int lo = static_cast<int>(std::max<int64_t>(0, i - half) - ks);
        const int hi = static_cast<int>(std::min<int64_t>(L - 1, i + right) - ks);  // columns lo..hi: the band
        std::fill(row, row + lo, 0.0f);
        float total = 0.0f;
        for (int j = lo; j <= hi; ++j) {
          const float x = row[j];
          const float w = (x == x) ? exp2_approx(x) : x;  // NaN stays NaN (and fails the row's check)
          row[j] = w;
          total += w;
        }
        std::fill(row + hi + 1, row + W, 0.0f);
        Sb[r] = total;
      }
      // Ob (rows x d_v) = S Vb; column-major: Ob^T = Vb^T S^T
      sgemm_("N", "N", &dv, &rows, &W, &one, Vb, &dv, S.data(), &W, &zero, Ob, &dv);
      for (int r = 0; r < rows; ++r) {
        const float inv = 1.0f / Sb[r];
        float* orow = Ob + static_cast<size_t>(r) * dv;
        bool finite = true;
        for (int j = 0; j < dv; ++j) {
          orow[j] *= inv;
          finite &= std::isfinite(orow[j]);
        }
        if (!finite || !(Sb[r] >= low && Sb[r] <= high)) {  // NaN fails the range test too
          Sb[r] = NAN;
          ++bad_rows;
        }
      }
    }
    if (bad_rows) __atomic_fetch_add(BAD, bad_rows, __ATOMIC_RELAXED);
  });
}

TORCH_LIBRARY(tlib_window, m) {
  // out and sums are written in place (a!, b!); called eagerly from fused.py only
  m.def("window_fused(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor(b!) sums, Tensor(c!) bad, int half, "
        "int right, int block, float c) -> ()");
  m.impl("window_fused", c10::DispatchKey::CPU, TORCH_FN(window_fused));
}
