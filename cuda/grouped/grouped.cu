// Register/shared-memory tiled direct transposed convolution for few channels per group
// (depthwise and small grouped layers). Plain fp32 FFMA accumulation for every input type.
//
// Index math (per spatial axis; the same for rows and columns). Output o receives tap k from
// input i exactly when  i*s = o + pad - k*dil.  Write t = o + pad = q*s + rho (0 <= rho < s).
// The taps that land on an input pixel depend only on rho (AxisPhase, common/params.h):
//     k = k0 + j*step,   i = q - d0 - j*in_step,   j = 0 .. count-1,
// with d0 = (k0*dil - rho)/s >= 0 exact. Every valid tap has d = d0 + j*in_step <= dmax, where
// dmax = (kernel-1)*dil/s (floor).
//
// Tiles are aligned to the output: a block covers output columns [ow0, ow0 + TQW*s) with ow0 a
// multiple of s, split into s "local phases" phi (ow = ow0 + qc*s + phi, qc = 0..TQW-1). Since s
// divides ow0, every column of one local phase has the same rho = (pad + phi) mod s and
//     q = ow0/s + qoff + qc,   qoff = (pad + phi) / s,
// so consecutive qc of one phase read consecutive input columns. qoff takes at most two values
// (qoff_min = pad/s and maybe qoff_min + 1), hence the tile reads input columns
//     [ow0/s + qoff_min - dmax,  ow0/s + qoff_min + qoff_span + TQW - 1]
// (staged = TQW + dmax + qoff_span columns), and output qc / tap j reads staged column
//     qc + (qoff - qoff_min) + dmax - d0 - j*in_step          (always inside the staged range).
// Rows are the same with TQH = NRR*TR q-rows per tile.
//
// Work split. A block = (batch n, GB consecutive groups, one tile of <=16 output channels per
// group, one output tile). It stages, once: the input tile of its GB*Cin/g channels (fp32, zero
// outside the image, [channel][column][row] so a thread's rows are consecutive words), those
// groups' weights (fp32, [channel][kh][kw][oc]), the epilogue's per-channel (mul, add) and the
// per-phase tap table. Then a "slab" of GB*TQW threads works on one item = (row phase, column
// phase, run of TR q-rows); each thread owns one (group, qc) and accumulates acc[TR][OCT] over
// its channels and taps. Slabs are warp-sized or larger where possible, so taps are warp-uniform
// (no divergence, weight reads are broadcasts). Lanes run along qc (stores along w, NCHW-like
// output) or, for channels_last output with few channels per group, along the groups (stores
// along c).
//
// Summation order. One output sums C*T products (C = Cin/g channels, T = taps of its phase),
// visited channel by channel, each channel's taps together. In a single fp32 accumulator that is
// one serial chain, whose rounding error grows like C*T (random-walk model: variance ~ (C*T)^2)
// against C*T*(C + T) for a GEMM + col2im order (a chain over the channels per tap, then one over
// the taps): up to 2-4x PyTorch's error on grouped layers with large kernels. So where
// C*T > C + T (C >= 2 and T >= 2, except C = T = 2) the channels are summed in blocks of
// cblk = floor(sqrt(C/T)) >= 1 channels: each block's cblk*T products go to a fresh partial that
// is then added to the output's total, two chains of cblk*T and C/cblk terms (error like the
// GEMM order's, or below). The partials double the accumulators; where that would not fit in
// registers a blocked item runs its TR rows in two passes (blocked_rows). fp32 input only (TF32
// and strict alike: the kernel is FFMA either way); 16-bit input keeps the single chain, whose
// error stays far below the 16-bit output's rounding.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "grouped/grouped.h"
#include "common/unit_kind.h"
#include "common/params.h"
#include "common/device_cache.h"
#include "common/epilogue.cuh"
#include "common/scalar_convert.cuh"

namespace deconv_patch {
namespace {

constexpr int kMaxThreads = 256;
constexpr int kMaxTaps = 4;               // row taps the register window covers
constexpr int kMaxOct = 16;               // output channels per thread
constexpr int kMaxChannelsPerGroup = 64;
constexpr int kMaxStride = 4096;
constexpr size_t kSmemLimit = 64 * 1024;  // every arch since sm_75 allows this (with opt-in)
constexpr size_t kSmemDefault = 48 * 1024;  // above this the kernel needs the opt-in attribute
constexpr int kStageBatch = 8;            // global loads in flight per thread while staging

// n / d for 0 <= n < 2^31 with a multiply-high instead of a division (runtime divisors of the
// block / thread index decompositions): n / d == (umulhi(n, m) + n) >> s.
struct FastDiv {
  uint32_t d, m, s;
  __device__ __forceinline__ int div(int n) const {
#ifdef __CUDA_ARCH__
    const uint32_t t = __umulhi((uint32_t)n, m);
#else
    const uint32_t t = (uint32_t)(((uint64_t)(uint32_t)n * m) >> 32);
#endif
    return (int)((t + (uint32_t)n) >> s);
  }
};

FastDiv make_fastdiv(int d) {  // 1 <= d < 2^31
  FastDiv f;
  f.d = (uint32_t)(d > 0 ? d : 1);
  f.s = 0;
  while ((1u << f.s) < f.d) ++f.s;
  f.m = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << f.s) - f.d)) / f.d + 1);
  return f;
}

// A walk over [0, r0) x [0, r1) x [0, r2) (digit 2 fastest) by a fixed linear step, without a
// division per step: the host splits the step into digits.
struct Walk {
  FastDiv r1, r2;
  int s0, s1, s2;
};

struct Counter3 {
  int d0, d1, d2;
  __device__ __forceinline__ void init(const Walk& w, int start) {
    const int q = w.r2.div(start);
    d2 = start - q * (int)w.r2.d;
    d0 = w.r1.div(q);
    d1 = q - d0 * (int)w.r1.d;
  }
  __device__ __forceinline__ void advance(const Walk& w) {
    d2 += w.s2;
    if (d2 >= (int)w.r2.d) { d2 -= (int)w.r2.d; ++d1; }
    d1 += w.s1;
    if (d1 >= (int)w.r1.d) { d1 -= (int)w.r1.d; ++d0; }
    d0 += w.s0;
  }
};

Walk make_walk(int r1, int r2, int step) {
  Walk w;
  w.r1 = make_fastdiv(r1);
  w.r2 = make_fastdiv(r2);
  w.s2 = step % r2;
  w.s1 = (step / r2) % r1;
  w.s0 = step / r2 / r1;
  return w;
}

