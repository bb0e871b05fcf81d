// Any transposed convolution (16-bit, fp32 as TF32 or strict 3xTF32; channels_last input) as
// stride-phase implicit GEMMs in one persistent, warp-specialised kernel on Hopper: TMA loads into
// an mbarrier ring, wgmma.mma_async, the fused epilogue storing straight into the output. sm_90a
// only; see the header for the supported subset. Structure, ring protocol and the column
// permutation follow gemm_kxs_sm90/gemm_kxs_sm90_kernel.cuh; the PTX wrappers are
// common/hopper_ptx.cuh. Included by gemm_phase_tma/gemm_phase_tma.cu (the API and weight packing)
// and by one translation unit per element type and fp32 mode that instantiates the GEMM kernels.
//
// Index math (per axis, h shown; w alike). Output row oh = r + S*i, phase r in [0, S), i in
// [0, rows(r)). Tap kh lands on phase r iff r = (kh*dil - pad) mod S; those taps are
// kh = kh0(r) + t*step, t in [0, taps(r)), step = S/gcd(S, dil), and read input row
//     ih = i + off0(r) - t*in_step,     in_step = dil/gcd(S, dil)
// (plan_axis in common/phase_plan.cuh gives taps, off0 and rows; kh0 is the first kh
// of the phase). Dilation and padding live only in off0 and in_step. So for a fixed phase
// (rh, rw) and tap (th, tw) the input pixels of a rectangular block of phase pixels
// (i0.., j0..) of images n0.. form a rectangular input box of the same shape starting at
//     (n0, i0 + off0_h(rh) - th*in_step_h, j0 + off0_w(rw) - tw*in_step_w):
// one 4-D TMA load (dims innermost first {C, W, H, N}, box {BK, BW, BH, BNI}, signed int32
// coordinates; out-of-bounds elements, negative coordinates included, are zero-filled).
//
// GEMM of phase (rh, rw), group g (Cin_g = Cin/groups, Cout_g = Cout/groups):
//     m   = (nl*BH + hl)*BW + wl   in [0, 128): a box of BNI x BH x BW phase pixels, exactly the
//           order TMA writes the box: 128 rows of BK elements = 128 bytes, 128-byte swizzle
//     k   = tap*Cin_pad + c,  tap = th*taps_w + tw,  Cin_pad = round_up(Cin_g, BK),
//           BK = 128 bytes of k (64 16-bit, 32 fp32); k block kb -> tap = kb / (Cin_pad/BK),
//           channel block cb = kb % (Cin_pad/BK)
//     oc  in [0, Cout_g)           (tiles of BN)
//     A[m, k]  = input[n0+nl, g*Cin_g + c, i0+hl + off0_h - th*in_step_h, j0+wl + off0_w - ...]
//     B[k, oc] = weight[g*Cin_g + c, oc, kh0_h(rh) + th*step_h, kh0_w(rw) + tw*step_w]
//     output[n, g*Cout_g + oc, rh + SH*i, rw + SW*j] = epilogue(sum_k A*B)  for the real pixels
//     (n < N, i < rows_h(rh), j < rows_w(rw)), 64-bit offsets, any output strides.
// A strided correlation (ConvTranspose2dParams::gather_h / gather_w: a transposed convolution's
// input gradient) is the same GEMM with one phase (the weight side: stride 1, padding 0,
// dilation 1, every tap in kh order) whose tap (th, tw) reads input row
//     ih = i * scale_h + offset_h + th * dil_h      (off0 = offset, in_step = -dil)
// and likewise along w: the A box of a block of output pixels starts at (i0 * scale_h + ...,
// j0 * scale_w + ...) and takes every scale-th pixel (TMA element strides; PtArgs::a_sh, a_sw).
// Groups > 1 need Cin_g % BK == 0 (a box never reaches the next group's channels); with one
// group the channel tail of the last block lies past C = Cin and is zero-filled by TMA.
// A phase without taps (kernel < stride, or gcd(S, dil) > 1) has 0 k blocks: its tiles store
// epilogue(0).
//
// Box shape (BW, BH, BNI), BW*BH*BNI = 128, powers of two, chosen per launch (pt_pick_box) to
// minimise the padded rows sum(tiles*128) - pixels (ties: wider BW, then taller BH). BNI > 1
// lets small phase images share a tile. Staged store (below): a warp stores 32 consecutive rows
// m of one channel, 32/BW output row runs, so there the box is the best one with BW >= W0 for
// the largest W0 <= min(16, widest phase rounded up to a power of two) whose tiles stay within
// 1.25x of the overall best box's (else the overall best).
//
// Packed weight (launch_gemm_phase_tma_pack_weight; independent of batch and image size):
// K-major [G*P*Cout_pad][Kmax] of the input's element type, P = SH*SW phases in (rh, rw)
// row-major order, Cout_pad = round_up(Cout_g, 32), Kmax = max over phases of taps*Cin_pad:
//     packed[((g*P + rh*SW + rw)*Cout_pad + pos)*Kmax + k] = B[k, pt_logical_col(pos)]
// and 0 where c >= Cin_g, the logical column >= Cout_g or k is past the phase's taps. fp32 is
// stored rounded to TF32 (round_tf32_bits = cvt.rna); fp32 strict appends a second block of the
// same layout (rows G*P*Cout_pad .. 2*G*P*Cout_pad - 1) holding lo = tf32_rna(w - hi). The B box
// {BK, BN} of k block kb, n tile col0 is at (kb*BK, (g*P + phase)*Cout_pad + col0): it may run
// into the next phase's rows (strict: into the lo block, or past the map, zero-filled); those
// columns are >= Cout_g and never stored (a GEMM column depends only on its own B column).
// Column permutation (kxs_sm90's): pos = 32g' + 8i + 2q + e <-> oc = 32g' + 8q + 2i + e. The
// wgmma accumulator fragment gives lane l (q = l%4) physical columns 8c + 2q + e, which then are
// the 8 consecutive channels 32g' + 8q + 0..7: a 16-byte NHWC store straight from registers.
//
// Tiles and schedule. The launched phases (those with output pixels) form segments of ncw
// phases; the tiles of a segment run (group, box tile (n-box, i-box, j-box; j fastest), n tile,
// x), x in [0, ncw) fastest, x picking the segment's phase x.
//   Phase-major (Vec and Direct stores, or one launched column phase): ncw = 1, one segment per
//     phase, most taps first (stable).
//   Interleaved (Staged store): one segment per launched row phase rh, most taps in total first
//     (stable; e.g. k3 s2 p1: the 2-tap row phase first), its phases the launched column phases
//     rw ascending. With NCHW-like output a tile writes every SW-th element of its output rows;
//     its sibling column phases write the rest of the same 32-byte sectors. Adjacent tile indices
//     run at the same time on neighbouring CTAs, so the sectors fill up in L2 instead of reaching
//     HBM partly written (ECC read-modify-write). x fastest rather than after the n tile: the
//     siblings are one index apart and read nearly the same input pixels (A hits in L2); the
//     ncw * n_tiles weight slabs of a row phase in use at once are a few MB at most.
//     The segment takes the largest j-box count of its phases (rows_w differs by at most one
//     between column phases); a tile whose j-box is past its own phase's count is empty: no
//     loads, no MMAs, no stores, 0 k blocks in every role's ring counter; a ping-pong consumer
//     still does its order barrier sync and arrive for it.
// Persistent: grid = min(#SMs, tiles). Turn i of CTA b takes tile i*grid + pos_i, pos_0 = b,
// pos advancing by rot (mod grid) after every turn (ping-pong: every second turn, so each
// consumer's tiles rotate too), rot = (1 - period*grid) mod ncw: the column phase x = t mod ncw
// of a CTA's (consumer's) successive tiles then advances by one. ncw = 1 gives rot = 0: tiles b,
// b + grid, ... Without it a grid that is a multiple of ncw would keep every CTA on one column
// phase (k3 s2 p1: 1 or 2 taps, 1.3-1.4x the phase-major makespan). A CTA's tiles only increase;
// each thread walks the phase table (per phase: its segment's first tile and box tiles, its own
// j-boxes, rows, off0, taps_w, k blocks, packed row; in the __grid_constant__ arguments) forward.
//
// 384 threads: warpgroup 0 = producer (one thread issues all TMA), warpgroups 1, 2 = consumers.
// Cooperative configs: both consumers on every tile (consumer w: rows 64w..64w+63, one m64nBN
// accumulator). Ping-pong: consumer w takes the CTA's turns i with i % 2 == w (all 128 rows).
// Shared memory (1024-byte aligned): STAGES x [A 128 rows | B BN rows] of 128-byte swizzled rows
// (fp32 strict: [A | A_lo 128 rows | B_hi BN rows | B_lo BN rows]), per consumer two epilogue
// tables (mul, add per column; double-buffered by tile parity) and one staging buffer, then the
// full/empty mbarriers.
// Ring protocol (kxs_sm90's): k block counter c runs over the CTA's tiles in order (the producer
// and both consumers see every tile of the CTA and add its k block count, 0 included, and 0 for
// an empty tile; a ping-pong consumer adds the other's tiles' counts without touching the
// ring), stage s = c % STAGES, round r = c / STAGES:
//     producer: wait empty[s] parity (r & 1) ^ 1; arrive.expect_tx(full[s], A box + B box bytes,
//               strict + a second B box: TMA counts the full box even where it zero-fills);
//               TMA A (4-D), TMA B (2-D; strict: B_hi, and B_lo at row + G*P*Cout_pad)
//     consumer: wait full[s] parity r & 1; 4 wgmma k steps (TF32: A from registers, below);
//               commit; wait_group(1) -> the previous
//               block's stage is free: lane 0 of each warp arrives on its empty barrier (count 8
//               cooperative, 4 ping-pong); after the last block wait_group(0) and arrive.
//               (fp32 strict: below; a block's stage is released at the end of the block.)
// A tile with 0 k blocks issues no TMA, waits on nothing and runs the epilogue of zeros (an
// empty tile skips the epilogue as well).
// Ping-pong order barrier: a consumer starts a tile's main loop only once the other has issued
// the main loop of the CTA's previous tile, so no parity wait ever meets a barrier a full round
// behind (and the tensor cores alternate). TF32: A is read into registers and rounded there (not
// in shared memory), as
// in gemm_kxs_sm90 (ldmatrix per k step, cvt.rna, register-A wgmma, one commit group per k step,
// wait_group 3 before a step's registers are rewritten; the stage of k block kb-1 is released at
// step 3 of block kb), except that step ks + 1's ldmatrix is issued before step ks's wgmmas
// (tf32_rs_k_block's PREFETCH: 10-15% faster on the ping-pong configs here, slower in
// gemm_kxs_sm90).
//
// Epilogue, per consumer and tile: bias/scale/shift loads issued before the main loop, (mul, add)
// tabulated in shared memory after it (channel_affine), then one of three store paths:
//   kPtStoreVec    (os_c == 1, Cout_g % 8 (16-bit) / % 4 (fp32) == 0, 16-byte aligned): 16-byte
//                  stores of 8 (4) consecutive channels per lane straight from registers.
//   kPtStoreDirect (other layouts with os_c < os_w): element stores from registers.
//   kPtStoreStaged (os_c >= os_w: NCHW and the rest): the consumer's tile goes through its own
//                  shared buffer [column][row] (ld = rows + 1: conflict-free fragment writes) in
//                  chunks of kCols columns, and each warp then stores 32 consecutive rows m of
//                  one column: runs of BW consecutive ow (stride SW) of one output channel row
//                  (the sibling column phases' tiles, adjacent in the interleaved order, fill
//                  in the elements between).
// Rounding to the output type happens once, after the epilogue, on every path.
//
// wgmma m64nNk16 (16-bit) / m64nNk8 (tf32) accumulator fragment (warp v of the warpgroup, lane
// l): register d[4*c + 2*h + e] holds row 16v + l/4 + 8h, physical column 8c + 2*(l%4) + e.
//
// fp32 strict (allow_tf32 false; the PtSplitConfig kernels, T = float): 3xTF32. Each operand x = hi
// + lo, hi = tf32_rna(x), lo = tf32_rna(x - hi) (pt_split_tf32_bits; x - hi is exact), and a*b ~
// a_lo*b_hi + a_hi*b_lo + a_hi*b_hi (a_lo*b_lo, ~2^-22 relative, dropped). The weight's hi and lo
// are packed (two blocks, above; one tensor map of 2*G*P*Cout_pad rows, the producer loads B_lo as
// the B box at row + G*P*Cout_pad). The consumer splits A in shared memory: its own A rows (those
// the TF32 pass rounds) become hi in place and lo in A_lo at the same offset within the region
// (every region starts on a 1024-byte swizzle atom, so the 128-byte swizzle puts lo at the same
// logical position and one descriptor layout reads both). Tensor-core fp32 sums are reported to
// truncate (Fasi et al.; docs/performance/fp32-strict.md: three MMAs into one running accumulator
// gave 9-158x fp32's error at K = 1024-16384 in a host model, a fresh accumulator per 32-deep k
// tile added with round-to-nearest fp32 adds 0.03-0.68x), so, as gemm_phase does, every k block (32
// k) is summed apart: per m64 x n64 sub-tile one commit group of 12 wgmma m64n64k8 (the 8 small
// terms lo*hi, hi*lo of the 4 k steps first, the first with scale-d 0, then the 4 hi*hi) into a
// partial accumulator of 32 registers, added to the tile accumulator with fp32 adds once complete.
// PARTS partials: 2 (group j uses j % 2; wait_group(1) after each group shows the one before
// complete, so one group runs while the previous one is added), or 1 for 128x128 ping-pong, whose
// 128 accumulator registers leave room for one (each group but the last waited for with
// wait_group(0)). While a block's last group runs, the next block's A is split (the next stage:
// STAGES >= 2); then wait_group(0), its partial is added and the block's stage released. No group
// is in flight across the k loop's back edge: ptxas serialises every wgmma of the kernel (C7514)
// when a partial is read there. Consumer registers: MI * BN/2 + 32 * PARTS (128 to 192). Stages, as
// many as fit: 3 (128x128), 2 (128x256), 4 (128x64).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gemm_phase_tma/gemm_phase_tma.h"
#include "common/phase_plan.cuh"
#include "common/device_cache.h"
#include "common/epilogue.cuh"
#include "common/scalar_convert.cuh"
#include "common/hopper_ptx.cuh"
#include "common/quad_regroup.cuh"
#include "common/tensor_core_ptx.cuh"
#include "common/tensor_map_encoder.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DECONV_PATCH_PT_SM90A_DEVICE 1
#endif

