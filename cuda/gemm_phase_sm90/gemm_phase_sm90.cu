// Any transposed convolution as stride-phase implicit GEMMs on Hopper warpgroup MMA (sm_90a).
//
// The GEMMs are exactly gemm_phase's (gemm_phase/gemm_phase.cu, whose top-of-file comment
// is the one place the index math is spelled out): phase (rh, rw) of group g is
//     m   = (n*OHp + i)*OWp + j,   k = (th*taps_w + tw)*Cin_pad + c,   oc in [0, Cout_g)
//     A[m, k]  = input[n, g*Cin_g + c, i + off_h(th), j + off_w(tw)]   (0 outside / c >= Cin_g)
//     B[k, oc] = weight[g*Cin_g + c, oc, kh0 + th*step_h, kw0 + tw*step_w]
// with Cin_pad = round_up(Cin_g, 32). What is the same comes from gemm_phase's code in
// common/phase_plan.cuh: the per-axis phase table (plan_axis), the launch order (phases with most
// taps first, n tile fastest), the k cursor walking (tap, 32-channel block), the C staging layout,
// the argument filling and the host checks; the fused epilogue is common/epilogue.cuh. The block's
// phase lookup, the per-block row/column tables and the C tile stores are gemm_phase's code too,
// written out in both kernels (the header says why). Only the packed weight layout, the operand
// staging and the MMA differ (below).
//
// Supported subset (gemm_phase_sm90_supports): fp16/bf16, channels_last input (channel stride 1)
// with Cin_g % 8 == 0 and 16-byte aligned pixels, so every A chunk is one 16-byte cp.async of 8
// channels that is entirely inside or outside [0, Cin_g). Any output strides.
//
// Packed weight (own layout, K-major so both wgmma operands use one shared-memory layout):
//     packed[((g*Cout_g + oc)*KH*KW + tap)*Cin_pad + c],   zero for c >= Cin_g,
// where tap is gemm_phase's packed tap order (phase (rh, rw) starts at prefix_h(rh)*KW +
// taps_h(rh)*prefix_w(rw), then th*taps_w + tw). So for one oc the phase's whole reduction
// k = 0 .. taps*Cin_pad-1 is contiguous, and B[k, oc] = packed[(g*Cout_g+oc)*Ktot + k0 + k] with
// Ktot = KH*KW*Cin_pad and k0 = phase start tap * Cin_pad.
//
// Block tile 128 (m) x BN (oc, 128 or 64) x 64 (k), 256 threads = two warpgroups; warpgroup w
// owns GEMM rows 64w..64w+63 and issues 4 x wgmma.m64nBNk16 per stage (A and B from shared
// memory through matrix descriptors, fp32 accumulators in registers). A stage's 64 k are two of
// gemm_phase's 32-wide k tiles, each at its own cursor position (its own tap / channel block).
//
// Shared memory per stage (1024-byte aligned): A [128 rows][64 k], then B [BN rows][64 k], both
// K-major with the 128-byte swizzle: row r is 128 bytes at r*128, its 16-byte chunk q (k 8q..8q+7)
// stored at chunk position q ^ (r % 8). That is the canonical K-major SWIZZLE_128B layout of the
// wgmma matrix descriptor (8-row x 128-byte swizzle atoms stacked along m/n 1024 bytes apart):
//     descriptor: start address >> 4 (bits 0-13), leading byte offset 16 B >> 4 = 1 (bits 16-29,
//     unused by swizzled K-major layouts), stride byte offset 1024 B >> 4 = 64 (bits 32-45),
//     base offset 0 (bits 49-51; atoms are 1024-byte aligned), layout type 1 = 128B swizzle
//     (bits 62-63).
// The k16 step ks inside a stage adds 32*ks bytes to the start address (the swizzle is a function
// of the address bits, 4-6 ^= 7-9, so the same XOR applies to the shifted start).
//
// Pipeline (per config: STAGES, INFLIGHT wgmma groups left pending per iteration):
//     prologue: tiles 0..P-1 (P = STAGES-1-INFLIGHT) in flight, one cp.async group each
//     iteration kt:  cp.async.wait_group(P-1)            -> this thread's copies of tile kt landed
//                    fence.proxy.async.shared::cta       -> generic-proxy writes visible to wgmma
//                    __syncthreads                       -> everyone's copies landed; every
//                                                           warpgroup's wgmma of tile kt-1-INFLIGHT
//                                                           has completed (waited last iteration)
//                    wgmma.fence, 4 wgmma (stage of kt), wgmma.commit_group
//                    cp.async of tile kt+P into the stage of tile kt-1-INFLIGHT, commit
//                    wgmma.wait_group(INFLIGHT)
// K tiles past the end are zero-filled (A and B), so the loop body has no branch.
//
// wgmma m64nNk16 accumulator fragment (warp v of the warpgroup, lane l): register
// d[4*c + 2*h + e] holds row 16v + l/4 + 8h, column 8c + 2*(l%4) + e.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gemm_phase_sm90/gemm_phase_sm90.h"
#include "common/unit_kind.h"
#include "common/phase_plan.cuh"
#include "common/device_cache.h"
#include "common/epilogue.cuh"
#include "common/scalar_convert.cuh"
#include "common/hopper_ptx.cuh"
#include "common/tensor_core_ptx.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DECONV_PATCH_SM90A_DEVICE 1
#endif

