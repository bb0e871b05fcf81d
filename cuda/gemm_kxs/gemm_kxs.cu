// Transposed convolution with kernel == stride (padding 0, dilation 1) as a tensor-core GEMM.
//
// Index math (the only place it is spelled out). Taps never overlap when kernel == stride, so
// output pixel (oh, ow) = (ih*KH + kh, iw*KW + kw) receives exactly one input pixel. Per group g,
// with K = Cin/groups and Cout_g = Cout/groups:
//     m = (n*H + ih)*W + iw               in [0, M),    M = N*H*W          (GEMM row)
//     k = input channel within the group  in [0, K)                         (reduction)
//     j = (oc*KH + kh)*KW + kw            in [0, Ncol), Ncol = Cout_g*KH*KW (GEMM column)
//     A[m, k] = input[n, g*K + k, ih, iw]
//     B[k, j] = weight[g*K + k, oc, kh, kw] = weight_flat[(g*K + k)*Ncol + j]   (contiguous)
// Tap-major columns (a packed weight, for channels_last output): j = (kh*KW + kw)*Cout_g + oc and
// B[k, j] = packed[(g*K + k)*Ncol + j], packed = weight viewed [Cin, Cout_g, KH*KW] transposed to
// [Cin, KH*KW, Cout_g]. A tile's columns are then runs of consecutive output channels of one tap,
// which channels_last output stores contiguously: 16-byte stores instead of 2-element ones.
//     output[n, c, ih*KH + kh, iw*KW + kw] = epilogue_c(sum_k A[m, k] * B[k, j]),  c = g*Cout_g + oc
// where epilogue_c(x) = act((x + bias[c]) * scale[c] + shift[c]) (common/epilogue.cuh), rounded
// once to T. The output offset splits into a row part and a column part,
//     out_off = row_off(m) + col_off(j),
//     row_off(m) = n*os_n + ih*KH*os_h + iw*KW*os_w,
//     col_off(j) = (g*Cout_g + oc)*os_c + kh*os_h + kw*os_w,
// so each block tabulates both once (shared memory), together with the per-column ChannelAffine
// (mul, add) of epilogue_c; the store is then one add of offsets per element. Likewise the input
// offset is a_row(m) + (g*K + k)*is_c with a_row(m) = n*is_n + ih*is_h + iw*is_w. Rows oh >= H*KH /
// columns ow >= W*KW (output_padding) get epilogue_c(0) = act(bias*scale + shift) only: a small
// second kernel.
//
// Block tile 128 (m) x 128 (j) x 32 (k), 8 warps as 2 (m) x 4 (j), warp tile 64 x 32; multi-stage
// cp.async pipeline; fp16/bf16 use ldmatrix + mma.m16n8k16, fp32 uses mma.m16n8k8.tf32 (inputs
// rounded with cvt.rna) or, without allow_tf32, 3xTF32 (see tf32_hi_lo); fp32 accumulate always.
// The C tile is staged through shared memory so the global stores run along ow (NCHW output) or
// along oc (channels_last output; 16 bytes at a time with tap-major columns).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gemm_kxs/gemm_kxs.h"
#include "common/unit_kind.h"
#include "common/device_cache.h"
#include "common/epilogue.cuh"
#include "common/scalar_convert.cuh"
#include "common/tensor_core_ptx.cuh"