namespace deconv_patch {
namespace {

using namespace tc;
using namespace hopper;

constexpr int kPtBM = 128;        // GEMM rows per tile (one TMA box)
constexpr int kPtRowBytes = 128;  // bytes of k per tile row and stage (one 128-byte swizzle row)
template <typename T>
constexpr int kPtBK = kPtRowBytes / (int)sizeof(T);  // 64 (16-bit) or 32 (fp32) k per stage
constexpr int kPtThreads = 384;   // producer warpgroup + 2 consumer warpgroups
constexpr int kPtProducerRegs = 40;  // setmaxnreg: 128*40 + 256*232 <= 64K registers
constexpr int kPtConsumerRegs = 232;
constexpr int kPtColGroup = 32;   // period of the column permutation (packed rows padded to it)
constexpr int kPtMaxPhases = 64;  // stride_h*stride_w (phase table in the kernel arguments)
constexpr int64_t kPtMaxTiles = (int64_t)1 << 30;
constexpr int64_t kPtInt32Limit = (int64_t)1 << 31;
constexpr int64_t kPtSizeLimit = (int64_t)1 << 30;  // batch, H, W, OH, OW (int32 coordinates)
// Named barriers (0 is __syncthreads), each + consumer index: table (its 128 threads), ping-pong
// order (256: the other consumer arrives, this one syncs), fp32 strict A split (128), staging
// (128).
constexpr int kPtTableBarrier = 1;
constexpr int kPtOrderBarrier = 3;
constexpr int kPtRoundBarrier = 5;
constexpr int kPtStagingBarrier = 7;
static_assert(kPtTableBarrier + 2 <= kPtOrderBarrier && kPtOrderBarrier + 2 <= kPtRoundBarrier &&
                  kPtRoundBarrier + 2 <= kPtStagingBarrier && kPtStagingBarrier + 2 <= 16,
              "barrier ids");
static_assert(128 * kPtProducerRegs + 256 * kPtConsumerRegs <= 65536, "register file split");

// Store paths (PtArgs::mode).
constexpr int kPtStoreVec = 0;
constexpr int kPtStoreDirect = 1;
constexpr int kPtStoreStaged = 2;

// Shared-memory layout and register geometry of a config. BN: tile columns (wgmma N). STAGES:
// ring depth. PINGPONG: consumers alternate tiles. SPLIT: fp32 strict (3xTF32, see "fp32 strict"
// at the top): a stage is [A | A_lo | B_hi | B_lo] instead of [A | B], and each consumer keeps
// PARTS m64n64 partial accumulators besides its tile accumulators.
template <int BN, int STAGES, bool PINGPONG, bool SPLIT, int PARTS = 0>
struct PtLayout {
  static constexpr int kBN = BN;
  static constexpr int kStages = STAGES;
  static constexpr bool kPingPong = PINGPONG;
  static constexpr bool kSplit = SPLIT;
  static constexpr int kMI = PINGPONG ? 2 : 1;  // m64 accumulators per consumer thread
  static constexpr int kAcc = BN / 2;           // fp32 registers per m64 accumulator
  // SPLIT: k block partials, PARTS m64n64 accumulators of 32 registers (2: one wgmma group in
  // flight while the previous one is added; 1: each group waited for, where 2 do not fit the
  // registers); kSub groups (one per m64 x n64 sub-tile) per k block.
  static constexpr int kPartBuffers = PARTS;
  static constexpr int kPartRegs = 32 * PARTS;
  static constexpr int kSub = SPLIT ? kMI * (BN / 64) : 0;
  static constexpr bool kSetMaxNreg = kMI * kAcc + kPartRegs > 64;
  static constexpr int kReleaseCount = PINGPONG ? 4 : 8;  // consumer warps reading a stage
  static constexpr int kRows = PINGPONG ? 128 : 64;       // tile rows one consumer stores
  static constexpr int kABytes = kPtBM * kPtRowBytes;     // = TMA box {BK, BW, BH, BNI}
  static constexpr int kBBytes = BN * kPtRowBytes;        // = TMA box {BK, BN}
  // Stage regions (offsets from the stage start): A (TMA), SPLIT: A_lo (written by the
  // consumers), B (TMA; SPLIT: the hi block), SPLIT: B_lo (TMA, the lo block).
  static constexpr int kALoOffset = kABytes;
  static constexpr int kBOffset = SPLIT ? 2 * kABytes : kABytes;
  static constexpr int kBLoOffset = kBOffset + kBBytes;
  static constexpr int kStageBytes = kBOffset + (SPLIT ? 2 : 1) * kBBytes;
  static constexpr int kTxBytes = kABytes + (SPLIT ? 2 : 1) * kBBytes;  // TMA bytes per stage
  static constexpr int kPipeBytes = STAGES * kStageBytes;
  static constexpr int kTableBytes = BN * 8;  // mul, add (float) per tile column
  static constexpr int kTableOffset = kPipeBytes;
  static constexpr int kStagingBytes = 8320;  // per consumer: >= kCols * (kRows + 1) * elem
  static constexpr int kStagingOffset = kTableOffset + 2 * 2 * kTableBytes;  // 2 consumers x 2
  static constexpr int kBarOffset = kStagingOffset + 2 * kStagingBytes;
  static constexpr int kTotalBytes = kBarOffset + 2 * STAGES * 8 + 1024;  // + alignment slack
  static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma wrappers exist for n64/n128/n256");
  static_assert(BN % kPtColGroup == 0, "tiles hold whole permutation groups");
  static_assert(kStageBytes % 1024 == 0, "stages keep the 1024-byte swizzle-atom alignment");
  static_assert(kALoOffset % 1024 == 0 && kBOffset % 1024 == 0 && kBLoOffset % 1024 == 0 &&
                    (64 * kPtRowBytes) % 1024 == 0,
                "regions and n64 / m64 halves start on swizzle atoms (same pattern at the same "
                "relative offset)");
  static_assert(!SPLIT || (kBOffset >= kALoOffset + kABytes && kStageBytes == kBLoOffset + kBBytes),
                "SPLIT regions are disjoint and fill the stage");
  static_assert(kTxBytes == kStageBytes - (SPLIT ? kABytes : 0),
                "TMA fills every region but A_lo (the producer's expect_tx)");
  static_assert(kMI * kAcc <= 128, "accumulators fit the consumer register budget");
  static_assert(SPLIT ? (kPartBuffers == 1 || kPartBuffers == 2) && kSub % kPartBuffers == 0 &&
                            kMI * kAcc + kPartRegs <= 192
                      : kPartBuffers == 0 && kSub == 0,
                "SPLIT: 1 or 2 partials, group j of every k block uses partial j % PARTS, "
                "accumulators + partials fit the consumer register budget");
  static_assert(kStagingBytes % 16 == 0 && kTableBytes % 16 == 0, "16-byte aligned regions");
  static_assert(kSetMaxNreg || kMI * kAcc <= 64, "more than 64 accumulators need setmaxnreg");
  static_assert(kStages >= 2 && kReleaseCount == 4 * (kPingPong ? 1 : 2) &&
                    kRows * (kPingPong ? 1 : 2) == kPtBM,
                "ring geometry");
};
// 16-bit and TF32 configs; fp32 strict (3xTF32) configs of the same tile shapes and index.
template <int BN, int STAGES, bool PINGPONG>
struct PtConfig : PtLayout<BN, STAGES, PINGPONG, false> {};
template <int BN, int STAGES, bool PINGPONG, int PARTS>
struct PtSplitConfig : PtLayout<BN, STAGES, PINGPONG, true, PARTS> {};
using PtCfg0 = PtConfig<128, 6, true>;   // 128x128s6pp (218464 B)
using PtCfg1 = PtConfig<128, 6, false>;  // 128x128s6   (218464 B)
using PtCfg2 = PtConfig<256, 4, false>;  // 128x256s4   (222528 B)
using PtCfg3 = PtConfig<64, 8, true>;    // 128x64s8pp  (216448 B)
// Strict: stages as many as fit; partials 2, except 128x128 ping-pong, whose 128 accumulator
// registers leave room for one (two spill: 192 + the loop's other live values > 232).
using PtSplitCfg0 = PtSplitConfig<128, 3, true, 1>;   // 128x128s6pp: 3 stages (218416 B)
using PtSplitCfg1 = PtSplitConfig<128, 3, false, 2>;  // 128x128s6:   3 stages (218416 B)
using PtSplitCfg2 = PtSplitConfig<256, 2, false, 2>;  // 128x256s4:   2 stages (222496 B)
using PtSplitCfg3 = PtSplitConfig<64, 4, true, 2>;    // 128x64s8pp:  4 stages (216384 B)
constexpr int kPtNumConfigs = 4;
const char* const kPtConfigNames[kPtNumConfigs] = {"128x128s6pp", "128x128s6", "128x256s4",
                                                   "128x64s8pp"};
constexpr int kPtSmemLimit = 232448;  // sm_90's 227 KB of opt-in shared memory per block
// Each config fits, and (strict) holds as many stages as fit: one more would not.
template <class Cfg>
constexpr bool pt_fits() {
  return Cfg::kTotalBytes <= kPtSmemLimit;
}
template <class Cfg>
constexpr bool pt_fits_most() {
  return pt_fits<Cfg>() && Cfg::kTotalBytes + Cfg::kStageBytes + 2 * 8 > kPtSmemLimit;
}
static_assert(pt_fits<PtCfg0>() && pt_fits<PtCfg1>() && pt_fits<PtCfg2>() && pt_fits<PtCfg3>(),
              "configs fit sm_90's 227 KB of opt-in shared memory");
static_assert(pt_fits_most<PtSplitCfg0>() && pt_fits_most<PtSplitCfg1>() &&
                  pt_fits_most<PtSplitCfg2>() && pt_fits_most<PtSplitCfg3>(),
              "strict configs fit, with as many stages as fit");
static_assert(PtSplitCfg0::kTotalBytes == 218416 && PtSplitCfg1::kTotalBytes == 218416 &&
                  PtSplitCfg2::kTotalBytes == 222496 && PtSplitCfg3::kTotalBytes == 216384 &&
                  PtCfg0::kTotalBytes == 218464 && PtCfg1::kTotalBytes == 218464 &&
                  PtCfg2::kTotalBytes == 222528 && PtCfg3::kTotalBytes == 216448,
              "the byte counts quoted above and in the header");
// The strict configs mirror the 16-bit / TF32 ones of the same index.
template <class A, class B>
constexpr bool pt_same_shape() {
  return A::kBN == B::kBN && A::kPingPong == B::kPingPong && !A::kSplit && B::kSplit;
}
static_assert(pt_same_shape<PtCfg0, PtSplitCfg0>() && pt_same_shape<PtCfg1, PtSplitCfg1>() &&
                  pt_same_shape<PtCfg2, PtSplitCfg2>() && pt_same_shape<PtCfg3, PtSplitCfg3>(),
              "config index -> tile shape");

// Staging geometry of the general store path: [kCols columns][kLd] elements per consumer, 8 KB
// of payload (16-bit: 32 columns ping-pong, 64 cooperative; fp32: 16 / 32).
template <typename T, class Cfg>
struct PtStaging {
  static constexpr int kCols = 8192 / (Cfg::kRows * (int)sizeof(T));
  static constexpr int kLd = Cfg::kRows + 1;  // odd: a warp's fragment writes hit 32 banks
  static_assert(kCols * kLd * (int)sizeof(T) <= Cfg::kStagingBytes, "staging fits");
  static_assert(Cfg::kBN % kCols == 0 && (kCols == 16 || kCols % kPtColGroup == 0),
                "a chunk is half a permutation group or whole groups");
  static_assert((kCols * Cfg::kRows) % 128 == 0, "chunk stores cover the warpgroup evenly");
};

// One launched phase (launch order), per-phase part of the kernel arguments. Segment s holds
// the phases s*ncw .. s*ncw + ncw - 1; the segment fields are repeated in each of them.
struct PtPhase {
  int tile_begin;        // segment: first tile index (all groups)
  int tiles_w, tiles_hw;  // segment: box tiles along j, and along (i, j) (its phases' maximum)
  int own_w;             // box tiles along j of this phase (j-boxes >= own_w: empty tiles)
  int rows_h, rows_w;    // phase pixels per image: rows(rh), rows(rw)
  int off_h, off_w;      // off0_h(rh), off0_w(rw)
  int taps_w;            // taps_w(rw) (tap -> th, tw)
  int kb;                // k blocks: taps_h * taps_w * Cin_pad / BK (0 without taps)
  int b_row;             // packed row of (group 0, this phase, column 0): (rh*SW + rw)*Cout_pad
  int rc;                // rh << 8 | rw
};

struct PtArgs {
  const void* bias;
  void* out;
  EpilogueParams epi;
  int64_t os_n, os_c, os_h, os_w;  // output strides
  int batch;
  int cin_g, cout_g;
  int cbs;                   // channel blocks per tap: Cin_pad / BK
  int in_step_h, in_step_w;
  int sh, sw;
  int bw, bh, bni;           // TMA box (phase columns, phase rows, images)
  int lg_bw, lg_bhw;         // log2(bw), log2(bw*bh)
  int tiles_n;               // ceil(batch / bni)
  int group_rows;            // packed rows per group: P * Cout_pad
  int n_tiles;               // ceil(Cout_g / BN)
  int tiles;                 // all tiles (empty ones included)
  int num_phases;            // launched phases (segments * ncw)
  int ncw;                   // phases per segment: launched column phases, or 1
  int rot;                   // CTA turn rotation (pt_schedule), 0 <= rot < grid
  int mode;                  // kPtStore*
  PtPhase ph[kPtMaxPhases];
  // Packed rows of one weight block (groups * group_rows): strict's lo block starts there. Last,
  // so the fields the 16-bit / TF32 kernels read keep their parameter offsets.
  int b_split_rows;
  // Input coordinate scale per axis: 1 for a transposed convolution, the gather's scale for a
  // strided correlation (ConvTranspose2dParams::gather_h / gather_w; its TMA map then steps
  // `scale` pixels per box element).
  int a_sh, a_sw;
  // k slices (pt_apply_slices): tile t computes slice t % k_slices of GEMM tile t / k_slices,
  // its fp32 sums stored slice_stride elements per slice into the workspace; 1: no slices.
  int k_slices;
  int64_t slice_stride;
};
static_assert(sizeof(PtArgs) + 2 * 128 <= 4096, "kernel arguments stay below 4 KiB");

// ---------------------------------------------------------------------------------------------
// Index functions (host and device: the host emulation runs exactly these).

// Logical column of physical packed row / GEMM column `pos` (an involution, see the top).
[[maybe_unused]] __host__ __device__ __forceinline__ int pt_logical_col(int pos) {
  return (pos & ~31) | (((pos >> 3) & 3) << 1) | (((pos >> 1) & 3) << 3) | (pos & 1);
}
// Accumulator register (of one m64 accumulator) that holds logical column 32cg + 8q + k of row
// half h for lane q: physical column 32cg + 8(k/2) + 2q + k%2, i.e. c = 4cg + k/2, e = k%2.
[[maybe_unused]] __host__ __device__ __forceinline__ int pt_acc_index(int cg, int h, int k) {
  return 16 * cg + 4 * (k >> 1) + 2 * h + (k & 1);
}
// Tile row of fragment (mi, h) of consumer cw, warp wv, lane row rq.
template <bool PINGPONG>
[[maybe_unused]] __host__ __device__ __forceinline__ int pt_frag_row(int mi, int cw, int wv,
                                                                     int rq, int h) {
  return (PINGPONG ? 64 * mi : 64 * cw) + 16 * wv + rq + 8 * h;
}

// fp32 strict: group j of a k block works on the m64 x n64 sub-tile (pt_group_mi, pt_group_nb)
// of a BN-column tile; register r of its m64n64 partial (row 16v + l/4 + 8h, column 8c + 2q + e,
// r = 4c + 2h + e) belongs to tile accumulator register pt_part_acc_index(nb, r) of m64
// accumulator mi (the same row, column 64nb + 8c + 2q + e).
template <int BN>
[[maybe_unused]] __host__ __device__ constexpr int pt_group_mi(int j) {
  return j / (BN / 64);
}
template <int BN>
[[maybe_unused]] __host__ __device__ constexpr int pt_group_nb(int j) {
  return j % (BN / 64);
}
[[maybe_unused]] __host__ __device__ constexpr int pt_part_acc_index(int nb, int r) {
  return 32 * nb + r;
}

// First phase of the segment holding tile t, scanning forward from segment start q (a
// thread's tiles only increase).
[[maybe_unused]] __host__ __device__ __forceinline__ int pt_find_segment(const PtArgs& a, int t,
                                                                         int q) {
  while (q + a.ncw < a.num_phases && t >= a.ph[q + a.ncw].tile_begin) q += a.ncw;
  return q;
}

// Position of a CTA's next turn: its turn i takes tile i*grid + pos_i, pos_0 = blockIdx.x and
// pos advancing by rot (mod grid) after every `period` turns (1; 2 for ping-pong). Tiles of one
// CTA only increase, and it stops at the first one past the end.
[[maybe_unused]] __host__ __device__ __forceinline__ int pt_next_pos(int pos, int turn, int rot,
                                                                     int grid, bool pingpong) {
  if (pingpong && (turn & 1) == 0) return pos;
  pos += rot;
  return pos >= grid ? pos - grid : pos;
}

struct PtTile {
  int q;            // launched phase
  bool live;        // false: an empty tile (its phase has fewer j-boxes than the segment)
  int g;            // group
  int n0, i0, j0;   // box origin: image, phase row, phase column
  int col0;         // first GEMM column (output channel within the group)
};
// Tile t of the segment starting at phase s: local = (((g*m_tiles + m tile)*n_tiles + n tile)
// *ncw + x, phase s + x, m tile = (n-box*tiles_h + i-box)*tiles_w + j-box (segment geometry).
[[maybe_unused]] __host__ __device__ __forceinline__ PtTile pt_decode_tile(const PtArgs& a, int t,
                                                                           int s, int bn) {
  const PtPhase& sg = a.ph[s];
  int local = t - sg.tile_begin;
  PtTile r;
  const int x = local % a.ncw;
  local /= a.ncw;
  const int nt = local % a.n_tiles;
  local /= a.n_tiles;
  const int m_tiles = sg.tiles_hw * a.tiles_n;
  r.g = local / m_tiles;
  int mt = local - r.g * m_tiles;
  const int bn_i = mt / sg.tiles_hw;
  mt -= bn_i * sg.tiles_hw;
  const int bh_i = mt / sg.tiles_w;
  const int bw_i = mt - bh_i * sg.tiles_w;
  r.q = s + x;
  r.live = bw_i < a.ph[r.q].own_w;
  r.n0 = bn_i * a.bni;
  r.i0 = bh_i * a.bh;
  r.j0 = bw_i * a.bw;
  r.col0 = nt * bn;
  return r;
}

// k slices: tile t of the launch is slice t % k_slices of GEMM tile t / k_slices (the slices of
// one GEMM tile adjacent, so a CTA's GEMM tiles still only increase).
[[maybe_unused]] __host__ __device__ __forceinline__ int pt_gemm_tile(const PtArgs& a, int t) {
  return t / a.k_slices;
}
[[maybe_unused]] __host__ __device__ __forceinline__ int pt_slice_of(const PtArgs& a, int t) {
  return t % a.k_slices;
}
// The k blocks [k0, k1) of slice s of a phase of kb blocks: nearly equal runs, in k order.
[[maybe_unused]] __host__ __device__ __forceinline__ void pt_slice_blocks(const PtArgs& a, int kb,
                                                                          int s, int& k0,
                                                                          int& k1) {
  k0 = (int)((int64_t)kb * s / a.k_slices);
  k1 = (int)((int64_t)kb * (s + 1) / a.k_slices);
}

// k block cursor of the producer: channel block cb of tap (th, tw), walked in k order.
struct PtKCursor {
  int cb, tw, th;
};
// The cursor at k block kb (a slice's first; block 0 also of a phase without taps).
[[maybe_unused]] __host__ __device__ __forceinline__ PtKCursor pt_cursor_at(int kb, int cbs,
                                                                            int taps_w) {
  if (kb == 0) return PtKCursor{0, 0, 0};
  const int tap = kb / cbs;
  return PtKCursor{kb - tap * cbs, tap % taps_w, tap / taps_w};
}
[[maybe_unused]] __host__ __device__ __forceinline__ void pt_cursor_next(PtKCursor& k, int cbs,
                                                                         int taps_w) {
  if (++k.cb == cbs) {
    k.cb = 0;
    if (++k.tw == taps_w) {
      k.tw = 0;
      ++k.th;
    }
  }
}
// A box coordinates {c, w, h, n} of the tile's k block at cursor k (BK channels per block).
[[maybe_unused]] __host__ __device__ __forceinline__ void pt_a_coords(const PtArgs& a,
                                                                      const PtPhase& ph,
                                                                      const PtTile& tl,
                                                                      const PtKCursor& k, int bk,
                                                                      int (&x)[4]) {
  x[0] = tl.g * a.cin_g + k.cb * bk;
  x[1] = tl.j0 * a.a_sw + ph.off_w - k.tw * a.in_step_w;
  x[2] = tl.i0 * a.a_sh + ph.off_h - k.th * a.in_step_h;
  x[3] = tl.n0;
}
// B box row coordinate of the tile (the k coordinate of block kb is kb*BK).
[[maybe_unused]] __host__ __device__ __forceinline__ int pt_b_row(const PtArgs& a,
                                                                  const PtPhase& ph,
                                                                  const PtTile& tl) {
  return tl.g * a.group_rows + ph.b_row + tl.col0;
}
// Output offset of tile row m without the channel part, and whether m is a real pixel.
[[maybe_unused]] __host__ __device__ __forceinline__ int64_t pt_row_offset(const PtArgs& a,
                                                                           const PtPhase& ph,
                                                                           const PtTile& tl,
                                                                           int m, bool& ok) {
  const int n = tl.n0 + (m >> a.lg_bhw);
  const int i = tl.i0 + ((m >> a.lg_bw) & (a.bh - 1));
  const int j = tl.j0 + (m & (a.bw - 1));
  ok = n < a.batch && i < ph.rows_h && j < ph.rows_w;
  if (!ok) return 0;
  return (int64_t)n * a.os_n + ((int64_t)(ph.rc >> 8) + (int64_t)a.sh * i) * a.os_h +
         ((int64_t)(ph.rc & 0xff) + (int64_t)a.sw * j) * a.os_w;
}
// Channel part of the output offset of the tile's logical column lc.
[[maybe_unused]] __host__ __device__ __forceinline__ int64_t pt_col_offset(const PtArgs& a,
                                                                           const PtTile& tl,
                                                                           int lc) {
  return (int64_t)(tl.g * a.cout_g + tl.col0 + lc) * a.os_c;
}

// fp32 strict (3xTF32) operand split of the fp32 value with bits x: hi = tf32_rna(x),
// lo = tf32_rna(x - hi) (x - hi is exact in fp32 for finite hi; an infinite or NaN x, or one
// that rounds to infinity, gives a NaN lo, so such inputs make NaN products, as in gemm_phase).
// Integer rounding (round_tf32_bits = cvt.rna) on host and device: the weight packing and the
// host emulation use this; the kernel's A split (pt_split_tf32_smem) is the same with cvt.rna.
[[maybe_unused]] __host__ __device__ __forceinline__ float pt_bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}
[[maybe_unused]] __host__ __device__ __forceinline__ uint32_t pt_float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
[[maybe_unused]] __host__ __device__ __forceinline__ void pt_split_tf32_bits(uint32_t x,
                                                                             uint32_t& hi,
                                                                             uint32_t& lo) {
  hi = round_tf32_bits(x);
  lo = round_tf32_bits(pt_float_bits(pt_bits_float(x) - pt_bits_float(hi)));
}

#if defined(DECONV_PATCH_PT_SM90A_DEVICE)
// fp32 strict A split in shared memory: CHUNKS 16-byte chunks of fp32, chunk i at
// addr + i * stride_bytes, become hi = tf32_rna(x) in place and lo = tf32_rna(x - hi) at
// lo_offset bytes further (cvt.rna). Four chunks at a time: loads first, then converts and
// stores (fewer live registers than loading every chunk first).
template <int CHUNKS>
__device__ __forceinline__ void pt_split_tf32_smem(uint32_t addr, uint32_t stride_bytes,
                                                   uint32_t lo_offset) {
  constexpr int kGroup = CHUNKS < 4 ? CHUNKS : 4;
  static_assert(CHUNKS % kGroup == 0, "whole groups");
#pragma unroll
  for (int g = 0; g < CHUNKS; g += kGroup) {
    uint32_t v[kGroup][4];
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v[i][0]), "=r"(v[i][1]), "=r"(v[i][2]), "=r"(v[i][3])
                   : "r"(addr + (g + i) * stride_bytes)
                   : "memory");
    }
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      uint32_t hi[4], lo[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        hi[e] = to_tf32(__uint_as_float(v[i][e]));
        lo[e] = to_tf32(__uint_as_float(v[i][e]) - __uint_as_float(hi[e]));
      }
      const uint32_t a = addr + (g + i) * stride_bytes;
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(hi[0]), "r"(hi[1]),
                   "r"(hi[2]), "r"(hi[3])
                   : "memory");
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(a + lo_offset), "r"(lo[0]),
                   "r"(lo[1]), "r"(lo[2]), "r"(lo[3])
                   : "memory");
    }
  }
}
// wgmma m64n64k8 tf32, both operands K-major in shared memory, with a compile-time scale-d: SCALE_D
// 0 writes D = A*B (the registers' old values are ignored), 1 accumulates. The descriptors
// (smem_desc_k128's layout) are passed as their low words and the high word they share (SBO and
// layout type, the same for every tile here), joined inside: fewer live 64-bit registers than
// common/hopper_ptx.cuh's Wgmma, which also always accumulates (the strict path starts each partial
// with SCALE_D 0 instead of zeroing registers the previous group wrote).
template <int SCALE_D>
__device__ __forceinline__ void pt_wgmma_tf32_n64(float (&d)[32], uint32_t da_lo, uint32_t db_lo,
                                                  uint32_t desc_hi) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %35, 0;\n"
      "mov.b64 da, {%32, %34};\nmov.b64 db, {%33, %34};\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "da, db, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(da_lo), "r"(db_lo), "r"(desc_hi), "n"(SCALE_D));
}
#endif