namespace deconv_patch {
namespace {

using namespace tc;
using namespace hopper;

// kBK (cursor k tile = per-tap channel padding), kMaxStride, kMaxPhases, kRowPastM and
// kIndexLimit: common/phase_plan.cuh.
constexpr int kBM = 128;        // GEMM rows per block: two warpgroups of 64
constexpr int kThreads = 256;
constexpr int kRowBytes = 128;  // one K-major smem row: 64 16-bit k = one 128-byte swizzle row

// BN: block tile along oc (wgmma N). STAGES: pipeline stages. INFLIGHT: wgmma groups left
// pending at the end of an iteration (0 or 1). MIN_BLOCKS: __launch_bounds__ occupancy target.
template <int BN, int STAGES, int INFLIGHT, int MIN_BLOCKS>
struct Sm90Config {
  static constexpr int kBN = BN;
  static constexpr int kStages = STAGES;
  static constexpr int kInFlight = INFLIGHT;
  static constexpr int kMinBlocks = MIN_BLOCKS;
  static constexpr int kPrefetch = STAGES - 1 - INFLIGHT;  // tiles loading while one computes
  static constexpr int kAcc = BN / 2;  // fp32 accumulators per thread (64 x BN over 128 threads)
  static_assert(BN == 64 || BN == 128, "wgmma wrappers exist for n64 and n128");
  static_assert(INFLIGHT == 0 || INFLIGHT == 1, "in-flight wgmma groups");
  static_assert(kPrefetch >= 1 && kStages >= 2 && kAcc > 0 && kInFlight + kPrefetch < kStages,
                "need at least one tile in flight");

