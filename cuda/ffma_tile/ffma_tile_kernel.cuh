// FFMA register-tiled transposed convolution for few output channels per group, kernel == taps x
// stride, dilation 1 (see ffma_tile/ffma_tile.h for what it covers and why): the kernel, its
// launch geometry and the per-config templates. ffma_tile/ffma_tile.cu is the public API; each
// generated ffma_tile_<type>_c<i>.cu compiles one config for one element type, so that a build
// compiles the configs in parallel and a unit of one type compiles that type's files only.
//
// Index math (per spatial axis; rows and columns alike). Output o receives tap k from input i
// exactly when  i*S = o + pad - k.  Write t = o + pad = q*S + rho (0 <= rho < S). With kernel
// K = T*S the taps of o are
//     k = rho + j*S,   i = q - j,        j = 0 .. T-1,
// so outputs sharing q (one per phase rho) read the same T inputs q, q-1, .., q-T+1 with
// different taps. A thread owns Q consecutive q ("positions") per axis and all S phases of each:
// it reads the window of inputs i = qb-T+1 .. qb+Q-1 (Q+T-1 of them) once per input channel and
// does (S*Q)*T multiply-adds per axis with it; window slot u = (q - qb) - j + T - 1.
// Position q covers outputs o = q*S + rho - pad; q runs from floor(pad/S) (o = 0) to
// floor((out-1+pad)/S); outputs outside [0, out) are computed and not stored.
//
// Work split. A block = (image n, one tile of BY*QH x BX*QW positions, one group, one chunk of
// OCT output channels of that group); thread (tx, ty) owns positions (ty*QH.., tx*QW..) of the
// tile. The block walks the group's input channels in chunks of CK. Per chunk it stages, as
// fp32 in shared memory: the tile's input window [CK][BY*QH+T-1][BX*QW+T-1] (zeros outside the
// image) and the chunk's weights phase-major, [CK][rho_h][rho_w][j_h][j_w][oc] (one run of
// T*T*OCT values per phase, padded to 16 bytes, read with float4 broadcasts: every thread uses
// the same weights). Weights that fit kWeightsOnceBytes are staged once for every channel.
// fp32 double-buffers the chunks: chunk k+1 is copied (cp.async for 16-byte rows and weights)
// while chunk k is multiplied; 16-bit types convert through registers into one buffer.
//
// Summation order. By default each accumulator is one FFMA chain over channels and taps. In
// fp32 without TF32 (tap_sums) each channel's T*T taps of an output are summed apart first and
// then added, which shortens the chain T*T-fold: a chain of Cin*T*T products measured 2.7-3.1x
// PyTorch's error on 190-500-deep sums (H100), above the tests' 2x bound.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "ffma_tile/ffma_tile.h"
#include "ffma_tile/ffma_tile_instances.h"
#include "common/params.h"
#include "common/device_cache.h"
#include "common/epilogue.cuh"
#include "common/scalar_convert.cuh"
#include "common/tensor_core_ptx.cuh"