// Offsets that follow a Walk: off = d0*m0 + d1*m1 + d2*m2, updated by additions only (step:
// the walk's step without carries; carry2 / carry1: the extra change when digit 2 / 1 wraps).
template <typename I>
struct WalkOffsets {
  I m0, m1, m2;
  I step, carry2, carry1;
};

template <typename I>
WalkOffsets<I> make_walk_offsets(const Walk& w, I m0, I m1, I m2) {
  WalkOffsets<I> o;
  o.m0 = m0;
  o.m1 = m1;
  o.m2 = m2;
  o.step = (I)w.s0 * m0 + (I)w.s1 * m1 + (I)w.s2 * m2;
  o.carry2 = m1 - (I)w.r2.d * m2;
  o.carry1 = m0 - (I)w.r1.d * m1;
  return o;
}

// One spatial axis of the launch: the AxisPhase constants plus the tile geometry.
struct AxisArgs {
  int stride, pad, dil, kernel;
  int gcd, step, in_step, inv;
  int dmax;       // (kernel-1)*dil / stride: largest input offset of a valid tap
  int qoff_min;   // pad / stride
  int qoff_span;  // (pad + stride - 1)/stride - pad/stride, 0 or 1
  int in_size, out_size;
  int tq;         // q-rows / q-columns per tile
  int tiles;      // tiles along this axis
  int staged;     // staged input rows / columns: tq + dmax + qoff_span
};

// The valid taps of one local phase (see the top of the file), tabulated in shared memory.
struct alignas(16) PhaseTaps {
  int k0, count, d0, qoff;
};

struct GroupedArgs {
  const void* in;
  const void* wt;
  const void* bias;
  void* out;
  EpilogueParams epi;
  int64_t is[4], ws[4], os[4];
  int groups, cin_g, cout_g;
  AxisArgs h, w;
  int gb, log2_gb;   // groups per block
  int log2_tqw;      // w.tq = 1 << log2_tqw
  int log2_slab;     // threads per item: gb * w.tq
  int slabs;         // items in flight per block (blockDim.x = slab * slabs)
  int nrr;           // row runs per tile (h.tq = nrr * TR)
  int c_fast;        // lanes along groups (channels_last output with few channels per group)
  int in_ch_fast;    // stage the input channel-fastest (channels_last input)
  int rp;            // staged floats per input column (>= h.staged, odd: conflict-free lanes)
  int cp;            // staged floats per input channel (>= w.staged * rp)
  int wp;            // staged floats per weight channel (>= KH*KW*OCT)
  int x_floats, w_floats;  // staged input / weight regions, multiples of 4 floats
  FastDiv w_tiles, h_tiles, oc_tiles, g_blocks;
  Walk x_walk;     // (ch, row, col) or, in_ch_fast, (row, col, ch) by blockDim.x
  WalkOffsets<int64_t> x_gmem;  // input element offset of the walk's position (64-bit)
  WalkOffsets<int> x_smem;      // staged offset of the walk's position
  Walk w_walk;     // (ch*OCT + o, kh, kw) by blockDim.x
  // Items: item = (row run * h.stride + row phase) * w.stride + column phase.
  FastDiv phases;  // h.stride * w.stride
  FastDiv sw;      // w.stride
};

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// Exact phase taps (divisions; runs once per table entry).
__device__ __forceinline__ PhaseTaps phase_taps(const AxisArgs& a, int phi) {
  const int t = a.pad + phi;  // o + pad minus a multiple of the stride
  const int rho = t % a.stride;
  PhaseTaps r{0, 0, 0, t / a.stride};
  if (rho % a.gcd != 0) return r;  // no tap of this phase lands on an input pixel
  const int k0 = a.step > 1 ? (int)((int64_t)(rho / a.gcd) * a.inv % a.step) : 0;
  if (k0 >= a.kernel) return r;
  r.k0 = k0;
  r.count = (a.kernel - 1 - k0) / a.step + 1;
  r.d0 = (k0 * a.dil - rho) / a.stride;  // exact: k0*dil = rho (mod stride)
  return r;
}

// The block's coordinates.
struct TileCoord {
  int n, g0, oc_tile;
  int oh0, ow0;            // first output row / column of the tile
  int row_base, col_base;  // input row / column of staged (0, 0); may be negative
};

__device__ __forceinline__ TileCoord tile_coord(const GroupedArgs& a, int block) {
  TileCoord c;
  int q = a.w_tiles.div(block);
  const int tw = block - q * a.w.tiles;
  block = q;
  q = a.h_tiles.div(block);
  const int th = block - q * a.h.tiles;
  block = q;
  q = a.oc_tiles.div(block);
  c.oc_tile = block - q * (int)a.oc_tiles.d;
  block = q;
  q = a.g_blocks.div(block);
  c.g0 = (block - q * (int)a.g_blocks.d) * a.gb;
  c.n = q;
  c.oh0 = th * a.h.tq * a.h.stride;
  c.ow0 = tw * a.w.tq * a.w.stride;
  c.row_base = th * a.h.tq + a.h.qoff_min - a.h.dmax;
  c.col_base = tw * a.w.tq + a.w.qoff_min - a.w.dmax;
  return c;
}

// Shared-memory regions (offsets in floats; every region starts 16-byte aligned).
struct SmemLayout {
  float* x;
  float* w;
  PhaseTaps* taps;  // h.stride row phases, then w.stride column phases
  ChannelAffine* aff;
};

__device__ __forceinline__ SmemLayout smem_layout(const GroupedArgs& a, float* smem) {
  SmemLayout s;
  s.x = smem;
  s.w = smem + a.x_floats;
  s.taps = reinterpret_cast<PhaseTaps*>(s.w + a.w_floats);
  s.aff = reinterpret_cast<ChannelAffine*>(s.taps + a.h.stride + a.w.stride);
  return s;
}