// ---------------------------------------------------------------------------------------------
// Main kernel (body only on sm_90a; an empty kernel elsewhere), one per fused activation.
template <typename T, class Cfg, Activation kAct>
__global__ void __launch_bounds__(kPtThreads, 1)
    conv_transpose2d_gemm_phase_tma_kernel(const __grid_constant__ CUtensorMap tma_a,
                                           const __grid_constant__ CUtensorMap tma_b,
                                           const __grid_constant__ PtArgs p) {
#if defined(DECONV_PATCH_PT_SM90A_DEVICE)
  constexpr bool kTf32 = std::is_same<T, float>::value;
  static_assert(sizeof(T) == 2 || kTf32, "16-bit or fp32 (TF32) operands");
  static_assert(!Cfg::kSplit || kTf32, "3xTF32 (strict) is an fp32 mode");
  constexpr int BN = Cfg::kBN;
  constexpr int S = Cfg::kStages;
  constexpr int MI = Cfg::kMI;
  constexpr int kAcc = Cfg::kAcc;
  constexpr bool kPP = Cfg::kPingPong;
  constexpr int BK = kPtBK<T>;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw_addr = smem_u32(smem_raw);
  unsigned char* smem = smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  const uint32_t base = smem_u32(smem);
  const uint32_t full_bar = base + Cfg::kBarOffset;  // full[s] = full_bar + 8s
  const uint32_t empty_bar = full_bar + 8 * S;       // empty[s] = empty_bar + 8s

  const int tid = threadIdx.x;
  const int wg = tid >> 7;

  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full_bar + 8 * s, 1);  // the producer's arrive.expect_tx (+ TMA bytes)
      mbar_init(empty_bar + 8 * s, Cfg::kReleaseCount);
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- Producer warpgroup: one thread issues every TMA load of this CTA's tiles. ----
    if constexpr (Cfg::kSetMaxNreg) setmaxnreg_dec<kPtProducerRegs>();
    if (tid == 0) {
      prefetch_tensormap(&tma_a);
      prefetch_tensormap(&tma_b);
      uint32_t c = 0;  // k block counter (see the ring protocol at the top)
      int q = 0;       // segment of the current tile
      int pos = blockIdx.x;
      for (int i = 0;; ++i) {
        const int64_t t64 = (int64_t)i * gridDim.x + pos;
        if (t64 >= p.tiles) break;
        pos = pt_next_pos(pos, i, p.rot, gridDim.x, kPP);
        const int t = (int)t64;
        const int tg = pt_gemm_tile(p, t);
        q = pt_find_segment(p, tg, q);
        const PtTile tl = pt_decode_tile(p, tg, q, BN);
        if (!tl.live) continue;  // empty tile: no k blocks
        const PtPhase& ph = p.ph[tl.q];
        const int b_row = pt_b_row(p, ph, tl);
        int k0, k1;
        pt_slice_blocks(p, ph.kb, pt_slice_of(p, t), k0, k1);
        PtKCursor cur = pt_cursor_at(k0, p.cbs, ph.taps_w);
        for (int kb = k0; kb < k1; ++kb, ++c) {
          const uint32_t s = c % S;
          const uint32_t bar = full_bar + 8 * s;
          mbar_wait(empty_bar + 8 * s, ((c / S) & 1) ^ 1);
          mbar_arrive_expect_tx(bar, Cfg::kTxBytes);  // A + B (strict: + B_lo)
          const uint32_t sa = base + s * Cfg::kStageBytes;
          int x[4];
          pt_a_coords(p, ph, tl, cur, BK, x);
          tma_load_4d(sa, &tma_a, bar, x[0], x[1], x[2], x[3]);
          tma_load_2d(sa + Cfg::kBOffset, &tma_b, bar, kb * BK, b_row);
          if constexpr (Cfg::kSplit) {
            // The lo block: the same box, one weight block further down the map.
            tma_load_2d(sa + Cfg::kBLoOffset, &tma_b, bar, kb * BK, b_row + p.b_split_rows);
          }
          pt_cursor_next(cur, p.cbs, ph.taps_w);
        }
      }
    }
    return;
  }

  // ---- Consumer warpgroups. ----
  if constexpr (Cfg::kSetMaxNreg) setmaxnreg_inc<kPtConsumerRegs>();
  const int cw = wg - 1;     // consumer 0 / 1
  const int ct = tid & 127;  // thread within the consumer warpgroup
  const int wv = ct >> 5;    // warp within it: fragment rows 16wv..
  const int lane = tid & 31;
  const int q4 = lane & 3;   // fragment column pair
  const int rq = lane >> 2;  // fragment row
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  T* __restrict__ out = static_cast<T*>(p.out);
  unsigned char* my_tables = smem + Cfg::kTableOffset + cw * 2 * Cfg::kTableBytes;
  T* stg = reinterpret_cast<T*>(smem + Cfg::kStagingOffset + cw * Cfg::kStagingBytes);

  // Cooperative: consumer cw reads A rows 64cw..; ping-pong: both m64 halves (mi * 64 rows).
  const uint64_t a_desc0 = smem_desc_k128(base + (uint32_t)((kPP ? 0 : cw) * 64 * kPtRowBytes));
  const uint64_t b_desc0 = smem_desc_k128(base + Cfg::kBOffset);
  // TF32: this lane's ldmatrix addresses, as in gemm_kxs_sm90 (see the top there).
  static_assert(kPtRowBytes == 128, "Tf32RsLane: 128-byte swizzled rows");
  [[maybe_unused]] const Tf32RsLane<MI> a_lane(kPP ? 0 : 64 * cw, wv, lane);
  constexpr uint64_t kStageDesc = Cfg::kStageBytes >> 4;  // descriptor units of 16 bytes
  constexpr uint64_t kHalfDesc = (64 * kPtRowBytes) >> 4;  // next 64 rows of A

  constexpr int kTE = (BN + 127) / 128;  // epilogue table entries this thread fills per tile
  float acc[MI][kAcc];
  int local = 0;   // live tiles done by this consumer: table buffer parity
  int q = 0;       // segment of the current tile
  int pos = blockIdx.x;
  uint32_t c = 0;  // k block counter at the start of the CTA's tile i
  for (int i = 0;; ++i) {
    const int64_t t64 = (int64_t)i * gridDim.x + pos;
    if (t64 >= p.tiles) break;
    pos = pt_next_pos(pos, i, p.rot, gridDim.x, kPP);
    // Whether the CTA has a turn after this one (ping-pong order barrier).
    const bool has_next = (int64_t)(i + 1) * gridDim.x + pos < p.tiles;
    const int t = (int)t64;
    const int tg = pt_gemm_tile(p, t);
    q = pt_find_segment(p, tg, q);
    const PtTile tl = pt_decode_tile(p, tg, q, BN);
    const PtPhase& ph = p.ph[tl.q];
    int k0, k1;
    pt_slice_blocks(p, ph.kb, pt_slice_of(p, t), k0, k1);
    const int nkb = tl.live ? k1 - k0 : 0;
    // A slice's sums go to its own part of the workspace (0 without slices).
    const int64_t slice_off = (int64_t)pt_slice_of(p, t) * p.slice_stride;
    if (kPP && (i & 1) != cw) {  // the other consumer's tile: only its k blocks count
      c += (uint32_t)nkb;
      continue;
    }
    if (!tl.live) {
      // Empty tile: no k blocks, no stores, the table buffer parity stays; ping-pong keeps its
      // order barrier pairing (sync for this tile, arrive for the next).
      if (kPP && i > 0) named_barrier_sync(kPtOrderBarrier + cw, 256);
      if (kPP && has_next) named_barrier_arrive(kPtOrderBarrier + 1 - cw, 256);
      continue;
    }
    const int ch0 = tl.g * p.cout_g + tl.col0;  // output channel of tile column 0

    // Epilogue table inputs of this tile's columns: loaded here, used after the MMAs, so the
    // loads are in flight during the main loop (columns >= Cout_g are never read back).
    T te_bias[kTE];
    float te_scale[kTE], te_shift[kTE];
#pragma unroll
    for (int e = 0; e < kTE; ++e) {
      const int col = ct + 128 * e;
      te_bias[e] = from_float<T>(0.f);
      te_scale[e] = 1.f;
      te_shift[e] = 0.f;
      if (col < BN && tl.col0 + col < p.cout_g) {
        if (bias != nullptr) te_bias[e] = bias[ch0 + col];
        if (p.epi.scale != nullptr) te_scale[e] = p.epi.scale[ch0 + col];
        if (p.epi.shift != nullptr) te_shift[e] = p.epi.shift[ch0 + col];
      }
    }

    // ---- Main loop over k blocks (none for a phase without taps). ----
    // Ping-pong: start only after the other consumer has issued its whole main loop of the
    // previous tile (it arrives below); see the ring protocol at the top.
    if (kPP && i > 0) named_barrier_sync(kPtOrderBarrier + cw, 256);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
      for (int r = 0; r < kAcc; ++r) acc[mi][r] = 0.f;
    }
    if constexpr (Cfg::kSplit) {
      // ---- fp32 strict (3xTF32; see "fp32 strict" at the top). Per k block: this warpgroup's
      // A rows split into hi (in place) and lo (A_lo, the same relative offset); then per
      // m64 x n64 sub-tile one commit group of 12 wgmmas (4 k steps x lo*hi, hi*lo, hi*hi, small
      // terms first) into a partial accumulator (the first with scale-d 0), added to the tile
      // accumulator with fp32 adds once complete. Two partials (group j uses j % 2): after each
      // group but the first, wait_group(1) shows the group before complete; one partial: each
      // group but the last is waited for (wait_group(0)). While the block's last group runs,
      // the next block's A is split; then wait_group(0), its partial is added and the block's
      // stage released. (ptxas serialises every wgmma (C7514) when a partial is read across the
      // loop's back edge, so no group stays in flight from one k block to the next.)
      constexpr int kSub = Cfg::kSub;  // groups per k block: one per m64 x n64 sub-tile
      static_assert(kSub == MI * (BN / 64) && pt_group_mi<BN>(kSub - 1) == MI - 1,
                    "groups cover the tile");
      constexpr uint32_t kALoDesc = (uint32_t)Cfg::kALoOffset >> 4;
      constexpr uint32_t kBLoDesc = (uint32_t)(Cfg::kBLoOffset - Cfg::kBOffset) >> 4;
      constexpr uint64_t kNBDesc = (64 * kPtRowBytes) >> 4;  // next 64 rows of B
      const uint32_t desc_hi = (uint32_t)(a_desc0 >> 32);     // = b_desc0's
      // Waits for k block counter k's stage and splits the A rows the TF32 pass would round:
      // hi in place, lo kALoOffset further (same swizzle position); the writes made visible to
      // the async proxy, the whole warpgroup done before any of its wgmmas reads them.
      auto split_block = [&](uint32_t k) {
        const uint32_t s = k % S;
        mbar_wait(full_bar + 8 * s, (k / S) & 1);
        const uint32_t rows = base + s * (uint32_t)Cfg::kStageBytes +
                              (uint32_t)((kPP ? 0 : cw) * 64 * kPtRowBytes);
        pt_split_tf32_smem<MI * 64 * kPtRowBytes / 16 / 128>(
            rows + 16u * (uint32_t)ct, 16u * 128u, (uint32_t)Cfg::kALoOffset);
        fence_proxy_async_smem();
        named_barrier_sync(kPtRoundBarrier + cw, 128);
      };
      constexpr int kParts = Cfg::kPartBuffers;
      float part[kParts][32];
      // Adds partial `b` (group jg's, complete) to the group's m64 x n64 sub-tile of acc.
      auto add_part = [&](int b, int jg) {
        fence_acc(part[b]);
#pragma unroll
        for (int r = 0; r < 32; ++r) {
          acc[pt_group_mi<BN>(jg)][pt_part_acc_index(pt_group_nb<BN>(jg), r)] += part[b][r];
        }
      };
      uint32_t cc = c;
      for (int kb = 0; kb < nkb; ++kb, ++cc) {
        const uint32_t s = cc % S;
        if (kb == 0) split_block(cc);  // later blocks: split during the previous block
        const uint64_t so = (uint64_t)s * kStageDesc;
#pragma unroll
        for (int j = 0; j < kSub; ++j) {
          const int mi = pt_group_mi<BN>(j), nb = pt_group_nb<BN>(j);
          float(&pj)[32] = part[j % kParts];
          // Low descriptor words (the start address field, no carry out of it: shared memory
          // ends below 256 KB): A (hi), + kALoDesc: A_lo; B_hi, + kBLoDesc: B_lo.
          const uint32_t da = (uint32_t)(a_desc0 + so + mi * kHalfDesc);
          const uint32_t db = (uint32_t)(b_desc0 + so + nb * kNBDesc);
          fence_acc(pj);
          wgmma_fence();
          // The 8 small terms (lo*hi, hi*lo of the 4 k steps) first, into a partial that is
          // still small, then the 4 hi*hi: every truncating tensor-core sum that aligns to a
          // large value then adds only large terms (half the worst error of the per-k-step order
          // in the host model, whose truncation this ordering targets).
          pt_wgmma_tf32_n64<0>(pj, da + kALoDesc, db, desc_hi);  // D = A_lo * B_hi
          pt_wgmma_tf32_n64<1>(pj, da, db + kBLoDesc, desc_hi);
#pragma unroll
          for (int ks = 1; ks < 4; ++ks) {
            pt_wgmma_tf32_n64<1>(pj, da + kALoDesc + 2 * ks, db + 2 * ks, desc_hi);
            pt_wgmma_tf32_n64<1>(pj, da + 2 * ks, db + kBLoDesc + 2 * ks, desc_hi);
          }
#pragma unroll
          for (int ks = 0; ks < 4; ++ks) pt_wgmma_tf32_n64<1>(pj, da + 2 * ks, db + 2 * ks, desc_hi);
          wgmma_commit();
          if (kParts == 2 && j > 0) {
            wgmma_wait<1>();  // group j - 1 is complete
            add_part((j - 1) % kParts, j - 1);
          }
          if (j == kSub - 1) {
            if (kb + 1 < nkb) split_block(cc + 1);  // while the block's last group runs
          } else if (kParts == 1) {
            wgmma_wait<0>();
            add_part(0, j);
          }
        }
        wgmma_wait<0>();  // the block's last group
        add_part((kSub - 1) % kParts, kSub - 1);
        if (lane == 0) mbar_arrive(empty_bar + 8 * s);  // every group of the block is done
      }
      // Ping-pong: let the other consumer start its next tile (as below).
      if (kPP && has_next) named_barrier_arrive(kPtOrderBarrier + 1 - cw, 256);
      c += (uint32_t)nkb;
    } else {
      uint32_t cc = c;
      uint32_t prev = 0;
      if constexpr (kTf32) {
        // TF32: A from registers, one commit group per k step (gemm_kxs_sm90's scheme, see the
        // top).
        uint32_t afr[4][MI][4];
        for (int kb = 0; kb < nkb; ++kb, ++cc) {
          const uint32_t s = cc % S;
          mbar_wait(full_bar + 8 * s, (cc / S) & 1);
          // The next step's fragment is loaded before this step's wgmmas issue (PREFETCH):
          // 10-15% faster on the ping-pong configs (common/hopper_ptx.cuh).
          tf32_rs_k_block<true, BN>(acc, afr, base + s * (uint32_t)Cfg::kStageBytes,
                                    b_desc0 + (uint64_t)s * kStageDesc, a_lane, kb > 0,
                                    empty_bar + 8 * prev, lane);
          prev = s;
        }
      } else {
        for (int kb = 0; kb < nkb; ++kb, ++cc) {
          const uint32_t s = cc % S;
          mbar_wait(full_bar + 8 * s, (cc / S) & 1);
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) fence_acc(acc[mi]);
          wgmma_fence();
          const uint64_t so = (uint64_t)s * kStageDesc;
#pragma unroll
          for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
              // k16 step (16-bit; TF32 runs the register-A loop above): 32 bytes further along
              // every 128-byte row (2 descriptor units); the hardware applies the swizzle to the
              // full address.
              Wgmma<T, BN>::run(acc[mi], a_desc0 + so + mi * kHalfDesc + 2 * ks,
                                b_desc0 + so + 2 * ks);
            }
          }
          wgmma_commit();
          if (kb > 0) {
            wgmma_wait<1>();  // this warp's wgmmas of k block kb-1 are done: release its stage
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) fence_acc(acc[mi]);
            if (lane == 0) mbar_arrive(empty_bar + 8 * prev);
          }
          prev = s;
        }
      }
      // Ping-pong: let the other consumer start its next tile (if this CTA has one; it then
      // syncs on this barrier exactly once per arrival).
      if (kPP && has_next) named_barrier_arrive(kPtOrderBarrier + 1 - cw, 256);
      // The final wait is unconditional (a no-op after no k blocks): a wait on a path only some
      // tiles take makes ptxas serialise every wgmma of the kernel (C7518) or inject waits of its
      // own (C7517), because it cannot prove the accumulators are complete before the epilogue.
      wgmma_wait<0>();
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) fence_acc(acc[mi]);
      if (nkb > 0 && lane == 0) mbar_arrive(empty_bar + 8 * prev);
      c += (uint32_t)nkb;
    }

    // ---- Epilogue table -> shared (buffer local & 1). ----
    float* t_mul = reinterpret_cast<float*>(my_tables + (local & 1) * Cfg::kTableBytes);
    float* t_add = t_mul + BN;