  // Shared memory (offsets from a 1024-byte aligned base).
  static constexpr int kABytes = kBM * kRowBytes;
  static constexpr int kBBytes = BN * kRowBytes;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kPipeBytes = STAGES * kStageBytes;
  using C = CStaging<2, kBM, BN>;  // C staging tile of 16-bit elements (reuses the pipeline)
  static constexpr int kMetaBytes = block_tables_bytes(kBM, BN);
  static constexpr int kTotalBytes = kPipeBytes + kMetaBytes + 1024;  // + alignment slack
  static_assert(kStageBytes % 1024 == 0, "stages keep the 1024-byte swizzle-atom alignment");
  static_assert(C::kBytes <= kPipeBytes, "C staging fits in the pipeline buffers");
};
using Sm90Cfg128 = Sm90Config<128, 3, 0, 2>;    // 101 KB: 2 blocks per SM
using Sm90Cfg128d = Sm90Config<128, 4, 1, 1>;   // 133 KB: 1 block per SM, wgmma always queued
using Sm90Cfg64 = Sm90Config<64, 4, 1, 2>;      // 101 KB: Cout_g <= 64
constexpr int kNumConfigs = 3;

// ---------------------------------------------------------------------------------------------
// Kernel arguments. Offsets are 32-bit: gemm_phase_sm90_supports bounds every element offset.
// All fields are PhaseArgs' too (fill_shared_args sets them); PhaseArgs adds n_pad and is_c.
struct Sm90Args {
  const void* in;
  const void* packed;
  const void* bias;
  void* out;
  EpilogueParams epi;
  int batch, in_h, in_w;
  int cin_g, cout_g;
  int cin_pad;       // packed channel padding (multiple of kBK)
  int kw, khkw;      // kernel width, kernel taps
  int sh, sw;
  int in_step_h, in_step_w;
  int is_n, is_h, is_w;  // input strides (the channel stride is 1)
  int os_n, os_c, os_h, os_w;
  int n_tiles;       // ceil(Cout_g / BN)
  int num_phases;    // phases with output pixels, in launch order
  bool out_along_n;  // store along oc (channels_last-like output) rather than along m
  bool out_vec;      // ... 16 bytes at a time (launcher proved contiguity and alignment)
  AxisPhaseInfo ph_h[kMaxStride], ph_w[kMaxStride];
  int tile_begin[kMaxPhases + 1];  // first blockIdx.x of each launched phase; [num_phases] = total
  uint16_t phase_rc[kMaxPhases];   // rh << 8 | rw of each launched phase
};

// ---------------------------------------------------------------------------------------------
// Main kernel (body only on sm_90a; an empty kernel elsewhere).
template <typename T, class Cfg>
__global__ void __launch_bounds__(kThreads, Cfg::kMinBlocks)
    conv_transpose2d_gemm_phase_sm90_kernel(const __grid_constant__ Sm90Args p) {
#if defined(DECONV_PATCH_SM90A_DEVICE)
  static_assert(sizeof(T) == 2, "16-bit operands only");
  constexpr int BN = Cfg::kBN;
  constexpr int kStages = Cfg::kStages;
  constexpr int kPrefetch = Cfg::kPrefetch;
  constexpr int kAcc = Cfg::kAcc;
  constexpr int kV = 8;  // elements per 16 bytes

  // Dynamic shared memory, rounded up to 1024 bytes (swizzle atoms; kTotalBytes has the slack).
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw_addr = smem_u32(smem_raw);
  unsigned char* pipe = smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  const uint32_t pipe_addr = smem_u32(pipe);
  RowInfo* rows = reinterpret_cast<RowInfo*>(pipe + Cfg::kPipeBytes);
  ChannelAffine* col_aff = reinterpret_cast<ChannelAffine*>(rows + kBM);
  int* col_off = reinterpret_cast<int*>(col_aff + BN);

  const T* __restrict__ in = static_cast<const T*>(p.in);
  const T* __restrict__ packed = static_cast<const T*>(p.packed);
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  T* __restrict__ out = static_cast<T*>(p.out);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int wg = tid >> 7;  // warpgroup: GEMM rows 64*wg .. 64*wg+63 of the block
  const int g = blockIdx.y;

  // ---- This block's phase, m tile and n tile (as gemm_phase). ----
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
  const int m0 = m_tile * kBM;
  const int plane = ah.rows * aw.rows;  // OHp*OWp
  const int M = p.batch * plane;

  // ---- Per-block tables: GEMM rows (input and output pixels), columns (affine, offset). ----
  for (int e = tid; e < kBM + BN; e += kThreads) {
    if (e < kBM) {
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
      const int nl = e - kBM;
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

  // ---- k cursor (gemm_phase's): tap and channel block of the next 32-wide k tile to load. ----
  const int KT32 = ah.taps * aw.taps * (p.cin_pad / kBK);  // k tiles of 32
  const int KT = (KT32 + 1) >> 1;                           // stages of 64 to compute
  const T* in_g = in + g * p.cin_g;                         // channel stride 1
  KCursor<true> cur;  // channel stride 1
  cur.start(p, ah, aw);

  // ---- A loader: thread = (row a_r and a_r + 64, 16-byte chunk a_q of a 32-channel k tile). --
  // k tile h (0/1) of a stage fills chunks 4h..4h+3 of each 128-byte row; chunk position is
  // swizzled with the row: (4h + a_q) ^ (row % 8), and (a_r + 64) % 8 == a_r % 8.
  const int a_q = tid & 3;
  const int a_r = tid >> 2;
  const RowInfo a_row[2] = {rows[a_r], rows[a_r + 64]};
  auto a_dst = [&](int it, int h) -> uint32_t {
    return (uint32_t)((a_r + 64 * it) * kRowBytes) +
           ((uint32_t)((4 * h + a_q) ^ (a_r & 7)) << 4);
  };
  auto load_a = [&](uint32_t sa, int h, bool more) {
    const int c = cur.c0 + a_q * kV;
    // Cin_g % 8 == 0: a chunk is entirely inside or outside the group's channels.
    const bool c_ok = more && c < p.cin_g;
#pragma unroll
    for (int it = 0; it < 2; ++it) {
      const RowInfo& ri = a_row[it];
      const bool ok = c_ok && (unsigned)(ri.i + cur.off_h) < (unsigned)p.in_h &&
                      (unsigned)(ri.j + cur.off_w) < (unsigned)p.in_w;
      const uint32_t off = ri.a_base + cur.a + (uint32_t)(a_q * kV);  // exact when ok
      cp_async<16>(sa + a_dst(it, h), ok ? in_g + off : in, ok ? 16 : 0);
    }
  };

  // ---- B loader: thread = (rows b_n + 32*it, chunk b_c of the 128-byte row). ----
  // Chunk b_c holds k 8*b_c.. of the stage, i.e. k tile b_c/4 of the stage.
  constexpr int kBIters = BN / 32;
  const int b_c = tid & 7;
  const int b_n = tid >> 3;
  const int b_half = b_c >> 2;
  const uint32_t b_dst0 = (uint32_t)(b_n * kRowBytes) + ((uint32_t)(b_c ^ (b_n & 7)) << 4);
  const uint32_t ktot = (uint32_t)p.khkw * (uint32_t)p.cin_pad;
  const uint32_t phase_k0 = (uint32_t)phase_first_tap(ah, aw, p.kw) * (uint32_t)p.cin_pad;
  // Wrapping unsigned math; exact for rows inside Cout_g (the only ones read).
  const uint32_t b_off0 = ((uint32_t)(g * p.cout_g + n0 + b_n)) * ktot + phase_k0 +
                          (uint32_t)(b_c * kV);
  auto load_b = [&](uint32_t sb, int t) {
    const bool more = 2 * t + b_half < KT32;
#pragma unroll
    for (int it = 0; it < kBIters; ++it) {
      const bool ok = more && n0 + b_n + 32 * it < p.cout_g;
      const uint32_t off = b_off0 + (uint32_t)it * 32u * ktot + (uint32_t)t * 64u;
      cp_async<16>(sb + b_dst0 + (uint32_t)(it * 32 * kRowBytes), ok ? packed + off : packed,
                   ok ? 16 : 0);
    }
  };

  // Issues stage tile t (two cursor k tiles of A, one 64-deep B tile) into `stage`. K tiles past
  // the end are zero-filled, so the MMAs of a half-empty last stage add exact zeros.
  auto issue_tile = [&](int stage, int t) {
    const uint32_t sa = pipe_addr + (uint32_t)(stage * Cfg::kStageBytes);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      load_a(sa, h, 2 * t + h < KT32);
      cur.advance(p, aw);
    }
    load_b(sa + Cfg::kABytes, t);
  };

  // ---- Matrix descriptors: warpgroup wg reads A rows 64*wg.., every warpgroup all BN rows. ----
  const uint64_t a_desc0 = smem_desc_k128(pipe_addr + (uint32_t)(wg * 64 * kRowBytes));
  const uint64_t b_desc0 = smem_desc_k128(pipe_addr + Cfg::kABytes);
  constexpr uint64_t kStageDesc = Cfg::kStageBytes >> 4;  // descriptor units of 16 bytes

  float acc[kAcc];
#pragma unroll
  for (int r = 0; r < kAcc; ++r) acc[r] = 0.f;

  // ---- Pipeline. ----
#pragma unroll
  for (int s = 0; s < kPrefetch; ++s) {
    issue_tile(s, s);
    cp_async_commit();  // one group per tile, so the group count stays in step with kt
  }
  int rd = 0, wr = kPrefetch;  // stages of tile kt and of tile kt + kPrefetch
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kPrefetch - 1>();
    fence_proxy_async_smem();
    // Tile kt is visible to every warp; every warpgroup has retired the wgmma of tile
    // kt-1-INFLIGHT (its wgmma.wait_group last iteration), whose stage (wr) is refilled below.
    __syncthreads();
    fence_acc(acc);
    wgmma_fence();
    const uint64_t stage_off = (uint64_t)rd * kStageDesc;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      // k16 step: 32 bytes further along every 128-byte row (2 descriptor units).
      Wgmma<T, BN>::run(acc, a_desc0 + stage_off + 2 * ks, b_desc0 + stage_off + 2 * ks);
    }
    wgmma_commit();
    issue_tile(wr, kt + kPrefetch);
    cp_async_commit();
    wgmma_wait<Cfg::kInFlight>();
    fence_acc(acc);
    rd = rd == kStages - 1 ? 0 : rd + 1;
    wr = wr == kStages - 1 ? 0 : wr + 1;
  }
  wgmma_wait<0>();
  fence_acc(acc);
  cp_async_wait<0>();
  __syncthreads();  // the pipeline buffers become the C staging tile

