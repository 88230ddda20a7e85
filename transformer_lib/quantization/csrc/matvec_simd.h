// The vector loops of matvec.cpp, written once over an instruction set V: a struct of static
// functions (V::load, V::fma, V::q8, ...) that matvec.cpp defines for AVX-512, AVX-512 VNNI and
// AVX2. matvec.cpp includes this file once per instruction set, each time in its own namespace
// and inside a `#pragma GCC target` region, so each copy is compiled for its own instructions
// while the library itself loads on any x86-64 CPU; which copy runs is decided at run time.
// Every loop here takes whole chunks of 32 codes: the group size is a multiple of 32.
//
// Float x (V::F is a register of V::kLanes floats):
//   tile_f32      R rows of W times NB rows of x, every accumulator in a register
//   rows_f32      rows n0..n1 of W against all B rows of x, in tiles
// Int8 x (256-bit registers on every instruction set; V::dot is the byte dot product):
//   tile_q8x      R rows of W against every row of x's codes
//   rows_q8x      rows n0..n1 of W, in tiles of 4 rows
// No #include here: matvec.cpp has included <immintrin.h> before.

inline float half_f16c(const uint8_t* p) {  // a little-endian float16 at p, as float32 (F16C)
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return _cvtsh_ss(bits);
}

inline float hsum8(__m256 v) {  // the sum of 8 floats: halves, then pairs, then the last two
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// R rows of W times NB rows of x per pass, R and NB fixed at compile time so that every
// accumulator lives in a register. Per block, the codes (as floats) times x are summed unscaled
// into `acc`, then one multiply-add adds d times that sum to the row's total: one scale per block,
// not one per weight (and for q4_1, m times the block's sum of x, XS, in a scalar). R = 4 rows
// give four independent chains of multiply-adds at batch 1 (a multiply-add takes 4 cycles and two
// can start per cycle).
template <class V, int R, int NB, bool Q4>
void tile_f32(const float* X, const float* XS, int64_t K, const uint8_t* W, int64_t gs, float* O, int64_t N,
              int64_t n) {
  using F = typename V::F;
  const int64_t G = K / gs, half = gs / 2, bpb = Q4 ? 4 + half : 2 + gs;
  F total[R][NB];
  float mins[R][NB] = {};
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) total[r][b] = V::zero();
  for (int64_t g = 0; g < G; ++g) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = W + ((n + r) * G + g) * bpb;
      F acc[NB];
      for (int b = 0; b < NB; ++b) acc[b] = V::zero();
      if (Q4) {
        for (int64_t j = 0; j < half; j += V::kLanes) {
          F lo, hi;  // the codes of weights j.. (low nibbles) and j + gs/2.. (high nibbles)
          V::q4(blk + 4 + j, lo, hi);
          for (int b = 0; b < NB; ++b) {
            const float* xg = X + b * K + g * gs;
            acc[b] = V::fma(lo, V::load(xg + j), acc[b]);
            acc[b] = V::fma(hi, V::load(xg + j + half), acc[b]);
          }
        }
      } else {
        for (int64_t j = 0; j < gs; j += V::kLanes) {
          const F w = V::q8(blk + 2 + j);  // the codes of weights j..
          for (int b = 0; b < NB; ++b) acc[b] = V::fma(w, V::load(X + b * K + g * gs + j), acc[b]);
        }
      }
      const F d = V::splat(half_f16c(blk));
      const float m = Q4 ? half_f16c(blk + 2) : 0.0f;
      for (int b = 0; b < NB; ++b) {
        total[r][b] = V::fma(d, acc[b], total[r][b]);  // d * sum q x
        if (Q4) mins[r][b] += m * XS[b * G + g];         // m * sum x
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) O[b * N + n + r] = V::sum(total[r][b]) + mins[r][b];
}

// Rows n0..n1 of W against NB rows of x, R rows of W at a time, the next R rows prefetched while
// these are computed.
template <class V, int R, int NB, bool Q4>
void rows_fixed(const float* X, const float* XS, int64_t K, const uint8_t* W, int64_t gs, float* O, int64_t N,
                int64_t n0, int64_t n1) {
  const int64_t rowb = K / gs * (Q4 ? 4 + gs / 2 : 2 + gs);
  int64_t n = n0;
  for (; n + R <= n1; n += R) {
    for (int64_t p = 0; p < R * rowb; p += 64)
      _mm_prefetch(reinterpret_cast<const char*>(W + (n + R) * rowb + p), _MM_HINT_T0);
    tile_f32<V, R, NB, Q4>(X, XS, K, W, gs, O, N, n);
  }
  for (; n < n1; ++n) tile_f32<V, 1, NB, Q4>(X, XS, K, W, gs, O, N, n);
}

// All B rows of x: 4 rows of W at a time for one row of x (batch 1, the decoding case), else one
// row of W for V::kBatch (8 with 32 registers, 4 with 16), then 4, 2 rows of x at a time.
template <class V, bool Q4>
void rows_f32(const float* X, const float* XS, int64_t B, int64_t K, const uint8_t* W, int64_t gs, float* O,
              int64_t N, int64_t n0, int64_t n1) {
  const int64_t G = K / gs;
  int64_t b = 0;
  for (; b + V::kBatch <= B; b += V::kBatch)
    rows_fixed<V, 1, V::kBatch, Q4>(X + b * K, XS + b * G, K, W, gs, O + b * N, N, n0, n1);
  if (V::kBatch > 4 && b + 4 <= B) {
    rows_fixed<V, 1, 4, Q4>(X + b * K, XS + b * G, K, W, gs, O + b * N, N, n0, n1);
    b += 4;
  }
  if (b + 2 <= B) { rows_fixed<V, 1, 2, Q4>(X + b * K, XS + b * G, K, W, gs, O + b * N, N, n0, n1); b += 2; }
  if (b < B) rows_fixed<V, 4, 1, Q4>(X + b * K, XS + b * G, K, W, gs, O + b * N, N, n0, n1);
}