// Input tile -> x[ch][col][row] (fp32, zero outside the image and past the last group).
// CH_FAST walks channel-fastest so channels_last input is read along its contiguous axis. Each
// thread issues kStageBatch independent loads before storing any, to keep loads in flight.
template <typename T, bool CH_FAST>
__device__ __forceinline__ void stage_input(const GroupedArgs& a, const TileCoord& tc, float* x,
                                            int tid) {
  const int chans = a.gb * a.cin_g;
  if (chans == 0) return;
  const int64_t c_base = (int64_t)tc.g0 * a.cin_g;
  const int c_valid = imin(chans, (int)((int64_t)a.groups * a.cin_g - c_base));
  const T* __restrict__ in =
      static_cast<const T*>(a.in) + (int64_t)tc.n * a.is[0] + c_base * a.is[1];
  const int r0 = CH_FAST ? a.h.staged : chans;
  const Walk& wk = a.x_walk;
  const WalkOffsets<int64_t>& go = a.x_gmem;
  const WalkOffsets<int>& so = a.x_smem;
  Counter3 it;
  it.init(wk, tid);
  // Offsets relative to (channel 0, input row row_base, input column col_base) of the tile;
  // they are negative only for positions outside the image, which are never loaded.
  int64_t goff = (int64_t)it.d0 * go.m0 + (int64_t)it.d1 * go.m1 + (int64_t)it.d2 * go.m2 +
                 (int64_t)tc.row_base * a.is[2] + (int64_t)tc.col_base * a.is[3];
  int soff = it.d0 * so.m0 + it.d1 * so.m1 + it.d2 * so.m2;
  while (it.d0 < r0) {
    float v[kStageBatch];
    int dst[kStageBatch];
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int ch = CH_FAST ? it.d2 : it.d0;
      const int row = CH_FAST ? it.d0 : it.d1;
      const int col = CH_FAST ? it.d1 : it.d2;
      const bool live = it.d0 < r0;
      dst[u] = live ? soff : -1;
      v[u] = 0.f;
      if (live && ch < c_valid && (unsigned)(tc.row_base + row) < (unsigned)a.h.in_size &&
          (unsigned)(tc.col_base + col) < (unsigned)a.w.in_size)
        v[u] = to_float(in[goff]);
      // it.advance(wk), carrying the offsets along.
      it.d2 += wk.s2;
      goff += go.step;
      soff += so.step;
      if (it.d2 >= (int)wk.r2.d) {
        it.d2 -= (int)wk.r2.d;
        ++it.d1;
        goff += go.carry2;
        soff += so.carry2;
      }
      it.d1 += wk.s1;
      if (it.d1 >= (int)wk.r1.d) {
        it.d1 -= (int)wk.r1.d;
        ++it.d0;
        goff += go.carry1;
        soff += so.carry1;
      }
      it.d0 += wk.s0;
    }
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u)
      if (dst[u] >= 0) x[dst[u]] = v[u];
  }
}

// Weights -> w[ch][kh][kw][OCT] (fp32, zero for channels past the group / tile), the tap table
// and the per-channel epilogue table. Returns false when this thread staged a non-finite weight.
template <typename T, int OCT>
__device__ __forceinline__ bool stage_weights(const GroupedArgs& a, const TileCoord& tc,
                                              const SmemLayout& sm, int tid, int nthreads) {
  const int chans = a.gb * a.cin_g, kw_n = a.w.kernel;
  const int oc0 = tc.oc_tile * OCT;
  const int64_t c_base = (int64_t)tc.g0 * a.cin_g;
  const int c_valid = imin(chans, (int)((int64_t)a.groups * a.cin_g - c_base));
  const int oc_valid = imin(OCT, a.cout_g - oc0);
  const T* __restrict__ wt =
      static_cast<const T*>(a.wt) + c_base * a.ws[0] + (int64_t)oc0 * a.ws[1];
  bool finite = true;
  // (ch, oc, kh, kw) with kw fastest: contiguous weights are read along their last axis.
  Counter3 it;
  it.init(a.w_walk, tid);
  while (it.d0 < chans * OCT) {
    float v[kStageBatch];
    int dst[kStageBatch];
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int ch = it.d0 / OCT, o = it.d0 % OCT;  // OCT is a power of two
      const int kh = it.d1, kw = it.d2;
      const bool live = it.d0 < chans * OCT;
      dst[u] = live ? ch * a.wp + (kh * kw_n + kw) * OCT + o : -1;
      v[u] = 0.f;
      if (live && ch < c_valid && o < oc_valid)  // 32-bit: make_plan bounds the weight extent
        v[u] = to_float(wt[ch * (int)a.ws[0] + o * (int)a.ws[1] + kh * (int)a.ws[2] +
                           kw * (int)a.ws[3]]);
      it.advance(a.w_walk);
    }
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      if (dst[u] >= 0) {
        finite = finite && fabsf(v[u]) <= 3.402823466e38f;  // false for inf and NaN
        sm.w[dst[u]] = v[u];
      }
    }
  }
  for (int e = tid; e < a.h.stride + a.w.stride; e += nthreads)
    sm.taps[e] = e < a.h.stride ? phase_taps(a.h, e) : phase_taps(a.w, e - a.h.stride);
  const T* __restrict__ bias = static_cast<const T*>(a.bias);
  for (int e = tid; e < a.gb * OCT; e += nthreads) {
    const int gi = e / OCT, o = e % OCT;
    const int g = tc.g0 + gi;
    ChannelAffine af{1.f, 0.f};
    if (g < a.groups && o < oc_valid) {
      const int64_t oc = (int64_t)g * a.cout_g + oc0 + o;
      const float b = bias != nullptr ? to_float(bias[oc]) : 0.f;
      af = channel_affine(a.epi, b, oc);
    }
    sm.aff[e] = af;
  }
  return finite;
}

// OCT consecutive fp32 weights (16-byte vectors where OCT allows; the layout keeps them aligned).
template <int OCT>
__device__ __forceinline__ void load_weights(const float* p, float (&w)[OCT]) {
  if constexpr (OCT % 4 == 0) {
#pragma unroll
    for (int o = 0; o < OCT; o += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + o);
      w[o] = v.x;
      w[o + 1] = v.y;
      w[o + 2] = v.z;
      w[o + 3] = v.w;
    }
  } else if constexpr (OCT == 2) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    w[0] = v.x;
    w[1] = v.y;
  } else {
#pragma unroll
    for (int o = 0; o < OCT; ++o) w[o] = p[o];
  }
}