namespace deconv_patch {
namespace {

constexpr int kMaxThreads = 256;
constexpr int kMaxChunk = 16;             // input channels staged at once
constexpr int kSmemTarget = 48 * 1024;    // no opt-in needed; leaves room for several blocks/SM
constexpr int kMaxGridY = 65535;

struct Config {
  int s, t, qh, qw, oct;
  const char* name;
};
// Keep in step with visit_config and the planner's FFMA_TILE_CONFIGS.
constexpr Config kConfigs[] = {
    {2, 2, 2, 2, 3, "s2q2x2o3"}, {2, 2, 2, 2, 4, "s2q2x2o4"}, {2, 2, 1, 2, 4, "s2q1x2o4"},
    {2, 2, 1, 2, 6, "s2q1x2o6"}, {2, 2, 1, 2, 9, "s2q1x2o9"}, {2, 2, 1, 1, 3, "s2q1x1o3"},
    {2, 2, 1, 1, 4, "s2q1x1o4"}, {3, 3, 2, 2, 1, "s3q2x2o1"}, {3, 3, 1, 2, 1, "s3q1x2o1"},
    {3, 3, 1, 1, 1, "s3q1x1o1"},
};
constexpr int kNumConfigs = (int)(sizeof(kConfigs) / sizeof(kConfigs[0]));

__host__ __device__ constexpr int round_up4(int v) { return (v + 3) / 4 * 4; }

// What the host decides per call (block shape, staging) and passes to the kernel.
struct Geometry {
  int bx, by;              // threads per block along positions' columns / rows
  int tiles_w, tiles_h;    // blocks per image along columns / rows
  int ck;                  // input channels staged per chunk
  int rh, rw;              // staged window rows / columns: by*QH + T - 1, bx*QW + T - 1
  int in_floats;           // one input buffer: ck*rh*pitch rounded up to 4 (16-byte aligned)
  int w_floats;            // one weight buffer: cin_g (weights_once) or ck channels' weights,
                           // rounded up to 4
  int oc_chunks;           // per group: ceil(Cout/g / OCT)
  int q0_h, q0_w;          // first position per axis: floor(pad / S)
  int threads, blocks_per_image;
  int64_t blocks;
  size_t smem;
  bool channels_inner;     // input channel stride 1: stage with channels fastest (coalesced)
  int step_c, step_r, step_x;  // the staging walk's step (the thread count) split per dimension
  // Wide staging (dense NCHW-like rows, W and the strides in whole 16-byte vectors, aligned base):
  // each window row is read as nv aligned 16-byte vectors from floor(i_w0 / V)*V and lands in
  // shared memory from column 0, so the window starts xoff = i_w0 mod V columns in.
  bool vec;
  int nv;                  // 16-byte vectors per staged row (covers rw columns at any offset)
  int pitch;               // shared-memory floats per staged row: nv*V when vec, else rw
  // channels_last staging (channel stride 1; channels per group, pixel and image strides and
  // the base in whole 16-byte vectors; chunks of whole vectors): one 16-byte vector carries V
  // channels of a pixel into V channel planes.
  bool cvec;
  bool weights_once;       // every input channel's weights staged at the start (kWeightsOnceBytes)
  bool ok;
};

// A thread's place in the staging walk over the chunk's window [ck][rh][rw]: element
// (c, r, x), advanced by the block's thread count with carries (host-split steps, no division per
// element). NCHW-like input walks columns fastest, channels_last input channels fastest, so
// consecutive threads read consecutive addresses either way.
struct StageCursor {
  int c, r, x;
  __device__ __forceinline__ void init(const Geometry& g, int tid) {
    if (!g.channels_inner) {
      x = tid % g.rw;
      r = (tid / g.rw) % g.rh;
      c = tid / (g.rw * g.rh);
    } else {
      c = tid % g.ck;
      x = (tid / g.ck) % g.rw;
      r = tid / (g.ck * g.rw);
    }
  }
  __device__ __forceinline__ void advance(const Geometry& g) {
    if (!g.channels_inner) {
      x += g.step_x;
      if (x >= g.rw) { x -= g.rw; ++r; }
      r += g.step_r;
      if (r >= g.rh) { r -= g.rh; ++c; }
      c += g.step_c;
    } else {
      c += g.step_c;
      if (c >= g.ck) { c -= g.ck; ++x; }
      x += g.step_x;
      if (x >= g.rw) { x -= g.rw; ++r; }
      r += g.step_r;
    }
  }
};

// Loads in flight per thread while staging (a batch is issued, then stored).
constexpr int kStageBatch = 8;
// ... and 16-byte vectors in flight per thread in the wide form (4 x 16 bytes: 2x the bytes of a
// scalar fp32 batch, in a quarter of the instructions).
constexpr int kRowBatch = 4;
// Weights up to this many bytes are staged once per block for every input channel (they are the
// same for every chunk); larger ones per chunk.
constexpr int kWeightsOnceBytes = 24 * 1024;

// Staging, all as fp32: input channels [c0, c0+cn) of the block's window into smem[c][r][x]
// (zeros outside the image), and weights phase-major into
// sm_w[((c*S + rho_h)*S + rho_w)*PH + (j_h*T + j_w)*OCT + o] (tap kh = rho_h + j_h*S,
// kw = rho_w + j_w*S; zeros past the group's channels and in the padding). Each thread walks its
// elements kStageBatch at a time: the batch's loads are issued before any is stored, so their
// latencies overlap. fp32 uses these plain loads too (into the next buffer): a 4-byte cp.async
// per element measured slower (FSRCNN fp32 channels_last 58 -> 83 us, H100).
template <typename T>
__device__ __forceinline__ void stage_input(float* __restrict__ smem, const T* __restrict__ in,
                                            const ConvTranspose2dParams& p, const Geometry& g,
                                            const StageCursor& start, int c0, int cn,
                                            int64_t i_h0, int64_t i_w0) {
  const int threads = (int)blockDim.x;
  const int in_elems = g.ck * g.rh * g.rw;  // the walk covers ck channels; c >= cn is skipped
  StageCursor cur = start;
  for (int e0 = (int)threadIdx.x; e0 < in_elems; e0 += kStageBatch * threads) {
    T v[kStageBatch];
    int dst[kStageBatch];
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const bool live = e0 + u * threads < in_elems && cur.c < cn;
      const int64_t ih = i_h0 + cur.r, iw = i_w0 + cur.x;
      v[u] = from_float<T>(0.f);
      if (live && ih >= 0 && ih < p.in_h && iw >= 0 && iw < p.in_w)
        v[u] = in[(int64_t)(c0 + cur.c) * p.in_stride[1] + ih * p.in_stride[2] +
                  iw * p.in_stride[3]];
      dst[u] = live ? (cur.c * g.rh + cur.r) * g.pitch + cur.x : -1;
      cur.advance(g);
    }
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u)
      if (dst[u] >= 0) smem[dst[u]] = to_float(v[u]);
  }
}