namespace deconv_patch {
namespace {

using namespace tc;

constexpr int kBM = 128;
constexpr int kBN = 128;
constexpr int kBK = 32;
constexpr int kThreads = 256;  // 8 warps: 2 along m x 4 along j
constexpr int kWarpM = 64;
constexpr int kWarpN = 32;
constexpr int kMT = kWarpM / 16;  // m16 tiles per warp
constexpr int kNT = kWarpN / 8;   // n8 tiles per warp

template <typename U>
struct TypeTag {
  using type = U;
};

struct GemmArgs {
  const void* in;
  const void* wt;
  const void* bias;
  void* out;
  EpilogueParams epi;  // scale / shift / activation (bias is above)
  int64_t M;      // N*H*W
  int64_t hw;     // H*W
  int64_t w;      // W
  int K;          // Cin / groups
  int ncol;       // Cout_g*KH*KW
  int cout_g;
  int kh, kw, khkw;
  int n_tiles;    // ceil(ncol / kBN)
  int64_t is_n, is_c, is_h, is_w;
  int64_t os_n, os_c, os_h, os_w;
  SmallDiv div_kw, div_khkw;
  bool out_channels_last;
  bool pair_store;  // see Epilogue 2
  bool tap_major;   // column order j = tap*Cout_g + oc (packed weight), see the top comment
  bool vec_store;   // tap_major, channels_last: 16-byte chunks of a row are contiguous + aligned
};

// ---------------------------------------------------------------------------------------------
// Shared-memory geometry. Padding keeps ldmatrix (8 rows of 16 B) and the tf32 scalar fragment
// loads free of bank conflicts:
//   k-contiguous rows (A when input is channels_last): 16 B of padding, row stride 80 B (16-bit,
//     rows hit banks 0,20,8,28,16,4,24,12 (+0..3)) or 144 B (fp32: 36 words, lanes 4*g + t);
//   m/j-contiguous rows (A when NCHW, and B): 8 elements of padding, 272 B (16-bit, 68 words ==
//     4 mod 32) or 544 B (fp32, 136 words == 8 mod 32: lanes 8*t + g).
template <typename T, bool A_KMAJOR>
struct Smem {
  static constexpr int kPadK = 16 / (int)sizeof(T);
  static constexpr int kLdA = A_KMAJOR ? kBK + kPadK : kBM + 8;  // elements
  static constexpr int kARows = A_KMAJOR ? kBM : kBK;
  static constexpr int kLdB = kBN + 8;
  static constexpr int kABytes = kARows * kLdA * (int)sizeof(T);
  static constexpr int kBBytes = kBK * kLdB * (int)sizeof(T);
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kStages = sizeof(T) == 4 ? 3 : 4;
  // The output tile is staged in T (row stride kLdC), or as fp32 accumulators (kLdC32) when the
  // epilogue has an activation; kCBytes covers both.
  static constexpr int kLdC = kBN + kPadK;
  static constexpr int kLdC32 = kBN + 4;
  static constexpr int kCBytes = kBM * kLdC32 * 4;
  static_assert(kLdC * sizeof(T) <= kLdC32 * 4, "fp32 staging is the larger");
  // Per-block tables: a_row[BM], o_row[BM], o_col[BN] (int64), epilogue mul[BN], add[BN] (float).
  static constexpr int kMetaBytes = (2 * kBM + kBN) * 8 + 2 * kBN * 4;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kTotalBytes = kMetaBytes + (kPipeBytes > kCBytes ? kPipeBytes : kCBytes);
  static_assert(kABytes % 16 == 0 && kBBytes % 16 == 0 && kMetaBytes % 16 == 0, "alignment");
  static_assert((kLdA * sizeof(T)) % 16 == 0 && (kLdB * sizeof(T)) % 16 == 0, "row alignment");
};

// ---------------------------------------------------------------------------------------------
// Main kernel. T: element type. A_KMAJOR: shared A tile is [m][k] (channels_last input, or any
// input whose channel stride is the smaller one) rather than [k][m]. VA / VB: elements per global
// load of A / B (a chunk is contiguous and VA*sizeof(T) aligned; the launcher proves it).
// SPLIT (T = float only): 3xTF32 instead of one TF32 product (fp32 without allow_tf32).
// Two blocks per SM (128 registers) except in 3xTF32 mode, whose split fragments and second
// accumulator need up to 255.
template <typename T, bool A_KMAJOR, int VA, int VB, bool SPLIT>
__global__ void __launch_bounds__(kThreads, SPLIT ? 1 : 2)
    conv_transpose2d_gemm_kxs_kernel(const GemmArgs p) {
  static_assert(!SPLIT || sizeof(T) == 4, "3xTF32 is an fp32 mode");
  using S = Smem<T, A_KMAJOR>;
  constexpr int kStages = S::kStages;
  extern __shared__ __align__(16) unsigned char smem[];
  int64_t* a_row = reinterpret_cast<int64_t*>(smem);
  int64_t* o_row = a_row + kBM;
  int64_t* o_col = o_row + kBM;
  float* mul_s = reinterpret_cast<float*>(o_col + kBN);  // ChannelAffine of each column
  float* add_s = mul_s + kBN;
  unsigned char* pipe = smem + S::kMetaBytes;

  const T* __restrict__ in = static_cast<const T*>(p.in);
  const T* __restrict__ wt = static_cast<const T*>(p.wt);
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  T* __restrict__ out = static_cast<T*>(p.out);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_m = warp >> 2;  // 0..1
  const int warp_n = warp & 3;   // 0..3

  // Consecutive blocks share the same m tile (its A rows stay hot in L2 across the j tiles).
  const int n_tile = (int)(blockIdx.x % (unsigned)p.n_tiles);
  const int64_t m_tile = blockIdx.x / (unsigned)p.n_tiles;
  const int g = blockIdx.y;
  const int64_t m0 = m_tile * kBM;
  const int j0 = n_tile * kBN;
  const int K = p.K;
  const int ncol = p.ncol;

  // ---- Per-block tables: row offsets (input and output), column offsets + ChannelAffine. ----
  if (tid < kBM) {
    const int64_t m = m0 + tid;
    int64_t ar = -1, orow = -1;  // -1 marks rows past M
    if (m < p.M) {
      int64_t n, ih, iw;
      if (p.M <= INT32_MAX) {  // 32-bit division is several times cheaper
        const uint32_t mm = (uint32_t)m, hw = (uint32_t)p.hw, w = (uint32_t)p.w;
        const uint32_t n32 = mm / hw, r = mm - n32 * hw;
        n = n32;
        ih = r / w;
        iw = r - (uint32_t)ih * w;
      } else {
        n = m / p.hw;
        const int64_t r = m - n * p.hw;
        ih = r / p.w;
        iw = r - ih * p.w;
      }
      ar = n * p.is_n + ih * p.is_h + iw * p.is_w;
      orow = n * p.os_n + ih * p.kh * p.os_h + iw * p.kw * p.os_w;
    }
    a_row[tid] = ar;
    o_row[tid] = orow;
  } else {
    const int jl = tid - kBM;
    const int j = j0 + jl;
    int64_t oc_off = -1;
    ChannelAffine af{1.f, 0.f};  // columns past ncol are never stored
    if (j < ncol) {
      int oc, tap;
      if (p.tap_major) {
        tap = j / p.cout_g;
        oc = j - tap * p.cout_g;
      } else {
        oc = j / p.khkw;
        tap = j - oc * p.khkw;
      }
      const int khi = tap / p.kw;
      const int kwi = tap - khi * p.kw;
      const int64_t c = (int64_t)g * p.cout_g + oc;
      oc_off = c * p.os_c + (int64_t)khi * p.os_h + (int64_t)kwi * p.os_w;
      af = channel_affine(p.epi, bias != nullptr ? to_float(bias[c]) : 0.f, c);
    }
    o_col[jl] = oc_off;
    mul_s[jl] = af.mul;
    add_s[jl] = af.add;
  }
  __syncthreads();

  // ---- Tile loader: k tile `kt` into pipeline stage `stage`. ----
  const T* in_g = in + (int64_t)g * K * p.is_c;
  const T* wt_g = wt + (int64_t)g * K * ncol;
  auto load_tile = [&](int stage, int kt) {
    T* As = reinterpret_cast<T*>(pipe + stage * S::kStageBytes);
    T* Bs = reinterpret_cast<T*>(pipe + stage * S::kStageBytes + S::kABytes);
    const int k0 = kt * kBK;
    if constexpr (A_KMAJOR) {
      // Chunk = one row m, VA consecutive k (contiguous when VA > 1: is_c == 1).
      constexpr int kPerRow = kBK / VA;
      constexpr int kIters = kBM * kPerRow / kThreads;
      static_assert(kBM * kPerRow % kThreads == 0, "chunk split");
      constexpr int kUnroll = VA == 1 ? 4 : kIters;  // full unroll of the element path spills
#pragma unroll kUnroll
      for (int i = 0; i < kIters; ++i) {
        const int c = tid + i * kThreads;
        const int r = c / kPerRow;
        const int kc = (c % kPerRow) * VA;
        const int k = k0 + kc;
        const int64_t ro = a_row[r];
        int valid = K - k;
        valid = ro < 0 ? 0 : (valid < 0 ? 0 : (valid > VA ? VA : valid));
        copy_chunk<T, VA>(As + r * S::kLdA + kc, in_g + ro + (int64_t)k * p.is_c, valid, in);
      }
    } else {
      // Chunk = one k, VA consecutive m (contiguous when VA > 1: is_w == 1 and no chunk crosses
      // a row/plane boundary, so a_row of its first m gives the address of all of it).
      constexpr int kPerRow = kBM / VA;
      constexpr int kIters = kBK * kPerRow / kThreads;
      static_assert(kBK * kPerRow % kThreads == 0, "chunk split");
      constexpr int kUnroll = VA == 1 ? 4 : kIters;
#pragma unroll kUnroll
      for (int i = 0; i < kIters; ++i) {
        const int c = tid + i * kThreads;
        const int kr = c / kPerRow;
        const int mc = (c % kPerRow) * VA;
        const int k = k0 + kr;
        const int64_t ro = a_row[mc];
        const int valid = (ro >= 0 && k < K) ? VA : 0;
        copy_chunk<T, VA>(As + kr * S::kLdA + mc, in_g + ro + (int64_t)k * p.is_c, valid, in);
      }
    }
    {
      // Chunk = one k, VB consecutive j (ncol % VB == 0, so a chunk is all valid or all not).
      constexpr int kPerRow = kBN / VB;
      constexpr int kIters = kBK * kPerRow / kThreads;
      static_assert(kBK * kPerRow % kThreads == 0, "chunk split");
      constexpr int kUnroll = VB == 1 ? 4 : kIters;
#pragma unroll kUnroll
      for (int i = 0; i < kIters; ++i) {
        const int c = tid + i * kThreads;
        const int kr = c / kPerRow;
        const int nc = (c % kPerRow) * VB;
        const int k = k0 + kr;
        const int j = j0 + nc;
        const int valid = (k < K && j < ncol) ? VB : 0;
        copy_chunk<T, VB>(Bs + kr * S::kLdB + nc, wt_g + (int64_t)k * ncol + j, valid, wt);
      }
    }
  };

  float acc[kMT][kNT][4];
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

  // ---- Fragment loads + MMAs on one stage. ----
  // mma.m16n8k16 (16-bit) fragments, g = lane/4, t = lane%4:
  //   A: a0 = (row g, k 2t..2t+1), a1 = (g+8, 2t), a2 = (g, 2t+8), a3 = (g+8, 2t+8)
  //   B: b0 = (k 2t..2t+1, col g), b1 = (k 2t+8.., col g)
  //   C: c0,c1 = (row g, cols 2t, 2t+1), c2,c3 = (row g+8, same cols)
  // ldmatrix (non-trans) gives lane l row l/4, elements 2(l%4)..+1 of each 8x8 matrix; .trans
  // gives the transpose. Matrix i of an x4 takes its 8 row addresses from lanes 8i..8i+7.
  //   A [m][k]: lanes 0-15 rows m 0-15 at k 0, lanes 16-31 rows m 0-15 at k 8 -> a0..a3 in order.
  //   A [k][m] (.trans): matrix i = (k block i/2, m block i%2) -> a0..a3 in order.
  //   B [k][j] (.trans): matrix i = (k block i%2, j block i/2) -> b0,b1 of n8 tile 0, then tile 1.
  // mma.m16n8k8.tf32: a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4);
  //   b0 = (k t, col g), b1 = (k t+4, col g); C as above. Loaded with scalar LDS.
  const int fg = lane >> 2, ft = lane & 3;
  auto compute_stage = [&](int stage) {
    const T* As = reinterpret_cast<const T*>(pipe + stage * S::kStageBytes);
    const T* Bs = reinterpret_cast<const T*>(pipe + stage * S::kStageBytes + S::kABytes);
    if constexpr (sizeof(T) == 2) {
      const int li = lane >> 3;
      uint32_t a_addr, b_addr;
      if constexpr (A_KMAJOR) {
        a_addr = smem_u32(As + (warp_m * kWarpM + (lane & 15)) * S::kLdA + (lane >> 4) * 8);
      } else {
        a_addr = smem_u32(As + ((lane & 7) + (li >> 1) * 8) * S::kLdA + warp_m * kWarpM +
                          (li & 1) * 8);
      }
      b_addr = smem_u32(Bs + ((lane & 7) + (li & 1) * 8) * S::kLdB + warp_n * kWarpN + (li >> 1) * 8);
#pragma unroll
      for (int ks = 0; ks < kBK / 16; ++ks) {
        uint32_t af[kMT][4], bfr[kNT][2];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          if constexpr (A_KMAJOR) {
            ldsm_x4(a_addr + (uint32_t)((mt * 16 * S::kLdA + ks * 16) * 2), af[mt][0], af[mt][1],
                    af[mt][2], af[mt][3]);
          } else {
            ldsm_x4_trans(a_addr + (uint32_t)((ks * 16 * S::kLdA + mt * 16) * 2), af[mt][0],
                          af[mt][1], af[mt][2], af[mt][3]);
          }
        }
#pragma unroll
        for (int np = 0; np < kNT / 2; ++np) {
          ldsm_x4_trans(b_addr + (uint32_t)((ks * 16 * S::kLdB + np * 16) * 2), bfr[2 * np][0],
                        bfr[2 * np][1], bfr[2 * np + 1][0], bfr[2 * np + 1][1]);
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) mma_16816<T>(acc[mt][nt], af[mt], bfr[nt]);
      }
    } else {
      // fp32 fragment elements (mma.m16n8k8.tf32 layout above), for both fp32 modes, each
      // passed through `cvt` as it is read: A at rows r, r+8 and k-columns k, k+4 of the
      // stage; B at (k, c) and (k+4, c).
      auto a_frag = [&](int r, int k, auto cvt, auto (&av)[4]) {
        if constexpr (A_KMAJOR) {
          av[0] = cvt(to_float(As[r * S::kLdA + k]));
          av[1] = cvt(to_float(As[(r + 8) * S::kLdA + k]));
          av[2] = cvt(to_float(As[r * S::kLdA + k + 4]));
          av[3] = cvt(to_float(As[(r + 8) * S::kLdA + k + 4]));
        } else {
          av[0] = cvt(to_float(As[k * S::kLdA + r]));
          av[1] = cvt(to_float(As[k * S::kLdA + r + 8]));
          av[2] = cvt(to_float(As[(k + 4) * S::kLdA + r]));
          av[3] = cvt(to_float(As[(k + 4) * S::kLdA + r + 8]));
        }
      };
      auto b_frag = [&](int k, int c, auto cvt, auto (&bv)[2]) {
        bv[0] = cvt(to_float(Bs[k * S::kLdB + c]));
        bv[1] = cvt(to_float(Bs[(k + 4) * S::kLdB + c]));
      };
      auto as_float = [](float x) { return x; };
      if constexpr (SPLIT) {
        // 3xTF32: x = hi + lo with hi = tf32(x) and lo = tf32(x - hi) (x - hi is exact in
        // fp32), a*b ~ a_lo*b_hi + a_hi*b_lo + a_hi*b_hi: only a_lo*b_lo (~2^-22 relative) and
        // lo's own rounding are lost. Small terms go first so they are not absorbed by the
        // large one. B is split once per k-step for the warp's n range, A once per m16 tile.
        // The k-tile's products go into a fresh accumulator, added to the running sum with fp32
        // (round-to-nearest) adds at the end: tensor cores are reported to truncate their fp32
        // sums, which over a long reduction grows to many times fp32's error; truncation
        // confined to one 32-deep k-tile stays below it. The split fragments and this second
        // accumulator are why the mode runs one block per SM (see the launch bounds).
        float part[kMT][kNT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) part[mt][nt][i] = 0.f;
#pragma unroll
        for (int ks = 0; ks < kBK / 8; ++ks) {
          uint32_t b_hi[kNT][2], b_lo[kNT][2];
          const int k = ks * 8 + ft;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            float bv[2];
            b_frag(k, warp_n * kWarpN + nt * 8 + fg, as_float, bv);
            tf32_hi_lo(bv[0], b_hi[nt][0], b_lo[nt][0]);
            tf32_hi_lo(bv[1], b_hi[nt][1], b_lo[nt][1]);
          }
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            float av[4];
            a_frag(warp_m * kWarpM + mt * 16 + fg, k, as_float, av);
            uint32_t a_hi[4], a_lo[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) tf32_hi_lo(av[i], a_hi[i], a_lo[i]);
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
              mma_1688_tf32(part[mt][nt], a_lo, b_hi[nt]);
              mma_1688_tf32(part[mt][nt], a_hi, b_lo[nt]);
              mma_1688_tf32(part[mt][nt], a_hi, b_hi[nt]);
            }
          }
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[mt][nt][i] += part[mt][nt][i];
      } else {
#pragma unroll
        for (int ks = 0; ks < kBK / 8; ++ks) {
          uint32_t af[kMT][4], bfr[kNT][2];
          const int k = ks * 8 + ft;
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
            a_frag(warp_m * kWarpM + mt * 16 + fg, k, to_tf32, af[mt]);
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
            b_frag(k, warp_n * kWarpN + nt * 8 + fg, to_tf32, bfr[nt]);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) mma_1688_tf32(acc[mt][nt], af[mt], bfr[nt]);
        }
      }
    }
  };

  // ---- Multi-stage pipeline: tile kt+kStages-1 is in flight while tile kt is computed. ----
  const int KT = (K + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < KT) load_tile(s, s);
    cp_async_commit();  // always commit so the group count stays in step with kt
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();
    // Makes tile kt visible to all warps, and proves every warp is done with tile kt-1, whose
    // stage the prefetch below overwrites.
    __syncthreads();
    const int nk = kt + kStages - 1;
    if (nk < KT) load_tile(nk % kStages, nk);
    cp_async_commit();
    compute_stage(kt % kStages);
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline buffers become the C staging tile

  // ---- Epilogue (common/epilogue.cuh): y = act((acc + bias) * scale + shift), rounded once. ----
  // Without an activation, Epilogue 1 applies the affine part on the fragments and stages T (with
  // no scale either: one add per element, acc + bias exactly as the unfused sum). With one, the
  // fragments are staged as fp32 and a rolled pass applies the whole epilogue in place, so the
  // activation's code exists once instead of once per unrolled accumulator; Epilogue 2 then rounds
  // while storing. For T = float both stagings are the same tile.
  const bool has_act = p.epi.activation != Activation::kNone;

  // ---- Epilogue 1: fragments -> shared C tile [m][j]. ----
  if (!has_act) {
    T* Cs = reinterpret_cast<T*>(pipe);
    auto store_c = [&](auto has_scale_tag) {
      EpilogueParams e = p.epi;
      e.activation = Activation::kNone;
      if constexpr (!decltype(has_scale_tag)::value) e.scale = nullptr;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const int r = warp_m * kWarpM + mt * 16 + fg;
          const int c = warp_n * kWarpN + nt * 8 + 2 * ft;
          const ChannelAffine a0{mul_s[c], add_s[c]}, a1{mul_s[c + 1], add_s[c + 1]};
          Cs[r * S::kLdC + c] = from_float<T>(apply_epilogue(acc[mt][nt][0], a0, e));
          Cs[r * S::kLdC + c + 1] = from_float<T>(apply_epilogue(acc[mt][nt][1], a1, e));
          Cs[(r + 8) * S::kLdC + c] = from_float<T>(apply_epilogue(acc[mt][nt][2], a0, e));
          Cs[(r + 8) * S::kLdC + c + 1] = from_float<T>(apply_epilogue(acc[mt][nt][3], a1, e));
        }
      }
    };
    if (p.epi.scale == nullptr) {
      store_c(std::false_type{});
    } else {
      store_c(std::true_type{});
    }
  } else {
    float* Cs = reinterpret_cast<float*>(pipe);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int r = warp_m * kWarpM + mt * 16 + fg;
        const int c = warp_n * kWarpN + nt * 8 + 2 * ft;
        *reinterpret_cast<float2*>(Cs + r * S::kLdC32 + c) =
            make_float2(acc[mt][nt][0], acc[mt][nt][1]);
        *reinterpret_cast<float2*>(Cs + (r + 8) * S::kLdC32 + c) =
            make_float2(acc[mt][nt][2], acc[mt][nt][3]);
      }
    }
    __syncthreads();
    // Each thread keeps one column (kThreads is a multiple of kBN): its affine is loaded once.
    static_assert(kThreads % kBN == 0, "one column per thread");
    const int jl = tid % kBN;
    const ChannelAffine af{mul_s[jl], add_s[jl]};
    auto activate_tile = [&](auto act_tag) {
      EpilogueParams e = p.epi;
      e.activation = decltype(act_tag)::value;
#pragma unroll 1
      for (int ml = tid / kBN; ml < kBM; ml += kThreads / kBN) {
        float* v = Cs + ml * S::kLdC32 + jl;
        *v = apply_epilogue(*v, af, e);
      }
    };
    using A = Activation;
    using std::integral_constant;
    switch (p.epi.activation) {
      case A::kNone: break;  // not reached (has_act)
      case A::kReLU: activate_tile(integral_constant<A, A::kReLU>{}); break;
      case A::kLeakyReLU: activate_tile(integral_constant<A, A::kLeakyReLU>{}); break;
      case A::kSiLU: activate_tile(integral_constant<A, A::kSiLU>{}); break;
      case A::kGELU: activate_tile(integral_constant<A, A::kGELU>{}); break;
      case A::kGELUTanh: activate_tile(integral_constant<A, A::kGELUTanh>{}); break;
      case A::kTanh: activate_tile(integral_constant<A, A::kTanh>{}); break;
      case A::kSigmoid: activate_tile(integral_constant<A, A::kSigmoid>{}); break;
      case A::kHardswish: activate_tile(integral_constant<A, A::kHardswish>{}); break;
    }
  }
  __syncthreads();

  // ---- Epilogue 2: shared C tile -> output, consecutive threads on consecutive addresses. ----
  // The tile's columns [j0, j_end) are enumerated in whole groups (partial groups at the edges are
  // skipped per element), so the innermost index can be the one contiguous in memory. With
  // p.pair_store the launcher proved that element pairs (kw, kw+1) for NCHW, or (oc, oc+1) with oc
  // even for channels_last, are adjacent and 2-element aligned in the output: one store per pair.
  // CT: the staging type of the tile (T, or float holding the final fp32 values).
  auto store_tile = [&](auto ct_tag) {
    using CT = typename decltype(ct_tag)::type;
    constexpr int kLdC = std::is_same_v<CT, T> ? S::kLdC : S::kLdC32;
    const CT* Cs = reinterpret_cast<const CT*>(pipe);
    using Pair = typename PairOf<T>::type;
    // Output value of tile element (ml, jl), and of the pair (ml, jl), (ml, jl + 1).
    auto value = [&](int ml, int jl) -> T {
      if constexpr (std::is_same_v<CT, T>) {
        return Cs[ml * kLdC + jl];
      } else {
        return from_float<T>(Cs[ml * kLdC + jl]);
      }
    };
    auto pair_value = [&](int ml, int jl) -> Pair {
      if constexpr (std::is_same_v<CT, T>) {
        return *reinterpret_cast<const Pair*>(Cs + ml * kLdC + jl);
      } else {
        const float2 f = *reinterpret_cast<const float2*>(Cs + ml * kLdC + jl);  // jl is even
        Pair v;
        v.x = from_float<T>(f.x);
        v.y = from_float<T>(f.y);
        return v;
      }
    };

    const int j_end = min(j0 + kBN, ncol);
    if (p.tap_major) {
      // Tap-major columns: a tile row is runs of consecutive output channels of one tap.
      if (p.vec_store) {
        // The launcher proved: channels_last with unit channel stride, Cout_g and every other
        // offset term multiples of V, 16-byte aligned base. j0 and ncol are multiples of V too,
        // so chunk [jl, jl + V) is V consecutive channels of one tap: one 16-byte store.
        constexpr int V = 16 / (int)sizeof(T);
        using Vec = uint4;
        const int chunks = (j_end - j0) / V;
        const int total = kBM * chunks;
        for (int e = tid; e < total; e += kThreads) {
          const int ml = e / chunks;
          const int jl = (e - ml * chunks) * V;
          const int64_t ro = o_row[ml];
          if (ro < 0) continue;
          Vec v;
          if constexpr (std::is_same_v<CT, T>) {
            v = *reinterpret_cast<const Vec*>(Cs + ml * kLdC + jl);  // rows are 16-byte aligned
          } else {
            alignas(16) T t[V];
#pragma unroll
            for (int i = 0; i < V; i += 4) {
              const float4 f = *reinterpret_cast<const float4*>(Cs + ml * kLdC + jl + i);
              t[i] = from_float<T>(f.x);
              t[i + 1] = from_float<T>(f.y);
              t[i + 2] = from_float<T>(f.z);
              t[i + 3] = from_float<T>(f.w);
            }
            v = *reinterpret_cast<const Vec*>(t);
          }
          *reinterpret_cast<Vec*>(out + ro + o_col[jl]) = v;
        }
      } else {
        // Any strides: one element at a time, consecutive threads on consecutive columns.
        const int cols = j_end - j0;
        const int total = kBM * cols;
        for (int e = tid; e < total; e += kThreads) {
          const int ml = e / cols;
          const int jl = e - ml * cols;
          const int64_t ro = o_row[ml];
          if (ro < 0) continue;
          out[ro + o_col[jl]] = value(ml, jl);
        }
      }
    } else if (!p.out_channels_last) {
      // NCHW: element e = ((jg_i*BM + m_local)*KW + kw), jg = j / KW = (oc, kh). Consecutive e
      // walk kw then iw: consecutive ow within an output row.
      const uint32_t kw = (uint32_t)p.kw;
      const uint32_t jg_lo = (uint32_t)j0 / kw;
      const uint32_t groups_n = (uint32_t)(j_end - 1) / kw - jg_lo + 1;
      if (p.pair_store) {
        // KW even: pair index e = ((jg_i*BM + m_local)*KW/2 + kw/2); j0, j_end and j are even, so
        // a pair is entirely inside or outside the tile.
        const uint32_t hkw = kw >> 1;
        const SmallDiv div_hkw = make_small_div(hkw);
        const uint32_t total = groups_n * kBM * hkw;
        for (uint32_t e = tid; e < total; e += kThreads) {
          const uint32_t r = small_div(e, div_hkw);
          const uint32_t kwi = (e - r * hkw) * 2;
          const int ml = (int)(r % kBM);
          const int j = (int)((jg_lo + r / kBM) * kw + kwi);
          const int jl = j - j0;
          if (jl < 0 || j >= j_end) continue;
          const int64_t ro = o_row[ml];
          if (ro < 0) continue;
          *reinterpret_cast<Pair*>(out + ro + o_col[jl]) = pair_value(ml, jl);
        }
      } else {
        const uint32_t total = groups_n * kBM * kw;  // < 128*(128+2*256): x*d fits small_div
        for (uint32_t e = tid; e < total; e += kThreads) {
          const uint32_t r = small_div(e, p.div_kw);
          const uint32_t kwi = e - r * kw;
          const int ml = (int)(r % kBM);
          const int j = (int)((jg_lo + r / kBM) * kw + kwi);
          const int jl = j - j0;
          if (jl < 0 || j >= j_end) continue;
          const int64_t ro = o_row[ml];
          if (ro < 0) continue;
          out[ro + o_col[jl]] = value(ml, jl);
        }
      }
    } else {
      // channels_last: element e = ((m_local*KHKW + tap)*OCcnt + oc_i); consecutive e walk oc.
      const uint32_t khkw = (uint32_t)p.khkw;
      const uint32_t oc_lo = (uint32_t)j0 / khkw;
      const uint32_t oc_hi = (uint32_t)(j_end - 1) / khkw;
      if (p.pair_store) {
        // Pairs (oc, oc+1) with oc even (output channel g*Cout_g + oc is then even too); at the
        // tile's edges one of the two may belong to a neighbouring tile: store the other alone.
        const uint32_t oc_lo2 = oc_lo >> 1;
        const uint32_t oc_n = (oc_hi >> 1) - oc_lo2 + 1;
        const SmallDiv div_oc = make_small_div(oc_n);
        const uint32_t total = (uint32_t)kBM * khkw * oc_n;
        for (uint32_t e = tid; e < total; e += kThreads) {
          const uint32_t r = small_div(e, div_oc);
          const uint32_t oci = e - r * oc_n;
          const uint32_t ml = small_div(r, p.div_khkw);
          const uint32_t tap = r - ml * khkw;
          const int ja = (int)((oc_lo2 + oci) * 2 * khkw + tap);
          const int jb = ja + (int)khkw;
          const bool va = ja >= j0 && ja < j_end, vb = jb >= j0 && jb < j_end;
          if (!va && !vb) continue;
          const int64_t ro = o_row[ml];
          if (ro < 0) continue;
          if (va && vb) {
            Pair v;
            v.x = value((int)ml, ja - j0);
            v.y = value((int)ml, jb - j0);
            *reinterpret_cast<Pair*>(out + ro + o_col[ja - j0]) = v;
          } else if (va) {
            out[ro + o_col[ja - j0]] = value((int)ml, ja - j0);
          } else {
            out[ro + o_col[jb - j0]] = value((int)ml, jb - j0);
          }
        }
      } else {
        const uint32_t oc_n = oc_hi - oc_lo + 1;
        const SmallDiv div_oc = make_small_div(oc_n);
        const uint32_t total = (uint32_t)kBM * khkw * oc_n;  // < 128*(128+2*256)
        for (uint32_t e = tid; e < total; e += kThreads) {
          const uint32_t r = small_div(e, div_oc);
          const uint32_t oci = e - r * oc_n;
          const uint32_t ml = small_div(r, p.div_khkw);
          const uint32_t tap = r - ml * khkw;
          const int j = (int)((oc_lo + oci) * khkw + tap);
          const int jl = j - j0;
          if (jl < 0 || j >= j_end) continue;
          const int64_t ro = o_row[ml];
          if (ro < 0) continue;
          out[ro + o_col[jl]] = value((int)ml, jl);
        }
      }
    }
  };
  if constexpr (sizeof(T) == sizeof(float)) {
    static_assert(S::kLdC == S::kLdC32, "fp32 staging is the T tile");
    store_tile(TypeTag<T>{});
  } else if (has_act) {
    store_tile(TypeTag<float>{});
  } else {
    store_tile(TypeTag<T>{});
  }
}