  // ---- Epilogue 1: fragments -> epilogue -> one rounding -> shared C tile [m][oc]. ----
  T* Cs = reinterpret_cast<T*>(pipe);
  const int ldc = p.out_along_n ? Cfg::C::kLdN : Cfg::C::kLdM;
  const int r0 = wg * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2);
  // One instantiation per activation (common/epilogue.cuh: dispatch_activation), so every unrolled
  // element runs only its own activation's instructions.
  auto stage_c = [&](auto act_tag) {
    constexpr Activation kAct = decltype(act_tag)::value;
    const float slope = p.epi.negative_slope;
#pragma unroll
    for (int nc = 0; nc < BN / 8; ++nc) {
      const int c = nc * 8 + 2 * (lane & 3);
      if (n0 + c >= p.cout_g) continue;  // padding columns are never stored: no epilogue
      const ChannelAffine a0 = col_aff[c], a1 = col_aff[c + 1];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        typename PairOf<T>::type pair;
        pair.x = from_float<T>(epilogue_value<kAct>(acc[4 * nc + 2 * h], a0.mul, a0.add, slope));
        pair.y =
            from_float<T>(epilogue_value<kAct>(acc[4 * nc + 2 * h + 1], a1.mul, a1.add, slope));
        // ldc and c are even: one 4-byte store per pair.
        *reinterpret_cast<typename PairOf<T>::type*>(Cs + (r0 + 8 * h) * ldc + c) = pair;
      }
    }
  };
  dispatch_activation(p.epi.activation, stage_c);
  __syncthreads();

  // ---- Epilogue 2: shared C tile -> output, consecutive threads on consecutive addresses. ----
  const int m_valid = min(kBM, M - m0);
  const int n_valid = min(BN, p.cout_g - n0);
  if (p.out_along_n) {
    if (p.out_vec) {
      // os_c == 1, Cout_g % 8 == 0 and 16-byte aligned pixels (launcher): whole 16-byte chunks.
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
    const int total = n_valid * kBM;
    for (int e = tid; e < total; e += kThreads) {
      const int nl = e / kBM;
      const int ml = e % kBM;
      if (ml < m_valid) out[rows[ml].o_row + col_off[nl]] = Cs[ml * ldc + nl];
    }
  }
#endif  // DECONV_PATCH_SM90A_DEVICE
}