#pragma unroll
    for (int e = 0; e < kTE; ++e) {
      const int col = ct + 128 * e;
      if (col < BN) {
        // channel_affine on the values loaded above: the same EpilogueParams with scale / shift
        // pointing at this column's loaded entry (index 0), so (mul, add) are exactly its result.
        const float col_scale = te_scale[e], col_shift = te_shift[e];
        EpilogueParams col_epi = p.epi;
        if (col_epi.scale != nullptr) col_epi.scale = &col_scale;
        if (col_epi.shift != nullptr) col_epi.shift = &col_shift;
        const ChannelAffine a =
            channel_affine(col_epi, bias != nullptr ? to_float(te_bias[e]) : 0.f, 0);
        t_mul[col] = a.mul;
        t_add[col] = a.add;
      }
    }
    // Table visible to the warpgroup. The other buffer was last read in the epilogue of the
    // previous tile, which every thread finished before arriving here: no second barrier (the
    // same holds for the staging buffer, last read in the previous tile's epilogue).
    named_barrier_sync(kPtTableBarrier + cw, 128);
    ++local;

    // The 8 (mul, add) pairs of logical columns lc..lc+7.
    auto load_affine = [&](int lc, float (&mul)[8], float (&add)[8]) {
      *reinterpret_cast<float4*>(mul) = *reinterpret_cast<const float4*>(t_mul + lc);
      *reinterpret_cast<float4*>(mul + 4) = *reinterpret_cast<const float4*>(t_mul + lc + 4);
      *reinterpret_cast<float4*>(add) = *reinterpret_cast<const float4*>(t_add + lc);
      *reinterpret_cast<float4*>(add + 4) = *reinterpret_cast<const float4*>(t_add + lc + 4);
    };

    if (p.mode != kPtStoreStaged) {
      // ---- Stores from registers (NHWC-like output). ----
      int64_t row_off[MI][2];
      bool row_ok[MI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          row_off[mi][h] =
              pt_row_offset(p, ph, tl, pt_frag_row<kPP>(mi, cw, wv, rq, h), row_ok[mi][h]) +
              slice_off;
        }
      }
      // The activation and the store mode are template arguments, so a tile runs one compact
      // stretch of code (as in gemm_kxs_sm90's store_tile, whose comment says why).
      auto store_tile = [&](auto vec_c) {
        constexpr bool kVec = decltype(vec_c)::value;
#pragma unroll
        for (int cg = 0; cg < BN / kPtColGroup; ++cg) {
          const int lc = kPtColGroup * cg + 8 * q4;  // this lane's 8 logical columns lc..lc+7
          // fp32 vectors: the quad regroups its values (common/quad_regroup.cuh) so that each warp
          // store fills whole 32-byte sectors. Every lane takes part in the shuffles, so the
          // channel tail is tested per store below, and here only for the whole group (uniform).
          // Not in fp32 strict (3xTF32), which is bound by its three MMAs per product: there
          // the regroup measured 0-5% slower (SimpleBaseline d1 / d3, H100).
          constexpr bool regroup = kTf32 && !Cfg::kSplit && kVec;
          if (regroup ? tl.col0 + kPtColGroup * cg >= p.cout_g : tl.col0 + lc >= p.cout_g) {
            if (regroup) break;
            continue;
          }
          float mul[8], add[8];
          load_affine(lc, mul, add);
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              if (!regroup && !row_ok[mi][h]) continue;
              float v[8];
#pragma unroll
              for (int k = 0; k < 8; ++k) {
                const float a = acc[mi][pt_acc_index(cg, h, k)];
                v[k] = epilogue_value<kAct>(a, mul[k], add[k], p.epi.negative_slope);
              }
              if constexpr (!kTf32) {
                // A k slice of 16-bit operands keeps its fp32 sums (the workspace is fp32; the
                // reduce rounds once). Vec: Cout_g % 8 == 0, 32-byte aligned (os_c == 1).
                if (p.k_slices > 1) {
                  float* dst = static_cast<float*>(p.out) + row_off[mi][h] +
                               pt_col_offset(p, tl, lc);
                  if constexpr (kVec) {
                    *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
                    *reinterpret_cast<float4*>(dst + 4) = make_float4(v[4], v[5], v[6], v[7]);
                  } else {
#pragma unroll
                    for (int k = 0; k < 8; ++k)
                      if (tl.col0 + lc + k < p.cout_g) dst[k] = v[k];
                  }
                  continue;
                }
              }
              if constexpr (kVec) {
                if constexpr (kTf32 && !Cfg::kSplit) {
                  // Cout_g % 4 == 0: after the regroup v[0..3] are channels lo..lo+3 (lo =
                  // 32cg + 4q) and v[4..7] channels lo+16..lo+19, each vector 16-byte aligned
                  // (os_c == 1) and present iff its first channel is below Cout_g - col0.
                  regroup_quad_f32(v, lane);
                  const int lo = kPtColGroup * cg + 4 * q4;
                  if (row_ok[mi][h] && tl.col0 + lo < p.cout_g) {
                    *reinterpret_cast<float4*>(out + row_off[mi][h] + pt_col_offset(p, tl, lo)) =
                        make_float4(v[0], v[1], v[2], v[3]);
                  }
                  if (row_ok[mi][h] && tl.col0 + lo + 16 < p.cout_g) {
                    *reinterpret_cast<float4*>(out + row_off[mi][h] +
                                               pt_col_offset(p, tl, lo + 16)) =
                        make_float4(v[4], v[5], v[6], v[7]);
                  }
                } else if constexpr (kTf32) {
                  // fp32 strict: Cout_g % 4 == 0: lc < Cout_g - col0 covers the first 4
                  // channels, the second 4 exist iff lc + 4 < Cout_g - col0; both 16-byte
                  // aligned (os_c == 1).
                  T* dst = out + row_off[mi][h] + pt_col_offset(p, tl, lc);
                  *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
                  if (tl.col0 + lc + 4 < p.cout_g) {
                    *reinterpret_cast<float4*>(dst + 4) = make_float4(v[4], v[5], v[6], v[7]);
                  }
                } else {
                  T* dst = out + row_off[mi][h] + pt_col_offset(p, tl, lc);  // os_c == 1
                  // Cout_g % 8 == 0: all 8 channels exist, 16-byte aligned.
                  uint4 pk;
                  pk.x = pack2<T>(v[0], v[1]);
                  pk.y = pack2<T>(v[2], v[3]);
                  pk.z = pack2<T>(v[4], v[5]);
                  pk.w = pack2<T>(v[6], v[7]);
                  *reinterpret_cast<uint4*>(dst) = pk;
                }
              } else {
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                  if (tl.col0 + lc + k < p.cout_g)
                    out[row_off[mi][h] + pt_col_offset(p, tl, lc + k)] = from_float<T>(v[k]);
                }
              }
            }
          }
        }
      };
      if (p.mode == kPtStoreVec) {
        store_tile(std::true_type{});
      } else {
        store_tile(std::false_type{});
      }
    } else {
      // ---- Staged stores (NCHW and any other layout): chunks of kCols columns. ----
      using St = PtStaging<T, Cfg>;
      constexpr int R = Cfg::kRows;
      constexpr int kCols = St::kCols;
      constexpr int kLd = St::kLd;
      // Reader side: this thread stores tile row m_r (a fixed consumer row) of columns
      // ct / R + (128 / R) * it: a warp stores 32 consecutive rows of one column.
      const int r_row = ct & (R - 1);
      bool r_ok;
      const int64_t r_off = pt_row_offset(p, ph, tl, (kPP ? 0 : 64 * cw) + r_row, r_ok);
      // (called once; as a plain block instead, nvcc compiles these kernels to other code)
      auto store_staged = [&]() {
#pragma unroll
        for (int chunk = 0; chunk < BN / kCols; ++chunk) {
          // Fragments of the chunk's columns -> epilogue -> one rounding -> stg[col][row].
#pragma unroll
          for (int cg = 0; cg < BN / kPtColGroup; ++cg) {
            if ((kPtColGroup * cg + kPtColGroup - 1) / kCols < chunk ||
                (kPtColGroup * cg) / kCols > chunk)
              continue;  // compile time: group cg does not meet this chunk
            const int lc = kPtColGroup * cg + 8 * q4;
            if (lc / kCols != chunk) continue;  // kCols == 16: half of the group's lanes
            // Columns past Cout_g (a padded n tile of a few-channel layer) are never stored: no
            // epilogue for a lane whose 8 columns all lie there (an exact Tanh on DCGAN's
            // 3-channel output tile cost 13% of the kernel, H100). Per lane, so the chunk's
            // barriers stay as they are (skipping whole chunks made the 3xTF32 128x128s6pp
            // kernel spill).
            if (tl.col0 + lc >= p.cout_g) continue;
            float mul[8], add[8];
            load_affine(lc, mul, add);
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int row = (kPP ? 64 * mi : 0) + 16 * wv + rq + 8 * h;
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                  const float a = acc[mi][pt_acc_index(cg, h, k)];
                  float v;
                  v = epilogue_value<kAct>(a, mul[k], add[k], p.epi.negative_slope);
                  stg[(lc + k - chunk * kCols) * kLd + row] = from_float<T>(v);
                }
              }
            }
          }
          named_barrier_sync(kPtStagingBarrier + cw, 128);
          // stg -> output: consecutive lanes on consecutive rows of one column, this thread's
          // columns col_first + it * (128 / R). A padding row stores nothing; per element one
          // pointer add and one compare with the chunk's count of columns below Cout_g.
          if (r_ok) {
            const int col_first = chunk * kCols + ct / R;
            const int cols_left = p.cout_g - tl.col0 - col_first;
            const T* src = stg + (ct / R) * kLd + r_row;
            T* dst = out + (r_off + pt_col_offset(p, tl, col_first));
            const int64_t dst_step = (int64_t)(128 / R) * p.os_c;
#pragma unroll 4
            for (int it = 0; it < kCols * R / 128; ++it) {
              if (it * (128 / R) < cols_left) *dst = src[it * (128 / R) * kLd];
              dst += dst_step;
            }
          }
          // The next chunk overwrites stg; after the last one the next tile's table barrier
          // orders these reads before its writes.
          if (chunk + 1 < BN / kCols) named_barrier_sync(kPtStagingBarrier + cw, 128);
        }
      };
      store_staged();
    }
  }
