// Output-tiled stride-phase GEMM (few output channels per group), see the header for why.
//
// Index math. The phases are gemm_phase's (gemm_phase/gemm_phase.cu spells it out): output
// row oh = rh + sh*i of row phase rh reads input row ih = i + off0_h(rh) - th*in_step_h for its
// taps th in [0, taps_h(rh)), kernel row kh = kh0(rh) + th*step_h; columns alike (rw, j, tw).
//
// Block tile. A block owns image n, group g, the phase rows i in [i0, i0 + MI) of one row phase
// (rh = rg) or of every row phase ("all" configs), the phase columns j in [j0, j0 + MJ) of every
// column phase, and all Cout_g channels. Its output is therefore the contiguous column range
// [sw*j0, sw*(j0 + MJ)) of MI output rows (one row phase: oh = rh + sh*(i0 + a)) or of the
// sh*MI contiguous rows [sh*i0, sh*(i0 + MI)) (every row phase). Staging row s of the tile is
// a (one row phase) or rh + sh*a (every row phase); staging column x = rw + sw*jj.
//
// Input footprint. Over the block's phases the input rows read are i0 + [rmin, rmax + MI) with
// rmin = min over its row phases with taps of off0_h - (taps_h - 1)*in_step_h, rmax = max off0_h;
// columns j0 + [cmin, cmax + MJ) alike over every column phase. The footprint is copied (once
// per channel block, below) to shared memory as [FR][FC] pixels of PS bytes: Cin_g channels
// zero-padded to CP (16-byte chunks of E = 16/sizeof(T) channels, C8 = CP/E chunks), PS an odd
// number of 16-byte units, so the 8 pixel rows an ldmatrix reads (consecutive jj) hit 8
// different bank groups. Pixels outside the input are zero.
//
// GEMM of phase (rh, rw): M = MI*MJ pixels p = a*MJ + jj, N = Cout_g (NT = ceil(Cout_g/8) n8
// tiles), K = taps_h*taps_w*C8 chunks q = (th*taps_w + tw)*C8 + cc, chunk q of pixel (a, jj) at
// footprint byte (a*FC + jj)*PS + off(q) with off(q) = (dr*FC + dc)*PS + 16*cc,
// dr = off0_h - th*in_step_h - rmin, dc = off0_w - tw*in_step_w - cmin (a per-block table).
// A k step is two chunks (m16n8k16 for 16-bit, m16n8k8.tf32 for fp32): KS = ceil(chunks/2), an
// odd last chunk's upper half is zeroed in registers. A warp takes (phase, two 16-pixel m tiles)
// items: per k step one ldmatrix.x4 per m tile (16 pixels x 2 chunks) and NT B fragments from
// shared memory shared by both tiles' MMAs (two independent accumulator chains).
//
// Channel blocks (the K loop). When the weights of all Cin_g channels do not fit shared memory
// (Keypoint R-CNN's 512 > 17), the C8 chunks are split into NB blocks of C8b = ceil(C8/NB)
// chunks (pack_geometry picks NB without the device, so a packed weight serves any GPU); a
// block then loads, per channel block kb, that block's weights and footprint (channels
// [kb*C8b*E, (kb+1)*C8b*E)), and each warp accumulates its one item across the blocks. Below,
// C8 and CP are those of one channel block (C8 = C8b), and NB = 1 is the common case.
//
// Packed weight (mma fragment order, zero in padding): per group, per channel block, per phase
// pair (rh, rw) in row-major order, [KS][NT][32 lanes][8 bytes], the B fragment of lane
// (g4 = lane/4, t = lane%4): 16-bit: k = 2t + 8*reg + half, fp32 (TF32-rounded): k = t + 4*reg,
// column n = 8*nt + g4; k in the step is chunk 2*ks + k/E, channel (kb*C8 + chunk % C8)*E + k%E.
// 3xTF32 (fp32, TF32 not allowed) packs 16 bytes per lane, the TF32 hi pair then the lo pair
// ([KS][NT][32][16 bytes]), and keeps the footprint in fp32 (A is split after ldmatrix). A
// block copies the contiguous range of its phases to shared memory (once per channel block).
// ks_prefix[pair] counts the k steps before a pair within a channel block.
//
// Epilogue: each warp applies the fused epilogue to its fragments and writes the tile's staging
// buffer ([channel][row][x] for NCHW-like output, [row][x][channel] for channels_last); after a
// barrier the block stores whole runs: one output row of one channel (NCHW), one output row of
// all channels (channels_last, groups 1) or one pixel's channels, 16 bytes at a time where the
// launcher proved alignment.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "gemm_out_tile/gemm_out_tile.h"
#include "common/unit_kind.h"
#include "common/phase_plan.cuh"
#include "common/device_cache.h"
#include "common/epilogue.cuh"
#include "common/scalar_convert.cuh"
#include "common/tensor_core_ptx.cuh"

