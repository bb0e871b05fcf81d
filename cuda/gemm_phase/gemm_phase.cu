// Any transposed convolution as stride-phase implicit GEMMs on tensor cores.
//
// Index math (the only place it is spelled out). Per axis (h shown, w alike), output row oh gets
// tap kh from input row ih exactly when  ih*sh = oh + pad_h - kh*dil_h.  Write oh = rh + sh*i with
// phase rh = oh mod sh. Tap kh reaches phase rh iff rh = (kh*dil_h - pad_h) mod sh, so every tap
// belongs to exactly one phase, and for it
//     ih = i + off_h,   off_h = (rh + pad_h - kh*dil_h) / sh      (exact; may be negative).
// The taps of phase rh form one residue class kh = kh0 + th*step_h, kh0 < step_h, th in
// [0, taps_h(rh)), step_h = sh/gcd(sh, dil_h); along it off_h = off0_h(rh) - th*in_step_h with
// in_step_h = dil_h/gcd. So phase (rh, rw) is a dense stride-1 correlation over taps_h x taps_w
// taps; a phase without taps (kernel < stride) is the epilogue of 0 (bias/affine/activation).
//
// GEMM of phase (rh, rw), group g. OHp = #{oh in [0, OH): oh = rh mod sh}, OWp alike,
// Cin_g = Cin/groups, Cout_g = Cout/groups, Cin_pad = round_up(Cin_g, 32), taps_w = taps_w(rw):
//     m   = (n*OHp + i)*OWp + j                 in [0, M), M = N*OHp*OWp     (GEMM row)
//     k   = (th*taps_w + tw)*Cin_pad + c        c in [0, Cin_pad)            (reduction)
//     oc                                        in [0, Cout_g)               (GEMM column)
//     A[m, k]  = input[n, g*Cin_g + c, i + off_h(th), j + off_w(tw)]  (0 if c >= Cin_g or the
//                pixel is outside the input)
//     B[k, oc] = weight[g*Cin_g + c, oc, kh0 + th*step_h, kw0 + tw*step_w]  (0 if c >= Cin_g)
//     output[n, g*Cout_g + oc, rh + sh*i, rw + sw*j] = epilogue(sum_k A[m, k]*B[k, oc], oc)
// A 32-wide k tile lies inside one tap, so the loader walks (tap, channel block) with a cursor and
// each GEMM row needs only a_base = n*is_n + i*is_h + j*is_w and (i, j), tabulated once per block:
// A offset = a_base + (off_h*is_h + off_w*is_w + c*is_c) (the bracket is the cursor's, uniform),
// valid iff i + off_h in [0, IH) and j + off_w in [0, IW). Both sums are formed mod 2^32: the
// final offset of an element inside the input is < 2^31, so it comes out exact.
// The output offset splits into o_row(m) + col_off(oc),
//     o_row(m) = n*os_n + (rh + sh*i)*os_h + (rw + sw*j)*os_w,  col_off(oc) = (g*Cout_g + oc)*os_c,
// both tabulated once per block in shared memory.
//
// Packed weight (pack kernel, once per weight): per group, the B matrices of all phases in
// row-major (rh, rw) order, each [taps_h*taps_w*Cin_pad rows][Np], Np = round_up(Cout_g, 8),
// contiguous along oc (16-byte cp.async rows), zero in padded rows/columns; fp32 is rounded to
// TF32 when packed for the TF32 mode, kept at full fp32 for the 3xTF32 mode (same size).
// Every tap lies in exactly one phase, so a group holds KH*KW*Cin_pad rows and phase (rh, rw)
// starts at tap row  prefix_h(rh)*KW + taps_h(rh)*prefix_w(rw)  (prefix = taps of the earlier
// phases of that axis): B[k, oc] = packed[((g*KH*KW + start)*Cin_pad + k)*Np + oc].
//
// Launch: grid.y = group; grid.x = every (phase, m tile, n tile) of a group, phases with the most
// taps first (the longest blocks start first), n tile fastest (an m tile's A rows stay in L2).
// A table in the kernel arguments maps blockIdx.x to its phase (binary search).
//
// Tile BM x BN x 32 (configs 0-3) or 128 x 128 x 64 (config 4, 16-byte 16-bit A path only: a
// stage holds two k tiles of 32, each at its own cursor position), multi-stage cp.async pipeline
// whose loop body is branch-free (k tiles past the end are zero-filled); fp16/bf16 use ldmatrix +
// mma.m16n8k16, fp32 with allow_tf32 uses mma.m16n8k8.tf32 (A rounded with cvt.rna at fragment
// load, B packed pre-rounded), fp32 without it 3xTF32 (SPLIT: three m16n8k8.tf32 per product on
// hi/lo halves split in registers, see split_tf32; products to ~fp32 precision; each k tile's
// MMAs sum into their own accumulator, added to the running one with fp32 adds); fp32
// accumulate. The C tile is staged through shared memory so global stores run along oc
// (channels_last output) or along m, i.e. along ow within a phase row (NCHW output).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gemm_phase/gemm_phase.h"
#include "common/unit_kind.h"
#include "common/phase_plan.cuh"
#include "common/device_cache.h"
#include "common/epilogue.cuh"
#include "common/scalar_convert.cuh"
#include "common/tensor_core_ptx.cuh"