// Accumulates one item. WINDOW: the row taps are consecutive input rows (in_step == 1 or a single
// tap) and at most kMaxTaps, so the TR + kMaxTaps - 1 input rows a column needs are read once into
// registers (consecutive words: immediate-offset loads) and shared by every (row, tap) pair.
// Otherwise each (row, tap) reads shared memory. Rows outside the image read the staged zeros;
// WINDOW is used only when every staged weight is finite (0 * w == 0); the exact path skips such
// rows (PyTorch never multiplies them). Columns outside the image are skipped on both paths.
// Sums channels [c_lo, c_hi) into acc.
template <int OCT, int TR, bool WINDOW>
__device__ __forceinline__ void accumulate(const GroupedArgs& a, const TileCoord& tc,
                                           const float* xg, const float* wg, const PhaseTaps& th,
                                           const PhaseTaps& tw, int row0, int col0, int c_lo,
                                           int c_hi, float (&acc)[TR][OCT]) {
  const int kw_n = a.w.kernel;
#pragma unroll 1
  for (int ci = c_lo; ci < c_hi; ++ci) {
    const float* xp = xg + ci * a.cp;
    const float* wp = wg + ci * a.wp;
#pragma unroll 1
    for (int b = 0; b < tw.count; ++b) {
      const int col = col0 - b * a.w.in_step;
      if ((unsigned)(tc.col_base + col) >= (unsigned)a.w.in_size) continue;  // past an edge
      const float* xc = xp + col * a.rp;
      const float* wk = wp + (th.k0 * kw_n + tw.k0 + b * a.w.step) * OCT;
      const int wk_step = a.h.step * kw_n * OCT;
      if constexpr (WINDOW) {
        // win[i] holds staged row row0 - (kMaxTaps-1) + i; output row r, tap j reads
        // win[r - j + kMaxTaps - 1]. Rows below kMaxTaps - count are never needed (or staged).
        const float* xw = xc + row0 - (kMaxTaps - 1);
        float win[TR + kMaxTaps - 1];
#pragma unroll
        for (int i = 0; i < TR + kMaxTaps - 1; ++i)
          win[i] = i >= kMaxTaps - 1 || i >= kMaxTaps - th.count ? xw[i] : 0.f;  // count >= 1
#pragma unroll
        for (int j = 0; j < kMaxTaps; ++j) {
          if (j < th.count) {
            float wv[OCT];
            load_weights<OCT>(wk + j * wk_step, wv);
#pragma unroll
            for (int r = 0; r < TR; ++r) {
#pragma unroll
              for (int o = 0; o < OCT; ++o)
                acc[r][o] = fmaf(win[r - j + kMaxTaps - 1], wv[o], acc[r][o]);
            }
          }
        }
      } else {
#pragma unroll 1
        for (int j = 0; j < th.count; ++j) {
          const int rj = row0 - j * a.h.in_step;
          const int ih0 = tc.row_base + rj;
          float wv[OCT];
          load_weights<OCT>(wk + j * wk_step, wv);
#pragma unroll
          for (int r = 0; r < TR; ++r) {
            if ((unsigned)(ih0 + r) < (unsigned)a.h.in_size) {
              const float x = xc[rj + r];
#pragma unroll
              for (int o = 0; o < OCT; ++o) acc[r][o] = fmaf(x, wv[o], acc[r][o]);
            }
          }
        }
      }
    }
  }
}

__device__ __forceinline__ uint32_t word_bits(float v) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(v);
#else
  uint32_t u;
  memcpy(&u, &v, sizeof(u));
  return u;