#endif  // DECONV_PATCH_PT_SM90A_DEVICE
}

// ---------------------------------------------------------------------------------------------
// Weight packing for any weight strides: one thread per packed element, k fastest (coalesced
// writes; layout at the top; fp32 rounded to TF32). Weights with contiguous inner elements take
// the tiled pack in gemm_phase_tma.cu instead. Plain CUDA: runs on any architecture.
struct PtPackArgs {
  const void* w;
  void* packed;
  int64_t ws[4];  // weight strides: cin, cout/g, kh, kw
  int cin_g, cout_g, cin_pad, cout_pad;
  int kmax;       // packed row length (elements)
  int sw, phases;  // stride_w (phase index = rh*sw + rw), stride_h*stride_w
  int step_h, step_w;
  int taps_h[kMaxStride], taps_w[kMaxStride];  // taps per phase
  int kh0_h[kMaxStride], kh0_w[kMaxStride];    // first kernel index per phase
  int64_t total;  // groups * phases * cout_pad * kmax
};

// Weight element offset that packed element `idx` copies, or -1 for a zero.
[[maybe_unused]] __host__ __device__ __forceinline__ int64_t pt_pack_source(const PtPackArgs& a,
                                                                            int64_t idx) {
  const int k = (int)(idx % a.kmax);
  const int64_t row = idx / a.kmax;
  const int pos = (int)(row % a.cout_pad);
  const int64_t gp = row / a.cout_pad;
  const int phase = (int)(gp % a.phases);
  const int g = (int)(gp / a.phases);
  const int rh = phase / a.sw;
  const int rw = phase - rh * a.sw;
  const int oc = pt_logical_col(pos);
  const int tap = k / a.cin_pad;
  const int c = k - tap * a.cin_pad;
  const int taps_w = a.taps_w[rw];
  if (oc >= a.cout_g || c >= a.cin_g || tap >= a.taps_h[rh] * taps_w) return -1;
  const int th = tap / taps_w;
  const int tw = tap - th * taps_w;
  const int kh = a.kh0_h[rh] + th * a.step_h;
  const int kw = a.kh0_w[rw] + tw * a.step_w;
  return ((int64_t)g * a.cin_g + c) * a.ws[0] + (int64_t)oc * a.ws[1] + (int64_t)kh * a.ws[2] +
         (int64_t)kw * a.ws[3];
}