namespace deconv_patch {
namespace {

using namespace tc;

// kBK (k tile = per-tap channel padding), kMaxStride, kMaxPhases, kRowPastM, kIndexLimit, the
// per-axis phase table (AxisPlan, plan_axis), RowInfo, the k cursor (KCursor), the C staging
// layout (CStaging) and host helpers are shared with gemm_phase_sm90:
// common/phase_plan.cuh.
constexpr int kNPad = 8;  // packed Cout_g padding: 16-byte rows for every dtype

// ---------------------------------------------------------------------------------------------
// Tile configurations: block tile BM x BN, warps WARPS_M x WARPS_N. A pipeline stage holds SUB
// k tiles of 32 (each with its own tap and channel block): SUB = 2 halves the barriers per MMA,
// used only on the 16-byte 16-bit path (Shallow is the SUB = 1 twin for the other paths).
template <int BM, int BN, int WARPS_M, int WARPS_N, int MIN_BLOCKS, int SUB = 1>
struct TileConfig {
  using Shallow = TileConfig<BM, BN, WARPS_M, WARPS_N, MIN_BLOCKS, 1>;
  static constexpr int kSub = SUB;
  static constexpr int kBM = BM, kBN = BN;
  static constexpr int kWarpsN = WARPS_N;
  static constexpr int kWM = BM / WARPS_M, kWN = BN / WARPS_N;  // warp tile
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int kMinBlocks = MIN_BLOCKS;
  static constexpr int kMT = kWM / 16;  // m16 tiles per warp
  static constexpr int kNT = kWN / 8;   // n8 tiles per warp
  static_assert(kWM % 16 == 0 && kWN % 16 == 0, "warp tile: m16 tiles, pairs of n8 tiles");
};
using Config128x128 = TileConfig<128, 128, 2, 4, 2>;  // 8 warps of 64x32: large M and Cout_g
using Config128x64 = TileConfig<128, 64, 2, 2, 3>;    // 4 warps of 64x32: Cout_g <= 64, or to fill
using Config64x64 = TileConfig<64, 64, 2, 2, 4>;      // 4 warps of 32x32: few output tiles
using Config128x32 = TileConfig<128, 32, 4, 1, 4>;    // 4 warps of 32x32: Cout_g <= 32
// 128x128 with 64-deep stages on the 16-byte 16-bit path (3 stages, 109 KB: 2 blocks per SM on
// sm_90, 1 on A100); Config128x128 on the other paths and where a block cannot get 109 KB.
using Config128x128x64 = TileConfig<128, 128, 2, 4, 2, 2>;
constexpr int kNumConfigs = 5;

// ---------------------------------------------------------------------------------------------
// Main kernel arguments. Offsets are 32-bit: gemm_phase_supports bounds every element offset.
// The fields other than n_pad and is_c are Sm90Args' too (fill_shared_args sets them).
struct PhaseArgs {
  const void* in;
  const void* packed;
  const void* bias;
  void* out;
  EpilogueParams epi;
  int batch, in_h, in_w;
  int cin_g, cout_g;
  int cin_pad, n_pad;  // packed geometry
  int kw, khkw;        // kernel width, kernel taps (packed phase offsets)
  int sh, sw;
  int in_step_h, in_step_w;
  int is_n, is_c, is_h, is_w;
  int os_n, os_c, os_h, os_w;
  int n_tiles;     // ceil(Cout_g / BN)
  int num_phases;  // phases with output pixels, in launch order
  bool out_along_n;  // store along oc (channels_last-like output) rather than along m
  bool out_vec;      // ... 16 bytes at a time (launcher proved contiguity and alignment)
  AxisPhaseInfo ph_h[kMaxStride], ph_w[kMaxStride];
  int tile_begin[kMaxPhases + 1];  // first blockIdx.x of each launched phase; [num_phases] = total
  uint16_t phase_rc[kMaxPhases];   // rh << 8 | rw of each launched phase
};

// ---------------------------------------------------------------------------------------------
// Shared-memory geometry. Padding keeps ldmatrix (8 rows of 16 B) and the tf32 scalar fragment
// loads free of bank conflicts:
//   k-contiguous A rows ([m][k], channels_last input): 16 B of padding (80 B or 144 B rows);
//   m/oc-contiguous rows (A [k][m] for NCHW input, B [k][oc]): 8 elements of padding, a row stride
//     of 4 (16-bit) or 8 (fp32) mod 32 words.
//   C staging [m][oc]: CStaging (shared with gemm_phase_sm90).
template <typename T, class Cfg, bool KMAJOR>
struct Smem {
  static constexpr int kV = 16 / (int)sizeof(T);  // elements per 16 bytes
  static constexpr int kBKS = kBK * Cfg::kSub;     // k depth of a stage
  static constexpr int kLdA = KMAJOR ? kBKS + kV : Cfg::kBM + 8;
  static constexpr int kARows = KMAJOR ? Cfg::kBM : kBKS;
  static constexpr int kLdB = Cfg::kBN + 8;
  static constexpr int kABytes = kARows * kLdA * (int)sizeof(T);
  static constexpr int kBBytes = kBKS * kLdB * (int)sizeof(T);
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kStages = sizeof(T) == 4 || Cfg::kSub > 1 ? 3 : 4;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  using C = CStaging<(int)sizeof(T), Cfg::kBM, Cfg::kBN>;  // reuses the pipeline buffers
  static constexpr int kMetaBytes = block_tables_bytes(Cfg::kBM, Cfg::kBN);
  static constexpr int kTotalBytes = kMetaBytes + (kPipeBytes > C::kBytes ? kPipeBytes : C::kBytes);
  static_assert(kABytes % 16 == 0 && kBBytes % 16 == 0 && kMetaBytes % 16 == 0, "alignment");
  static_assert((kLdA * sizeof(T)) % 16 == 0 && (kLdB * sizeof(T)) % 16 == 0, "row alignment");
};

template <typename T>
__device__ __forceinline__ uint32_t load_bits16(const T* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}

// 3xTF32 operand split of the fp32 value with bits x: x = hi + lo up to lo's own rounding, with
// hi = tf32_rna(x) and lo = tf32_rna(x - hi) (the difference is exact in fp32: hi keeps x's top
// 11 significant bits, so x - hi fits in 13). hi is rounded with integer ops: adding half a TF32
// ulp to the magnitude bits and clearing the 13 dropped ones is round-to-nearest-away for every
// finite and infinite x (the carry moves into the exponent as it should), two instructions where
// cvt.rna also tests for NaN. A NaN x still gives lo = NaN (and an infinite x: inf - inf), so
// non-finite inputs make NaN products.
__device__ __forceinline__ void split_tf32(uint32_t x, uint32_t& hi, uint32_t& lo) {
  hi = (x + 0x1000u) & 0xffffe000u;
  lo = to_tf32(__uint_as_float(x) - __uint_as_float(hi));
}

// Launch-bounds blocks per SM: Cfg::kMinBlocks, except for 3xTF32 (SPLIT) with 64x32 warp tiles,
// whose two accumulator sets (running and per k tile, 64 registers each) plus split fragments
// need ~200 registers: there the most blocks that leave a thread 255 (64K registers per SM),
// i.e. 1 of 256 threads (128x128), 2 of 128 (128x64). 32x32 warp tiles fit Cfg's bounds.
template <class Cfg, bool SPLIT>
constexpr int min_blocks_per_sm() {
  if (!SPLIT || Cfg::kMT * Cfg::kNT * 4 < 64) return Cfg::kMinBlocks;
  return 65536 / (Cfg::kThreads * 256) > 1 ? 65536 / (Cfg::kThreads * 256) : 1;
}

// ---------------------------------------------------------------------------------------------
// Main kernel. T: element type. KMAJOR: the shared A tile is [m][k] (channels_last input, or any
// input whose channel stride is the smaller one) rather than [k][m]. VEC: A chunks are 16 bytes
// of channels (is_c == 1, aligned; the launcher proves it). Otherwise A is gathered per element:
// fp32 with 4-byte cp.async, 16-bit types through registers (cp.async has no 2-byte form), the
// loads issued before the MMAs of the previous tile and stored to shared memory after them.
// SPLIT (T = float only): 3xTF32 (fp32 without allow_tf32; B packed at full fp32) instead of one
// TF32 MMA per product; the other instantiations are untouched by it (with 64x32 warp tiles its
// per-k-tile accumulator needs relaxed launch bounds: min_blocks_per_sm).
template <typename T, class Cfg, bool KMAJOR, bool VEC, bool SPLIT>
__global__ void __launch_bounds__(Cfg::kThreads, (min_blocks_per_sm<Cfg, SPLIT>()))
    conv_transpose2d_gemm_phase_kernel(const __grid_constant__ PhaseArgs p) {
  using S = Smem<T, Cfg, KMAJOR>;
  constexpr int BM = Cfg::kBM, BN = Cfg::kBN, kThreads = Cfg::kThreads;
  constexpr int kMT = Cfg::kMT, kNT = Cfg::kNT;
  constexpr int kStages = S::kStages;
  constexpr int kV = S::kV;
  static_assert(KMAJOR || !VEC, "[k][m] A has no 16-byte path: tap offsets break the alignment");
  constexpr bool kRegA = sizeof(T) == 2 && !VEC;
  constexpr int kSub = Cfg::kSub;
  static_assert(kSub == 1 || (sizeof(T) == 2 && VEC), "deep stages: 16-byte 16-bit path only");
  static_assert(!SPLIT || sizeof(T) == 4, "3xTF32 is an fp32 mode");

  extern __shared__ __align__(16) unsigned char smem[];
  RowInfo* rows = reinterpret_cast<RowInfo*>(smem);
  ChannelAffine* col_aff = reinterpret_cast<ChannelAffine*>(rows + BM);
  int* col_off = reinterpret_cast<int*>(col_aff + BN);
  unsigned char* pipe = smem + S::kMetaBytes;

  const T* __restrict__ in = static_cast<const T*>(p.in);
  const T* __restrict__ packed = static_cast<const T*>(p.packed);
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  T* __restrict__ out = static_cast<T*>(p.out);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_m = warp / Cfg::kWarpsN;
  const int warp_n = warp % Cfg::kWarpsN;
  const int g = blockIdx.y;

  // ---- This block's phase, m tile and n tile (this section, the tables below and Epilogue 2
  // are also gemm_phase_sm90's code: common/phase_plan.cuh says why not shared). ----
  const int bid = (int)blockIdx.x;
  int q = 0;
  for (int hi = p.num_phases; hi - q > 1;) {
    const int mid = (q + hi) >> 1;
    if (p.tile_begin[mid] <= bid) q = mid; else hi = mid;
  }
  const int local = bid - p.tile_begin[q];
  const int rh = p.phase_rc[q] >> 8, rw = p.phase_rc[q] & 0xff;
  const AxisPhaseInfo ah = p.ph_h[rh], aw = p.ph_w[rw];
  const int m_tile = local / p.n_tiles;
  const int n0 = (local - m_tile * p.n_tiles) * BN;
  const int m0 = m_tile * BM;
  const int plane = ah.rows * aw.rows;  // OHp*OWp
  const int M = p.batch * plane;

  // ---- Per-block tables: GEMM rows (input and output pixels), columns (affine, offset). ----
  for (int e = tid; e < BM + BN; e += kThreads) {
    if (e < BM) {
      const int m = m0 + e;
      RowInfo ri{0u, kRowPastM, 0, 0};
      if (m < M) {
        const unsigned n = (unsigned)m / (unsigned)plane;
        const unsigned rem = (unsigned)m - n * (unsigned)plane;
        const int i = (int)(rem / (unsigned)aw.rows);
        const int j = (int)rem - i * aw.rows;
        // Wrapping unsigned math: only the sum with a valid tap offset must be exact (< 2^31).
        ri.a_base = n * (uint32_t)p.is_n + (uint32_t)i * (uint32_t)p.is_h +
                    (uint32_t)j * (uint32_t)p.is_w;
        ri.i = i;
        ri.j = j;
        ri.o_row = (int)n * p.os_n + (rh + p.sh * i) * p.os_h + (rw + p.sw * j) * p.os_w;
      }
      rows[e] = ri;
    } else {
      const int nl = e - BM;
      const int oc = n0 + nl;
      ChannelAffine aff{0.f, 0.f};
      int off = 0;
      if (oc < p.cout_g) {
        const int c = g * p.cout_g + oc;
        aff = channel_affine(p.epi, bias != nullptr ? to_float(bias[c]) : 0.f, c);
        off = c * p.os_c;
      }
      col_aff[nl] = aff;
      col_off[nl] = off;
    }
  }
  __syncthreads();

  // ---- k cursor: the tap and channel block of the next tile to load. Uniform, branch-free. ----
  const int KT32 = ah.taps * aw.taps * (p.cin_pad / kBK);  // k tiles of 32
  const int KT = (KT32 + kSub - 1) / kSub;                   // pipeline stages to compute
  const T* in_g = in + g * p.cin_g * p.is_c;
  KCursor<false> cur;
  cur.start(p, ah, aw);

  // ---- A loader. A thread's chunks keep one k (or m) position and step through rows. ----
  // [m][k]: chunk = kVA consecutive channels of one row.  [k][m]: chunk = kVA consecutive rows.
  constexpr int kVA = VEC ? kV : (kRegA ? 2 : 1);
  constexpr int kAPerLine = KMAJOR ? kBK / kVA : BM / kVA;  // chunks per smem line
  constexpr int kAIters = BM * kBK / kVA / kThreads;
  constexpr int kALineStep = kThreads / kAPerLine;
  static_assert(BM * kBK / kVA % kThreads == 0 && kThreads % kAPerLine == 0, "A chunk split");
  const int a_pos = (tid % kAPerLine) * kVA;  // k in the tile ([m][k]) or m in the tile ([k][m])
  const int a_line0 = tid / kAPerLine;
  uint32_t a_regs[kRegA ? kAIters : 1];
  // The GEMM rows a thread loads are fixed for the whole k loop: the 16-byte path and the [k][m]
  // paths keep their (a_base, i, j) in registers; the element [m][k] paths (up to 16 rows) read
  // them from shared memory per tile, and so does the 16-byte path in 3xTF32 mode (its split
  // fragments need those registers: 128x128 spills otherwise).
  constexpr int kRowRegs = KMAJOR ? (VEC && !SPLIT ? kAIters : 0) : kVA;
  RowInfo a_rows[kRowRegs > 0 ? kRowRegs : 1];
#pragma unroll
  for (int it = 0; it < kRowRegs; ++it)
    a_rows[it] = rows[KMAJOR ? a_line0 + it * kALineStep : a_pos + it];
  // Input offset (from in_g, mod 2^32) of row `ri` at the cursor; exact when ok. ok is false when
  // the pixel is outside the input, or when `more` is false (a tile past the end: zero-filled).
  auto pixel = [&](const RowInfo& ri, bool more, bool& ok) -> uint32_t {
    ok = more && (unsigned)(ri.i + cur.off_h) < (unsigned)p.in_h &&
         (unsigned)(ri.j + cur.off_w) < (unsigned)p.in_w;
    return ri.a_base + cur.a;
  };

  const uint32_t a_chan = (uint32_t)a_pos * (uint32_t)p.is_c;  // [m][k]: the chunk's channel
  auto load_a = [&](T* As, bool more) {
    if constexpr (KMAJOR) {
      const int c = cur.c0 + a_pos;
      // VEC: Cin_g % kV == 0, so a chunk is entirely inside or outside the group's channels.
      const bool c_ok = more && c < p.cin_g;
      // Register-staged chunks must unroll fully (a_regs[it] stays in registers); the many
      // 4-byte cp.async of the fp32 element path unroll by 4 only, to keep code size down.
      constexpr int kUnroll = kRegA || VEC ? kAIters : 4;
#pragma unroll kUnroll
      for (int it = 0; it < kAIters; ++it) {
        const int r = a_line0 + it * kALineStep;
        RowInfo ri;
        if constexpr (kRowRegs > 0) ri = a_rows[it]; else ri = rows[r];
        bool ok;
        const uint32_t pix = pixel(ri, c_ok, ok);
        if constexpr (kRegA) {
          uint32_t lo = 0, hi = 0;
          if (ok) {
            const T* src = in_g + (pix + a_chan);
            lo = load_bits16(src);
            if (c + 1 < p.cin_g) hi = load_bits16(src + p.is_c);
          }
          a_regs[it] = lo | hi << 16;
        } else {
          constexpr int kBytes = kVA * (int)sizeof(T);
          cp_async<kBytes>(smem_u32(As + r * S::kLdA + a_pos), in_g + (ok ? pix + a_chan : 0u),
                           ok ? kBytes : 0);
        }
      }
    } else {
      bool ok0, ok1 = false;
      // pix (cursor channel block included) is exact where ok: the channel offsets are added
      // to the pointers, and only for channels inside the group.
      const uint32_t pix0 = pixel(a_rows[0], more, ok0);
      const uint32_t pix1 = kVA == 2 ? pixel(a_rows[kVA - 1], more, ok1) : 0u;
      const T* src0 = in_g + (ok0 ? pix0 : 0u);
      const T* src1 = in_g + (ok1 ? pix1 : 0u);
      constexpr int kUnroll = kRegA ? kAIters : 4;
#pragma unroll kUnroll
      for (int it = 0; it < kAIters; ++it) {
        const int kr = a_line0 + it * kALineStep;
        const bool c_ok = cur.c0 + kr < p.cin_g;
        if constexpr (kRegA) {
          uint32_t lo = 0, hi = 0;
          if (c_ok) {
            if (ok0) lo = load_bits16(src0 + (int64_t)kr * p.is_c);
            if (ok1) hi = load_bits16(src1 + (int64_t)kr * p.is_c);
          }
          a_regs[it] = lo | hi << 16;
        } else {
          const bool ok = ok0 && c_ok;
          cp_async<4>(smem_u32(As + kr * S::kLdA + a_pos), ok ? src0 + (int64_t)kr * p.is_c : in_g,
                      ok ? 4 : 0);
        }
      }
    }
  };
  // Register-staged A (16-bit element path): registers -> shared stage.
  auto store_a_regs = [&](T* As) {
#pragma unroll
    for (int it = 0; it < kAIters; ++it) {
      const int line = a_line0 + it * kALineStep;  // row m ([m][k]) or k ([k][m])
      *reinterpret_cast<uint32_t*>(As + line * S::kLdA + a_pos) = a_regs[it];
    }
  };

  // ---- B loader: 16-byte chunks of one packed row (Np % 8 == 0: a chunk is all in or out). ----
  constexpr int kBPerLine = BN / kV;
  constexpr int kBIters = kBK * kBPerLine / kThreads;
  constexpr int kBLineStep = kThreads / kBPerLine;
  static_assert(kBK * kBPerLine % kThreads == 0 && kThreads % kBPerLine == 0, "B chunk split");
  const int b_col = (tid % kBPerLine) * kV;
  const int b_line0 = tid / kBPerLine;
  const bool b_ok = n0 + b_col < p.n_pad;
  // This thread's first chunk of the phase's B; each tile moves kBK packed rows on.
  const T* b_src = packed + ((g * p.khkw + phase_first_tap(ah, aw, p.kw)) * p.cin_pad + b_line0) *
                                p.n_pad + (b_ok ? n0 + b_col : 0);
  auto load_b = [&](T* Bs, bool more) {
    const bool ok = b_ok && more;
#pragma unroll
    for (int it = 0; it < kBIters; ++it) {
      const int kr = b_line0 + it * kBLineStep;
      cp_async<16>(smem_u32(Bs + kr * S::kLdB + b_col),
                   ok ? b_src + it * kBLineStep * p.n_pad : packed, ok ? 16 : 0);
    }
    b_src += kBK * p.n_pad;
  };

  auto stage_a = [&](int stage) { return reinterpret_cast<T*>(pipe + stage * S::kStageBytes); };
  auto stage_b = [&](int stage) {
    return reinterpret_cast<T*>(pipe + stage * S::kStageBytes + S::kABytes);
  };
  // Issues the loads of stage tile `t` (kSub k tiles of 32 at the cursor) into `stage` (A only
  // into registers when kRegA). A k tile past the end is zero-filled (A and B: the MMAs of a
  // half-empty last stage add exact zeros), so the loop body has no branch.
  auto issue_tile = [&](int stage, int t) {
#pragma unroll
    for (int h = 0; h < kSub; ++h) {
      const bool more = t * kSub + h < KT32;
      load_a(stage_a(stage) + (KMAJOR ? h * kBK : h * kBK * S::kLdA), more);
      load_b(stage_b(stage) + h * kBK * S::kLdB, more);
      cur.advance(p, aw);
    }
  };

  float acc[kMT][kNT][4];
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

  // ---- Fragment loads + MMAs on one stage (layouts as in gemm_kxs/gemm_kxs.cu). ----
  // mma.m16n8k16, g = lane/4, t = lane%4: A a0 = (row g, k 2t..2t+1), a1 = (g+8, 2t),
  // a2 = (g, 2t+8), a3 = (g+8, 2t+8); B b0 = (k 2t.., col g), b1 = (k 2t+8.., col g).
  // ldmatrix x4: matrix i takes its row addresses from lanes 8i..8i+7.
  //   A [m][k]: lanes 0-15 rows 0-15 at k 0, lanes 16-31 rows 0-15 at k 8 -> a0..a3.
  //   A [k][m] (.trans): matrix i = (k block i/2, m block i%2) -> a0..a3.
  //   B [k][n] (.trans): matrix i = (k block i%2, n block i/2) -> b0,b1 of n8 tile 0, then 1.
  // mma.m16n8k8.tf32: a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4);
  //   b0 = (k t, col g), b1 = (k t+4, col g). Scalar LDS. SPLIT fragments hold raw fp32 bits
  //   (split in mma_frag, so only the fragments being multiplied exist as hi/lo pairs).
  const int fg = lane >> 2, ft = lane & 3;
  constexpr int kKSteps = S::kBKS / (sizeof(T) == 2 ? 16 : 8);
  struct Frag {
    uint32_t a[kMT][4], b[kNT][2];
  };
  const int li = lane >> 3;
  const uint32_t a_frag0 =
      KMAJOR ? smem_u32(pipe) + 2u * (uint32_t)((warp_m * Cfg::kWM + (lane & 15)) * S::kLdA +
                                                (lane >> 4) * 8)
             : smem_u32(pipe) + 2u * (uint32_t)(((lane & 7) + (li >> 1) * 8) * S::kLdA +
                                                warp_m * Cfg::kWM + (li & 1) * 8);
  const uint32_t b_frag0 = smem_u32(pipe) + S::kABytes +
      2u * (uint32_t)(((lane & 7) + (li & 1) * 8) * S::kLdB + warp_n * Cfg::kWN + (li >> 1) * 8);
  auto load_frag = [&](int stage, int ks, Frag& f) {
    if constexpr (sizeof(T) == 2) {
      const uint32_t a_addr = a_frag0 + (uint32_t)(stage * S::kStageBytes);
      const uint32_t b_addr = b_frag0 + (uint32_t)(stage * S::kStageBytes);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if constexpr (KMAJOR) {
          ldsm_x4(a_addr + (uint32_t)((mt * 16 * S::kLdA + ks * 16) * 2), f.a[mt][0], f.a[mt][1],
                  f.a[mt][2], f.a[mt][3]);
        } else {
          ldsm_x4_trans(a_addr + (uint32_t)((ks * 16 * S::kLdA + mt * 16) * 2), f.a[mt][0],
                        f.a[mt][1], f.a[mt][2], f.a[mt][3]);
        }
      }
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        ldsm_x4_trans(b_addr + (uint32_t)((ks * 16 * S::kLdB + np * 16) * 2), f.b[2 * np][0],
                      f.b[2 * np][1], f.b[2 * np + 1][0], f.b[2 * np + 1][1]);
      }
    } else {
      const T* As = stage_a(stage);
      const T* Bs = stage_b(stage);
      const int k = ks * 8 + ft;
      // TF32: A rounded here. SPLIT: raw bits, split in mma_frag.
      auto a_val = [](float x) -> uint32_t {
        if constexpr (SPLIT) return __float_as_uint(x); else return to_tf32(x);
      };
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        const int r = warp_m * Cfg::kWM + mt * 16 + fg;
        if constexpr (KMAJOR) {
          f.a[mt][0] = a_val(As[r * S::kLdA + k]);
          f.a[mt][1] = a_val(As[(r + 8) * S::kLdA + k]);
          f.a[mt][2] = a_val(As[r * S::kLdA + k + 4]);
          f.a[mt][3] = a_val(As[(r + 8) * S::kLdA + k + 4]);
        } else {
          f.a[mt][0] = a_val(As[k * S::kLdA + r]);
          f.a[mt][1] = a_val(As[k * S::kLdA + r + 8]);
          f.a[mt][2] = a_val(As[(k + 4) * S::kLdA + r]);
          f.a[mt][3] = a_val(As[(k + 4) * S::kLdA + r + 8]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int c = warp_n * Cfg::kWN + nt * 8 + fg;
        // Packed pre-rounded to TF32 (TF32 mode) or at full fp32 (SPLIT).
        f.b[nt][0] = __float_as_uint(Bs[k * S::kLdB + c]);
        f.b[nt][1] = __float_as_uint(Bs[(k + 4) * S::kLdB + c]);
      }
    }
  };
  // MMAs of one k-step: into acc, or in SPLIT mode into the k tile's own accumulator `part`.
  float part[SPLIT ? kMT : 1][SPLIT ? kNT : 1][4];
  auto mma_frag = [&](const Frag& f) {
    if constexpr (SPLIT) {
      // 3xTF32: a*b ~ a_lo*b_hi + a_hi*b_lo + a_hi*b_hi (split_tf32), dropping only a_lo*b_lo
      // (~2^-22 relative) and lo's rounding: products to about fp32 precision (the sum still
      // rounds in the fp32 accumulator, once per MMA). The small terms go first, into the same
      // accumulator: added after this k-step's ~2^11x larger hi*hi term they would be aligned to
      // (and truncated at) its exponent in the tensor core's adder, losing bits while the sum is
      // still small. B is split once per k-step, A once per m16 tile (fewer live hi/lo).
      uint32_t b_hi[kNT][2], b_lo[kNT][2];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        split_tf32(f.b[nt][0], b_hi[nt][0], b_lo[nt][0]);
        split_tf32(f.b[nt][1], b_hi[nt][1], b_lo[nt][1]);
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        uint32_t a_hi[4], a_lo[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) split_tf32(f.a[mt][i], a_hi[i], a_lo[i]);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          mma_1688_tf32(part[mt][nt], a_lo, b_hi[nt]);
          mma_1688_tf32(part[mt][nt], a_hi, b_lo[nt]);
          mma_1688_tf32(part[mt][nt], a_hi, b_hi[nt]);
        }
      }
    } else {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          if constexpr (sizeof(T) == 2) {
            mma_16816<T>(acc[mt][nt], f.a[mt], f.b[nt]);
          } else {
            mma_1688_tf32(acc[mt][nt], f.a[mt], f.b[nt]);
          }
        }
    }
  };

  // ---- Multi-stage pipeline: tile kt+kStages-1 is in flight while tile kt is computed. ----
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    issue_tile(s, s);
    if constexpr (kRegA) store_a_regs(stage_a(s));
    cp_async_commit();  // one group per tile, so the group count stays in step with kt
  }
  int rd = 0, wr = kStages - 1;  // stages of tile kt and of tile kt+kStages-1
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();
    // Makes tile kt visible to all warps, and proves every warp is done with tile kt-1, whose
    // stage (wr) the loads below overwrite (the register-staged A is stored after the MMAs of
    // tile kt, and read only after the barrier of iteration kt+kStages-1).
    __syncthreads();
    // One basic block per tile. cp.async paths: the first fragments are requested before the
    // producer (its index math and issue then overlap their latency). Register-staged A: its
    // global loads go first (their latency spans the MMAs; fewer registers live across them).
    Frag f[2];
    if constexpr (!kRegA) load_frag(rd, 0, f[0]);
    issue_tile(wr, kt + kStages - 1);
    cp_async_commit();
    if constexpr (kRegA) load_frag(rd, 0, f[0]);
    if constexpr (SPLIT) {
      // The k tile's 12 MMAs per output fragment go into a fresh accumulator, added to acc with
      // fp32 (round-to-nearest) adds below: tensor cores are reported to truncate their fp32
      // sums, which over a long reduction grows to many times fp32's error; confined to one
      // 32-deep k tile it stays below it (fp32 has one stage per k tile: kSub == 1).
#pragma unroll
      for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int j = 0; j < kNT; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) part[i][j][r] = 0.f;
    }
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      if (ks + 1 < kKSteps) load_frag(rd, ks + 1, f[(ks + 1) & 1]);
      mma_frag(f[ks & 1]);
    }
    if constexpr (SPLIT) {
#pragma unroll
      for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int j = 0; j < kNT; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) acc[i][j][r] += part[i][j][r];
    }
    if constexpr (kRegA) store_a_regs(stage_a(wr));
    rd = rd == kStages - 1 ? 0 : rd + 1;
    wr = wr == kStages - 1 ? 0 : wr + 1;
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline buffers become the C staging tile

  // ---- Epilogue 1: fragments -> epilogue -> one rounding -> shared C tile [m][oc]. ----
  T* Cs = reinterpret_cast<T*>(pipe);
  const int ldc = p.out_along_n ? S::C::kLdN : S::C::kLdM;
  // One instantiation per activation (common/epilogue.cuh: dispatch_activation), so every unrolled
  // element runs only its own activation's instructions.
  auto stage_c = [&](auto act_tag) {
    constexpr Activation kAct = decltype(act_tag)::value;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int r = warp_m * Cfg::kWM + mt * 16 + fg;
        const int c = warp_n * Cfg::kWN + nt * 8 + 2 * ft;
        if (n0 + c >= p.cout_g) continue;  // padding columns are never stored: no epilogue
        const ChannelAffine a0 = col_aff[c], a1 = col_aff[c + 1];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const T v0 = from_float<T>(
              epilogue_value<kAct>(acc[mt][nt][2 * h], a0.mul, a0.add, p.epi.negative_slope));
          const T v1 = from_float<T>(
              epilogue_value<kAct>(acc[mt][nt][2 * h + 1], a1.mul, a1.add, p.epi.negative_slope));
          T* dst = Cs + (r + 8 * h) * ldc + c;
          if constexpr (sizeof(T) == 2) {
            // ldc and c are even: one 4-byte store per pair.
            typename PairOf<T>::type pair;
            pair.x = v0;
            pair.y = v1;
            *reinterpret_cast<typename PairOf<T>::type*>(dst) = pair;
          } else {
            dst[0] = v0;  // ldc may be odd: no 8-byte store
            dst[1] = v1;
          }
        }
      }
    }
  };
  dispatch_activation(p.epi.activation, stage_c);
  __syncthreads();

  // ---- Epilogue 2: shared C tile -> output, consecutive threads on consecutive addresses. ----
  const int m_valid = min(BM, M - m0);
  const int n_valid = min(BN, p.cout_g - n0);
  if (p.out_along_n) {
    if (p.out_vec) {
      // os_c == 1, Cout_g % kV == 0 and 16-byte aligned pixels (launcher): whole 16-byte chunks.
      const int chunks = n_valid / kV;
      const SmallDiv div = make_small_div((uint32_t)chunks);
      const int total = m_valid * chunks;
      for (int e = tid; e < total; e += kThreads) {
        const int ml = (int)small_div((uint32_t)e, div);
        const int nl = (e - ml * chunks) * kV;
        *reinterpret_cast<uint4*>(out + rows[ml].o_row + col_off[nl]) =
            *reinterpret_cast<const uint4*>(Cs + ml * ldc + nl);
      }
    } else {
      const SmallDiv div = make_small_div((uint32_t)n_valid);
      const int total = m_valid * n_valid;
      for (int e = tid; e < total; e += kThreads) {
        const int ml = (int)small_div((uint32_t)e, div);
        const int nl = e - ml * n_valid;
        out[rows[ml].o_row + col_off[nl]] = Cs[ml * ldc + nl];
      }
    }
  } else {
    // Consecutive m of a phase are consecutive ow = rw + sw*j of one output row (stride sw*os_w).
    const int total = n_valid * BM;
    for (int e = tid; e < total; e += kThreads) {
      const int nl = e / BM;
      const int ml = e % BM;
      if (ml < m_valid) out[rows[ml].o_row + col_off[nl]] = Cs[ml * ldc + nl];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Weight packing: one thread per packed element, in packed order (coalesced writes; the reads
// go through any weight strides). Writes every element, zeros in the padding.
struct PackArgs {
  const void* w;
  void* packed;
  int64_t ws[4];  // weight strides: cin, cout/g, kh, kw
  int cin_g, cout_g, cin_pad, n_pad, kh, kw;
  int pad_h, pad_w, dil_h, dil_w;
  bool round_tf32;  // TF32 mode; the 3xTF32 mode keeps full fp32 (split in the kernel)
  int64_t total;
  AxisPlan h, w_axis;
};

template <typename T>
__global__ void __launch_bounds__(256)
    gemm_phase_pack_weight_kernel(const __grid_constant__ PackArgs a) {
  const T* __restrict__ w = static_cast<const T*>(a.w);
  T* __restrict__ packed = static_cast<T*>(a.packed);
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < a.total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int n = (int)(idx % a.n_pad);
    int64_t r = idx / a.n_pad;
    const int c = (int)(r % a.cin_pad);
    r /= a.cin_pad;
    const int kwi = (int)(r % a.kw);
    r /= a.kw;
    const int khi = (int)(r % a.kh);
    const int g = (int)(r / a.kh);
    // Phase of the tap and its index inside the phase (taps of a phase are kh0 + t*step with
    // kh0 < step, so t = kh / step).
    const int rh = phase_of(khi, a.dil_h, a.pad_h, a.h.stride);
    const int rw = phase_of(kwi, a.dil_w, a.pad_w, a.w_axis.stride);
    const AxisPhaseInfo& ph = a.h.ph[rh];
    const AxisPhaseInfo& pw = a.w_axis.ph[rw];
    const int tap = (khi / a.h.step) * pw.taps + kwi / a.w_axis.step;
    const int64_t row = ((int64_t)g * a.kh * a.kw + ph.tap_prefix * a.kw + ph.taps * pw.tap_prefix +
                         tap) * a.cin_pad + c;
    T v = from_float<T>(0.f);
    if (c < a.cin_g && n < a.cout_g) {
      v = w[((int64_t)g * a.cin_g + c) * a.ws[0] + n * a.ws[1] + khi * a.ws[2] + kwi * a.ws[3]];
      if constexpr (sizeof(T) == 4) {
        if (a.round_tf32) v = __uint_as_float(to_tf32(v));
      }
    }
    packed[row * a.n_pad + n] = v;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.
struct PackGeometry {
  int64_t cin_pad, n_pad, elements;
};
PackGeometry pack_geometry(const ConvTranspose2dParams& p) {
  PackGeometry geo;
  geo.cin_pad = round_up(p.in_per_group, kBK);
  geo.n_pad = round_up(p.out_per_group, kNPad);
  geo.elements = p.groups * p.ph_h.kernel * p.ph_w.kernel * geo.cin_pad * geo.n_pad;
  return geo;
}

int64_t element_size(ScalarKind kind) { return kind == ScalarKind::kFloat32 ? 4 : 2; }

// Tiles of one group for a BM x BN tile, summed over the phases with output pixels.
int64_t group_tiles(const ConvTranspose2dParams& p, const AxisPlan& h, const AxisPlan& w, int bm,
                    int bn) {
  const int64_t n_tiles = (p.out_per_group + bn - 1) / bn;
  int64_t tiles = 0;
  for (int rh = 0; rh < h.stride; ++rh)
    for (int rw = 0; rw < w.stride; ++rw) {
      const int64_t m = p.batch * h.ph[rh].rows * w.ph[rw].rows;
      tiles += (m + bm - 1) / bm * n_tiles;
    }
  return tiles;
}

// Heuristic: the largest tile that still gives every SM at least one block; narrow tiles when
// Cout_g is small (a 128-wide tile would be mostly padding).
int pick_config(const ConvTranspose2dParams& p, const AxisPlan& h, const AxisPlan& w) {
  int sms = device_sm_count(current_device());
  if (sms <= 0) sms = 132;
  if (p.out_per_group <= 32) return 3;
  if (p.out_per_group > 64 && p.groups * group_tiles(p, h, w, 128, 128) >= sms) return 0;
  if (p.groups * group_tiles(p, h, w, 128, 64) >= sms) return 1;
  return 2;
}

template <typename T, class Cfg, bool KMAJOR, bool VEC, bool SPLIT>
cudaError_t launch_main(PhaseArgs& a, const ConvTranspose2dParams& p, const AxisPlan& h,
                        const AxisPlan& w, cudaStream_t stream) {
  using S = Smem<T, Cfg, KMAJOR>;
  const int64_t tiles = schedule_phases(a, p, h, w, Cfg::kBM, Cfg::kBN);
  if (tiles == 0) return cudaSuccess;

  auto kernel = conv_transpose2d_gemm_phase_kernel<T, Cfg, KMAJOR, VEC, SPLIT>;
  // Above 48 KiB of dynamic shared memory needs the opt-in (once per device).
  const cudaError_t err = ensure_dynamic_smem(kernel, S::kTotalBytes, current_device());
  if (err != cudaSuccess) return err;
  const dim3 grid((unsigned)tiles, (unsigned)p.groups, 1);
  kernel<<<grid, Cfg::kThreads, S::kTotalBytes, stream>>>(a);
  return cudaGetLastError();
}

// Picks the A load path: 16-byte channel chunks when the input is channels_last with aligned
// pixels and Cin_g % 16B == 0; otherwise per-element gathers into [m][k] or [k][m] tiles,
// whichever layout keeps consecutive threads on consecutive input addresses.
template <typename T, class Cfg, bool SPLIT>
cudaError_t dispatch_a(PhaseArgs& a, const ConvTranspose2dParams& p, const AxisPlan& h,
                       const AxisPlan& w, cudaStream_t stream) {
  constexpr int V = 16 / (int)sizeof(T);
  const int64_t* is = p.in_stride;
  const bool kmajor = is[1] == 1 || (is[3] != 1 && is[1] <= is[3]);
  using Shallow = typename Cfg::Shallow;  // Cfg itself unless it has deep stages
  if (!kmajor) return launch_main<T, Shallow, false, false, SPLIT>(a, p, h, w, stream);
  const bool vec = is[1] == 1 && p.in_per_group % V == 0 && ptr_aligned(p.input, 16) &&
                   stride_multiple(is[0], p.batch, V) && stride_multiple(is[2], p.in_h, V) &&
                   stride_multiple(is[3], p.in_w, V);
  if (!vec) return launch_main<T, Shallow, true, false, SPLIT>(a, p, h, w, stream);
  if constexpr (Cfg::kSub > 1 && sizeof(T) == 2) {
    if (device_optin_smem(current_device()) >= Smem<T, Cfg, true>::kTotalBytes) {
      return launch_main<T, Cfg, true, true, SPLIT>(a, p, h, w, stream);
    }
  }
  return launch_main<T, Shallow, true, true, SPLIT>(a, p, h, w, stream);
}

template <typename T, bool SPLIT>
cudaError_t launch_typed(const ConvTranspose2dParams& p, const void* packed, int config,
                         cudaStream_t stream) {
  const AxisPlan h = plan_axis(p.ph_h, p.out_h);
  const AxisPlan w = plan_axis(p.ph_w, p.out_w);
  const PackGeometry geo = pack_geometry(p);
  PhaseArgs a{};
  fill_shared_args<T>(a, p, packed, h, w, geo.cin_pad);
  a.n_pad = (int)geo.n_pad;
  a.is_c = (int)p.in_stride[1];
  if (config < 0) config = pick_config(p, h, w);
  switch (config) {
    case 0: return dispatch_a<T, Config128x128, SPLIT>(a, p, h, w, stream);
    case 1: return dispatch_a<T, Config128x64, SPLIT>(a, p, h, w, stream);
    case 2: return dispatch_a<T, Config64x64, SPLIT>(a, p, h, w, stream);
    case 3: return dispatch_a<T, Config128x32, SPLIT>(a, p, h, w, stream);
    case 4: return dispatch_a<T, Config128x128x64, SPLIT>(a, p, h, w, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t launch_pack(const ConvTranspose2dParams& p, bool round_tf32, void* packed,
                        cudaStream_t stream) {
  const PackGeometry geo = pack_geometry(p);
  PackArgs a{};
  fill_shared_pack_args(a, p, packed, geo.cin_pad, geo.elements);
  a.n_pad = (int)geo.n_pad;
  a.round_tf32 = round_tf32;
  gemm_phase_pack_weight_kernel<T><<<pack_grid(a.total), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

bool gemm_phase_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32) {
  switch (kind) {
    case ScalarKind::kFloat16:
    case ScalarKind::kBFloat16: break;
    case ScalarKind::kFloat32: break;  // TF32, or 3xTF32 without allow_tf32
    default: return false;
  }
  if (!axis_supported(p.ph_h) || !axis_supported(p.ph_w)) return false;
  if (p.groups < 1 || p.groups > 65535 || p.batch < 0 || p.in_h < 0 || p.in_w < 0) return false;
  if (p.out_h < 0 || p.out_w < 0 || p.in_h >= (1 << 30) || p.in_w >= (1 << 30)) return false;
  if (p.in_per_group < 0 || p.out_per_group < 0) return false;
  if (p.in_per_group * p.groups != p.in_channels || p.out_per_group * p.groups != p.out_channels)
    return false;
  for (int i = 0; i < 4; ++i)
    if (p.in_stride[i] < 0 || p.w_stride[i] < 0 || p.out_stride[i] < 0) return false;
  // 32-bit element offsets everywhere (and GEMM rows / tile counts of a phase).
  const int64_t KH = p.ph_h.kernel, KW = p.ph_w.kernel;
  if (max_offset(p.w_stride, p.in_channels, p.out_per_group, KH, KW) >= kIndexLimit) return false;
  if (pack_geometry(p).elements >= kIndexLimit) return false;
  return io_fits_index_limit(p);
}

int gemm_phase_num_configs() { return kNumConfigs; }

int64_t gemm_phase_packed_weight_bytes(const ConvTranspose2dParams& p, ScalarKind kind) {
  return pack_geometry(p).elements * element_size(kind);
}

cudaError_t launch_gemm_phase_pack_weight(const ConvTranspose2dParams& p, ScalarKind kind,
                                          bool allow_tf32, void* packed, cudaStream_t stream) {
  if (!gemm_phase_supports(p, kind, allow_tf32)) return cudaErrorInvalidValue;
  if (pack_geometry(p).elements == 0) return cudaSuccess;
  if (packed == nullptr || p.weight == nullptr) return cudaErrorInvalidValue;
  switch (kind) {
    case ScalarKind::kFloat32: return launch_pack<float>(p, allow_tf32, packed, stream);
    case ScalarKind::kFloat16: return launch_pack<__half>(p, false, packed, stream);
    case ScalarKind::kBFloat16: return launch_pack<__nv_bfloat16>(p, false, packed, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_conv_transpose2d_gemm_phase(const ConvTranspose2dParams& p, ScalarKind kind,
                                               bool allow_tf32, const void* packed, int config,
                                               cudaStream_t stream) {
  if (!gemm_phase_supports(p, kind, allow_tf32)) return cudaErrorInvalidValue;
  if (config < -1 || config >= kNumConfigs) return cudaErrorInvalidValue;
  if (p.batch * p.out_channels * p.out_h * p.out_w == 0) return cudaSuccess;
  if (packed == nullptr && pack_geometry(p).elements > 0) return cudaErrorInvalidValue;
  switch (kind) {
#if DECONV_PATCH_UNIT_HAS_KIND(0)
    case ScalarKind::kFloat32:
      return allow_tf32 ? launch_typed<float, false>(p, packed, config, stream)
                        : launch_typed<float, true>(p, packed, config, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(1)
    case ScalarKind::kFloat16: return launch_typed<__half, false>(p, packed, config, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(2)
    case ScalarKind::kBFloat16:
      return launch_typed<__nv_bfloat16, false>(p, packed, config, stream);
#endif
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