#endif
}
__device__ __forceinline__ uint32_t half_bits(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ uint32_t half_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

// 32 bits of output starting at channel o: one fp32 value or two 16-bit values.
template <typename T, int OCT>
__device__ __forceinline__ uint32_t pack_word(const float (&v)[OCT], int o) {
  if constexpr (sizeof(T) == 4) {
    return word_bits(v[o]);
  } else {
    return half_bits(from_float<T>(v[o])) | (half_bits(from_float<T>(v[o + 1])) << 16);
  }
}

// Writes the OCT channels of one output pixel. vec (channel stride 1, whole tile valid, pointer
// aligned to the chunk): 4/8/16-byte stores; otherwise one element at a time.
template <typename T, int OCT>
__device__ __forceinline__ void store_pixel(T* dst, int64_t c_stride, const float (&v)[OCT],
                                            int valid, bool vec) {
  constexpr int kBytes = OCT * (int)sizeof(T);
  if constexpr (OCT > 1 && kBytes >= 4) {  // one channel: the scalar store is the same
    if (vec) {
      constexpr int kChunk = kBytes < 16 ? kBytes : 16;
      constexpr int kPer = kChunk / (int)sizeof(T);  // elements per chunk
      constexpr int kStep = 4 / (int)sizeof(T);      // elements per 32-bit word
#pragma unroll
      for (int c = 0; c < OCT; c += kPer) {
        if constexpr (kChunk == 16) {
          uint4 u;
          u.x = pack_word<T, OCT>(v, c);
          u.y = pack_word<T, OCT>(v, c + kStep);
          u.z = pack_word<T, OCT>(v, c + 2 * kStep);
          u.w = pack_word<T, OCT>(v, c + 3 * kStep);
          *reinterpret_cast<uint4*>(dst + c) = u;
        } else if constexpr (kChunk == 8) {
          uint2 u;
          u.x = pack_word<T, OCT>(v, c);
          u.y = pack_word<T, OCT>(v, c + kStep);
          *reinterpret_cast<uint2*>(dst + c) = u;
        } else {
          *reinterpret_cast<uint32_t*>(dst + c) = pack_word<T, OCT>(v, c);
        }
      }
      return;
    }
  }
#pragma unroll
  for (int o = 0; o < OCT; ++o)
    if (o == 0 || o < valid) dst[o * c_stride] = from_float<T>(v[o]);  // valid >= 1
}

// Epilogue (common/epilogue.cuh: y = act((acc + bias) * scale + shift), rounded once) and stores
// for TR rows of one item, the first at q-row qr0 of the tile. ACT is a template argument so each
// activation's code is unrolled once over the rows.
template <Activation ACT, typename T, int OCT, int TR>
__device__ __forceinline__ void finish_item(const GroupedArgs& a, const TileCoord& tc,
                                            const ChannelAffine* aff, const float (&acc)[TR][OCT],
                                            int gi, int qc, int phh, int phw, int qr0) {
  const int g = tc.g0 + gi;
  const int ow = tc.ow0 + qc * a.w.stride + phw;
  if (g >= a.groups || ow >= a.w.out_size) return;
  const int oc0 = tc.oc_tile * OCT;
  const int valid = imin(OCT, a.cout_g - oc0);
  EpilogueParams e = a.epi;
  e.activation = ACT;
  // Up to 4 channels: the (mul, add) pairs stay in registers for all TR rows. Wider tiles re-read
  // them from shared memory per row, which keeps 2*OCT registers free next to the accumulators.
  constexpr bool kHoist = OCT <= 4;
  const ChannelAffine* aff_g = aff + gi * OCT;
  ChannelAffine af[kHoist ? OCT : 1];
  if constexpr (kHoist) {
#pragma unroll
    for (int o = 0; o < OCT; ++o) af[o] = aff_g[o];
  }
  T* base = static_cast<T*>(a.out) + (int64_t)tc.n * a.os[0] +
            ((int64_t)g * a.cout_g + oc0) * a.os[1] + (int64_t)ow * a.os[3];
  int oh = tc.oh0 + qr0 * a.h.stride + phh;
  T* dst = base + (int64_t)oh * a.os[2];
  const int64_t dst_step = (int64_t)a.h.stride * a.os[2];
  constexpr int kBytes = OCT * (int)sizeof(T);
  constexpr int kChunk = kBytes < 16 ? kBytes : 16;
  // Rows step by a multiple of os[2]; alignment is checked per row (cheap, and exact).
  const bool vec_layout = a.os[1] == 1 && valid == OCT;
#pragma unroll
  for (int r = 0; r < TR; ++r) {
    // The epilogue runs unconditionally (straight-line code, so its uniform tests are hoisted
    // out of the row loop); only the store depends on the row being inside the output.
    float v[OCT];
#pragma unroll
    for (int o = 0; o < OCT; ++o)
      v[o] = apply_epilogue(acc[r][o], kHoist ? af[kHoist ? o : 0] : aff_g[o], e);
    if (oh < a.h.out_size) {
      const bool vec = vec_layout && (reinterpret_cast<uintptr_t>(dst) % kChunk) == 0;
      store_pixel<T, OCT>(dst, a.os[1], v, valid, vec);
    }
    oh += a.h.stride;
    dst += dst_step;
  }
}

// Epilogue and stores of TR rows (finish_item for the launch's activation).
template <typename T, int OCT, int TR>
__device__ __forceinline__ void finish_rows(const GroupedArgs& a, const TileCoord& tc,
                                            const ChannelAffine* aff, const float (&acc)[TR][OCT],
                                            int gi, int qc, int phh, int phw, int qr0) {
  switch (a.epi.activation) {
#define DP_GROUPED_FINISH(A)                                                    \
  case A: finish_item<A, T, OCT, TR>(a, tc, aff, acc, gi, qc, phh, phw, qr0); \
    break;
    DP_GROUPED_FINISH(Activation::kNone)
    DP_GROUPED_FINISH(Activation::kReLU)
    DP_GROUPED_FINISH(Activation::kLeakyReLU)
    DP_GROUPED_FINISH(Activation::kSiLU)
    DP_GROUPED_FINISH(Activation::kGELU)
    DP_GROUPED_FINISH(Activation::kGELUTanh)
    DP_GROUPED_FINISH(Activation::kTanh)
    DP_GROUPED_FINISH(Activation::kSigmoid)
    DP_GROUPED_FINISH(Activation::kHardswish)
#undef DP_GROUPED_FINISH
  }
}

// Rows per pass of a blocked item (see the top). OCT 4 keeps all TR rows: its 2*32 accumulators
// fit the 128-register budget of min_blocks_for. The others would spill (OCT 1 and 2 under
// their 80-register cap, OCT 8 and 16 with 2*64), so they run two passes of TR/2 rows, partials
// and totals together within the single-chain path's TR*OCT accumulators.
__host__ __device__ constexpr int blocked_rows(int oct, int tr) { return oct == 4 ? tr : tr / 2; }

// Computes and stores every item of this thread's slab.
template <typename T, int OCT, int TR>
__device__ __forceinline__ void compute_tile(const GroupedArgs& a, const TileCoord& tc,
                                             const SmemLayout& sm, int tid, bool finite_w) {
  constexpr int SR = blocked_rows(OCT, TR);
  static_assert(SR >= 1 && TR % SR == 0, "blocked passes must tile the item's rows");
  const int slab = tid >> a.log2_slab, t = tid & ((1 << a.log2_slab) - 1);
  int gi, qc;
  if (a.c_fast) {
    gi = t & (a.gb - 1);
    qc = t >> a.log2_gb;
  } else {
    qc = t & ((1 << a.log2_tqw) - 1);
    gi = t >> a.log2_tqw;
  }
  const float* xg = sm.x + gi * a.cin_g * a.cp;
  const float* wg = sm.w + gi * a.cin_g * a.wp;
  const int cin = a.cin_g;
  // Items in (row run, row phase, column phase) order, column phase fastest: neighbouring slabs
  // fill the same output rows at the same time. Passes alternate direction over the slabs, so a
  // slab that drew a phase with many taps in one pass draws one with few in the next (phases
  // differ in tap count whenever the kernel is not a multiple of the stride).
  const int items = (int)a.phases.d * a.nrr;
#pragma unroll 1
  for (int pass = 0;; ++pass) {
    const int item = pass * a.slabs + ((pass & 1) ? a.slabs - 1 - slab : slab);
    if (item >= items) break;
    const int rr = a.phases.div(item);
    const int ph = item - rr * (int)a.phases.d;
    const int phh = a.sw.div(ph);
    const int phw = ph - phh * a.w.stride;
    const PhaseTaps th = sm.taps[phh];
    const PhaseTaps tw = sm.taps[a.h.stride + phw];
    // Staged row of output row 0 / tap 0, and staged column of tap 0 (see the top).
    const int row0 = (th.qoff - a.h.qoff_min) + a.h.dmax + rr * TR - th.d0;
    const int col0 = (tw.qoff - a.w.qoff_min) + a.w.dmax + qc - tw.d0;
    const bool window = finite_w && th.count <= kMaxTaps && (th.count == 1 || a.h.in_step == 1);
    const int taps = th.count * tw.count;  // slab-uniform, like everything that picks a path
    // 16-bit inputs keep the single chain: their error bar is the 16-bit output's rounding.
    if constexpr (std::is_same<T, float>::value) {
      if (cin >= 2 && (cin - 1) * (taps - 1) > 1) {  // C*T > C + T: blocked channel sums
        int cblk = 1;
        while ((cblk + 1) * (cblk + 1) * taps <= cin) ++cblk;
#pragma unroll 1
        for (int r0 = 0; r0 < TR; r0 += SR) {
          const int qr0 = rr * TR + r0;
          if (tc.oh0 + qr0 * a.h.stride + phh >= a.h.out_size) break;  // rest below the output
          float acc[SR][OCT];
#pragma unroll
          for (int r = 0; r < SR; ++r)
#pragma unroll
            for (int o = 0; o < OCT; ++o) acc[r][o] = 0.f;
#pragma unroll 1
          for (int c = 0; c < cin; c += cblk) {
            float part[SR][OCT];
#pragma unroll
            for (int r = 0; r < SR; ++r)
#pragma unroll
              for (int o = 0; o < OCT; ++o) part[r][o] = 0.f;
            const int c_hi = imin(c + cblk, cin);
            if (window)
              accumulate<OCT, SR, true>(a, tc, xg, wg, th, tw, row0 + r0, col0, c, c_hi, part);
            else
              accumulate<OCT, SR, false>(a, tc, xg, wg, th, tw, row0 + r0, col0, c, c_hi, part);
#pragma unroll
            for (int r = 0; r < SR; ++r)
#pragma unroll
              for (int o = 0; o < OCT; ++o) acc[r][o] += part[r][o];
          }
          finish_rows<T, OCT, SR>(a, tc, sm.aff, acc, gi, qc, phh, phw, qr0);
        }
        continue;
      }
    }
    float acc[TR][OCT];
#pragma unroll
    for (int r = 0; r < TR; ++r)
#pragma unroll
      for (int o = 0; o < OCT; ++o) acc[r][o] = 0.f;
    if (taps > 0) {
      if (window)
        accumulate<OCT, TR, true>(a, tc, xg, wg, th, tw, row0, col0, 0, cin, acc);
      else
        accumulate<OCT, TR, false>(a, tc, xg, wg, th, tw, row0, col0, 0, cin, acc);
    }
    finish_rows<T, OCT, TR>(a, tc, sm.aff, acc, gi, qc, phh, phw, rr * TR);
  }
}

// Stages everything the block reads; returns false when a staged weight is non-finite.
template <typename T, int OCT>
__device__ __forceinline__ bool stage_tile(const GroupedArgs& a, const TileCoord& tc,
                                           const SmemLayout& sm, int tid, int nthreads) {
  if (a.in_ch_fast)
    stage_input<T, true>(a, tc, sm.x, tid);
  else
    stage_input<T, false>(a, tc, sm.x, tid);
  return stage_weights<T, OCT>(a, tc, sm, tid, nthreads);
}

// Blocks per SM the register allocation must allow (ptxas otherwise picks its own target,
// and spills for it).
constexpr int min_blocks_for(int oct) { return oct <= 2 ? 3 : 2; }
// Rows per thread: TR * OCT <= 64 accumulators.
constexpr int tr_for(int oct) { return oct == 1 ? 16 : oct <= 8 ? 8 : 4; }

template <typename T, int OCT, int TR>
__global__ void __launch_bounds__(kMaxThreads, min_blocks_for(OCT))
conv_transpose2d_grouped_kernel(const GroupedArgs a) {
  extern __shared__ float4 smem_f4[];  // float4: 16-byte aligned regions
  const SmemLayout sm = smem_layout(a, reinterpret_cast<float*>(smem_f4));
  const TileCoord tc = tile_coord(a, (int)blockIdx.x);
  const bool finite = stage_tile<T, OCT>(a, tc, sm, (int)threadIdx.x, (int)blockDim.x);
  const bool finite_w = __syncthreads_and(finite ? 1 : 0) != 0;
  compute_tile<T, OCT, TR>(a, tc, sm, (int)threadIdx.x, finite_w);
}

// ------------------------------------------------------------------------------------------------
// Host side: tile shape, shared-memory layout and launch.

int pow2_ceil(int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p <<= 1;
  return p;
}

int log2_exact(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Worst bank-conflict degree of a warp reading `width` consecutive words (width 1, 2 or 4) at
// word address addr[l] for 32 lanes: requests are served 32/width lanes at a time.
int bank_ways(const int64_t* addr, int width) {
  const int per = 32 / width;
  int worst = 1;
  for (int p0 = 0; p0 < 32; p0 += per) {
    int64_t distinct[32];
    int nd = 0;
    for (int l = p0; l < p0 + per; ++l) {
      bool seen = false;
      for (int k = 0; k < nd; ++k) seen = seen || distinct[k] == addr[l];
      if (!seen) distinct[nd++] = addr[l];
    }
    int count[32] = {0};
    for (int k = 0; k < nd; ++k)
      for (int wd = 0; wd < width; ++wd) {
        const int bank = (int)((distinct[k] + wd) % 32);
        if (++count[bank] > worst) worst = count[bank];
      }
  }
  return worst;
}

// Smallest pitch >= min_pitch (a multiple of `width`) for which 32 lanes reading at
// lane_mul[l] * pitch + lane_off[l] have the fewest bank conflicts.
int pick_pitch(int64_t min_pitch, int width, const int64_t* lane_mul, const int64_t* lane_off) {
  const int64_t base = (min_pitch + width - 1) / width * width;
  int64_t best = base;
  int best_ways = 1 << 30;
  for (int k = 0; k < 32; ++k) {
    const int64_t pitch = base + k * width;
    int64_t addr[32];
    for (int l = 0; l < 32; ++l) addr[l] = lane_mul[l] * pitch + lane_off[l];
    const int ways = bank_ways(addr, width);
    if (ways < best_ways) {
      best_ways = ways;
      best = pitch;
    }
    if (ways == 1) break;
  }
  return (int)best;
}

struct Plan {
  bool ok = false;
  int oct = 1;
  int threads = 0;
  int64_t blocks = 0;
  size_t smem = 0;
  GroupedArgs args{};
};

bool axis_ok(const AxisPhase& a) {
  return a.stride >= 1 && a.stride <= kMaxStride && a.dil >= 1 && a.pad >= 0 && a.kernel >= 1 &&
         (int64_t)a.dil * a.kernel + a.pad < (1 << 24);
}

AxisArgs make_axis(const AxisPhase& ph, int64_t in_size, int64_t out_size) {
  const AxisPhase f = make_axis_phase(ph.stride, ph.pad, ph.dil, ph.kernel);  // trust no caller
  AxisArgs a{};
  a.stride = f.stride;
  a.pad = f.pad;
  a.dil = f.dil;
  a.kernel = f.kernel;
  a.gcd = f.gcd;
  a.step = f.step;
  a.in_step = f.in_step;
  a.inv = f.inv;
  a.dmax = (int)((int64_t)(f.kernel - 1) * f.dil / f.stride);
  a.qoff_min = f.pad / f.stride;
  a.qoff_span = (f.pad + f.stride - 1) / f.stride - a.qoff_min;
  a.in_size = (int)in_size;
  a.out_size = (int)out_size;
  return a;
}

// Tile shape for one OCT choice, or ok = false when nothing fits in shared memory.
Plan plan_for_oct(const ConvTranspose2dParams& p, int oct, int64_t elem) {
  Plan pl;
  GroupedArgs a{};
  a.in = p.input;
  a.wt = p.weight;
  a.bias = p.bias;
  a.out = p.output;
  a.epi = p.epi;
  for (int i = 0; i < 4; ++i) {
    a.is[i] = p.in_stride[i];
    a.ws[i] = p.w_stride[i];
    a.os[i] = p.out_stride[i];
  }
  a.groups = (int)p.groups;
  a.cin_g = (int)p.in_per_group;
  a.cout_g = (int)p.out_per_group;
  a.h = make_axis(p.ph_h, p.in_h, p.out_h);
  a.w = make_axis(p.ph_w, p.in_w, p.out_w);
  const int tr = tr_for(oct);
  const int64_t kk = (int64_t)a.h.kernel * a.w.kernel;
  const int64_t qh = ceil_div(p.out_h, a.h.stride), qw = ceil_div(p.out_w, a.w.stride);
  const int phases = a.h.stride * a.w.stride;
  // Lanes along groups when the output is channels_last-like and one thread's channel run is
  // narrower than 16 bytes (depthwise): a warp then stores whole runs of channels.
  const bool c_fast = p.out_stride[1] < p.out_stride[3] && oct * elem < 16 && p.groups > 1;
  a.c_fast = c_fast ? 1 : 0;
  a.in_ch_fast = p.in_stride[1] < p.in_stride[3] ? 1 : 0;
  const int g_pow2 = pow2_ceil(p.groups);
  const int qw_pow2 = pow2_ceil(qw);

  // Candidate (gb, tqw) pairs, preferred first; later ones shrink the staged tile.
  int cand_gb[24], cand_tqw[24], nc = 0;
  if (c_fast) {
    int gb = g_pow2 < 32 ? g_pow2 : 32;
    int tqw = kMaxThreads / gb < 32 ? kMaxThreads / gb : 32;
    if (tqw > qw_pow2) tqw = qw_pow2;
    for (; tqw >= 1 && nc < 24; tqw /= 2) cand_gb[nc] = gb, cand_tqw[nc++] = tqw;
    for (gb /= 2; gb >= 1 && nc < 24; gb /= 2) cand_gb[nc] = gb, cand_tqw[nc++] = 1;
  } else {
    int tqw = qw_pow2 < 32 ? qw_pow2 : 32;
    int gb = 32 / tqw < g_pow2 ? 32 / tqw : g_pow2;
    for (; gb >= 1 && nc < 24; gb /= 2) cand_gb[nc] = gb, cand_tqw[nc++] = tqw;
    for (tqw /= 2; tqw >= 1 && nc < 24; tqw /= 2) cand_gb[nc] = 1, cand_tqw[nc++] = tqw;
  }

  for (int c = 0; c < nc; ++c) {
    const int gb = cand_gb[c], tqw = cand_tqw[c];
    const int slab = gb * tqw;
    const int target_slabs = kMaxThreads / slab;
    // Row runs: about two items per slab (spreads the per-thread setup), at least 16 q-rows
    // (less halo), no more than the image has. Fewer when shared memory is short or the last
    // tile would be mostly empty.
    int64_t nrr_hi = ceil_div(2 * target_slabs, phases);
    if (nrr_hi < ceil_div(16, tr)) nrr_hi = ceil_div(16, tr);
    const int64_t nrr_max = ceil_div(qh, tr);
    if (nrr_hi > nrr_max) nrr_hi = nrr_max;
    if (nrr_hi < 1) nrr_hi = 1;
    for (int nrr = (int)nrr_hi; nrr >= 1; --nrr) {
      AxisArgs h = a.h, w = a.w;
      h.tq = nrr * tr;
      w.tq = tqw;
      h.staged = h.tq + h.dmax + h.qoff_span;
      w.staged = w.tq + w.dmax + w.qoff_span;
      h.tiles = (int)ceil_div(p.out_h, (int64_t)h.tq * h.stride);
      w.tiles = (int)ceil_div(p.out_w, (int64_t)w.tq * w.stride);
      // Skip shapes whose row tiles overshoot the image by more than 1/16 (unless no choice).
      if (nrr > 1 && (int64_t)h.tiles * h.tq * h.stride * 16 > (int64_t)p.out_h * 17) continue;
      const int64_t chans = (int64_t)gb * a.cin_g;
      // Rough size check before choosing pitches (pitches add < 32 words per channel).
      const int64_t approx =
          4 * (chans * ((int64_t)h.staged * w.staged + kk * oct) + 2 * gb * oct) +
          16 * (int64_t)(h.stride + w.stride);
      if (approx > (int64_t)kSmemLimit) continue;
      // Pitches against bank conflicts, for one warp's lanes (group gi, column qc): an odd
      // column pitch (lanes of one group read consecutive columns), then the channel pitch and
      // the weight pitch with the fewest conflicts between groups.
      int64_t ch_mul[32], col_off[32], zero[32];
      const int rp = h.staged | 1;
      for (int l = 0; l < 32; ++l) {
        const int t = l % slab;
        const int gi = c_fast ? t % gb : t / tqw, qc = c_fast ? t / gb : t % tqw;
        ch_mul[l] = (int64_t)gi * a.cin_g;
        col_off[l] = (int64_t)qc * rp;
        zero[l] = 0;
      }
      const int cp = pick_pitch((int64_t)w.staged * rp, 1, ch_mul, col_off);
      const int wp = pick_pitch(kk * oct, oct >= 4 ? 4 : oct, ch_mul, zero);
      const int64_t x_floats = (chans * cp + 3) / 4 * 4;
      const int64_t w_floats = (chans * wp + 3) / 4 * 4;
      const int64_t bytes = 4 * (x_floats + w_floats) +
                            (int64_t)sizeof(PhaseTaps) * (h.stride + w.stride) +
                            (int64_t)sizeof(ChannelAffine) * gb * oct;
      if (bytes > (int64_t)kSmemLimit) continue;
      a.h = h;
      a.w = w;
      a.gb = gb;
      a.log2_gb = log2_exact(gb);
      a.log2_tqw = log2_exact(tqw);
      a.log2_slab = log2_exact(slab);
      a.nrr = nrr;
      const int items = phases * nrr;
      a.slabs = target_slabs < items ? target_slabs : items;
      a.rp = rp;
      a.cp = cp;
      a.wp = wp;
      a.x_floats = (int)x_floats;
      a.w_floats = (int)w_floats;
      const int g_blocks = (int)ceil_div(p.groups, gb);
      const int oc_tiles = (int)ceil_div(p.out_per_group, oct);
      a.w_tiles = make_fastdiv(w.tiles > 0 ? w.tiles : 1);
      a.h_tiles = make_fastdiv(h.tiles > 0 ? h.tiles : 1);
      a.oc_tiles = make_fastdiv(oc_tiles > 0 ? oc_tiles : 1);
      a.g_blocks = make_fastdiv(g_blocks);
      const int threads = slab * a.slabs;
      const int chans_i = (int)chans > 0 ? (int)chans : 1;
      if (a.in_ch_fast) {  // digits (row, col, ch)
        a.x_walk = make_walk(w.staged, chans_i, threads);
        a.x_gmem = make_walk_offsets<int64_t>(a.x_walk, a.is[2], a.is[3], a.is[1]);
        a.x_smem = make_walk_offsets<int>(a.x_walk, 1, rp, cp);
      } else {  // digits (ch, row, col)
        a.x_walk = make_walk(h.staged, w.staged, threads);
        a.x_gmem = make_walk_offsets<int64_t>(a.x_walk, a.is[1], a.is[2], a.is[3]);
        a.x_smem = make_walk_offsets<int>(a.x_walk, cp, 1, rp);
      }
      a.w_walk = make_walk(a.h.kernel, a.w.kernel, threads);
      a.phases = make_fastdiv(phases);
      a.sw = make_fastdiv(w.stride);
      pl.ok = true;
      pl.oct = oct;
      pl.threads = threads;
      pl.blocks = p.batch * g_blocks * (int64_t)oc_tiles * h.tiles * w.tiles;
      pl.smem = (size_t)bytes;
      pl.args = a;
      return pl;
    }
  }
  return pl;
}

Plan make_plan(const ConvTranspose2dParams& p, ScalarKind kind) {
  Plan none;
  int64_t elem = 0;
  switch (kind) {
    case ScalarKind::kFloat32: elem = 4; break;
    case ScalarKind::kFloat16:
    case ScalarKind::kBFloat16: elem = 2; break;
    default: return none;
  }
  if (!axis_ok(p.ph_h) || !axis_ok(p.ph_w)) return none;
  if (p.groups < 1 || p.groups >= (1 << 30) || p.batch < 0) return none;
  if (p.in_per_group < 0 || p.in_per_group > kMaxChannelsPerGroup) return none;
  if (p.out_per_group < 0 || p.out_per_group > kMaxChannelsPerGroup) return none;
  if (p.in_per_group * p.groups != p.in_channels || p.out_per_group * p.groups != p.out_channels)
    return none;
  if (p.in_h < 0 || p.in_w < 0 || p.out_h < 0 || p.out_w < 0) return none;
  if (p.in_h >= (1 << 30) || p.in_w >= (1 << 30) || p.out_h >= (1 << 30) || p.out_w >= (1 << 30))
    return none;
  for (int i = 0; i < 4; ++i)
    if (p.in_stride[i] < 0 || p.w_stride[i] < 0 || p.out_stride[i] < 0) return none;
  // The weight is read with 32-bit offsets.
  const int64_t w_dims[4] = {p.in_channels, p.out_per_group, p.ph_h.kernel, p.ph_w.kernel};
  int64_t w_extent = 0;
  for (int i = 0; i < 4; ++i) w_extent += (w_dims[i] > 0 ? w_dims[i] - 1 : 0) * p.w_stride[i];
  if (w_extent >= ((int64_t)1 << 31)) return none;
  if ((int)p.epi.activation < (int)Activation::kNone ||
      (int)p.epi.activation > (int)Activation::kHardswish)
    return none;
  const int64_t out_elems = p.batch * p.out_channels * p.out_h * p.out_w;
  if (out_elems > 0 && p.output == nullptr) return none;
  if (out_elems > 0 && p.in_channels > 0 && p.in_h > 0 && p.in_w > 0 &&
      (p.input == nullptr || p.weight == nullptr))
    return none;
  const int oct0 = p.out_per_group >= kMaxOct ? kMaxOct : pow2_ceil(p.out_per_group);
  for (int oct = oct0; oct >= 1; oct /= 2) {
    Plan pl = plan_for_oct(p, oct, elem);
    if (pl.ok) {
      if (pl.blocks >= ((int64_t)1 << 31) - 1) return none;
      return pl;
    }
  }
  return none;
}

template <typename T, int OCT>
cudaError_t launch_oct(const Plan& pl, cudaStream_t stream) {
  auto kernel = conv_transpose2d_grouped_kernel<T, OCT, tr_for(OCT)>;
  if (pl.smem > kSmemDefault) {
    // Above 48 KiB of dynamic shared memory needs the opt-in (once per device).
    const cudaError_t err = ensure_dynamic_smem(kernel, (int)pl.smem, current_device());
    if (err != cudaSuccess) return err;
  }
  kernel<<<(unsigned)pl.blocks, pl.threads, pl.smem, stream>>>(pl.args);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const Plan& pl, cudaStream_t stream) {
  switch (pl.oct) {
    case 1: return launch_oct<T, 1>(pl, stream);
    case 2: return launch_oct<T, 2>(pl, stream);
    case 4: return launch_oct<T, 4>(pl, stream);
    case 8: return launch_oct<T, 8>(pl, stream);
    case 16: return launch_oct<T, 16>(pl, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool grouped_supports(const ConvTranspose2dParams& p, ScalarKind kind) {
  return make_plan(p, kind).ok;
}

cudaError_t launch_conv_transpose2d_grouped(const ConvTranspose2dParams& p, ScalarKind kind,
                                            cudaStream_t stream) {
  const Plan pl = make_plan(p, kind);
  if (!pl.ok) return cudaErrorInvalidValue;
  if (pl.blocks == 0) return cudaSuccess;
  switch (kind) {
#if DECONV_PATCH_UNIT_HAS_KIND(0)
    case ScalarKind::kFloat32: return launch_typed<float>(pl, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(1)
    case ScalarKind::kFloat16: return launch_typed<__half>(pl, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(2)
    case ScalarKind::kBFloat16: return launch_typed<__nv_bfloat16>(pl, stream);
#endif
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