// a / b rounded towards minus infinity (b > 0).
__device__ __forceinline__ int64_t floor_div_dev(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// How a block's threads split `slots` staging slots, and the channels of each: with fewer
// threads than slots a thread takes every threads-th slot and all its channels; with more,
// `groups` threads share a slot and each takes every groups-th channel (threads past
// groups*slots idle).
struct SlotSplit {
  int first, step;  // a thread's first slot and its slot step
  int c_first;      // its first channel of each slot (channel step: groups)
  int groups;
  bool idle;
  __device__ __forceinline__ explicit SlotSplit(int slots) {
    const int threads = (int)blockDim.x, t = (int)threadIdx.x;
    groups = threads >= slots ? threads / slots : 1;
    idle = groups > 1 && t >= groups * slots;
    first = groups > 1 ? t % slots : t;
    step = groups > 1 ? slots : threads;
    c_first = groups > 1 ? t / slots : 0;
  }
};

// The wide form of stage_input (g.vec). A slot (r, k) is the 16-byte vector of window row r at
// input columns a0 + k*V .. a0 + k*V + V-1 (a0 = floor(i_w0 / V)*V, the caller's); it lands at
// smem[(c*rh + r)*pitch + k*V] as V floats for each channel c. With W a multiple of V a vector
// lies wholly inside or wholly outside the row, so outside ones are zeros. The slot's address and
// bounds are worked out once and then reused for every channel: threads split the slots and, when
// there are more threads than slots, the channels too (`groups` threads per slot).
template <typename T, bool ASYNC>
__device__ __forceinline__ void stage_input_rows(float* __restrict__ smem,
                                                 const T* __restrict__ in,
                                                 const ConvTranspose2dParams& p,
                                                 const Geometry& g, int c0, int cn,
                                                 int64_t i_h0, int64_t a0) {
  constexpr int V = 16 / (int)sizeof(T);
  const int slots = g.rh * g.nv;
  const SlotSplit split(slots);
  if (split.idle) return;
  const int groups = split.groups;
  const int64_t c_stride = p.in_stride[1];
  const int smem_c_stride = g.rh * g.pitch;
  for (int slot = split.first; slot < slots; slot += split.step) {
    const int r = slot / g.nv, k = slot - r * g.nv;
    const int64_t ih = i_h0 + r, iw = a0 + (int64_t)k * V;
    const bool inside = ih >= 0 && ih < p.in_h && iw >= 0 && iw < p.in_w;
    const T* src = in + (int64_t)c0 * c_stride + (inside ? ih * p.in_stride[2] + iw : 0);
    float* dst = smem + r * g.pitch + k * V;
    if constexpr (ASYNC) {  // fp32: one 16-byte cp.async per vector (zero-filled outside)
      for (int c = split.c_first; c < cn; c += groups)
        tc::cp_async<16>(tc::smem_u32(dst + c * smem_c_stride),
                         inside ? src + (int64_t)c * c_stride : in, inside ? 16 : 0);
    } else {
      for (int c = split.c_first; c < cn; c += groups * kRowBatch) {
        uint4 v[kRowBatch];
#pragma unroll
        for (int u = 0; u < kRowBatch; ++u) {
          v[u] = make_uint4(0u, 0u, 0u, 0u);
          if (inside && c + u * groups < cn)
            v[u] = *reinterpret_cast<const uint4*>(src + (int64_t)(c + u * groups) * c_stride);
        }
#pragma unroll
        for (int u = 0; u < kRowBatch; ++u) {
          if (c + u * groups >= cn) break;
          const T* elems = reinterpret_cast<const T*>(&v[u]);
          // pitch and k*V: 16-byte aligned
          float4* out4 = reinterpret_cast<float4*>(dst + (c + u * groups) * smem_c_stride);
#pragma unroll
          for (int q = 0; q < V / 4; ++q)
            out4[q] = make_float4(to_float(elems[4 * q]), to_float(elems[4 * q + 1]),
                                  to_float(elems[4 * q + 2]), to_float(elems[4 * q + 3]));
        }
      }
    }
  }
}

// The channels_last form of stage_input (g.cvec). A slot is one pixel (r, x) of the window; its
// channels c0 .. c0+cn-1 are contiguous, read as 16-byte vectors of V channels, each written to
// smem[(c*rh + r)*pitch + x] for its V channels (consecutive slots write consecutive columns of
// a plane: no bank conflicts). As in stage_input_rows, the slot's address and bounds are worked
// out once and threads split the slots and, when there are more threads than slots, the
// vectors.
template <typename T>
__device__ __forceinline__ void stage_input_pixels(float* __restrict__ smem,
                                                   const T* __restrict__ in,
                                                   const ConvTranspose2dParams& p,
                                                   const Geometry& g, int c0, int cn,
                                                   int64_t i_h0, int64_t i_w0) {
  constexpr int V = 16 / (int)sizeof(T);
  const int slots = g.rh * g.rw;
  const SlotSplit split(slots);  // its "channels" are this walk's channel vectors
  if (split.idle) return;
  const int groups = split.groups;
  const int nvec = cn / V;  // chunks hold whole vectors (host)
  const int smem_c_stride = g.rh * g.pitch;
  for (int slot = split.first; slot < slots; slot += split.step) {
    const int r = slot / g.rw, x = slot - r * g.rw;
    const int64_t ih = i_h0 + r, iw = i_w0 + x;
    const bool inside = ih >= 0 && ih < p.in_h && iw >= 0 && iw < p.in_w;
    const T* src = in + c0 + (inside ? ih * p.in_stride[2] + iw * p.in_stride[3] : 0);
    float* dst = smem + r * g.pitch + x;
    for (int v = split.c_first; v < nvec; v += groups * kRowBatch) {
      uint4 val[kRowBatch];
#pragma unroll
      for (int u = 0; u < kRowBatch; ++u) {
        val[u] = make_uint4(0u, 0u, 0u, 0u);
        if (inside && v + u * groups < nvec)
          val[u] = *reinterpret_cast<const uint4*>(src + (v + u * groups) * V);
      }
#pragma unroll
      for (int u = 0; u < kRowBatch; ++u) {
        if (v + u * groups >= nvec) break;
        const T* elems = reinterpret_cast<const T*>(&val[u]);
        float* d = dst + (v + u * groups) * V * smem_c_stride;
#pragma unroll
        for (int q = 0; q < V; ++q) d[q * smem_c_stride] = to_float(elems[q]);
      }
    }
  }
}

// Stages the weights of input channels [c0, c0+cn) phase-major into sm_w (layout above). A slot
// is one place (phase, tap, channel o) within an input channel's S*S*PH floats: its source offset
// is worked out once (compile-time divisors) and reused for every input channel, as in
// stage_input_rows.
template <typename T, int S, int TT, int OCT, bool ASYNC>
__device__ __forceinline__ void stage_weights(float* __restrict__ sm_w, const T* __restrict__ wt,
                                              const ConvTranspose2dParams& p, int c0, int cn,
                                              int oc0, int cout_g) {
  constexpr int PH = round_up4(TT * TT * OCT);
  constexpr int P = S * S * PH;  // staged floats per input channel
  const SlotSplit split(P);
  if (split.idle) return;
  const int groups = split.groups;
  const int64_t c_stride = p.w_stride[0];
  for (int slot = split.first; slot < P; slot += split.step) {
    // Slot (phase (rho_h, rho_w), r = (j_h*T + j_w)*OCT + o): tap kh = rho_h + j_h*S,
    // kw = rho_w + j_w*S.
    const int r = slot % PH, ph = slot / PH;
    const int o = r % OCT, jj = r / OCT;
    const int kh = ph / S + (jj / TT) * S, kw = ph % S + (jj % TT) * S;
    const bool live = jj < TT * TT && oc0 + o < cout_g;
    const T* src = wt + (int64_t)c0 * c_stride +
                   (live ? (oc0 + o) * p.w_stride[1] + kh * p.w_stride[2] + kw * p.w_stride[3]
                         : 0);
    float* dst = sm_w + slot;
    if constexpr (ASYNC) {  // fp32: one 4-byte cp.async per element (zeros in the padding)
      for (int c = split.c_first; c < cn; c += groups)
        tc::cp_async<4>(tc::smem_u32(dst + c * P), live ? src + (int64_t)c * c_stride : wt,
                        live ? 4 : 0);
    } else {
      for (int c = split.c_first; c < cn; c += groups * kStageBatch) {
        T v[kStageBatch];
#pragma unroll
        for (int u = 0; u < kStageBatch; ++u) {
          v[u] = from_float<T>(0.f);
          if (live && c + u * groups < cn) v[u] = src[(int64_t)(c + u * groups) * c_stride];
        }
#pragma unroll
        for (int u = 0; u < kStageBatch; ++u)
          if (c + u * groups < cn) dst[(c + u * groups) * P] = to_float(v[u]);
      }
    }
  }
}

template <typename T, int S, int TT, int QH, int QW, int OCT, bool TAP_SUMS>
__global__ void __launch_bounds__(kMaxThreads)
ffma_tile_kernel(const ConvTranspose2dParams p, const Geometry g) {
  constexpr int WH = QH + TT - 1, WW = QW + TT - 1;  // a thread's input window
  constexpr int PH = round_up4(TT * TT * OCT);  // weights per (channel, phase), padded
  // fp32 stages with cp.async into two buffers; 16-bit converts through registers into one.
  constexpr bool ASYNC = std::is_same<T, float>::value;
  constexpr int kBuffers = ASYNC ? 2 : 1;
  extern __shared__ float4 smem4[];
  // Shared memory: kBuffers input buffers of in_floats, then the weights: one buffer of every
  // channel (weights_once) or kBuffers buffers of a chunk's, w_floats each.
  float* smem = reinterpret_cast<float*>(smem4);
  float* sm_w = smem + kBuffers * g.in_floats;

  // Block coordinates: x = (image, tile), y = (group, output-channel chunk).
  const int64_t n = blockIdx.x / g.blocks_per_image;
  const int tile = (int)(blockIdx.x - n * g.blocks_per_image);
  const int tile_h = tile / g.tiles_w;
  const int tile_w = tile - tile_h * g.tiles_w;
  const int grp = (int)(blockIdx.y / g.oc_chunks);
  const int oc0 = (int)(blockIdx.y - (unsigned)grp * g.oc_chunks) * OCT;  // within the group
  const int tx = (int)threadIdx.x % g.bx;
  const int ty = (int)threadIdx.x / g.bx;

  // The tile's first position and the first staged input (T-1 before it), per axis.
  const int bq_h = g.q0_h + tile_h * g.by * QH;
  const int bq_w = g.q0_w + tile_w * g.bx * QW;
  const int64_t i_h0 = (int64_t)bq_h - (TT - 1), i_w0 = (int64_t)bq_w - (TT - 1);

  const int cin_g = (int)p.in_per_group, cout_g = (int)p.out_per_group;
  const T* __restrict__ in = static_cast<const T*>(p.input) + n * p.in_stride[0] +
                             (int64_t)grp * cin_g * p.in_stride[1];
  const T* __restrict__ wt = static_cast<const T*>(p.weight) +
                             (int64_t)grp * cin_g * p.w_stride[0];

  float acc[S][QH][S][QW][OCT];
#pragma unroll
  for (int a = 0; a < S; ++a)
#pragma unroll
    for (int b = 0; b < QH; ++b)
#pragma unroll
      for (int c = 0; c < S; ++c)
#pragma unroll
        for (int d = 0; d < QW; ++d)
#pragma unroll
          for (int o = 0; o < OCT; ++o) acc[a][b][c][d][o] = 0.f;

  StageCursor start;
  start.init(g, (int)threadIdx.x);
  constexpr int V = 16 / (int)sizeof(T);
  // Wide staging reads rows from a0, the 16-byte boundary at or before i_w0.
  const int64_t a0 = floor_div_dev(i_w0, V) * V;
  const int xoff = g.vec ? (int)(i_w0 - a0) : 0;
  const int win_offset = ty * QH * g.pitch + tx * QW + xoff;
  const int per_channel = g.rh * g.pitch;
  // Stages chunk [c0, c0 + cn) into buffer b (and its weights unless they are staged once).
  auto stage_chunk = [&](int c0, int cn, int b) {
    float* dst = smem + b * g.in_floats;
    if (g.vec)
      stage_input_rows<T, ASYNC>(dst, in, p, g, c0, cn, i_h0, a0);
    else if (g.cvec)
      stage_input_pixels(dst, in, p, g, c0, cn, i_h0, i_w0);  // plain loads, every dtype
    else
      stage_input(dst, in, p, g, start, c0, cn, i_h0, i_w0);  // plain loads, every dtype
    if (!g.weights_once)
      stage_weights<T, S, TT, OCT, ASYNC>(sm_w + b * g.w_floats, wt, p, c0, cn, oc0, cout_g);
  };
  if (g.weights_once)  // every channel's weights, once (the loop's first barrier publishes them)
    stage_weights<T, S, TT, OCT, ASYNC>(sm_w, wt, p, 0, cin_g, oc0, cout_g);
  if constexpr (ASYNC) {  // chunk 0 (and the weights) in flight before the loop
    stage_chunk(0, min(g.ck, cin_g), 0);
    tc::cp_async_commit();
  }
  for (int c0 = 0, k = 0; c0 < cin_g; c0 += g.ck, ++k) {
    const int cn = min(g.ck, cin_g - c0);
    const int b = ASYNC ? (k & 1) : 0;
    if constexpr (ASYNC) {
      // Chunk k + 1 goes into the other buffer (consumed: the barrier ending iteration k - 1)
      // while this one lands; one commit group per iteration, empty on the last.
      if (c0 + g.ck < cin_g) stage_chunk(c0 + g.ck, min(g.ck, cin_g - c0 - g.ck), b ^ 1);
      tc::cp_async_commit();
      tc::cp_async_wait<1>();  // everything but the newest group: chunk k is here
      __syncthreads();
    } else {
      __syncthreads();  // the previous chunk is consumed
      stage_chunk(c0, cn, 0);
      __syncthreads();
    }
    const float* win_base = smem + b * g.in_floats + win_offset;
    // The chunk's first channel's weights.
    const float* sm_w_chunk = g.weights_once ? sm_w + c0 * S * S * PH : sm_w + b * g.w_floats;
#pragma unroll 1
    for (int c = 0; c < cn; ++c) {
      float win[WH][WW];
      const float* wb = win_base + c * per_channel;
#pragma unroll
      for (int a = 0; a < WH; ++a)
#pragma unroll
        for (int b = 0; b < WW; ++b) win[a][b] = wb[a * g.pitch + b];
      const float4* wphase = reinterpret_cast<const float4*>(sm_w_chunk + c * S * S * PH);
#pragma unroll
      for (int rho_h = 0; rho_h < S; ++rho_h)
#pragma unroll
        for (int rho_w = 0; rho_w < S; ++rho_w) {
          float w[PH];
#pragma unroll
          for (int v = 0; v < PH / 4; ++v) {
            const float4 f = wphase[(rho_h * S + rho_w) * (PH / 4) + v];
            w[4 * v] = f.x;
            w[4 * v + 1] = f.y;
            w[4 * v + 2] = f.z;
            w[4 * v + 3] = f.w;
          }
#pragma unroll
          for (int qh = 0; qh < QH; ++qh)
#pragma unroll
            for (int qw = 0; qw < QW; ++qw)
#pragma unroll
              for (int o = 0; o < OCT; ++o) {
                // Output (q, rho) takes tap j from input q - j: window slot q - j + T - 1.
                float& out_acc = acc[rho_h][qh][rho_w][qw][o];
                if (TAP_SUMS) {
                  float t = win[qh + TT - 1][qw + TT - 1] * w[o];
#pragma unroll
                  for (int jj = 1; jj < TT * TT; ++jj)
                    t = fmaf(win[qh - jj / TT + TT - 1][qw - jj % TT + TT - 1],
                             w[jj * OCT + o], t);
                  out_acc += t;
                } else {
#pragma unroll
                  for (int jj = 0; jj < TT * TT; ++jj)
                    out_acc = fmaf(win[qh - jj / TT + TT - 1][qw - jj % TT + TT - 1],
                                   w[jj * OCT + o], out_acc);
                }
              }
        }
    }
    if constexpr (ASYNC) __syncthreads();  // buffer b is consumed before it is staged again
  }

  // Epilogue: bias, scale/shift and the activation (fixed at compile time per store), one
  // rounding to T, stored through the output strides (64-bit offsets).
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  T* __restrict__ out = static_cast<T*>(p.output);
  float mul[OCT], add[OCT];
#pragma unroll
  for (int o = 0; o < OCT; ++o) {
    const int oc = oc0 + o;
    const int64_t oc_abs = (int64_t)grp * cout_g + (oc < cout_g ? oc : 0);
    const float b = bias != nullptr ? to_float(bias[oc_abs]) : 0.f;
    const ChannelAffine ca = channel_affine(p.epi, b, oc_abs);  // mul = 1 without a scale
    mul[o] = ca.mul;
    add[o] = ca.add;
  }
  const int qb_h = bq_h + ty * QH, qb_w = bq_w + tx * QW;
  const int pad_h = p.ph_h.pad, pad_w = p.ph_w.pad;
  T* out_n = out + n * p.out_stride[0] + ((int64_t)grp * cout_g + oc0) * p.out_stride[1];
  dispatch_activation(p.epi.activation, [&](auto act) {
    constexpr Activation A = decltype(act)::value;
#pragma unroll
    for (int rho_h = 0; rho_h < S; ++rho_h)
#pragma unroll
      for (int qh = 0; qh < QH; ++qh) {
        const int oh = (qb_h + qh) * S + rho_h - pad_h;
        if (oh < 0 || oh >= p.out_h) continue;
#pragma unroll
        for (int rho_w = 0; rho_w < S; ++rho_w)
#pragma unroll
          for (int qw = 0; qw < QW; ++qw) {
            const int ow = (qb_w + qw) * S + rho_w - pad_w;
            if (ow < 0 || ow >= p.out_w) continue;
            T* o_px = out_n + oh * p.out_stride[2] + ow * p.out_stride[3];
#pragma unroll
            for (int o = 0; o < OCT; ++o) {
              if (oc0 + o >= cout_g) break;
              o_px[o * p.out_stride[1]] = from_float<T>(epilogue_value<A>(
                  acc[rho_h][qh][rho_w][qw][o], mul[o], add[o], p.epi.negative_slope));
            }
          }
      }
  });
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool axis_ok(const AxisPhase& a, int s, int t) {
  return a.stride == s && a.dil == 1 && a.kernel == s * t && a.pad >= 0 && a.pad < (1 << 29);
}

// Resident warps an SM needs before more of them stop shortening its time: with ~2.4 warps per
// scheduler the kernel issued on 54% of cycles (ncu, FSRCNN s3q1x2o1, H100).
constexpr double kBusyWarps = 16.0;

// How many blocks of `threads` threads and `smem` bytes of dynamic shared memory an SM of the
// current device holds at once, for a kernel of `regs` registers per thread: the least of its
// shared-memory, register, thread and block limits (registers are allocated per warp in units
// of 256). Unknown limits (-1) do not bound it.
struct SmLimits {
  int smem, reserved, regs, blocks, threads;
  SmLimits() {
    const int d = current_device();
    smem = device_smem_per_sm(d);
    reserved = device_reserved_smem_per_block(d);
    regs = device_regs_per_sm(d);
    blocks = device_blocks_per_sm(d);
    threads = device_threads_per_sm(d);
  }
  int64_t resident_blocks(int block_threads, size_t block_smem, int kernel_regs) const {
    const int64_t warps = (block_threads + 31) / 32;
    int64_t n = blocks > 0 ? blocks : 32;
    if (threads > 0) n = std::min<int64_t>(n, threads / (warps * 32));
    if (smem > 0) n = std::min<int64_t>(n, smem / ((int64_t)block_smem + std::max(reserved, 0)));
    if (regs > 0 && kernel_regs > 0)
      n = std::min<int64_t>(n, regs / (warps * ((kernel_regs * 32 + 255) / 256 * 256)));
    return n;
  }
};

// The block shape, staging chunk and grid for `p` with config `cf`, for a kernel of `regs`
// registers per thread. The block shape minimises a simple time model of one SM: its blocks
// run in rounds of as many as it holds at once (SmLimits); a round takes max(its warps,
// kBusyWarps) in units of one warp's work (warps rounded up to 32 lanes), times the staging
// instructions' share (the window's halo makes small blocks stage more per thread). Without
// the rounds, the model took 32-thread blocks for FSRCNN in channels_last, of which shared
// memory let an H100 SM hold 7 (6 warps): 1.5x slower than 121-thread blocks.
Geometry make_geometry(const ConvTranspose2dParams& p, ScalarKind kind, const Config& cf,
                       int regs) {
  Geometry g{};
  g.ok = false;
  if (kind != ScalarKind::kFloat32 && kind != ScalarKind::kFloat16 &&
      kind != ScalarKind::kBFloat16)
    return g;
  if (!axis_ok(p.ph_h, cf.s, cf.t) || !axis_ok(p.ph_w, cf.s, cf.t)) return g;
  if (p.groups < 1 || p.in_per_group < 1 || p.out_per_group < 1 || p.batch < 0) return g;
  if (p.in_per_group * p.groups != p.in_channels || p.out_per_group * p.groups != p.out_channels)
    return g;
  if (p.in_per_group >= (1 << 30) || p.out_per_group >= (1 << 30)) return g;
  if (p.in_h < 1 || p.in_w < 1 || p.out_h < 1 || p.out_w < 1) return g;
  if (p.in_h >= (1 << 30) || p.in_w >= (1 << 30) || p.out_h >= (1 << 30) || p.out_w >= (1 << 30))
    return g;
  if ((int)p.epi.activation < (int)Activation::kNone ||
      (int)p.epi.activation > (int)Activation::kHardswish)
    return g;
  const int64_t oc_chunks = ceil_div(p.out_per_group, cf.oct);
  if (oc_chunks * p.groups > kMaxGridY) return g;
  // Weight offsets are formed in 64 bits; the weight's extent is still kept below 2^31 elements,
  // the range the device runs covered.
  const int64_t k = cf.s * cf.t;
  if ((p.out_per_group - 1) * p.w_stride[1] + (k - 1) * (p.w_stride[2] + p.w_stride[3]) >=
      ((int64_t)1 << 31))
    return g;

  // Positions per axis (pad >= 0 and out >= 1, so these divisions floor).
  const int64_t q0_h = p.ph_h.pad / cf.s, q0_w = p.ph_w.pad / cf.s;
  const int64_t nq_h = (p.out_h - 1 + p.ph_h.pad) / cf.s - q0_h + 1;
  const int64_t nq_w = (p.out_w - 1 + p.ph_w.pad) / cf.s - q0_w + 1;
  const int64_t tq_h = ceil_div(nq_h, cf.qh), tq_w = ceil_div(nq_w, cf.qw);
  const int sms = device_sm_count(current_device());
  const SmLimits limits;
  const int64_t per_image_sets = p.groups * oc_chunks;  // blocks per tile position and image

  // Staged floats per input channel: the phase-major weights (PH per phase), staged once for
  // every channel when they fit kWeightsOnceBytes, else per chunk.
  const int w_per_channel = cf.s * cf.s * round_up4(cf.t * cf.t * cf.oct);
  const bool weights_once = (int64_t)4 * w_per_channel * p.in_per_group <= kWeightsOnceBytes;
  const int64_t w_once_floats = weights_once ? (int64_t)w_per_channel * p.in_per_group : 0;
  // Wide staging: NCHW-like rows whose width, strides and base are whole 16-byte vectors.
  const int vec_elems = kind == ScalarKind::kFloat32 ? 4 : 8;
  const bool vec = p.in_stride[3] == 1 && p.in_w % vec_elems == 0 &&
                   p.in_stride[2] % vec_elems == 0 && p.in_stride[1] % vec_elems == 0 &&
                   p.in_stride[0] % vec_elems == 0 &&
                   reinterpret_cast<uintptr_t>(p.input) % 16 == 0 &&
                   !(p.in_stride[1] == 1 && p.in_per_group > 1);
  const bool cvec = !vec && p.in_stride[1] == 1 && p.in_per_group % vec_elems == 0 &&
                    p.in_stride[2] % vec_elems == 0 && p.in_stride[3] % vec_elems == 0 &&
                    p.in_stride[0] % vec_elems == 0 &&
                    reinterpret_cast<uintptr_t>(p.input) % 16 == 0;
  // fp32 double-buffers its chunks (cp.async), 16-bit stages one at a time.
  const bool async = kind == ScalarKind::kFloat32;
  const int buffers = async ? 2 : 1;
  double best = 0.0;
  // Column counts per block: the row split into 1-8 equal parts, or a power of two.
  int bx_cands[12];
  int n_cands = 0;
  for (int m = 1; m <= 8; ++m) {
    const int64_t v = ceil_div(tq_w, m);
    if (v <= 64) bx_cands[n_cands++] = (int)v;
  }
  for (int v : {64, 32, 16, 8})
    if (v < tq_w) bx_cands[n_cands++] = v;
  for (int ci = 0; ci < n_cands; ++ci) {
    const int bx = bx_cands[ci];
    const int by_max = (int)(kMaxThreads / bx < tq_h ? kMaxThreads / bx : tq_h);
    for (int by_try = by_max; by_try >= 1; by_try = by_try > 1 ? (by_try + 1) / 2 : 0) {
      const int64_t tiles_h = ceil_div(tq_h, by_try);
      const int by = (int)ceil_div(tq_h, tiles_h);  // balance the rows over the tiles
      const int64_t tiles_w = ceil_div(tq_w, bx);
      const int rh = by * cf.qh + cf.t - 1, rw = bx * cf.qw + cf.t - 1;
      const int threads = bx * by;
      // Channels per chunk: the staged floats of every buffer fit shared memory (each buffer is
      // padded by up to 3 floats).
      const int nv = (int)ceil_div(rw + vec_elems - 1, vec_elems);
      const int pitch = vec ? nv * vec_elems : rw;
      const int64_t per_ch = (int64_t)rh * pitch + (weights_once ? 0 : w_per_channel);
      int64_t ck = ((int64_t)kSmemTarget / 4 - 8 * buffers - w_once_floats) / (buffers * per_ch);
      if (ck > kMaxChunk) ck = kMaxChunk;
      if (ck > p.in_per_group) ck = p.in_per_group;
      if (ck < 1) continue;
      // channels_last vectors need whole vectors per chunk (in_per_group is a multiple of V).
      const bool use_cvec = cvec && ck >= vec_elems;
      if (use_cvec) ck = ck / vec_elems * vec_elems;
      const int64_t warps = (threads + 31) / 32;
      const int64_t blocks = p.batch * tiles_h * tiles_w * per_image_sets;
      if (blocks >= ((int64_t)1 << 31) - 1 || tiles_h * tiles_w >= ((int64_t)1 << 30)) continue;
      const int in_floats = round_up4((int)ck * rh * pitch);
      const int w_floats = round_up4(weights_once ? (int)w_once_floats : (int)ck * w_per_channel);
      const size_t smem = (size_t)4 * ((size_t)buffers * in_floats +
                                       (size_t)(weights_once ? 1 : buffers) * w_floats);
      const int64_t per_sm_blocks = ceil_div(blocks, sms > 0 ? sms : 1);
      const int64_t resident = std::max<int64_t>(limits.resident_blocks(threads, smem, regs), 1);
      const int64_t rounds = ceil_div(per_sm_blocks, resident);
      const double round_warps = (double)std::min(per_sm_blocks, resident) * (double)warps;
      // Instructions per input channel and thread: the multiply-adds and shared loads, and
      // ~25 per staged element (its share of the window and weights).
      const double compute = (double)k * k * cf.qh * cf.qw * cf.oct +
                             (cf.qh + cf.t - 1) * (cf.qw + cf.t - 1) + w_per_channel / 4.0;
      const double stage =
          (vec || use_cvec ? 10.0 : 25.0) * ((double)rh * pitch) / threads +
          25.0 * (weights_once ? 0.0 : (double)w_per_channel) / threads;
      const double score = (double)rounds * std::max(round_warps, kBusyWarps) *
                           (1.0 + stage / compute);
      if (g.ok && score >= best) continue;
      best = score;
      g.ok = true;
      g.bx = bx;
      g.by = by;
      g.tiles_w = (int)tiles_w;
      g.tiles_h = (int)tiles_h;
      g.ck = (int)ck;
      g.rh = rh;
      g.rw = rw;
      g.nv = nv;
      g.pitch = pitch;
      g.vec = vec;
      g.cvec = use_cvec;
      g.in_floats = in_floats;
      g.w_floats = w_floats;
      g.oc_chunks = (int)oc_chunks;
      g.q0_h = (int)q0_h;
      g.q0_w = (int)q0_w;
      g.threads = threads;
      g.blocks_per_image = (int)(tiles_h * tiles_w);
      g.blocks = p.batch * tiles_h * tiles_w;
      g.weights_once = weights_once;
      g.smem = smem;
    }
  }
  g.channels_inner = p.in_stride[1] == 1 && p.in_per_group > 1;
  if (g.ok) {
    const int t = g.threads;
    if (!g.channels_inner) {
      g.step_x = t % g.rw;
      g.step_r = (t / g.rw) % g.rh;
      g.step_c = t / (g.rw * g.rh);
    } else {
      g.step_c = t % g.ck;
      g.step_x = (t / g.ck) % g.rw;
      g.step_r = t / (g.ck * g.rw);
    }
  }
  return g;
}

// A config's compile-time tile (kConfigs[i] as template arguments).
template <int S, int TT, int QH, int QW, int OCT>
struct Tile {
  static constexpr int s = S, t = TT, qh = QH, qw = QW, oct = OCT;
};
template <int I>
using ConfigTile = Tile<kConfigs[I].s, kConfigs[I].t, kConfigs[I].qh, kConfigs[I].qw,
                        kConfigs[I].oct>;

template <typename T>
constexpr ScalarKind kind_of() {
  return std::is_same<T, float>::value    ? ScalarKind::kFloat32
         : std::is_same<T, __half>::value ? ScalarKind::kFloat16
                                          : ScalarKind::kBFloat16;
}

// Registers per thread of config C's kernel for T on the current device (-1 when unknown), asked
// of the runtime once per device: the block-shape model's residency needs it (76-192 across
// the instantiations). The tap-sum kernel is not asked; its count differs by a few registers.
template <typename T, typename C>
int kernel_regs() {
  return cached_per_device<std::pair<T, C>>(current_device(), [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr,
                              ffma_tile_kernel<T, C::s, C::t, C::qh, C::qw, C::oct, false>) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    return attr.numRegs;
  });
}

// The geometry of config I for `p` on T (its kernel's registers looked up).
template <typename T, int I>
Geometry config_geometry(const ConvTranspose2dParams& p) {
  return make_geometry(p, kind_of<T>(), kConfigs[I], kernel_regs<T, ConfigTile<I>>());
}

template <typename T, typename C>
cudaError_t launch_kernel(const ConvTranspose2dParams& p, const Geometry& g, bool tap_sums,
                          cudaStream_t stream) {
  // Only fp32 has the tap-sum order (16-bit outputs round far above either order's error).
  constexpr bool kFloat = std::is_same<T, float>::value;
  auto kernel = kFloat && tap_sums ? ffma_tile_kernel<T, C::s, C::t, C::qh, C::qw, C::oct, kFloat>
                                   : ffma_tile_kernel<T, C::s, C::t, C::qh, C::qw, C::oct, false>;
  if (g.smem > (size_t)kSmemTarget) {
    const cudaError_t err = ensure_dynamic_smem(kernel, (int)g.smem, current_device());
    if (err != cudaSuccess) return err;
  }
  const dim3 grid((unsigned)g.blocks, (unsigned)(p.groups * g.oc_chunks));
  kernel<<<grid, g.threads, g.smem, stream>>>(p, g);
  return cudaGetLastError();
}

// What the generated per-config files define (ffma_tile_instances.h).
template <typename T, int I>
bool config_supports(const ConvTranspose2dParams& p) {
  return config_geometry<T, I>(p).ok;
}

template <typename T, int I>
cudaError_t config_launch(const ConvTranspose2dParams& p, bool tap_sums, cudaStream_t stream) {
  const Geometry g = config_geometry<T, I>(p);
  if (!g.ok) return cudaErrorInvalidValue;
  if (g.blocks == 0) return cudaSuccess;
  return launch_kernel<T, ConfigTile<I>>(p, g, tap_sums, stream);
}

}  // namespace
}  // namespace deconv_patch