// ---------------------------------------------------------------------------------------------
// Weight packing: one thread per packed element, iterated in weight order (g, oc, kh, kw, c),
// written to packed[((g*Cout_g + oc)*KH*KW + tap)*Cin_pad + c] (runs of Cin_pad contiguous
// elements). Writes every element, zeros for c >= Cin_g. Plain CUDA: runs on any architecture.
struct PackArgs {
  const void* w;
  void* packed;
  int64_t ws[4];  // weight strides: cin, cout/g, kh, kw
  int cin_g, cout_g, cin_pad, kh, kw;
  int pad_h, pad_w, dil_h, dil_w;
  int64_t total;
  AxisPlan h, w_axis;
};

template <typename T>
__global__ void __launch_bounds__(256)
    gemm_phase_sm90_pack_weight_kernel(const __grid_constant__ PackArgs a) {
  const T* __restrict__ w = static_cast<const T*>(a.w);
  T* __restrict__ packed = static_cast<T*>(a.packed);
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < a.total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int c = (int)(idx % a.cin_pad);
    int64_t r = idx / a.cin_pad;
    const int kwi = (int)(r % a.kw);
    r /= a.kw;
    const int khi = (int)(r % a.kh);
    r /= a.kh;
    const int oc = (int)(r % a.cout_g);
    const int g = (int)(r / a.cout_g);
    // gemm_phase's packed tap order: phase (rh, rw) block, then (th, tw) with th = kh / step.
    const int rh = phase_of(khi, a.dil_h, a.pad_h, a.h.stride);
    const int rw = phase_of(kwi, a.dil_w, a.pad_w, a.w_axis.stride);
    const AxisPhaseInfo& ph = a.h.ph[rh];
    const AxisPhaseInfo& pw = a.w_axis.ph[rw];
    const int tap =
        phase_first_tap(ph, pw, a.kw) + (khi / a.h.step) * pw.taps + kwi / a.w_axis.step;
    T v = from_float<T>(0.f);
    if (c < a.cin_g) {
      v = w[((int64_t)g * a.cin_g + c) * a.ws[0] + oc * a.ws[1] + khi * a.ws[2] + kwi * a.ws[3]];
    }
    packed[(((int64_t)g * a.cout_g + oc) * a.kh * a.kw + tap) * a.cin_pad + c] = v;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.
int64_t cin_pad_of(const ConvTranspose2dParams& p) { return round_up(p.in_per_group, kBK); }

int64_t packed_elements(const ConvTranspose2dParams& p) {
  return p.groups * p.out_per_group * (int64_t)p.ph_h.kernel * p.ph_w.kernel * cin_pad_of(p);
}

// The weight-side conditions (all that packing depends on).
bool weight_side_ok(const ConvTranspose2dParams& p, ScalarKind kind) {
  if (kind != ScalarKind::kFloat16 && kind != ScalarKind::kBFloat16) return false;
  if (!axis_supported(p.ph_h) || !axis_supported(p.ph_w)) return false;
  if (p.groups < 1 || p.groups > 65535) return false;
  if (p.in_per_group < 8 || p.in_per_group % 8 != 0 || p.out_per_group < 1) return false;
  if (p.in_per_group * p.groups != p.in_channels || p.out_per_group * p.groups != p.out_channels)
    return false;
  for (int i = 0; i < 4; ++i)
    if (p.w_stride[i] < 0) return false;
  if (max_offset(p.w_stride, p.in_channels, p.out_per_group, p.ph_h.kernel, p.ph_w.kernel) >=
      kIndexLimit)
    return false;
  return packed_elements(p) < kIndexLimit;
}

int pick_config(const ConvTranspose2dParams& p) { return p.out_per_group <= 64 ? 2 : 0; }

template <typename T, class Cfg>
cudaError_t launch_main(Sm90Args& a, const ConvTranspose2dParams& p, const AxisPlan& h,
                        const AxisPlan& w, cudaStream_t stream) {
  const int64_t tiles = schedule_phases(a, p, h, w, kBM, Cfg::kBN);
  if (tiles == 0) return cudaSuccess;

  auto kernel = conv_transpose2d_gemm_phase_sm90_kernel<T, Cfg>;
  const cudaError_t err = ensure_dynamic_smem(kernel, Cfg::kTotalBytes, current_device());
  if (err != cudaSuccess) return err;
  const dim3 grid((unsigned)tiles, (unsigned)p.groups, 1);
  kernel<<<grid, kThreads, Cfg::kTotalBytes, stream>>>(a);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const ConvTranspose2dParams& p, const void* packed, int config,
                         cudaStream_t stream) {
  const AxisPlan h = plan_axis(p.ph_h, p.out_h);
  const AxisPlan w = plan_axis(p.ph_w, p.out_w);
  Sm90Args a{};
  fill_shared_args<T>(a, p, packed, h, w, cin_pad_of(p));  // 16-bit T: out_vec in chunks of 8
  if (config < 0) config = pick_config(p);
  switch (config) {
    case 0: return launch_main<T, Sm90Cfg128>(a, p, h, w, stream);
    case 1: return launch_main<T, Sm90Cfg128d>(a, p, h, w, stream);
    case 2: return launch_main<T, Sm90Cfg64>(a, p, h, w, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t launch_pack(const ConvTranspose2dParams& p, void* packed, cudaStream_t stream) {
  PackArgs a{};
  fill_shared_pack_args(a, p, packed, cin_pad_of(p), packed_elements(p));
  gemm_phase_sm90_pack_weight_kernel<T><<<pack_grid(a.total), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

bool gemm_phase_sm90_supports(const ConvTranspose2dParams& p, ScalarKind kind, bool allow_tf32) {
  (void)allow_tf32;  // float32 (TF32) is not supported by this kernel
#if !defined(DECONV_PATCH_SM90A)
  (void)p;
  (void)kind;
  return false;
#else
  if (!weight_side_ok(p, kind)) return false;
  if (p.batch < 0 || p.in_h < 0 || p.in_w < 0 || p.out_h < 0 || p.out_w < 0) return false;
  if (p.in_h >= (1 << 30) || p.in_w >= (1 << 30)) return false;
  for (int i = 0; i < 4; ++i)
    if (p.in_stride[i] < 0 || p.out_stride[i] < 0) return false;
  // A gathered as 16-byte chunks of 8 channels: unit channel stride, 16-byte aligned pixels.
  constexpr int V = 8;
  if (p.in_stride[1] != 1 || !ptr_aligned(p.input, 16)) return false;
  if (!stride_multiple(p.in_stride[0], p.batch, V) || !stride_multiple(p.in_stride[2], p.in_h, V) ||
      !stride_multiple(p.in_stride[3], p.in_w, V))
    return false;
  // 32-bit element offsets everywhere (and GEMM rows / tile counts of a phase; BM = 128, BN >= 64).
  if (!io_fits_index_limit(p)) return false;
  return current_device_is_sm90();
#endif
}

int gemm_phase_sm90_num_configs() { return kNumConfigs; }

int64_t gemm_phase_sm90_packed_weight_bytes(const ConvTranspose2dParams& p, ScalarKind kind) {
  (void)kind;  // 16-bit elements only
  return packed_elements(p) * 2;
}

cudaError_t launch_gemm_phase_sm90_pack_weight(const ConvTranspose2dParams& p, ScalarKind kind,
                                               bool allow_tf32, void* packed,
                                               cudaStream_t stream) {
  (void)allow_tf32;
  if (!weight_side_ok(p, kind)) return cudaErrorInvalidValue;
  if (packed_elements(p) == 0) return cudaSuccess;
  if (packed == nullptr || p.weight == nullptr) return cudaErrorInvalidValue;
  switch (kind) {
    case ScalarKind::kFloat16: return launch_pack<__half>(p, packed, stream);
    case ScalarKind::kBFloat16: return launch_pack<__nv_bfloat16>(p, packed, stream);
    default: break;
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_conv_transpose2d_gemm_phase_sm90(const ConvTranspose2dParams& p,
                                                    ScalarKind kind, bool allow_tf32,
                                                    const void* packed, cudaStream_t stream,
                                                    int config) {
  if (!gemm_phase_sm90_supports(p, kind, allow_tf32)) return cudaErrorInvalidValue;
  if (config < -1 || config >= kNumConfigs) return cudaErrorInvalidValue;
  if (p.batch * p.out_channels * p.out_h * p.out_w == 0) return cudaSuccess;
  if (packed == nullptr) return cudaErrorInvalidValue;
  switch (kind) {
#if DECONV_PATCH_UNIT_HAS_KIND(1)
    case ScalarKind::kFloat16: return launch_typed<__half>(p, packed, config, stream);
#endif
#if DECONV_PATCH_UNIT_HAS_KIND(2)
    case ScalarKind::kBFloat16: return launch_typed<__nv_bfloat16>(p, packed, config, stream);
#endif
    default: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace deconv_patch