// R consecutive rows of W against every row of x's int8 codes QX. Per 32 codes of a block: one
// load of x's codes, shared by the R rows, and per row one load of the weights' codes (q4_1: 16
// bytes, nibbles split by a shift and a mask) and one V::dot (byte products summed into 8 int32,
// exact); per block and row one int -> float conversion and one multiply-add by d * dx. The R rows
// (a few KB) stay in L1 for the B rows of x; the next rows are prefetched while these are computed.
// GS = 32 fixes the group size at compile time (llama.cpp's, the common case: no chunk loop);
// GS = 0 reads it from gs.
template <class V, int R, bool Q4, int GS>
void tile_q8x(const int8_t* QX, const float* DX, const float* SX, int64_t B, int64_t K, const uint8_t* W,
              int64_t gs_, float* O, int64_t N, int64_t n) {
  const int64_t gs = GS ? GS : gs_, G = K / gs, half = gs / 2, bpb = Q4 ? 4 + half : 2 + gs, rowb = G * bpb;
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
      const int8_t* xg = qx + g * gs;
      const uint8_t* blk = tile + g * bpb;  // row r's block: blk + r * rowb
      __m256i dot[R];
      for (int r = 0; r < R; ++r) dot[r] = _mm256_setzero_si256();
      if (Q4) {  // 16 bytes: low nibbles = codes c..c+15, high nibbles = codes c+gs/2..c+gs/2+15
        for (int64_t c = 0; c < half; c += 16) {
          const __m256i xv = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xg + half + c)),
                                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(xg + c)));
          for (int r = 0; r < R; ++r) {
            const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + r * rowb + 4 + c));
            const __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), low4);
            dot[r] = V::dot(dot[r], w, xv);  // codes 0..15 are unsigned
          }
        }
      } else {  // signed x signed: |w| (unsigned) times x with w's sign
        for (int64_t c = 0; c < gs; c += 32) {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + c));
          for (int r = 0; r < R; ++r) {
            const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + r * rowb + 2 + c));
            dot[r] = V::dot(dot[r], _mm256_abs_epi8(w), _mm256_sign_epi8(xv, w));
          }
        }
      }
      for (int r = 0; r < R; ++r) {
        const uint8_t* br = blk + r * rowb;
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r]), _mm256_set1_ps(half_f16c(br) * dx[g]), acc[r]);
        if (Q4) mins[r] += half_f16c(br + 2) * sx[g];
      }
    }
    for (int r = 0; r < R; ++r) O[b * N + n + r] = hsum8(acc[r]) + mins[r];
  }
}

template <class V, bool Q4, int GS>
void rows_q8x_fixed(const int8_t* QX, const float* DX, const float* SX, int64_t B, int64_t K, const uint8_t* W,
                    int64_t gs, float* O, int64_t N, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) tile_q8x<V, 4, Q4, GS>(QX, DX, SX, B, K, W, gs, O, N, n);
  for (; n < n1; ++n) tile_q8x<V, 1, Q4, GS>(QX, DX, SX, B, K, W, gs, O, N, n);
}

template <class V, bool Q4>
void rows_q8x(const int8_t* QX, const float* DX, const float* SX, int64_t B, int64_t K, const uint8_t* W,
              int64_t gs, float* O, int64_t N, int64_t n0, int64_t n1) {
  if (gs == 32) rows_q8x_fixed<V, Q4, 32>(QX, DX, SX, B, K, W, gs, O, N, n0, n1);
  else rows_q8x_fixed<V, Q4, 0>(QX, DX, SX, B, K, W, gs, O, N, n0, n1);
}

// Prefill (matvec.cpp's matmul_tiles): `rows` rows of W decoded to float32 (rows, K) at dst, one
// block at a time, w = d q (+ m): V::kLanes weights per instruction.
template <class V, bool Q4>
void decode_rows(const uint8_t* W, int64_t G, int64_t gs, int64_t rows, float* dst) {
  using F = typename V::F;
  const int64_t half = gs / 2, bpb = Q4 ? 4 + half : 2 + gs;
  for (int64_t i = 0; i < rows * G; ++i) {  // block i of the tile: row i / G, group i % G
    const uint8_t* blk = W + i * bpb;
    float* w = dst + i * gs;
    const F d = V::splat(half_f16c(blk));
    if (Q4) {
      const F m = V::splat(half_f16c(blk + 2));
      for (int64_t j = 0; j < half; j += V::kLanes) {
        F lo, hi;
        V::q4(blk + 4 + j, lo, hi);
        V::store(w + j, V::fma(d, lo, m));
        V::store(w + j + half, V::fma(d, hi, m));
      }
    } else {
      for (int64_t j = 0; j < gs; j += V::kLanes) V::store(w + j, V::fma(d, V::q8(blk + 2 + j), V::zero()));
    }
  }
}