namespace deconv_patch {
namespace {

using namespace tc;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxNT = 4;         // Cout_g <= 32
constexpr int kFragBytes = 256;   // one (k step, n tile) B fragment: 32 lanes x 8 bytes
constexpr int kSplitFragBytes = 512;  // 3xTF32: 32 lanes x (hi, lo) x 8 bytes
constexpr int kLoadBatch = 8;     // footprint loads in flight per thread (scalar path)

struct TileShape {
  int mi, mj;     // phase rows and phase columns per phase
  bool all_rows;  // every row phase in one block (else one)
  const char* name;
};
constexpr TileShape kTiles[] = {
    {4, 32, false, "4x32"},    {2, 64, false, "2x64"},   {8, 16, false, "8x16"},
    {8, 32, true, "8x32all"},  {4, 64, true, "4x64all"}, {2, 64, true, "2x64all"},
    {4, 32, true, "4x32all"},
};
constexpr int kNumConfigs = (int)(sizeof(kTiles) / sizeof(kTiles[0]));

// Store modes of the staged tile.
enum StoreMode : int {
  kRowsAlongX = 0,     // output stride along w is the smallest (NCHW): runs = one channel's row
  kRowsOfPixels = 1,   // channels then pixels contiguous (channels_last, Cout_g == row pitch)
  kPixels = 2,         // channel-fastest, pixels not adjacent (groups > 1): runs = one pixel
};

struct OutTileArgs {
  const void* in;
  const void* packed;
  const void* bias;
  void* out;
  EpilogueParams epi;
  int in_h, in_w, out_h, out_w;
  int cin_g, cout_g, cp, c8, ps;  // channels, padded channels, chunks per tap, pixel bytes
  int is_n, is_c, is_h, is_w;
  int os_n, os_c, os_h, os_w;
  int sh, sw, in_step_h, in_step_w;
  int mi, mj, mj_shift, all_rows;
  int row_groups, row_blocks, col_blocks;
  int cmin, fc;        // footprint columns: j0 + cmin ..., width FC
  int ks_block;        // k steps of one channel block of one group's packed weight
  int nblocks;         // channel blocks (the K loop; 1 when all channels fit)
  int store_mode;
  bool in_vec;         // input read as 16-byte channel chunks
  bool out_vec;        // runs stored 16 bytes at a time
  int smem_fp, smem_st, smem_tab, smem_aff;  // byte offsets of the regions (B at 0)
  AxisPhaseInfo ph_h[kMaxStride], ph_w[kMaxStride];
  int ks_prefix[kMaxPhases + 1];
};

template <typename T>
__device__ __forceinline__ void mma_step(float (&d)[4], const uint32_t (&a)[4], uint2 b) {
  const uint32_t bb[2] = {b.x, b.y};
  if constexpr (sizeof(T) == 2) mma_16816<T>(d, a, bb);
  else mma_1688_tf32(d, a, bb);
}

// A lane's B fragment of one (k step, n tile): 16-bit / TF32 8 bytes, 3xTF32 (hi, lo) 16 bytes.
template <bool kSplit>
using BFrag = std::conditional_t<kSplit, uint4, uint2>;

// 16 bytes of the input's zero-filled footprint, fp32 rounded to TF32 (the kernel's A operand;
// 3xTF32 keeps fp32 and splits after ldmatrix).
template <typename T, bool kSplit>
__device__ __forceinline__ uint4 round_chunk(uint4 v) {
  if constexpr (sizeof(T) == 4 && !kSplit) {
    v.x = to_tf32(__uint_as_float(v.x));
    v.y = to_tf32(__uint_as_float(v.y));
    v.z = to_tf32(__uint_as_float(v.z));
    v.w = to_tf32(__uint_as_float(v.w));
  }
  return v;
}

template <typename T, bool kSplit>
__device__ __forceinline__ T round_operand(T v) {
  if constexpr (sizeof(T) == 4 && !kSplit) return __uint_as_float(to_tf32(v));
  else return v;
}

// kSplit (T = float, TF32 not allowed): 3xTF32, a*b = a_hi*b_hi + a_lo*b_hi + a_hi*b_lo with
// each k step's three products summed in a fresh partial, small terms first, then added to the
// accumulator in fp32 (the order docs/performance/fp32-strict.md measured for gemm_phase_tma).
// (2 blocks per SM: shared memory allows no more on the large layers, and without the bound
// ptxas kept the small-NT instances at 64 registers with spills.)
template <typename T, int NT, bool kSplit>
__global__ void __launch_bounds__(kThreads, 2)
    conv_transpose2d_gemm_out_tile_kernel(const __grid_constant__ OutTileArgs p) {
  static_assert(!kSplit || sizeof(T) == 4, "3xTF32 is an fp32 mode");
  constexpr int kFrag = kSplit ? kSplitFragBytes : kFragBytes;
  constexpr int E = 16 / (int)sizeof(T);  // channels per 16-byte chunk
  constexpr int V = E;                    // output elements per 16-byte store
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Which tile: column block fastest (neighbours share input rows in L2), then row block, row
  // phase (one-row configs), image.
  int x = blockIdx.x;
  const int cb = x % p.col_blocks;
  x /= p.col_blocks;
  const int rb = x % p.row_blocks;
  x /= p.row_blocks;
  const int rg = x % p.row_groups;
  const int n_img = x / p.row_groups;
  const int g = blockIdx.y;
  const int rh_begin = p.all_rows ? 0 : rg;
  const int rh_count = p.all_rows ? p.sh : 1;
  const int i0 = rb * p.mi, j0 = cb * p.mj;
  if (!p.all_rows && i0 >= p.ph_h[rh_begin].rows) return;  // uniform: OH not a multiple of sh

  // Footprint rows of this block's row phases.
  int rmin = INT_MAX, rmax = INT_MIN;
  for (int r = 0; r < rh_count; ++r) {
    const AxisPhaseInfo& ah = p.ph_h[rh_begin + r];
    if (ah.taps == 0) continue;
    rmin = min(rmin, ah.off0 - (ah.taps - 1) * p.in_step_h);
    rmax = max(rmax, ah.off0);
  }
  const int fr = rmin <= rmax ? p.mi + rmax - rmin : 0;
  const int FC = p.fc, PS = p.ps;

  const int pair0 = rh_begin * p.sw;
  const int npairs = rh_count * p.sw;
  const int ks0 = p.ks_prefix[pair0];
  const int ks_cta = p.ks_prefix[pair0 + npairs] - ks0;

  unsigned char* b_sm = smem;
  unsigned char* fp_sm = smem + p.smem_fp;
  T* st = reinterpret_cast<T*>(smem + p.smem_st);
  int* tab = reinterpret_cast<int*>(smem + p.smem_tab);
  ChannelAffine* aff = reinterpret_cast<ChannelAffine*>(smem + p.smem_aff);

  // Channel blocks (the K loop): block kb holds channels [kb*CB, (kb+1)*CB), CB = C8 chunks of
  // E channels (p.c8, the padded channels p.cp); one block (nblocks == 1) when the weights of
  // all channels fit shared memory, which is every layer but those with many input channels
  // (Keypoint R-CNN's 512 > 17). With several blocks each warp owns at most one item (the
  // launcher's tile guarantees items <= warps), whose accumulators run across the blocks.
  const int mtiles = (p.mi * p.mj) >> 4;  // even (the launcher keeps MI*MJ >= 32)
  const int tw_cols = p.sw * p.mj;        // staging row width
  const int sr = p.all_rows ? p.sh * p.mi : p.mi;
  const bool ch_fast = p.store_mode != kRowsAlongX;
  const int mpairs = mtiles >> 1;
  const int items = npairs * mpairs;
  const uint32_t fp_base = smem_u32(fp_sm);
  const int arow = (lane & 7) | (lane & 8);  // this lane's ldmatrix row (pixel of the m tile)
  const int ahalf = lane >> 4;               // ... and chunk of the k step
  const int g4 = lane >> 2, t4 = lane & 3;
  float kacc[2][NT][4];  // the warp's item's accumulators across channel blocks
#pragma unroll
  for (int u = 0; u < 2; ++u)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      kacc[u][nt][0] = kacc[u][nt][1] = kacc[u][nt][2] = kacc[u][nt][3] = 0.f;

  // Item it: phase pair pr = it / mpairs of the block (row phase rh_begin + pr / sw, column
  // phase pr % sw), m tiles mt0 and mt0 + 1 (quotients by multiply-high: items < 2^16).
  const SmallDiv div_mpairs = make_small_div((uint32_t)mpairs),
                 div_sw = make_small_div((uint32_t)p.sw);
  auto item_coords = [&](int it, int& pr, int& mt0, int& rh, int& rw) {
    pr = (int)small_div((uint32_t)it, div_mpairs);
    mt0 = 2 * (it - pr * mpairs);
    const int rr = (int)small_div((uint32_t)pr, div_sw);
    rh = rh_begin + rr;
    rw = pr - rr * p.sw;
  };
  // One item's GEMM over the channel block in shared memory, accumulated into acc: per k step
  // one ldmatrix.x4 per m tile and NT B fragments shared by both tiles' MMAs.
  auto run_gemm = [&](int it, float (&acc)[2][NT][4]) {
    int pr, mt0, rh, rw;
    item_coords(it, pr, mt0, rh, rw);
    const int kp = p.ks_prefix[pair0 + pr];
    const int ks_n = p.ks_prefix[pair0 + pr + 1] - kp;
    const int chunks = p.ph_h[rh].taps * p.ph_w[rw].taps * p.c8;
    const int* t = tab + 2 * (kp - ks0);
    using Frag = BFrag<kSplit>;
    const Frag* bfr = reinterpret_cast<const Frag*>(b_sm + (int64_t)(kp - ks0) * NT * kFrag);
    uint32_t a_addr[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int pix = (mt0 + u) * 16 + arow;
      a_addr[u] = fp_base + (uint32_t)(((pix >> p.mj_shift) * FC + (pix & (p.mj - 1))) * PS);
    }
#pragma unroll(kSplit ? 1 : 2)
    for (int ks = 0; ks < ks_n; ++ks) {
      const uint32_t off = (uint32_t)t[min(2 * ks + ahalf, chunks - 1)];
      const bool odd_last = 2 * ks + 1 >= chunks;  // odd last chunk: no upper half
      uint32_t a[2][4];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        ldsm_x4(a_addr[u] + off, a[u][0], a[u][1], a[u][2], a[u][3]);
        if (odd_last) a[u][2] = a[u][3] = 0u;
      }
      if constexpr (kSplit) {
        uint32_t a_lo[2][4];
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
          for (int r = 0; r < 4; ++r) tf32_hi_lo(__uint_as_float(a[u][r]), a[u][r], a_lo[u][r]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint4 b = bfr[(ks * NT + nt) * 32 + lane];
          const uint2 b_hi = make_uint2(b.x, b.y), b_lo = make_uint2(b.z, b.w);
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            float part[4] = {0.f, 0.f, 0.f, 0.f};
            mma_step<T>(part, a_lo[u], b_hi);
            mma_step<T>(part, a[u], b_lo);
            mma_step<T>(part, a[u], b_hi);
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[u][nt][r] += part[r];
          }
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint2 b = bfr[(ks * NT + nt) * 32 + lane];
          mma_step<T>(acc[0][nt], a[0], b);
          mma_step<T>(acc[1][nt], a[1], b);
        }
      }
    }
  };

