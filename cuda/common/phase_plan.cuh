// What the two stride-phase implicit-GEMM kernels share: gemm_phase (mma.sync,
// gemm_phase/gemm_phase.cu) and gemm_phase_sm90 (wgmma, gemm_phase_sm90/gemm_phase_sm90.cu)
// run the same GEMMs over the same phases, so the phase tables, the launch order, the k cursor,
// the C staging layout and the host-side checks and argument filling are written once, here.
// The index math behind every piece (phases, taps, off0, tap_prefix, the GEMM row
// m -> (n, i, j), a_base, o_row, col_off, the k cursor, the packed tap order) is explained once,
// in the top-of-file comment of gemm_phase/gemm_phase.cu; comments here only say what each
// piece computes.
//
// Left written out in both kernels on purpose (the same code in each): the block's phase lookup
// (binary search of blockIdx.x), the per-block row/column tables, the C-tile epilogue and stores.
// Moved into __forceinline__ helpers they give the same PTX up to virtual-register numbering,
// and ptxas's output depends on that numbering: a third to a half of gemm_phase's kernels came
// out with different SASS. gemm_phase is the version proven on a GPU and keeps its exact SASS.
//
// Linkage: everything sits in deconv_patch's anonymous namespace, like the rest of both .cu
// files, so each translation unit that includes this header gets its own internal copy: nothing
// is exported, and the two .cu files link into one library without clashes. Host functions are
// also `inline` (no unused-function warnings where a file does not use one). Device helpers are
// __forceinline__ and templated on the kernel-argument struct (PhaseArgs, Sm90Args: the fields
// they read have the same names), so neither argument struct changes layout.
#pragma once

#include <climits>
#include <cstdint>

#include <cuda_runtime.h>

#include "common/params.h"
#include "common/epilogue.cuh"  // ChannelAffine