// ---------------------------------------------------------------------------------------------
// output_padding region: rows oh >= H*KH (all columns) and, above them, columns ow >= W*KW.
// No tap reaches it: it receives the epilogue of a zero sum, act(bias*scale + shift) (a missing
// bias or shift is 0, a missing scale 1). Tiny compared with the GEMM; one thread per element.
struct PadArgs {
  const void* bias;
  void* out;
  EpilogueParams epi;
  int64_t batch, channels, oh, ow, hk, wk;  // hk = H*KH, wk = W*KW
  int64_t os_n, os_c, os_h, os_w;
};

template <typename T>
__global__ void __launch_bounds__(256) fill_output_padding_kernel(const PadArgs a) {
  const T* __restrict__ bias = static_cast<const T*>(a.bias);
  T* __restrict__ out = static_cast<T*>(a.out);
  const int64_t bottom = (a.oh - a.hk) * a.ow;  // elements per (n, c) in the bottom rows
  const int64_t right = a.hk * (a.ow - a.wk);   // ... in the right columns above them
  const int64_t per_nc = bottom + right;
  const int64_t total = a.batch * a.channels * per_nc;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = idx % per_nc;
    const int64_t nc = idx / per_nc;
    const int64_t c = nc % a.channels, n = nc / a.channels;
    int64_t oh, ow;
    if (r < bottom) {
      oh = a.hk + r / a.ow;
      ow = r % a.ow;
    } else {
      r -= bottom;
      const int64_t wp = a.ow - a.wk;
      oh = r / wp;
      ow = a.wk + r % wp;
    }
    const ChannelAffine af = channel_affine(a.epi, bias != nullptr ? to_float(bias[c]) : 0.f, c);
    out[n * a.os_n + c * a.os_c + oh * a.os_h + ow * a.os_w] =
        from_float<T>(apply_epilogue(0.f, af, a.epi));
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.
bool stride_multiple(int64_t stride, int64_t size, int64_t v) { return size <= 1 || stride % v == 0; }
bool ptr_aligned(const void* ptr, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % (uintptr_t)bytes == 0;
}

template <typename T, bool A_KMAJOR, int VA, int VB>
cudaError_t launch_gemm(const GemmArgs& a, int64_t m_tiles, int groups, bool split,
                        cudaStream_t stream) {
  using S = Smem<T, A_KMAJOR>;
  auto kernel = conv_transpose2d_gemm_kxs_kernel<T, A_KMAJOR, VA, VB, false>;
  if constexpr (sizeof(T) == 4) {
    if (split) kernel = conv_transpose2d_gemm_kxs_kernel<T, A_KMAJOR, VA, VB, true>;
  }
  // Above 48 KiB of dynamic shared memory needs the opt-in (once per device).
  const cudaError_t err = ensure_dynamic_smem(kernel, S::kTotalBytes, current_device());
  if (err != cudaSuccess) return err;
  const dim3 grid((unsigned)(m_tiles * a.n_tiles), (unsigned)groups, 1);
  kernel<<<grid, kThreads, S::kTotalBytes, stream>>>(a);
  return cudaGetLastError();
}

// Picks the load widths. V = elements in 16 bytes. Every chunk must be contiguous in global
// memory and aligned to its size; otherwise fall back to one element per load.
template <typename T>
cudaError_t dispatch(const ConvTranspose2dParams& p, const GemmArgs& a, int64_t m_tiles,
                     bool split, cudaStream_t stream) {
  constexpr int V = 16 / (int)sizeof(T);
  const int groups = (int)p.groups;
  const int64_t N = p.batch, C = p.in_channels, H = p.in_h, W = p.in_w;
  const bool b_vec = a.ncol % V == 0 && ptr_aligned(a.wt, 16);
  const bool a_kmajor = a.is_c == 1 || (a.is_w != 1 && a.is_c <= a.is_w);
  if (a_kmajor) {
    // Chunk = v channels of one pixel: channel stride 1, pixel strides and the group's first
    // channel (g*K) multiples of v. A K tail (groups == 1) is zero-filled by cp.async. B keeps
    // its 16-byte chunks whatever width A gets: a pixel stride of 100 channels (DCGAN's latent
    // input) gives A 8-byte chunks in 16-bit, and with both at one element the 1.6 MB weight
    // was read 2 bytes per load (19 us of GPU time on the H100 where TF32 took 11).
    auto a_fits = [&](int v) {
      return a.is_c == 1 && ptr_aligned(p.input, v * (int64_t)sizeof(T)) &&
             stride_multiple(a.is_n, N, v) && stride_multiple(a.is_h, H, v) &&
             stride_multiple(a.is_w, W, v) && (groups == 1 || a.K % v == 0);
    };
    if (!b_vec) return launch_gemm<T, true, 1, 1>(a, m_tiles, groups, split, stream);
    if (a_fits(V)) return launch_gemm<T, true, V, V>(a, m_tiles, groups, split, stream);
    if constexpr (V >= 8) {
      // 16-bit: 8- or 4-byte chunks (cp.async moves 4, 8 or 16 bytes; one 16-bit element is a
      // plain load). fp32 goes straight to one element, itself a 4-byte cp.async (its 8-byte
      // instance spilled 56 bytes under the 128-register bound).
      if (a_fits(V / 2)) return launch_gemm<T, true, V / 2, V>(a, m_tiles, groups, split, stream);
      if (a_fits(V / 4)) return launch_gemm<T, true, V / 4, V>(a, m_tiles, groups, split, stream);
    }
    return launch_gemm<T, true, 1, V>(a, m_tiles, groups, split, stream);
  }
  // Chunk = v consecutive m of one channel: iw stride 1, and runs of contiguous m (a whole plane
  // when rows are packed, else one row) have a length that is a multiple of v, so no chunk
  // straddles a run; strides and base pointer are multiples of v elements.
  if (b_vec && a.is_w == 1) {
    const int64_t run = (H <= 1 || a.is_h == W) ? H * W : W;
    for (int v = V; v >= 2; v /= 2) {
      if (v * (int)sizeof(T) < 4) break;  // 2-byte chunks have no cp.async
      const bool ok = run % v == 0 && ptr_aligned(p.input, v * (int64_t)sizeof(T)) &&
                      stride_multiple(a.is_n, N, v) && stride_multiple(a.is_c, C, v) &&
                      stride_multiple(a.is_h, H, v);
      if (!ok) continue;
      if (v == V) return launch_gemm<T, false, V, V>(a, m_tiles, groups, split, stream);
      if (v == V / 2) return launch_gemm<T, false, V / 2, V>(a, m_tiles, groups, split, stream);
      if constexpr (V >= 8) {
        if (v == V / 4) return launch_gemm<T, false, V / 4, V>(a, m_tiles, groups, split, stream);
      }
    }
  }
  // One element of A a load (e.g. an odd H*W plane); B's 16-byte chunks do not depend on it.
  if (b_vec) return launch_gemm<T, false, 1, V>(a, m_tiles, groups, split, stream);
  return launch_gemm<T, false, 1, 1>(a, m_tiles, groups, split, stream);
}

template <typename T>
cudaError_t launch_padding(const ConvTranspose2dParams& p, cudaStream_t stream) {
  PadArgs a;
  a.bias = p.bias;
  a.out = p.output;
  a.epi = p.epi;
  a.batch = p.batch;
  a.channels = p.out_channels;
  a.oh = p.out_h;
  a.ow = p.out_w;
  a.hk = p.in_h * p.ph_h.kernel;
  a.wk = p.in_w * p.ph_w.kernel;
  a.os_n = p.out_stride[0];
  a.os_c = p.out_stride[1];
  a.os_h = p.out_stride[2];
  a.os_w = p.out_stride[3];
  const int64_t total = a.batch * a.channels * ((a.oh - a.hk) * a.ow + a.hk * (a.ow - a.wk));
  if (total == 0) return cudaSuccess;
  const int64_t blocks = (total + 255) / 256;
  const unsigned grid = (unsigned)(blocks < 65536 ? blocks : 65536);
  fill_output_padding_kernel<T><<<grid, 256, 0, stream>>>(a);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const ConvTranspose2dParams& p, const void* tap_major_weight, bool split,
                         cudaStream_t stream) {
  const int KH = p.ph_h.kernel, KW = p.ph_w.kernel;
  GemmArgs a;
  a.in = p.input;
  a.wt = tap_major_weight != nullptr ? tap_major_weight : p.weight;
  a.bias = p.bias;
  a.out = p.output;
  a.epi = p.epi;
  a.M = p.batch * p.in_h * p.in_w;
  a.hw = p.in_h * p.in_w;
  a.w = p.in_w;
  a.K = (int)p.in_per_group;
  a.cout_g = (int)p.out_per_group;
  a.kh = KH;
  a.kw = KW;
  a.khkw = KH * KW;
  a.ncol = (int)(p.out_per_group * KH * KW);
  a.n_tiles = (a.ncol + kBN - 1) / kBN;
  a.is_n = p.in_stride[0];
  a.is_c = p.in_stride[1];
  a.is_h = p.in_stride[2];
  a.is_w = p.in_stride[3];
  a.os_n = p.out_stride[0];
  a.os_c = p.out_stride[1];
  a.os_h = p.out_stride[2];
  a.os_w = p.out_stride[3];
  a.div_kw = make_small_div((uint32_t)KW);
  a.div_khkw = make_small_div((uint32_t)(KH * KW));
  a.out_channels_last = p.out_channels_last;
  // Paired stores: the two elements of a pair are adjacent (unit stride along the paired index)
  // and every other offset term is even, so the pair's address is 2-element aligned.
  {
    const int64_t* os = p.out_stride;
    const bool even_rest = ptr_aligned(p.output, 2 * (int64_t)sizeof(T)) &&
                           stride_multiple(os[0], p.batch, 2) && stride_multiple(os[2], p.out_h, 2);
    if (!p.out_channels_last) {
      a.pair_store = even_rest && KW % 2 == 0 && os[3] == 1 && stride_multiple(os[1], p.out_channels, 2);
    } else {
      a.pair_store = even_rest && os[1] == 1 && p.out_per_group % 2 == 0 &&
                     stride_multiple(os[3], p.out_w, 2);
    }
    a.tap_major = tap_major_weight != nullptr;
    constexpr int V = 16 / (int)sizeof(T);
    a.vec_store = a.tap_major && p.out_channels_last && os[1] == 1 && p.out_per_group % V == 0 &&
                  ptr_aligned(p.output, 16) && stride_multiple(os[0], p.batch, V) &&
                  stride_multiple(os[2], p.out_h, V) && stride_multiple(os[3], p.out_w, V);
  }

  if (a.M > 0 && a.ncol > 0) {
    const int64_t m_tiles = (a.M + kBM - 1) / kBM;
    const cudaError_t err = dispatch<T>(p, a, m_tiles, split, stream);
    if (err != cudaSuccess) return err;
  }
  return launch_padding<T>(p, stream);
}

}  // namespace