template <typename T>
__global__ void __launch_bounds__(256)
    gemm_phase_tma_pack_weight_kernel(const __grid_constant__ PtPackArgs a) {
  const T* __restrict__ w = static_cast<const T*>(a.w);
  T* __restrict__ packed = static_cast<T*>(a.packed);
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < a.total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t src = pt_pack_source(a, idx);
    if constexpr (std::is_same<T, float>::value) {
      packed[idx] = src >= 0 ? __uint_as_float(round_tf32_bits(__float_as_uint(w[src]))) : 0.f;
    } else {
      packed[idx] = src >= 0 ? w[src] : from_float<T>(0.f);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.
bool pt_aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }
int64_t pt_elem_bytes(ScalarKind kind) { return kind == ScalarKind::kFloat32 ? 4 : 2; }
int64_t pt_stage_k(ScalarKind kind) { return kPtRowBytes / pt_elem_bytes(kind); }

// First kernel index of each phase of one axis (-1 for a phase without taps). The taps of a
// phase are kh0, kh0 + step, ... (plan_axis counts them in the same increasing order).
void pt_first_taps(const AxisPhase& a, int (&kh0)[kMaxStride]) {
  for (int r = 0; r < kMaxStride; ++r) kh0[r] = -1;
  for (int k = 0; k < a.kernel; ++k) {
    const int64_t t = (int64_t)k * a.dil - a.pad;
    const int r = (int)(((t % a.stride) + a.stride) % a.stride);
    if (kh0[r] < 0) kh0[r] = k;
  }
}

// Weight-side geometry (all that packing depends on).
struct PtGeom {
  int64_t cin_pad, cbs, cout_pad, phases, kmax, rows;  // rows: groups * phases * cout_pad
};
PtGeom pt_geom(const ConvTranspose2dParams& p, ScalarKind kind, const AxisPlan& h,
               const AxisPlan& w) {
  PtGeom g{};
  const int64_t bk = pt_stage_k(kind);
  g.cin_pad = round_up(p.in_per_group, bk);
  g.cbs = g.cin_pad / bk;
  g.cout_pad = round_up(p.out_per_group, kPtColGroup);
  g.phases = (int64_t)h.stride * w.stride;
  int max_h = 0, max_w = 0;
  for (int r = 0; r < h.stride; ++r) max_h = h.ph[r].taps > max_h ? h.ph[r].taps : max_h;
  for (int r = 0; r < w.stride; ++r) max_w = w.ph[r].taps > max_w ? w.ph[r].taps : max_w;
  g.kmax = (int64_t)max_h * max_w * g.cin_pad;
  g.rows = p.groups * g.phases * g.cout_pad;
  return g;
}

// What packing depends on (and the kernel's weight-side limits). split: fp32 strict, whose
// packed weight is two blocks (hi, lo) of the layout, so twice the rows in one tensor map.
bool pt_weight_side_ok(const ConvTranspose2dParams& p, ScalarKind kind, bool split = false) {
  if (kind != ScalarKind::kFloat16 && kind != ScalarKind::kBFloat16 &&
      kind != ScalarKind::kFloat32)
    return false;
  if (!axis_supported(p.ph_h) || !axis_supported(p.ph_w)) return false;
  if (p.ph_h.stride * p.ph_w.stride > kPtMaxPhases) return false;
  if (p.groups < 1 || p.in_per_group < 1 || p.out_per_group < 1) return false;
  if (p.in_per_group * p.groups != p.in_channels || p.out_per_group * p.groups != p.out_channels)
    return false;
  if (p.in_channels >= kPtSizeLimit || p.out_channels >= kPtSizeLimit) return false;
  // A box of BK channels never crosses into the next group's channels.
  if (p.groups > 1 && p.in_per_group % pt_stage_k(kind) != 0) return false;
  for (int i = 0; i < 4; ++i)
    if (p.w_stride[i] < 0) return false;
  const AxisPlan h = plan_axis(p.ph_h, 0), w = plan_axis(p.ph_w, 0);
  const PtGeom g = pt_geom(p, kind, h, w);
  // int32 TMA row coordinates (+ one box), k coordinates and k block counts.
  const int64_t blocks = split ? 2 : 1;
  if (g.rows * blocks >= kPtInt32Limit - 512 || g.kmax >= kPtInt32Limit - 512) return false;
  return g.rows * blocks * g.kmax * pt_elem_bytes(kind) < ((int64_t)1 << 40);
}

// fp32 without TF32: the 3xTF32 (split) kernels and the two-block packed weight.
bool pt_is_split(ScalarKind kind, bool allow_tf32) {
  return kind == ScalarKind::kFloat32 && !allow_tf32;
}

// The A side's axis plan of a call producing `out_size` along the axis: the transposed
// convolution's phases, or for a strided correlation its one phase over every tap, read at
// y * scale + offset + t * dil (off0 = offset, in_step = -dil; the kernel scales the phase
// index by PtArgs::a_sh / a_sw). The weight side (packing) keeps plan_axis(ph, 0) alone.
AxisPlan pt_io_plan(const AxisPhase& ph, const InputGather& gather, int64_t out_size) {
  AxisPlan r = plan_axis(ph, out_size);
  if (gather.scale > 0) {
    r.in_step = -gather.dil;
    r.ph[0].off0 = gather.offset;
  }
  return r;
}

struct PtBox {
  int w, h, n;  // phase columns, phase rows, images; product 128, powers of two
};

// The largest box extent (log2) along an axis whose input is read every `scale` pixels: a TMA
// box spans extent * scale pixels, at most 256.
int pt_box_log2_cap(int scale) {
  int lg = 7;
  while (lg > 0 && (1 << lg) * (scale > 1 ? scale : 1) > 256) --lg;
  return lg;
}

// Box tiles of one phase image set (per group).
int64_t pt_box_tiles(const PtBox& b, int64_t batch, int64_t rows_h, int64_t rows_w) {
  return (batch + b.n - 1) / b.n * ((rows_h + b.h - 1) / b.h) * ((rows_w + b.w - 1) / b.w);
}

// Box extents along one axis summed over its phases with rows: sum of ceil(rows / extent).
int64_t pt_axis_blocks(const AxisPlan& a, int extent) {
  int64_t blocks = 0;
  for (int r = 0; r < a.stride; ++r)
    if (a.ph[r].rows > 0) blocks += ((int64_t)a.ph[r].rows + extent - 1) / extent;
  return blocks;
}

// The box with BW >= min_w with the fewest padded rows over the launched phases (= the fewest
// m tiles, returned in `tiles`); ties go to the wider box, then the taller one. Every row phase
// with rows is launched with every column phase with rows, so the sum of pt_box_tiles over
// those pairs is ceil(batch / n) x the row phases' blocks x the column phases' blocks (the
// same integers, a few divisions instead of a pass over the phase pairs per box: every launch
// asks this several times).
PtBox pt_best_box(int64_t batch, const AxisPlan& h, const AxisPlan& w, int min_w,
                  int64_t& best_tiles, int max_lw = 7, int max_lh = 7) {
  PtBox best{1 << (max_lw < 4 ? max_lw : 4), 1 << (max_lh < 3 ? max_lh : 3), 1};
  best.n = 128 / (best.w * best.h);
  best_tiles = -1;
  int64_t blocks_h[8], blocks_w[8];
  for (int l = 0; l < 8; ++l) {
    blocks_h[l] = pt_axis_blocks(h, 1 << l);
    blocks_w[l] = pt_axis_blocks(w, 1 << l);
  }
  for (int lw = max_lw; lw >= 0 && (1 << lw) >= min_w; --lw) {
    for (int lh = (7 - lw < max_lh ? 7 - lw : max_lh); lh >= 0; --lh) {
      const PtBox b{1 << lw, 1 << lh, 1 << (7 - lw - lh)};
      const int64_t tiles = (batch + b.n - 1) / b.n * blocks_h[lh] * blocks_w[lw];
      if (best_tiles < 0 || tiles < best_tiles) {
        best = b;
        best_tiles = tiles;
      }
    }
  }
  return best;
}

// The box of the launch (rule at the top): the fewest padded rows; for the staged store the
// widest BW <= min(16, widest phase rounded up to a power of two) whose best box has at most
// 1.25x the tiles of the overall best.
PtBox pt_pick_box(int64_t batch, const AxisPlan& h, const AxisPlan& w, bool staged,
                  int max_lw = 7, int max_lh = 7) {
  int64_t best_tiles = 0;
  const PtBox best = pt_best_box(batch, h, w, 1, best_tiles, max_lw, max_lh);
  if (!staged) return best;
  int64_t widest = 0;
  for (int rw = 0; rw < w.stride; ++rw) widest = w.ph[rw].rows > widest ? w.ph[rw].rows : widest;
  int target = 1;
  while (target < 16 && target < widest && target < (1 << max_lw)) target *= 2;
  for (int min_w = target; min_w > best.w; min_w /= 2) {
    int64_t tiles = 0;
    const PtBox b = pt_best_box(batch, h, w, min_w, tiles, max_lw, max_lh);
    if (tiles * 4 <= best_tiles * 5) return b;
  }
  return best;
}

// Store path (PtArgs::mode): 16-byte vectors of V = 16 / element size channels (8 or 4) when
// the channels are contiguous and every vector is aligned; element stores from registers when
// channels are the output's innermost dim of the two; staged (along m) otherwise.
int pt_store_mode(const ConvTranspose2dParams& p, ScalarKind kind) {
  const int64_t vec = 16 / pt_elem_bytes(kind);
  const int64_t* os = p.out_stride;
  const bool out_vec = os[1] == 1 && p.out_per_group % vec == 0 && pt_aligned16(p.output) &&
                       stride_multiple(os[0], p.batch, vec) &&
                       stride_multiple(os[2], p.out_h, vec) && stride_multiple(os[3], p.out_w, vec);
  return out_vec ? kPtStoreVec : (os[1] < os[3] ? kPtStoreDirect : kPtStoreStaged);
}

// The box of a call (pt_pick_box), within the TMA's 256-pixel extent where the input is read
// every `scale` pixels.
PtBox pt_call_box(const ConvTranspose2dParams& p, ScalarKind kind, const AxisPlan& h,
                  const AxisPlan& w) {
  return pt_pick_box(p.batch, h, w, pt_store_mode(p, kind) == kPtStoreStaged,
                     pt_box_log2_cap(p.gather_w.scale), pt_box_log2_cap(p.gather_h.scale));
}

int pt_log2(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

// Kernel arguments for tiles of `bn` columns and box `box` (no CUDA calls: the host emulation
// runs it). Returns false when the tile count or the k block total leaves int32 (supports).
bool pt_fill_args(PtArgs& a, const ConvTranspose2dParams& p, ScalarKind kind, int bn,
                  const PtBox& box, const AxisPlan& h, const AxisPlan& w,
                  int64_t* kblocks_total = nullptr) {
  const PtGeom geo = pt_geom(p, kind, h, w);
  a = PtArgs{};
  a.bias = p.bias;
  a.out = p.output;
  a.epi = p.epi;
  a.os_n = p.out_stride[0];
  a.os_c = p.out_stride[1];
  a.os_h = p.out_stride[2];
  a.os_w = p.out_stride[3];
  a.batch = (int)p.batch;
  a.cin_g = (int)p.in_per_group;
  a.cout_g = (int)p.out_per_group;
  a.cbs = (int)geo.cbs;
  a.in_step_h = h.in_step;
  a.in_step_w = w.in_step;
  a.sh = h.stride;
  a.sw = w.stride;
  a.bw = box.w;
  a.bh = box.h;
  a.bni = box.n;
  a.lg_bw = pt_log2(box.w);
  a.lg_bhw = pt_log2(box.w * box.h);
  a.tiles_n = (int)((p.batch + box.n - 1) / box.n);
  a.group_rows = (int)(geo.phases * geo.cout_pad);
  a.n_tiles = (int)((p.out_per_group + bn - 1) / bn);
  a.b_split_rows = (int)geo.rows;  // < 2^31 - 512 (pt_weight_side_ok)
  a.a_sh = p.gather_h.scale > 0 ? p.gather_h.scale : 1;
  a.a_sw = p.gather_w.scale > 0 ? p.gather_w.scale : 1;
  a.k_slices = 1;
  a.slice_stride = 0;

  a.mode = pt_store_mode(p, kind);

  // Launched phases in launch order (rh << 8 | rw), in segments of ncw (tile order at the top).
  auto taps_of = [&](int rc) { return h.ph[rc >> 8].taps * w.ph[rc & 0xff].taps; };
  auto sort_desc = [](int* v, int n, auto key) {  // insertion sort, descending key, stable
    for (int x = 1; x < n; ++x)
      for (int y = x; y > 0 && key(v[y - 1]) < key(v[y]); --y) {
        const int t = v[y];
        v[y] = v[y - 1];
        v[y - 1] = t;
      }
  };
  int cols[kMaxStride];
  int ncols = 0;
  for (int rw = 0; rw < w.stride; ++rw)
    if (w.ph[rw].rows > 0) cols[ncols++] = rw;
  int order[kPtMaxPhases];
  int count = 0;
  a.ncw = 1;
  if (a.mode == kPtStoreStaged && ncols > 1) {
    // Interleaved: one segment per launched row phase, most taps in total first (stable), its
    // phases the launched column phases in rw order.
    int taps_cols = 0;
    for (int x = 0; x < ncols; ++x) taps_cols += w.ph[cols[x]].taps;
    int rows[kMaxStride];
    int nrows = 0;
    for (int rh = 0; rh < h.stride; ++rh)
      if (h.ph[rh].rows > 0) rows[nrows++] = rh;
    sort_desc(rows, nrows, [&](int rh) { return h.ph[rh].taps * taps_cols; });
    for (int y = 0; y < nrows; ++y)
      for (int x = 0; x < ncols; ++x) order[count++] = rows[y] << 8 | cols[x];
    a.ncw = ncols;
  } else {
    // Phase-major: one segment per launched phase, most taps first (stable: ties in (rh, rw)
    // order).
    for (int rh = 0; rh < h.stride; ++rh)
      for (int rw = 0; rw < w.stride; ++rw)
        if (h.ph[rh].rows > 0 && w.ph[rw].rows > 0) order[count++] = rh << 8 | rw;
    sort_desc(order, count, taps_of);
  }
  int64_t tiles = 0, kblocks = 0;
  for (int s = 0; s < count; s += a.ncw) {
    const AxisPhaseInfo& ih = h.ph[order[s] >> 8];
    int64_t seg_w = 0;  // the segment's j-boxes: its phases' maximum
    for (int x = 0; x < a.ncw; ++x) {
      const int64_t own_w = (w.ph[order[s + x] & 0xff].rows + box.w - 1) / box.w;
      seg_w = own_w > seg_w ? own_w : seg_w;
    }
    const int64_t tiles_h = (ih.rows + box.h - 1) / box.h;
    const int64_t seg_hw = tiles_h * seg_w;  // < 2^60
    if (seg_hw >= kPtMaxTiles) return false;
    // Each factor below is < 2^30 (ncw <= 16) and each partial product is checked: no int64
    // overflow.
    int64_t seg_tiles = seg_hw * a.tiles_n;
    if (seg_tiles >= kPtMaxTiles) return false;
    seg_tiles *= a.n_tiles;
    if (seg_tiles >= kPtMaxTiles) return false;
    seg_tiles *= p.groups;
    if (seg_tiles >= kPtMaxTiles) return false;
    const int64_t phase_live_per_w = seg_tiles / seg_w;  // live tiles per own j-box
    seg_tiles *= a.ncw;
    if (seg_tiles >= kPtMaxTiles) return false;
    for (int x = 0; x < a.ncw; ++x) {
      const int q = s + x;
      const int rh = order[q] >> 8, rw = order[q] & 0xff;
      const AxisPhaseInfo& iw = w.ph[rw];
      PtPhase& ph = a.ph[q];
      const int64_t own_w = (iw.rows + box.w - 1) / box.w;
      const int64_t kb = (int64_t)ih.taps * iw.taps * geo.cbs;
      if (kb >= kPtInt32Limit) return false;
      ph.tile_begin = (int)tiles;
      ph.tiles_w = (int)seg_w;
      ph.tiles_hw = (int)seg_hw;
      ph.own_w = (int)own_w;
      ph.rows_h = ih.rows;
      ph.rows_w = iw.rows;
      ph.off_h = ih.off0;
      ph.off_w = iw.off0;
      ph.taps_w = iw.taps;
      ph.kb = (int)kb;
      ph.b_row = (int)((rh * w.stride + rw) * geo.cout_pad);
      ph.rc = order[q];
      kblocks += phase_live_per_w * own_w * kb;  // < 2^30 * 2^31
      if (kblocks >= kPtInt32Limit) return false;
    }
    tiles += seg_tiles;
    if (tiles >= kPtMaxTiles) return false;
  }
  a.tiles = (int)tiles;
  a.num_phases = count;
  if (kblocks_total != nullptr) *kblocks_total = kblocks;
  return true;
}

// Grid (persistent: min(SMs, tiles)) and the CTA turn rotation of an interleaved launch: pos
// advances by rot every `period` turns (1; 2 for ping-pong, where each consumer takes every
// other turn) so that a CTA's (or ping-pong consumer's) column phase x = t mod ncw advances by
// one: period*grid + rot == 1 (mod ncw). Without it a grid that is a multiple of ncw would give
// each CTA one column phase for the whole launch (unbalanced when their tap counts differ).
int pt_schedule(PtArgs& a, int sms, bool pingpong) {
  const int grid = a.tiles < sms ? a.tiles : sms;
  a.rot = 0;
  if (a.ncw > 1 && grid > 0) {
    const int period = pingpong ? 2 : 1;
    const int r = (int)((1 - (int64_t)period * grid) % a.ncw);
    a.rot = (r < 0 ? r + a.ncw : r) % grid;
  }
  return grid;
}

// ---- k slices ----------------------------------------------------------------------------
// A call whose GEMM tiles leave most SMs idle (few output rows, deep sums: an input gradient of
// a small image) splits each tile's k blocks into slices: the tiles of slice s store their fp32
// sums into slice s of a workspace, and common/k_slice_reduce.cuh adds the slices in order
// (deterministic) and rounds once into the output. The slices' tiles store into the workspace
// as into a dense channels_last fp32 output (pt_slice_params), so they take the Vec or Direct
// store and one phase per segment.
constexpr int kPtMaxSlices = 16;
// k blocks per slice: fewer leave too little work to pay for the workspace and the reduce
// (docs/performance/training.md, "k slices").
constexpr int kPtMinSliceBlocks = 8;

// Elements of one slice of the workspace: the output's, dense.
int64_t pt_slice_elems(const ConvTranspose2dParams& p) {
  return p.batch * p.out_channels * p.out_h * p.out_w;
}

// The call with the workspace as its output: fp32 sums in dense channels_last order.
ConvTranspose2dParams pt_slice_params(const ConvTranspose2dParams& p, void* workspace) {
  ConvTranspose2dParams q = p;
  q.output = workspace;
  q.out_stride[1] = 1;
  q.out_stride[3] = p.out_channels;
  q.out_stride[2] = p.out_channels * p.out_w;
  q.out_stride[0] = p.out_channels * p.out_w * p.out_h;
  q.out_channels_last = true;
  return q;
}

// No bias and no epilogue: each slice stores its plain sums (the reduce adds nothing else).
bool pt_plain_sums(const ConvTranspose2dParams& p) {
  return p.bias == nullptr && p.epi.scale == nullptr && p.epi.shift == nullptr &&
         p.epi.activation == Activation::kNone;
}

// Slices of a call whose launch arguments (for the workspace output, no slices yet) are `a`:
// only a strided correlation of plain sums (the input gradient), and only when its tiles fill
// at most half of the SMs. Then as many as keep the sliced tiles within one wave, each slice of
// at least kPtMinSliceBlocks k blocks.
int pt_pick_slices(const ConvTranspose2dParams& p, const PtArgs& a, int sms) {
  if (p.gather_h.scale == 0 || !pt_plain_sums(p) || a.ncw != 1 || a.mode == kPtStoreStaged)
    return 1;
  if (a.tiles <= 0 || 2 * (int64_t)a.tiles > sms) return 1;
  int kb = 0;
  for (int q = 0; q < a.num_phases; ++q) kb = a.ph[q].kb > kb ? a.ph[q].kb : kb;
  int slices = sms / a.tiles < kPtMaxSlices ? sms / a.tiles : kPtMaxSlices;
  while (slices > 1 && kb < kPtMinSliceBlocks * slices) --slices;
  return slices;
}

// Launch arguments in `slices` k slices, each a whole output of workspace (a and p of the
// workspace call, pt_slice_params); false for sums that are not plain, a staged store or tiles
// beyond int32.
bool pt_apply_slices(PtArgs& a, const ConvTranspose2dParams& p, int slices) {
  if (slices <= 1) return true;
  if (slices > kPtMaxSlices || !pt_plain_sums(p) || a.ncw != 1 || a.mode == kPtStoreStaged)
    return false;
  const int64_t tiles = (int64_t)a.tiles * slices;
  if (tiles >= kPtMaxTiles) return false;
  a.tiles = (int)tiles;
  a.k_slices = slices;
  a.slice_stride = pt_slice_elems(p);
  return true;
}

PtPackArgs pt_pack_args(const ConvTranspose2dParams& p, ScalarKind kind, void* packed) {
  const AxisPlan h = plan_axis(p.ph_h, 0), w = plan_axis(p.ph_w, 0);
  const PtGeom geo = pt_geom(p, kind, h, w);
  PtPackArgs a{};
  a.w = p.weight;
  a.packed = packed;
  for (int i = 0; i < 4; ++i) a.ws[i] = p.w_stride[i];
  a.cin_g = (int)p.in_per_group;
  a.cout_g = (int)p.out_per_group;
  a.cin_pad = (int)geo.cin_pad;
  a.cout_pad = (int)geo.cout_pad;
  a.kmax = (int)geo.kmax;
  a.sw = w.stride;
  a.phases = (int)geo.phases;
  a.step_h = h.step;
  a.step_w = w.step;
  for (int r = 0; r < kMaxStride; ++r) {
    a.taps_h[r] = h.ph[r].taps;
    a.taps_w[r] = w.ph[r].taps;
  }
  pt_first_taps(p.ph_h, a.kh0_h);
  pt_first_taps(p.ph_w, a.kh0_w);
  a.total = geo.rows * geo.kmax;
  return a;
}

// No output element (sizes are checked non-negative first; no product that could overflow).
bool pt_output_empty(const ConvTranspose2dParams& p) {
  return p.batch == 0 || p.out_channels == 0 || p.out_h == 0 || p.out_w == 0;
}

// A strided correlation's gather, on both axes or neither: TMA steps at most 8 pixels per box
// element, the weight side is the one-phase axis (stride 1, padding 0, dilation 1), and every
// input coordinate y * scale + offset + t * dil stays an int32.
bool pt_gather_ok(const ConvTranspose2dParams& p) {
  if (p.gather_h.scale == 0 && p.gather_w.scale == 0) return true;
  auto axis_ok = [](const InputGather& g, const AxisPhase& a, int64_t out) {
    const int64_t reach = (int64_t)g.dil * a.kernel + (g.offset < 0 ? -g.offset : g.offset);
    return g.scale >= 1 && g.scale <= 8 && g.dil >= 1 && a.stride == 1 && a.pad == 0 &&
           a.dil == 1 && reach < (1 << 24) && out * g.scale + reach < kPtInt32Limit - 4096;
  };
  return axis_ok(p.gather_h, p.ph_h, p.out_h) && axis_ok(p.gather_w, p.ph_w, p.out_w);
}

// Everything supports() checks except the build, the driver and the device.
[[maybe_unused]] bool pt_geometry_ok(const ConvTranspose2dParams& p, ScalarKind kind,
                                     bool split = false) {
  if (!pt_weight_side_ok(p, kind, split)) return false;
  if (!pt_gather_ok(p)) return false;
  const int act = (int)p.epi.activation;
  if (act < (int)Activation::kNone || act > (int)Activation::kHardswish) return false;
  if (p.batch < 0 || p.in_h < 0 || p.in_w < 0 || p.out_h < 0 || p.out_w < 0) return false;
  if (p.batch >= kPtSizeLimit || p.in_h >= kPtSizeLimit || p.in_w >= kPtSizeLimit ||
      p.out_h >= kPtSizeLimit || p.out_w >= kPtSizeLimit)
    return false;
  for (int i = 0; i < 4; ++i)
    if (p.in_stride[i] < 0 || p.out_stride[i] < 0) return false;
  if (pt_output_empty(p)) return true;  // nothing to launch
  if (p.output == nullptr || p.input == nullptr || !pt_aligned16(p.input)) return false;
  if (p.in_h < 1 || p.in_w < 1) return false;
  // A is read by TMA: channel stride 1, n/h/w strides positive multiples of 16 bytes below 2^40
  // (a size-1 dim gets a valid stride substituted at launch).
  if (p.in_stride[1] != 1 && p.in_channels > 1) return false;
  const int64_t eb = pt_elem_bytes(kind);
  auto tma_stride_ok = [eb](int64_t stride, int64_t size) {
    return size <= 1 || (stride > 0 && (stride * eb) % 16 == 0 && stride * eb < ((int64_t)1 << 40));
  };
  if (!tma_stride_ok(p.in_stride[0], p.batch) || !tma_stride_ok(p.in_stride[2], p.in_h) ||
      !tma_stride_ok(p.in_stride[3], p.in_w))
    return false;
  // int32 tile indices and k block counters: the most tiles come with the narrowest tile.
  const AxisPlan h = pt_io_plan(p.ph_h, p.gather_h, p.out_h);
  const AxisPlan w = pt_io_plan(p.ph_w, p.gather_w, p.out_w);
  PtArgs a;
  return pt_fill_args(a, p, kind, 64, pt_call_box(p, kind, h, w), h, w);
}

CUtensorMapDataType pt_tma_type(ScalarKind kind) {
  return kind == ScalarKind::kFloat32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
         : kind == ScalarKind::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                         : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// Tiled map with the 128-byte swizzle (matches smem_desc_k128), out-of-bounds elements read as
// zero. fp32 is plain FLOAT32 (a byte copy: the kernel rounds A to TF32 itself).
// `elem_strides` (rank values, or null for 1): a box element every that many along a dim.
bool pt_encode(CUtensorMap* map, ScalarKind kind, const void* ptr, int rank,
               const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
               const cuuint32_t* elem_strides = nullptr) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint32_t ones[4] = {1, 1, 1, 1};
  if (elem_strides == nullptr) elem_strides = ones;
  return encode(map, pt_tma_type(kind), (cuuint32_t)rank, const_cast<void*>(ptr), dims, strides,
                box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Input map: dims {C, W, H, N} (innermost first), box {BK, BW, BH, BNI}; a strided correlation
// reads every scale-th pixel: box {BK, BW * scale_w, BH * scale_h, BNI} with those element
// strides (BW x BH pixels land in shared memory as before). A size-1 dim may carry any stride in
// PyTorch; it gets the dense one (its only coordinate in range is 0).
bool pt_encode_input(CUtensorMap* map, const ConvTranspose2dParams& p, ScalarKind kind,
                     const PtBox& box) {
  const int64_t eb = pt_elem_bytes(kind);
  auto pick = [](int64_t stride_bytes, int64_t size, int64_t dense) -> cuuint64_t {
    return (cuuint64_t)(size <= 1 ? dense : stride_bytes);
  };
  const cuuint64_t sw = pick(p.in_stride[3] * eb, p.in_w, round_up(p.in_channels * eb, 16));
  const cuuint64_t sh = pick(p.in_stride[2] * eb, p.in_h, (int64_t)sw * p.in_w);
  const cuuint64_t sn = pick(p.in_stride[0] * eb, p.batch, (int64_t)sh * p.in_h);
  const cuuint64_t dims[4] = {(cuuint64_t)p.in_channels, (cuuint64_t)p.in_w, (cuuint64_t)p.in_h,
                              (cuuint64_t)p.batch};
  const cuuint64_t strides[3] = {sw, sh, sn};
  const cuuint32_t sw_px = p.gather_w.scale > 0 ? (cuuint32_t)p.gather_w.scale : 1;
  const cuuint32_t sh_px = p.gather_h.scale > 0 ? (cuuint32_t)p.gather_h.scale : 1;
  const cuuint32_t boxd[4] = {(cuuint32_t)pt_stage_k(kind), (cuuint32_t)box.w * sw_px,
                              (cuuint32_t)box.h * sh_px, (cuuint32_t)box.n};
  const cuuint32_t elem_strides[4] = {1, sw_px, sh_px, 1};
  return pt_encode(map, kind, p.input, 4, dims, strides, boxd, elem_strides);
}

// Packed weight map: [rows][Kmax] (split: [2 * rows][Kmax], the hi block then the lo block),
// box {BK, BN}.
bool pt_encode_weight(CUtensorMap* map, const ConvTranspose2dParams& p, ScalarKind kind,
                      const void* packed, int bn, bool split) {
  const AxisPlan h = plan_axis(p.ph_h, 0), w = plan_axis(p.ph_w, 0);
  const PtGeom geo = pt_geom(p, kind, h, w);
  const cuuint64_t dims[2] = {(cuuint64_t)geo.kmax, (cuuint64_t)(geo.rows * (split ? 2 : 1))};
  const cuuint64_t strides[1] = {(cuuint64_t)(geo.kmax * pt_elem_bytes(kind))};
  const cuuint32_t boxd[2] = {(cuuint32_t)pt_stage_k(kind), (cuuint32_t)bn};
  return pt_encode(map, kind, packed, 2, dims, strides, boxd);
}

// Config -1 (not measured yet; autotune times all of them): Cout_g <= 64 -> 128x64 ping-pong;
// at most one 128x128 tile per SM -> cooperative 128x128 (both warpgroups on the one tile);
// Cout_g > 128 and clearly fewer waves of 128x256 tiles (a 128x256 tile counted as 1.8 of
// 128x128: twice the MMAs for 1.5x the loads) -> 128x256; else 128x128 ping-pong.
// fp32 strict (split) is compute-bound: 3 MMAs per product, and every config issues the same
// m64n64 wgmma groups, so a wider tile saves loads but no MMA time. Cout_g <= 64, or so few
// tiles that even 128x64 ones fill at most one wave -> 128x64 ping-pong (twice the CTAs of
// 128x128; H100, each config forced: DCGAN g2 65 vs 93 us, pix2pix u2 121 vs 174 us); else
// cooperative 128x128 (both warpgroups keep double-buffered groups on the tensor cores, where
// the strict 128x128 ping-pong waits for each group and 128x256 has 2 stages; within 10% of the
// best config on the suite's other strict layers).
int pt_pick_config(int64_t cout_g, int64_t m_tiles, int sms, bool split = false) {
  if (cout_g <= 64) return 3;
  const int64_t t128 = m_tiles * ((cout_g + 127) / 128);
  if (split) return sms > 0 && 2 * t128 <= sms ? 3 : 1;
  if (sms <= 0) return 0;
  if (t128 <= sms) return 1;
  if (cout_g > 128) {
    const int64_t waves256 = (m_tiles * ((cout_g + 255) / 256) + sms - 1) / sms;
    const int64_t waves128 = (t128 + sms - 1) / sms;
    if (waves256 * 18 <= waves128 * 10) return 2;
  }
  return 0;
}

template <typename T, class Cfg>
cudaError_t pt_launch_cfg(const ConvTranspose2dParams& p, ScalarKind kind, const void* packed,
                          const AxisPlan& h, const AxisPlan& w, const PtBox& box, int device,
                          int sms, int k_slices, cudaStream_t stream) {
  PtArgs a;
  if (!pt_fill_args(a, p, kind, Cfg::kBN, box, h, w)) return cudaErrorInvalidValue;
  if (!pt_apply_slices(a, p, k_slices)) return cudaErrorInvalidValue;
  if (a.tiles == 0) return cudaSuccess;

  void (*kernel)(const CUtensorMap, const CUtensorMap, const PtArgs) = nullptr;
  dispatch_activation(p.epi.activation, [&](auto act_c) {
    kernel = conv_transpose2d_gemm_phase_tma_kernel<T, Cfg, decltype(act_c)::value>;
  });
  if (kernel == nullptr) return cudaErrorInvalidDeviceFunction;  // (another activation's unit)
  const cudaError_t err = ensure_dynamic_smem(kernel, Cfg::kTotalBytes, device);
  if (err != cudaSuccess) return err;

  CUtensorMap map_a, map_b;
  if (!pt_encode_input(&map_a, p, kind, box) ||
      !pt_encode_weight(&map_b, p, kind, packed, Cfg::kBN, Cfg::kSplit))
    return cudaErrorInvalidValue;
  const unsigned grid = (unsigned)pt_schedule(a, sms, Cfg::kPingPong);
  kernel<<<grid, kPtThreads, Cfg::kTotalBytes, stream>>>(map_a, map_b, a);
  return cudaGetLastError();
}

// The tile config of index I (SPLIT: fp32 strict's of the same shape).
template <bool SPLIT, int I>
struct PtConfigAt;
template <> struct PtConfigAt<false, 0> { using type = PtCfg0; };
template <> struct PtConfigAt<false, 1> { using type = PtCfg1; };
template <> struct PtConfigAt<false, 2> { using type = PtCfg2; };
template <> struct PtConfigAt<false, 3> { using type = PtCfg3; };
template <> struct PtConfigAt<true, 0> { using type = PtSplitCfg0; };
template <> struct PtConfigAt<true, 1> { using type = PtSplitCfg1; };
template <> struct PtConfigAt<true, 2> { using type = PtSplitCfg2; };
template <> struct PtConfigAt<true, 3> { using type = PtSplitCfg3; };

// Tile columns (BN) of config index c.
int pt_config_bn(int c) {
  switch (c) {
    case 0: return PtCfg0::kBN;
    case 1: return PtCfg1::kBN;
    case 2: return PtCfg2::kBN;
    case 3: return PtCfg3::kBN;
  }
  return 0;
}

// The config a call runs: `config` when it names one, the heuristic's for -1 (SPLIT: fp32
// strict); -1 when the call cannot run.
template <bool SPLIT>
int pt_resolve_config(const ConvTranspose2dParams& p, ScalarKind kind, int config) {
  if (config >= 0) return config < kPtNumConfigs ? config : -1;
  const int sms = device_sm_count(current_device());
  if (sms <= 0) return -1;
  const AxisPlan h = pt_io_plan(p.ph_h, p.gather_h, p.out_h);
  const AxisPlan w = pt_io_plan(p.ph_w, p.gather_w, p.out_w);
  const PtBox box = pt_call_box(p, kind, h, w);
  int64_t m_tiles = 0;
  for (int rh = 0; rh < h.stride; ++rh)
    for (int rw = 0; rw < w.stride; ++rw)
      if (h.ph[rh].rows > 0 && w.ph[rw].rows > 0)
        m_tiles += pt_box_tiles(box, p.batch, h.ph[rh].rows, w.ph[rw].rows);
  return pt_pick_config(p.out_per_group, m_tiles * p.groups, sms, SPLIT);
}

// Config I's launch (SPLIT: fp32 strict, T = float), in k_slices slices (p's output then the
// workspace: pt_slice_params). Each (element type, config) is compiled in a generated file of
// its own, so that a build compiles the configs' kernels in parallel.
template <typename T, bool SPLIT, int I>
cudaError_t pt_launch_config(const ConvTranspose2dParams& p, ScalarKind kind, const void* packed,
                             int k_slices, cudaStream_t stream) {
  static_assert(!SPLIT || std::is_same<T, float>::value, "3xTF32 is an fp32 mode");
  const int device = current_device();
  const int sms = device_sm_count(device);
  if (sms <= 0) return cudaErrorInvalidValue;
  const AxisPlan h = pt_io_plan(p.ph_h, p.gather_h, p.out_h);
  const AxisPlan w = pt_io_plan(p.ph_w, p.gather_w, p.out_w);
  const PtBox box = pt_call_box(p, kind, h, w);
  return pt_launch_cfg<T, typename PtConfigAt<SPLIT, I>::type>(p, kind, packed, h, w, box, device,
                                                                sms, k_slices, stream);
}

}  // namespace

}  // namespace deconv_patch

// The GEMM launchers (generated, tools/generate_instances.py): per element type and fp32 mode
// one that picks the config (same contract as launch_conv_transpose2d_gemm_phase_tma after its
// checks), and per config the one that runs it, each in a translation unit of its own.
#include "gemm_phase_tma/gemm_phase_tma_instances.h"