  for (int kb = 0; kb < p.nblocks; ++kb) {
    if (kb > 0) __syncthreads();  // every warp is done with the previous block's operands
    // 1. This block's B fragments for channel block kb: one contiguous range of the packed
    //    weight ([group][channel block][pair][k step][n tile]).
    {
      const unsigned char* src =
          static_cast<const unsigned char*>(p.packed) +
          (((int64_t)g * p.nblocks + kb) * p.ks_block + ks0) * NT * kFrag;
      const int chunks = ks_cta * NT * (kFrag / 16);
      for (int c = tid; c < chunks; c += kThreads)
        cp_async<16>(smem_u32(b_sm + 16 * c), src + 16 * c, 16);
      cp_async_commit();
    }

    // 2. The input footprint of the channel block, zero outside the input and in the padded
    //    channels.
    if (fr > 0) {
      const T* in = static_cast<const T*>(p.in);
      const int ih0 = i0 + rmin, iw0 = j0 + p.cmin;
      const int c_first = kb * p.cp;  // group-relative channel of the block's first
      const int64_t base = (int64_t)n_img * p.is_n + ((int64_t)g * p.cin_g + c_first) * p.is_c;
      if (p.in_vec) {
        // channels_last-like input, Cin_g % E == 0: one 16-byte chunk per (pixel, cc).
        // Quotients by multiply-high (exact: numerator and divisor far below 2^16), not the
        // ~20-instruction integer division (it was most of this loop's instructions).
        const int total = fr * FC * p.c8;
        const SmallDiv div_c8 = make_small_div((uint32_t)p.c8),
                       div_fc = make_small_div((uint32_t)FC);
        for (int u = tid; u < total; u += kThreads) {
          const int pix = (int)small_div((uint32_t)u, div_c8);
          const int cc = u - pix * p.c8;
          const int frr = (int)small_div((uint32_t)pix, div_fc);
          const int fc = pix - frr * FC;
          const int ih = ih0 + frr, iw = iw0 + fc;
          const bool ok = ih >= 0 && ih < p.in_h && iw >= 0 && iw < p.in_w &&
                          c_first + cc * E < p.cin_g;
          unsigned char* dst = fp_sm + pix * PS + 16 * cc;
          const T* src =
              in + (ok ? base + (int64_t)ih * p.is_h + (int64_t)iw * p.is_w + cc * E : 0);
          if constexpr (sizeof(T) == 2) {
            cp_async<16>(smem_u32(dst), src, ok ? 16 : 0);
          } else {
            uint4 v = make_uint4(0, 0, 0, 0);
            if (ok) v = round_chunk<T, kSplit>(__ldg(reinterpret_cast<const uint4*>(src)));
            *reinterpret_cast<uint4*>(dst) = v;
          }
        }
        cp_async_commit();
      } else {
        // Any strides, one element at a time in the order that keeps a warp's reads adjacent:
        // along w (NCHW-like) or along the channels. Padded channels are written as zeros.
        const bool along_w = p.is_w <= p.is_c;
        const int total = fr * FC * p.cp;
        const int c_valid = p.cin_g - c_first;  // channels of this block that exist
        // Quotients by multiply-high (exact here: numerators and divisors far below 2^16).
        const SmallDiv div_fc = make_small_div((uint32_t)FC), div_fr = make_small_div((uint32_t)fr),
                       div_cp = make_small_div((uint32_t)p.cp);
        for (int e0 = tid; e0 < total; e0 += kThreads * kLoadBatch) {
          T v[kLoadBatch];
          int off[kLoadBatch];
#pragma unroll
          for (int b = 0; b < kLoadBatch; ++b) {
            const int e = e0 + b * kThreads;
            int c, fcc, frr;
            if (along_w) {
              const int t = (int)small_div((uint32_t)e, div_fc);
              fcc = e - t * FC;
              c = (int)small_div((uint32_t)t, div_fr);
              frr = t - c * fr;
            } else {
              const int t = (int)small_div((uint32_t)e, div_cp);
              c = e - t * p.cp;
              frr = (int)small_div((uint32_t)t, div_fc);
              fcc = t - frr * FC;
            }
            const int ih = ih0 + frr, iw = iw0 + fcc;
            const bool ok = e < total && c < c_valid && ih >= 0 && ih < p.in_h && iw >= 0 &&
                            iw < p.in_w;
            v[b] = ok ? in[base + (int64_t)c * p.is_c + (int64_t)ih * p.is_h +
                           (int64_t)iw * p.is_w]
                      : from_float<T>(0.f);
            off[b] = e < total ? (frr * FC + fcc) * PS + c * (int)sizeof(T) : -1;
          }
#pragma unroll
          for (int b = 0; b < kLoadBatch; ++b)
            if (off[b] >= 0)
              *reinterpret_cast<T*>(fp_sm + off[b]) = round_operand<T, kSplit>(v[b]);
        }
      }
    }

    if (kb == 0) {
      // 3. Chunk offset table of each phase pair (2*KS entries reserved per pair; the same for
      //    every channel block) and the channels' epilogue constants.
      for (int pr = warp; pr < npairs; pr += kWarps) {
        const AxisPhaseInfo& ah = p.ph_h[rh_begin + pr / p.sw];
        const AxisPhaseInfo& aw = p.ph_w[pr % p.sw];
        const int chunks = ah.taps * aw.taps * p.c8;
        int* t = tab + 2 * (p.ks_prefix[pair0 + pr] - ks0);
        for (int q = lane; q < chunks; q += 32) {
          const int tap = q / p.c8, cc = q % p.c8;
          const int th = tap / aw.taps, tw = tap % aw.taps;
          const int dr = ah.off0 - th * p.in_step_h - rmin;
          const int dc = aw.off0 - tw * p.in_step_w - p.cmin;
          t[q] = (dr * FC + dc) * PS + 16 * cc;
        }
      }
      if (tid < p.cout_g) {
        const int oc = g * p.cout_g + tid;
        const float bias = p.bias != nullptr ? to_float(static_cast<const T*>(p.bias)[oc]) : 0.f;
        aff[tid] = channel_affine(p.epi, bias, oc);
      }
    }
    cp_async_wait<0>();
    __syncthreads();
    if (p.nblocks > 1 && warp < items) run_gemm(warp, kacc);
  }