namespace deconv_patch {
namespace {

constexpr int kBK = 32;         // k tile of the cursor (one tap, 32 channels): per-tap padding
constexpr int kMaxStride = 16;  // phase tables live in the kernel arguments (< 4 KiB)
constexpr int kMaxPhases = kMaxStride * kMaxStride;
constexpr int kRowPastM = INT_MIN / 2;  // phase row of GEMM rows past M: every bounds test fails
constexpr int64_t kIndexLimit = (int64_t)1 << 31;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// ---------------------------------------------------------------------------------------------
// Per-axis phase table (host-built; the kernels index it by phase).
struct AxisPhaseInfo {
  int taps;        // taps of the kernel that land on this phase
  int off0;        // input offset of its first tap: in = phase index + off0 - t*in_step
  int tap_prefix;  // taps of the phases before it (packed-weight order)
  int rows;        // output coordinates of this phase inside [0, out_size)
};

struct AxisPlan {
  AxisPhaseInfo ph[kMaxStride];
  int stride;
  int step;     // kernel index distance between consecutive taps of a phase
  int in_step;  // input index decrease between consecutive taps of a phase
};

inline AxisPlan plan_axis(const AxisPhase& a, int64_t out_size) {
  AxisPlan r{};
  r.stride = a.stride;
  int x = a.stride, y = a.dil;
  while (y != 0) {
    const int t = x % y;
    x = y;
    y = t;
  }
  r.step = a.stride / x;
  r.in_step = a.dil / x;
  for (int k = 0; k < a.kernel; ++k) {
    const int64_t t = (int64_t)k * a.dil - a.pad;
    const int ph = (int)(((t % a.stride) + a.stride) % a.stride);
    // Taps are visited in increasing k, so the first one seen is the phase's first tap.
    if (r.ph[ph].taps == 0) r.ph[ph].off0 = (int)((ph - t) / a.stride);
    ++r.ph[ph].taps;
  }
  int prefix = 0;
  for (int ph = 0; ph < a.stride; ++ph) {
    r.ph[ph].tap_prefix = prefix;
    prefix += r.ph[ph].taps;
    r.ph[ph].rows = ph < out_size ? (int)((out_size - ph + a.stride - 1) / a.stride) : 0;
  }
  return r;
}

// Phase of kernel index k along one axis: (k*dil - pad) mod stride (the weight packers).
__host__ __device__ __forceinline__ int phase_of(int k, int dil, int pad, int stride) {
  const int t = (k * dil - pad) % stride;
  return t < 0 ? t + stride : t;
}

// ---------------------------------------------------------------------------------------------
// Host checks both kernels' *_supports predicates make.
inline bool stride_multiple(int64_t stride, int64_t size, int64_t v) {
  return size <= 1 || stride % v == 0;
}
inline bool ptr_aligned(const void* ptr, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % (uintptr_t)bytes == 0;
}

// Largest element offset of a 4-D tensor (-1 when it is empty).
inline int64_t max_offset(const int64_t* stride, int64_t n, int64_t c, int64_t h, int64_t w) {
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return -1;
  return (n - 1) * stride[0] + (c - 1) * stride[1] + (h - 1) * stride[2] + (w - 1) * stride[3];
}

// Tap offsets and phase indices stay far from int overflow.
inline bool axis_supported(const AxisPhase& a) {
  return a.stride >= 1 && a.stride <= kMaxStride && a.dil >= 1 && a.pad >= 0 && a.kernel >= 1 &&
         (int64_t)a.dil * a.kernel + a.pad < (1 << 24);
}

// Input and output element offsets, output pixels (GEMM rows of a phase) and the grid within
// the 32-bit index math (sizes and strides already checked non-negative), and an output to write.
inline bool io_fits_index_limit(const ConvTranspose2dParams& p) {
  if (max_offset(p.in_stride, p.batch, p.in_channels, p.in_h, p.in_w) >= kIndexLimit) return false;
  if (max_offset(p.out_stride, p.batch, p.out_channels, p.out_h, p.out_w) >= kIndexLimit)
    return false;
  const int64_t pixels = p.batch * p.out_h * p.out_w;
  if (pixels >= kIndexLimit - 256) return false;
  // Grid: every config of both kernels has BM >= 64 and BN >= 32; at most kMaxPhases partial
  // m tiles.
  if ((pixels / 64 + kMaxPhases) * ((p.out_per_group + 31) / 32) >= kIndexLimit) return false;
  if (p.output == nullptr && pixels * p.out_channels > 0) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Kernel arguments, host side: the fields both argument structs have (each kernel sets its own
// extras: gemm_phase n_pad and is_c, sm90 none; sm90's channel stride is 1). T: element type;
// out_vec means 16-byte output chunks (channels_last-like output, contiguous and aligned).
template <typename T, class Args>
void fill_shared_args(Args& a, const ConvTranspose2dParams& p, const void* packed,
                      const AxisPlan& h, const AxisPlan& w, int64_t cin_pad) {
  constexpr int V = 16 / (int)sizeof(T);
  a.in = p.input;
  a.packed = packed;
  a.bias = p.bias;
  a.out = p.output;
  a.epi = p.epi;
  a.batch = (int)p.batch;
  a.in_h = (int)p.in_h;
  a.in_w = (int)p.in_w;
  a.cin_g = (int)p.in_per_group;
  a.cout_g = (int)p.out_per_group;
  a.cin_pad = (int)cin_pad;
  a.kw = p.ph_w.kernel;
  a.khkw = p.ph_h.kernel * p.ph_w.kernel;
  a.sh = p.ph_h.stride;
  a.sw = p.ph_w.stride;
  a.in_step_h = h.in_step;
  a.in_step_w = w.in_step;
  a.is_n = (int)p.in_stride[0];
  a.is_h = (int)p.in_stride[2];
  a.is_w = (int)p.in_stride[3];
  a.os_n = (int)p.out_stride[0];
  a.os_c = (int)p.out_stride[1];
  a.os_h = (int)p.out_stride[2];
  a.os_w = (int)p.out_stride[3];
  const int64_t* os = p.out_stride;
  a.out_along_n = os[1] < os[3];
  a.out_vec = a.out_along_n && os[1] == 1 && p.out_per_group % V == 0 &&
              ptr_aligned(p.output, 16) && stride_multiple(os[0], p.batch, V) &&
              stride_multiple(os[2], p.out_h, V) && stride_multiple(os[3], p.out_w, V);
  for (int r = 0; r < kMaxStride; ++r) {
    a.ph_h[r] = h.ph[r];
    a.ph_w[r] = w.ph[r];
  }
}

// Launch order for a BM x BN tile: phases with output pixels, most taps first (the longest
// blocks start first; stable: ties in (rh, rw) order), every (m tile, n tile) of a phase, n tile
// fastest. Fills n_tiles, tile_begin, phase_rc and num_phases; returns the tiles of one group.
template <class Args>
int64_t schedule_phases(Args& a, const ConvTranspose2dParams& p, const AxisPlan& h,
                        const AxisPlan& w, int bm, int bn) {
  a.n_tiles = (int)((p.out_per_group + bn - 1) / bn);
  int order[kMaxPhases];
  int count = 0;
  for (int rh = 0; rh < h.stride; ++rh)
    for (int rw = 0; rw < w.stride; ++rw)
      if (h.ph[rh].rows > 0 && w.ph[rw].rows > 0) order[count++] = rh << 8 | rw;
  auto taps_of = [&](int rc) { return h.ph[rc >> 8].taps * w.ph[rc & 0xff].taps; };
  for (int x = 1; x < count; ++x)  // insertion sort, descending taps
    for (int y = x; y > 0 && taps_of(order[y - 1]) < taps_of(order[y]); --y) {
      const int t = order[y];
      order[y] = order[y - 1];
      order[y - 1] = t;
    }
  int64_t tiles = 0;
  for (int q = 0; q < count; ++q) {
    a.tile_begin[q] = (int)tiles;
    a.phase_rc[q] = (uint16_t)order[q];
    const int64_t m = p.batch * h.ph[order[q] >> 8].rows * w.ph[order[q] & 0xff].rows;
    tiles += (m + bm - 1) / bm * a.n_tiles;
  }
  a.tile_begin[count] = (int)tiles;
  a.num_phases = count;
  return tiles;
}

// Weight-packing arguments both PackArgs have. Only the plans' taps, tap_prefix, step and stride
// are read, so they are built without an output size (packing needs only the weight side of p).
template <class PackArgsT>
void fill_shared_pack_args(PackArgsT& a, const ConvTranspose2dParams& p, void* packed,
                           int64_t cin_pad, int64_t total) {
  a.w = p.weight;
  a.packed = packed;
  for (int i = 0; i < 4; ++i) a.ws[i] = p.w_stride[i];
  a.cin_g = (int)p.in_per_group;
  a.cout_g = (int)p.out_per_group;
  a.cin_pad = (int)cin_pad;
  a.kh = p.ph_h.kernel;
  a.kw = p.ph_w.kernel;
  a.pad_h = p.ph_h.pad;
  a.pad_w = p.ph_w.pad;
  a.dil_h = p.ph_h.dil;
  a.dil_w = p.ph_w.dil;
  a.total = total;
  a.h = plan_axis(p.ph_h, 0);
  a.w_axis = plan_axis(p.ph_w, 0);
}

// Grid of a grid-stride packing kernel of 256 threads over `total` elements.
inline unsigned pack_grid(int64_t total) {
  const int64_t blocks = (total + 255) / 256;
  return (unsigned)(blocks < 65536 ? blocks : 65536);
}

// ---------------------------------------------------------------------------------------------
// Kernel side.

// First packed tap of phase (rh, rw) (packed tap order: phase blocks in (rh, rw) order, then
// th*taps_w + tw inside a phase).
__device__ __forceinline__ int phase_first_tap(const AxisPhaseInfo& ah, const AxisPhaseInfo& aw,
                                               int kw) {
  return ah.tap_prefix * kw + ah.taps * aw.tap_prefix;
}

// One GEMM row of the block: where its input pixel and output pixel are.
struct alignas(16) RowInfo {
  uint32_t a_base;  // n*is_n + i*is_h + j*is_w mod 2^32 (+ the tap's offset = the pixel's offset)
  int i, j;         // phase row / column (i = kRowPastM for rows past M)
  int o_row;        // output offset of (n, oh, ow); unused past M
};

// Shared-memory bytes of the per-block tables: rows[BM], col_aff[BN], col_off[BN].
constexpr int block_tables_bytes(int bm, int bn) {
  return bm * (int)sizeof(RowInfo) + bn * (int)(sizeof(ChannelAffine) + sizeof(int));
}

// The k cursor: tap (th, tw) and channel block c0 of the next 32-wide k tile to load, held as the
// tap's input offsets (off_h, off_w). `a` = off_h*is_h + off_w*is_w + c0*is_c (mod 2^32), the
// tile's input offset relative to a GEMM row's a_base. Uniform and branch-free. UNIT_C: the input
// channel stride is 1 (sm90 takes channels_last input only; its arguments have no is_c).
// (Member order is arbitrary for correctness; this one keeps gemm_phase's machine code exactly
// what it was when the cursor was written inline.)
template <bool UNIT_C>
struct KCursor {
  int tw, c0;        // tap column of the tap row, first channel of the block
  uint32_t a;        // the tile's input offset (above)
  int off_w, off_h;  // input offsets of the tap: off0 - t*in_step per axis

  template <class Args>
  __device__ __forceinline__ uint32_t offset(const Args& p) const {
    const uint32_t hw = (uint32_t)off_h * (uint32_t)p.is_h + (uint32_t)off_w * (uint32_t)p.is_w;
    if constexpr (UNIT_C) return hw + (uint32_t)c0;
    else return hw + (uint32_t)c0 * (uint32_t)p.is_c;
  }
  // At the phase's first tap (th = tw = 0), channel block 0.
  template <class Args>
  __device__ __forceinline__ void start(const Args& p, const AxisPhaseInfo& ah,
                                        const AxisPhaseInfo& aw) {
    c0 = 0;
    tw = 0;
    off_h = ah.off0;
    off_w = aw.off0;
    a = offset(p);
  }
  // One k tile on: the next channel block, else the next tap of the row, else the next row.
  template <class Args>
  __device__ __forceinline__ void advance(const Args& p, const AxisPhaseInfo& aw) {
    c0 += kBK;
    const bool next_tap = c0 >= p.cin_pad;
    c0 = next_tap ? 0 : c0;
    tw += next_tap ? 1 : 0;
    off_w -= next_tap ? p.in_step_w : 0;
    const bool next_row = tw >= aw.taps;
    tw = next_row ? 0 : tw;
    off_w = next_row ? aw.off0 : off_w;
    off_h -= next_row ? p.in_step_h : 0;
    a = offset(p);
  }
};

// C staging tile [BM][ldc] of T in shared memory (reusing the pipeline buffers) between the
// fragment epilogue and the global stores: ldc = kLdN when the output is stored along oc (rows
// read with 16-byte loads: a multiple of 16 bytes), kLdM when stored along m (an odd number of
// words per row: 32 consecutive rows hit 32 banks).
template <int ELEM_BYTES, int BM, int BN>
struct CStaging {
  static constexpr int kLdN = BN + 16 / ELEM_BYTES;
  static constexpr int kLdM = BN + (ELEM_BYTES == 4 ? 9 : 18);
  static constexpr int kBytes = BM * (kLdM > kLdN ? kLdM : kLdN) * ELEM_BYTES;
  static_assert((kLdN * ELEM_BYTES) % 16 == 0 && (kLdM * ELEM_BYTES / 4) % 2 == 1, "C rows");
};

}  // namespace
}  // namespace deconv_patch