bool gemm_kxs_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool tap_major) {
  switch (kind) {
    case ScalarKind::kFloat16:
    case ScalarKind::kBFloat16:
    case ScalarKind::kFloat32: break;  // TF32, or 3xTF32 without allow_tf32
    default: return false;
  }
  auto axis_ok = [](const AxisPhase& a, int64_t in, int64_t out) {
    // output_padding = out - in*kernel; PyTorch keeps it below the stride, the kernel itself
    // handles any non-negative amount.
    return a.kernel >= 1 && a.kernel == a.stride && a.pad == 0 && a.dil == 1 && in >= 0 &&
           out >= in * a.kernel;
  };
  if (!axis_ok(p.ph_h, p.in_h, p.out_h) || !axis_ok(p.ph_w, p.in_w, p.out_w)) return false;
  const int64_t KH = p.ph_h.kernel, KW = p.ph_w.kernel;
  if (KH * KW > 256) return false;  // bound used by the epilogue's small divisions
  const int act = (int)p.epi.activation;
  if (act < (int)Activation::kNone || act > (int)Activation::kHardswish) return false;
  if (p.groups < 1 || p.groups > 65535 || p.batch < 0) return false;
  if (p.in_per_group < 0 || p.out_per_group < 0) return false;
  if (p.in_per_group * p.groups != p.in_channels || p.out_per_group * p.groups != p.out_channels)
    return false;
  if (p.in_per_group > INT32_MAX || p.out_per_group * KH * KW > INT32_MAX) return false;
  for (int i = 0; i < 4; ++i)
    if (p.in_stride[i] < 0 || p.w_stride[i] < 0 || p.out_stride[i] < 0) return false;
  // Weight must be contiguous [Cin, Cout/g, KH, KW]: B is then row-major with row length ncol.
  // (A tap-major weight is a separate contiguous buffer by contract; p.weight is not read.)
  const int64_t ncol = p.out_per_group * KH * KW;
  const int64_t w_sizes[4] = {p.in_channels, p.out_per_group, KH, KW};
  const int64_t w_want[4] = {ncol, KH * KW, KW, 1};
  for (int i = 0; i < 4 && !tap_major; ++i)
    if (w_sizes[i] > 1 && p.w_stride[i] != w_want[i]) return false;
  const int64_t M = p.batch * p.in_h * p.in_w;
  const int64_t m_tiles = (M + kBM - 1) / kBM;
  const int64_t n_tiles = (ncol + kBN - 1) / kBN;
  if (m_tiles * n_tiles > INT32_MAX) return false;  // grid.x
  if (p.output == nullptr && p.batch * p.out_channels * p.out_h * p.out_w > 0) return false;
  return true;
}

cudaError_t launch_conv_transpose2d_gemm_kxs(const ConvTranspose2dParams& p, ScalarKind kind,
                                             bool allow_tf32, const void* tap_major_weight,
                                             cudaStream_t stream) {
  if (!gemm_kxs_supports(p, kind, tap_major_weight != nullptr)) return cudaErrorInvalidValue;
  if (p.batch * p.out_channels * p.out_h * p.out_w == 0) return cudaSuccess;
  switch (kind) {
#if DECONV_PATCH_UNIT_HAS_KIND(0)
    case ScalarKind::kFloat32: return launch_typed<float>(p, tap_major_weight, !allow_tf32, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(1)
    case ScalarKind::kFloat16: return launch_typed<__half>(p, tap_major_weight, false, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(2)
    case ScalarKind::kBFloat16:
      return launch_typed<__nv_bfloat16>(p, tap_major_weight, false, stream);
#endif
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