  // 4. The phases' GEMMs and the epilogue into the staging tile. This lane's epilogue channels
  //    n = 8*nt + 2*t4 + e: their constants and staging offsets, read once (not per value).
  bool ch_ok[NT][2];
  float ch_mul[NT][2], ch_add[NT][2];
  int ch_off[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int n = nt * 8 + 2 * t4 + e;
      ch_ok[nt][e] = n < p.cout_g;
      const ChannelAffine c = aff[ch_ok[nt][e] ? n : 0];
      ch_mul[nt][e] = c.mul;
      ch_add[nt][e] = c.add;
      ch_off[nt][e] = ch_fast ? n : n * sr * tw_cols;
    }
  // Fragment element e of tile u: pixel (mt0 + u)*16 + g4 + 8*(e/2), channel 8*nt + 2*t4 + e%2.
  auto run_epilogue = [&](int it, const float (&acc)[2][NT][4]) {
    int pr, mt0, rh, rw;
    item_coords(it, pr, mt0, rh, rw);
    dispatch_activation(p.epi.activation, [&](auto act) {
      constexpr Activation A = decltype(act)::value;
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int pp = (mt0 + u) * 16 + g4 + 8 * hr;
          const int a_row = pp >> p.mj_shift, jj = pp & (p.mj - 1);
          const int s = p.all_rows ? rh + p.sh * a_row : a_row;
          const int xs = rw + p.sw * jj;
          T* const dst = st + (ch_fast ? (s * tw_cols + xs) * p.cout_g : s * tw_cols + xs);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (ch_ok[nt][e])
                dst[ch_off[nt][e]] = from_float<T>(epilogue_value<A>(
                    acc[u][nt][2 * hr + e], ch_mul[nt][e], ch_add[nt][e], p.epi.negative_slope));
        }
    });
  };
  if (p.nblocks > 1) {
    if (warp < items) run_epilogue(warp, kacc);
  } else {
    // One channel block: every (phase, pair of 16-pixel m tiles) item, one per warp at a time.
    for (int it = warp; it < items; it += kWarps) {
      float acc[2][NT][4];
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          acc[u][nt][0] = acc[u][nt][1] = acc[u][nt][2] = acc[u][nt][3] = 0.f;
      run_gemm(it, acc);
      run_epilogue(it, acc);
    }
  }
  __syncthreads();

  // 5. Whole runs of the staged tile to the output.
  T* out = static_cast<T*>(p.out);
  const int x0 = p.sw * j0;
  const int twv = min(tw_cols, p.out_w - x0);  // valid columns of the tile
  const int oh_first = p.all_rows ? p.sh * i0 : rh_begin + p.sh * i0;
  const int oh_step = p.all_rows ? 1 : p.sh;
  const int rows_valid = min(sr, (p.out_h - oh_first + oh_step - 1) / oh_step);
  const int64_t out_base = (int64_t)n_img * p.os_n + (int64_t)g * p.cout_g * p.os_c +
                           (int64_t)oh_first * p.os_h + (int64_t)x0 * p.os_w;
  int runs, len, el_stride;
  if (p.store_mode == kRowsAlongX) {
    runs = p.cout_g * sr;  // run = (channel, staging row), staging [n][s][x]
    len = twv;
    el_stride = p.os_w;
  } else if (p.store_mode == kRowsOfPixels) {
    runs = sr;  // run = staging row, staging [s][x][n]
    len = twv * p.cout_g;
    el_stride = 1;
  } else {
    runs = sr * tw_cols;  // run = pixel
    len = p.cout_g;
    el_stride = p.os_c;
  }
  // Run r: its staging offset and global offset (relative to out_base); false when the run lies
  // outside the output.
  const SmallDiv div_sr = make_small_div((uint32_t)sr), div_tw = make_small_div((uint32_t)tw_cols);
  auto run_offsets = [&](int r, int& s_off, int64_t& g_off) {
    if (p.store_mode == kRowsAlongX) {
      const int n = (int)small_div((uint32_t)r, div_sr), s = r - n * sr;
      s_off = r * tw_cols;
      g_off = (int64_t)n * p.os_c + (int64_t)s * oh_step * p.os_h;
      return s < rows_valid;
    }
    if (p.store_mode == kRowsOfPixels) {
      s_off = r * tw_cols * p.cout_g;
      g_off = (int64_t)r * oh_step * p.os_h;
      return r < rows_valid;
    }
    const int s = (int)small_div((uint32_t)r, div_tw), xs = r - s * tw_cols;
    s_off = r * p.cout_g;
    g_off = (int64_t)s * oh_step * p.os_h + (int64_t)xs * p.os_w;
    return s < rows_valid && xs < twv;
  };
  if (p.out_vec) {
    const int vpr = (len + V - 1) / V;
    const int total = runs * vpr;
    const SmallDiv div_vpr = make_small_div((uint32_t)vpr);
    for (int e = tid; e < total; e += kThreads) {
      const int r = (int)small_div((uint32_t)e, div_vpr), v = e - r * vpr;
      int s_off;
      int64_t g_off;
      if (!run_offsets(r, s_off, g_off)) continue;
      const int el = v * V;
      T* dst = out + out_base + g_off + el;
      const T* src = st + s_off + el;
      if (el + V <= len) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
      } else {
        for (int k = 0; k < len - el; ++k) dst[k] = src[k];
      }
    }
  } else {
    const int total = runs * len;
    const SmallDiv div_len = make_small_div((uint32_t)len);
    for (int e = tid; e < total; e += kThreads) {
      const int r = (int)small_div((uint32_t)e, div_len), el = e - r * len;
      int s_off;
      int64_t g_off;
      if (!run_offsets(r, s_off, g_off)) continue;
      out[out_base + g_off + (int64_t)el * el_stride] = st[s_off + el];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Weight packing: one thread per packed element (see the top comment for the order).
struct OutTilePackArgs {
  const void* w;
  void* packed;
  int64_t ws[4];  // weight strides: cin, cout/g, kh, kw
  int cin_g, cout_g, c8, nt, ks_block, nblocks, npairs;  // c8: chunks per channel block
  int pad_h, pad_w, dil_h, dil_w;
  int64_t total;  // packed elements
  AxisPlan h, w_axis;
  int ks_prefix[kMaxPhases + 1];
};

// First kernel index of phase ph along an axis (the phase's taps are k0 + t*step, k0 < step).
__device__ __forceinline__ int first_tap(int ph, int step, int dil, int pad, int stride) {
  for (int k = 0; k < step; ++k)
    if (phase_of(k, dil, pad, stride) == ph) return k;
  return 0;
}

template <typename T, bool kSplit>
__global__ void __launch_bounds__(256)
    gemm_out_tile_pack_weight_kernel(const __grid_constant__ OutTilePackArgs a) {
  constexpr int E = 16 / (int)sizeof(T);
  // Elements per lane per fragment: 8 bytes of k values; 3xTF32 two TF32 values, hi then lo.
  constexpr int EL = kSplit ? 4 : 8 / (int)sizeof(T);
  const T* __restrict__ w = static_cast<const T*>(a.w);
  T* __restrict__ packed = static_cast<T*>(a.packed);
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < a.total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int j = (int)(idx % EL);
    const int lane = (int)((idx / EL) % 32);
    const int64_t f = idx / (EL * 32);
    const int nt = (int)(f % a.nt);
    const int64_t kk = f / a.nt;  // [group][channel block][k step of the block]
    const int g = (int)(kk / ((int64_t)a.nblocks * a.ks_block));
    const int kbk = (int)(kk % ((int64_t)a.nblocks * a.ks_block));
    const int kb = kbk / a.ks_block, kg = kbk % a.ks_block;
    int pr = 0;
    while (pr + 1 < a.npairs && a.ks_prefix[pr + 1] <= kg) ++pr;
    const int ks = kg - a.ks_prefix[pr];
    const int sw = a.w_axis.stride;
    const int rh = pr / sw, rw = pr % sw;
    const AxisPhaseInfo& ph = a.h.ph[rh];
    const AxisPhaseInfo& pw = a.w_axis.ph[rw];
    const int t4 = lane & 3, g4 = lane >> 2;
    const int k_in = sizeof(T) == 2 ? 2 * t4 + 8 * (j >> 1) + (j & 1) : t4 + 4 * (j & 1);
    const int q = 2 * ks + k_in / E;
    const int tap = q / a.c8;
    const int c = (kb * a.c8 + q % a.c8) * E + k_in % E;
    const int n = nt * 8 + g4;
    T v = from_float<T>(0.f);
    if (tap < ph.taps * pw.taps && c < a.cin_g && n < a.cout_g) {
      const int th = tap / pw.taps, tw = tap % pw.taps;
      const int khi = first_tap(rh, a.h.step, a.dil_h, a.pad_h, a.h.stride) + th * a.h.step;
      const int kwi = first_tap(rw, a.w_axis.step, a.dil_w, a.pad_w, sw) + tw * a.w_axis.step;
      v = w[((int64_t)g * a.cin_g + c) * a.ws[0] + n * a.ws[1] + khi * a.ws[2] + kwi * a.ws[3]];
      if constexpr (kSplit) {
        uint32_t hi, lo;
        tf32_hi_lo(v, hi, lo);
        v = __uint_as_float(j >= 2 ? lo : hi);
      } else {
        v = round_operand<T, false>(v);
      }
    }
    packed[idx] = v;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.
int64_t element_size(ScalarKind kind) { return kind == ScalarKind::kFloat32 ? 4 : 2; }

// Weight-side geometry: chunks, channel blocks, n tiles and each phase pair's k steps (within
// one channel block).
struct PackGeometry {
  int e, cp, c8, nt, npairs;  // cp, c8: padded channels and chunks of one channel block
  int nblocks;                // channel blocks (C8 chunks of all channels split evenly)
  int64_t ks_block, ks_group;
  int ks_prefix[kMaxPhases + 1];
};

PackGeometry pack_geometry_blocks(const ConvTranspose2dParams& p, ScalarKind kind,
                                  const AxisPlan& h, const AxisPlan& w, int nblocks) {
  PackGeometry geo{};
  geo.e = (int)(16 / element_size(kind));
  const int c8_all = (int)((p.in_per_group + geo.e - 1) / geo.e);
  geo.c8 = (c8_all + nblocks - 1) / nblocks;
  geo.nblocks = (c8_all + geo.c8 - 1) / geo.c8;
  geo.cp = geo.c8 * geo.e;
  geo.nt = (int)((p.out_per_group + 7) / 8);
  geo.npairs = h.stride * w.stride;
  int64_t ks = 0;
  for (int rh = 0; rh < h.stride; ++rh)
    for (int rw = 0; rw < w.stride; ++rw) {
      geo.ks_prefix[rh * w.stride + rw] = (int)ks;
      ks += ((int64_t)h.ph[rh].taps * w.ph[rw].taps * geo.c8 + 1) / 2;
      if (ks >= (1 << 24)) ks = 1 << 24;  // absurd sizes: rejected by the caller's checks
    }
  geo.ks_prefix[geo.npairs] = (int)ks;
  geo.ks_block = ks;
  geo.ks_group = ks * geo.nblocks;
  return geo;
}

// Every dtype of ours: fp32 as TF32, or 3xTF32 when TF32 is not allowed.
bool kind_supported(ScalarKind kind) {
  return kind == ScalarKind::kFloat16 || kind == ScalarKind::kBFloat16 ||
         kind == ScalarKind::kFloat32;
}

// Weight-side checks (what packing needs).
bool weight_supported(const ConvTranspose2dParams& p) {
  if (!axis_supported(p.ph_h) || !axis_supported(p.ph_w)) return false;
  if (p.groups < 1 || p.groups > 65535 || p.in_per_group < 1 || p.out_per_group < 1) return false;
  if (p.out_per_group > 8 * kMaxNT) return false;
  if (p.in_per_group * p.groups != p.in_channels || p.out_per_group * p.groups != p.out_channels)
    return false;
  for (int i = 0; i < 4; ++i)
    if (p.w_stride[i] < 0) return false;
  if (max_offset(p.w_stride, p.in_channels, p.out_per_group, p.ph_h.kernel, p.ph_w.kernel) >=
      kIndexLimit)
    return false;
  return true;
}

// fp32 without TF32 runs 3xTF32: (hi, lo) B fragments.
bool split_mode(ScalarKind kind, bool allow_tf32) {
  return kind == ScalarKind::kFloat32 && !allow_tf32;
}

int frag_bytes(bool split) { return split ? kSplitFragBytes : kFragBytes; }

// Shared memory of one tile shape: B fragments, footprint, staging, chunk table, affine table.
struct Layout {
  TileShape t;
  int fr_max, fc;
  int cmin;
  int ks_cta_max;
  int smem_fp, smem_st, smem_tab, smem_aff, total;
};

Layout make_layout(const ConvTranspose2dParams& p, ScalarKind kind, bool split, const AxisPlan& h,
                   const AxisPlan& w, const PackGeometry& geo, TileShape t) {
  Layout L{};
  L.t = t;
  const int ps = (geo.c8 % 2 == 1 ? geo.c8 : geo.c8 + 1) * 16;
  int cmin = INT_MAX, cmax = INT_MIN;
  for (int rw = 0; rw < w.stride; ++rw) {
    if (w.ph[rw].taps == 0) continue;
    cmin = std::min(cmin, w.ph[rw].off0 - (w.ph[rw].taps - 1) * w.in_step);
    cmax = std::max(cmax, w.ph[rw].off0);
  }
  L.cmin = cmin <= cmax ? cmin : 0;
  L.fc = cmin <= cmax ? t.mj + cmax - cmin : 0;
  // Rows and k steps per block: every row phase, or the largest single one.
  const int sets = t.all_rows ? 1 : h.stride;
  L.fr_max = 0;
  L.ks_cta_max = 0;
  for (int sidx = 0; sidx < sets; ++sidx) {
    const int rb = t.all_rows ? 0 : sidx, rc = t.all_rows ? h.stride : 1;
    int rmin = INT_MAX, rmax = INT_MIN;
    for (int r = rb; r < rb + rc; ++r) {
      if (h.ph[r].taps == 0) continue;
      rmin = std::min(rmin, h.ph[r].off0 - (h.ph[r].taps - 1) * h.in_step);
      rmax = std::max(rmax, h.ph[r].off0);
    }
    if (rmin <= rmax) L.fr_max = std::max(L.fr_max, t.mi + rmax - rmin);
    L.ks_cta_max = std::max(L.ks_cta_max, geo.ks_prefix[(rb + rc) * w.stride] -
                                              geo.ks_prefix[rb * w.stride]);
  }
  const int64_t es = element_size(kind);
  const int64_t sr = t.all_rows ? (int64_t)h.stride * t.mi : t.mi;
  const int64_t b_bytes = (int64_t)L.ks_cta_max * geo.nt * frag_bytes(split);
  const int64_t fp_bytes = (int64_t)L.fr_max * L.fc * ps;
  const int64_t st_bytes = round_up(sr * w.stride * t.mj * p.out_per_group * es, 16);
  const int64_t tab_bytes = round_up(2 * (int64_t)L.ks_cta_max * 4, 16);
  const int64_t aff_bytes = 8 * kMaxNT * 8;
  const int64_t total = b_bytes + fp_bytes + st_bytes + tab_bytes + aff_bytes;
  if (total > (1 << 30)) {
    L.total = 1 << 30;
    return L;
  }
  L.smem_fp = (int)b_bytes;
  L.smem_st = (int)(b_bytes + fp_bytes);
  L.smem_tab = (int)(b_bytes + fp_bytes + st_bytes);
  L.smem_aff = (int)(b_bytes + fp_bytes + st_bytes + tab_bytes);
  L.total = (int)total;
  return L;
}

// The smallest tile: 32 pixels per phase (a warp item is two 16-pixel m tiles).
constexpr TileShape kMinTile{1, 32, false, ""};

// Warp items of a tile: (phase pair, two 16-pixel m tiles). With several channel blocks a warp
// keeps one item's accumulators across them, so a tile may have at most kWarps items.
int tile_items(TileShape t, const AxisPlan& h, const AxisPlan& w) {
  return (t.all_rows ? h.stride : 1) * w.stride * (t.mi * t.mj / 32);
}

bool items_ok(TileShape t, const AxisPlan& h, const AxisPlan& w, const PackGeometry& geo) {
  return geo.nblocks == 1 || tile_items(t, h, w) <= kWarps;
}

// The config's tile, shrunk until it fits `limit` bytes (and, with channel blocks, kWarps
// items): one row phase instead of every one, then half the phase rows, then half the phase
// columns (at least 32 pixels per phase), and last kMinTile (what gemm_out_tile_supports
// checks).
bool fit_layout(const ConvTranspose2dParams& p, ScalarKind kind, bool split, const AxisPlan& h,
                const AxisPlan& w, const PackGeometry& geo, TileShape t, int limit, Layout& out) {
  for (;;) {
    if (items_ok(t, h, w, geo)) {
      out = make_layout(p, kind, split, h, w, geo, t);
      if (out.total <= limit) return true;
    }
    if (t.all_rows) t.all_rows = false;
    else if (t.mi > 1 && t.mi * t.mj > 32) t.mi /= 2;
    else if (t.mj > 32) t.mj /= 2;
    else break;
  }
  out = make_layout(p, kind, split, h, w, geo, kMinTile);
  return items_ok(kMinTile, h, w, geo) && out.total <= limit;
}

// Channel blocks of a weight, chosen without the device (so one packed weight serves any GPU of
// ours): one block when the smallest tile holds every channel in kOneBlockBytes; else the
// fewest blocks with which a 4 x 32 one-row-phase tile (shrunk to kWarps items) fits
// kBlockedTileBytes (two blocks per SM), failing that the fewest with which the smallest tile
// fits kOneBlockBytes.
constexpr int kOneBlockBytes = 160 * 1024;  // below sm_80's 163 KB opt-in limit
constexpr int kBlockedTileBytes = 96 * 1024;

PackGeometry pack_geometry(const ConvTranspose2dParams& p, ScalarKind kind, bool split,
                           const AxisPlan& h, const AxisPlan& w) {
  PackGeometry geo = pack_geometry_blocks(p, kind, h, w, 1);
  Layout L;
  if (fit_layout(p, kind, split, h, w, geo, kMinTile, kOneBlockBytes, L)) return geo;
  const int c8_all = geo.c8;
  TileShape ref{4, 32, false, ""};
  while (ref.mi > 1 && tile_items(ref, h, w) > kWarps) ref.mi /= 2;
  for (int pass = 0; pass < 2; ++pass)
    for (int nb = 2; nb <= c8_all; ++nb) {
      geo = pack_geometry_blocks(p, kind, h, w, nb);
      if (geo.nblocks != nb) continue;  // the same chunks per block as a smaller count
      if (pass == 0 ? tile_items(ref, h, w) <= kWarps &&
                          make_layout(p, kind, split, h, w, geo, ref).total <= kBlockedTileBytes
                    : fit_layout(p, kind, split, h, w, geo, kMinTile, kOneBlockBytes, L))
        return geo;
    }
  return pack_geometry_blocks(p, kind, h, w, c8_all);  // fits nothing: the fit checks refuse it
}

int64_t packed_bytes(const ConvTranspose2dParams& p, const PackGeometry& geo, bool split) {
  return p.groups * geo.ks_group * geo.nt * frag_bytes(split);
}

int64_t packed_bytes(const ConvTranspose2dParams& p, ScalarKind kind, bool split) {
  const AxisPlan h = plan_axis(p.ph_h, 0), w = plan_axis(p.ph_w, 0);
  return packed_bytes(p, pack_geometry(p, kind, split, h, w), split);
}

int smem_limit() {
  const int optin = device_optin_smem(current_device());
  return optin > 0 ? optin : 48 * 1024;
}

// Heuristic: every row phase per block when all the weights fit in 80 KB (the input footprint is
// then read once for all of them), else one row phase; 4 x 32 (or 64) pixels per phase.
int pick_config(const PackGeometry& geo, bool split, const AxisPlan& w, int64_t out_w) {
  const int64_t all_b = (int64_t)geo.ks_prefix[geo.npairs] * geo.nt * frag_bytes(split);
  const int64_t cols = (out_w + w.stride - 1) / w.stride;
  if (geo.nblocks > 1) return cols >= 32 ? 0 : 2;  // channel blocks: one row phase
  if (all_b <= 80 * 1024) return cols >= 48 ? 4 : 3;
  return cols >= 32 ? 0 : 2;
}

bool io_supported(const ConvTranspose2dParams& p) {
  if (p.batch < 0 || p.in_h < 0 || p.in_w < 0 || p.out_h < 0 || p.out_w < 0) return false;
  if (p.in_h >= (1 << 30) || p.in_w >= (1 << 30) || p.out_h >= (1 << 30) || p.out_w >= (1 << 30))
    return false;
  for (int i = 0; i < 4; ++i)
    if (p.in_stride[i] < 0 || p.out_stride[i] < 0) return false;
  return io_fits_index_limit(p);
}

template <typename T, int NT, bool kSplit>
cudaError_t launch_nt(const OutTileArgs& a, dim3 grid, int smem, cudaStream_t stream) {
  auto kernel = conv_transpose2d_gemm_out_tile_kernel<T, NT, kSplit>;
  // The attribute is raised once to the device's limit: this kernel's shared memory differs from
  // call to call, and ensure_dynamic_smem remembers one size per kernel as already set.
  const cudaError_t err = ensure_dynamic_smem(kernel, smem_limit(), current_device());
  if (err != cudaSuccess) return err;
  kernel<<<grid, kThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

template <typename T, bool kSplit>
cudaError_t launch_typed(const ConvTranspose2dParams& p, ScalarKind kind, const void* packed,
                         int config, cudaStream_t stream) {
  constexpr int V = 16 / (int)sizeof(T);
  const AxisPlan h = plan_axis(p.ph_h, p.out_h);
  const AxisPlan w = plan_axis(p.ph_w, p.out_w);
  const PackGeometry geo = pack_geometry(p, kind, kSplit, h, w);
  if (config < 0) config = pick_config(geo, kSplit, w, p.out_w);
  Layout L;
  if (!fit_layout(p, kind, kSplit, h, w, geo, kTiles[config], smem_limit(), L))
    return cudaErrorInvalidValue;

  OutTileArgs a{};
  a.in = p.input;
  a.packed = packed;
  a.bias = p.bias;
  a.out = p.output;
  a.epi = p.epi;
  a.in_h = (int)p.in_h;
  a.in_w = (int)p.in_w;
  a.out_h = (int)p.out_h;
  a.out_w = (int)p.out_w;
  a.cin_g = (int)p.in_per_group;
  a.cout_g = (int)p.out_per_group;
  a.cp = geo.cp;
  a.c8 = geo.c8;
  a.ps = (geo.c8 % 2 == 1 ? geo.c8 : geo.c8 + 1) * 16;
  a.is_n = (int)p.in_stride[0];
  a.is_c = (int)p.in_stride[1];
  a.is_h = (int)p.in_stride[2];
  a.is_w = (int)p.in_stride[3];
  a.os_n = (int)p.out_stride[0];
  a.os_c = (int)p.out_stride[1];
  a.os_h = (int)p.out_stride[2];
  a.os_w = (int)p.out_stride[3];
  a.sh = h.stride;
  a.sw = w.stride;
  a.in_step_h = h.in_step;
  a.in_step_w = w.in_step;
  a.mi = L.t.mi;
  a.mj = L.t.mj;
  a.mj_shift = 0;
  while ((1 << a.mj_shift) < a.mj) ++a.mj_shift;
  a.all_rows = L.t.all_rows ? 1 : 0;
  a.row_groups = L.t.all_rows ? 1 : h.stride;
  a.row_blocks = (int)(((p.out_h + h.stride - 1) / h.stride + a.mi - 1) / a.mi);
  a.col_blocks = (int)(((p.out_w + w.stride - 1) / w.stride + a.mj - 1) / a.mj);
  a.cmin = L.cmin;
  a.fc = L.fc;
  a.ks_block = (int)geo.ks_block;
  a.nblocks = geo.nblocks;
  for (int r = 0; r < kMaxStride; ++r) {
    a.ph_h[r] = h.ph[r];
    a.ph_w[r] = w.ph[r];
  }
  for (int i = 0; i <= geo.npairs; ++i) a.ks_prefix[i] = geo.ks_prefix[i];
  a.smem_fp = L.smem_fp;
  a.smem_st = L.smem_st;
  a.smem_tab = L.smem_tab;
  a.smem_aff = L.smem_aff;

  const int64_t* is = p.in_stride;
  a.in_vec = is[1] == 1 && p.in_per_group % V == 0 && ptr_aligned(p.input, 16) &&
             stride_multiple(is[0], p.batch, V) && stride_multiple(is[2], p.in_h, V) &&
             stride_multiple(is[3], p.in_w, V);
  const int64_t* os = p.out_stride;
  const bool along_x = os[3] < os[1] || (os[3] == os[1] && p.out_per_group == 1);
  if (along_x) a.store_mode = kRowsAlongX;
  else if (os[1] == 1 && os[3] == p.out_per_group) a.store_mode = kRowsOfPixels;
  else a.store_mode = kPixels;
  const bool aligned = ptr_aligned(p.output, 16) && stride_multiple(os[0], p.batch, V) &&
                       stride_multiple(os[2], p.out_h, V);
  if (a.store_mode == kRowsAlongX) {
    a.out_vec = aligned && os[3] == 1 && stride_multiple(os[1], p.out_channels, V);
  } else if (a.store_mode == kRowsOfPixels) {
    a.out_vec = aligned && (p.groups == 1 || (p.out_per_group % V == 0));
  } else {
    a.out_vec = aligned && os[1] == 1 && p.out_per_group % V == 0 &&
                stride_multiple(os[3], p.out_w, V);
  }

  const int64_t blocks = p.batch * a.row_groups * (int64_t)a.row_blocks * a.col_blocks;
  if (blocks == 0) return cudaSuccess;
  if (blocks >= kIndexLimit) return cudaErrorInvalidValue;
  const dim3 grid((unsigned)blocks, (unsigned)p.groups, 1);
  switch (geo.nt) {
    case 1: return launch_nt<T, 1, kSplit>(a, grid, L.total, stream);
    case 2: return launch_nt<T, 2, kSplit>(a, grid, L.total, stream);
    case 3: return launch_nt<T, 3, kSplit>(a, grid, L.total, stream);
    case 4: return launch_nt<T, 4, kSplit>(a, grid, L.total, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T, bool kSplit>
cudaError_t launch_pack(const ConvTranspose2dParams& p, ScalarKind kind, void* packed,
                        cudaStream_t stream) {
  OutTilePackArgs a{};
  a.h = plan_axis(p.ph_h, 0);
  a.w_axis = plan_axis(p.ph_w, 0);
  const PackGeometry geo = pack_geometry(p, kind, kSplit, a.h, a.w_axis);
  a.w = p.weight;
  a.packed = packed;
  for (int i = 0; i < 4; ++i) a.ws[i] = p.w_stride[i];
  a.cin_g = (int)p.in_per_group;
  a.cout_g = (int)p.out_per_group;
  a.c8 = geo.c8;
  a.nt = geo.nt;
  a.ks_block = (int)geo.ks_block;
  a.nblocks = geo.nblocks;
  a.npairs = geo.npairs;
  a.pad_h = p.ph_h.pad;
  a.pad_w = p.ph_w.pad;
  a.dil_h = p.ph_h.dil;
  a.dil_w = p.ph_w.dil;
  for (int i = 0; i <= geo.npairs; ++i) a.ks_prefix[i] = geo.ks_prefix[i];
  a.total = packed_bytes(p, geo, kSplit) / element_size(kind);
  if (a.total == 0) return cudaSuccess;
  gemm_out_tile_pack_weight_kernel<T, kSplit><<<pack_grid(a.total), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

// The weight side of gemm_out_tile_supports; *blocks = the channel blocks it runs in.
bool weight_runs(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32, int* blocks) {
  if (!kind_supported(kind) || !weight_supported(p)) return false;
  const bool split = split_mode(kind, allow_tf32);
  // The shared-memory layout depends on the phases' taps and offsets, not on the image size.
  const AxisPlan h = plan_axis(p.ph_h, 0), w = plan_axis(p.ph_w, 0);
  const PackGeometry geo = pack_geometry(p, kind, split, h, w);
  if (packed_bytes(p, geo, split) >= kIndexLimit) return false;
  *blocks = geo.nblocks;
  Layout L;
  return fit_layout(p, kind, split, h, w, geo, kMinTile, smem_limit(), L);
}

}  // namespace

bool gemm_out_tile_weight_fits(const ConvTranspose2dParams& p, ScalarKind kind,
                               bool allow_tf32) {
  int blocks = 0;
  return weight_runs(p, kind, allow_tf32, &blocks) && blocks == 1;
}

bool gemm_out_tile_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32) {
  int blocks = 0;
  return io_supported(p) && weight_runs(p, kind, allow_tf32, &blocks);
}

int gemm_out_tile_num_configs() { return kNumConfigs; }

const char* gemm_out_tile_config_name(int config) {
  return config >= 0 && config < kNumConfigs ? kTiles[config].name : "";
}

int64_t gemm_out_tile_packed_weight_bytes(const ConvTranspose2dParams& p, ScalarKind kind,
                                          bool allow_tf32) {
  if (!weight_supported(p)) return 0;
  return packed_bytes(p, kind, split_mode(kind, allow_tf32));
}

cudaError_t launch_gemm_out_tile_pack_weight(const ConvTranspose2dParams& p, ScalarKind kind,
                                             bool allow_tf32, void* packed, cudaStream_t stream) {
  if (!kind_supported(kind) || !weight_supported(p)) return cudaErrorInvalidValue;
  if (packed_bytes(p, kind, split_mode(kind, allow_tf32)) == 0) return cudaSuccess;
  if (packed == nullptr || p.weight == nullptr) return cudaErrorInvalidValue;
  switch (kind) {
    case ScalarKind::kFloat32:
      return allow_tf32 ? launch_pack<float, false>(p, kind, packed, stream)
                        : launch_pack<float, true>(p, kind, packed, stream);
    case ScalarKind::kFloat16: return launch_pack<__half, false>(p, kind, packed, stream);
    case ScalarKind::kBFloat16: return launch_pack<__nv_bfloat16, false>(p, kind, packed, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_conv_transpose2d_gemm_out_tile(const ConvTranspose2dParams& p, ScalarKind kind,
                                                  bool allow_tf32, const void* packed, int config,
                                                  cudaStream_t stream) {
  if (!gemm_out_tile_supports(p, kind, allow_tf32)) return cudaErrorInvalidValue;
  if (config < -1 || config >= kNumConfigs) return cudaErrorInvalidValue;
  if (p.batch * p.out_channels * p.out_h * p.out_w == 0) return cudaSuccess;
  if (packed == nullptr) return cudaErrorInvalidValue;
  switch (kind) {
#if DECONV_PATCH_UNIT_HAS_KIND(0)
    case ScalarKind::kFloat32:
      return allow_tf32 ? launch_typed<float, false>(p, kind, packed, config, stream)
                        : launch_typed<float, true>(p, kind, packed, config, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(1)
    case ScalarKind::kFloat16: return launch_typed<__half, false>(p, kind, packed, config, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(2)
    case ScalarKind::kBFloat16:
      return launch_typed<__nv_bfloat16, false>(p, kind, packed, config, stream);
#endif
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
