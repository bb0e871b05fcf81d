// gemm_kxs_sm90's kernels and host helpers, included by gemm_kxs_sm90/gemm_kxs_sm90.cu (the
// public API) and by one translation unit per element type (conv_transpose2d_gemm_kxs_sm90_
// {f16,bf16,f32}.cu), which instantiate the GEMM kernels: three smaller units compile in
// parallel, where one unit holding every instantiation was the build's long pole. The
// kernel-area kernels of configs 3..5 have their own units per element type
// (conv_transpose2d_gemm_kxs_sm90_area_{f16,bf16,f32}.cu), for the same reason.
#pragma once
// Transposed convolution with kernel == stride (padding 0, dilation 1, output_padding 0,
// groups 1), 16-bit or fp32 with TF32 allowed, channels_last input (or, 16-bit only, NCHW input
// read in place: "NCHW paths" below), as one persistent warp-specialised GEMM on Hopper (TMA +
// wgmma.mma_async). sm_90a only; see the header for the supported subset.
//
// Index math (the only place it is spelled out). Taps never overlap when kernel == stride, so
// output pixel (ih*SH + kh, iw*SW + kw) receives exactly one input pixel:
//     m = (n*H + ih)*W + iw     in [0, M),  M = N*H*W                      (GEMM row)
//     k = input channel         in [0, K),  K = Cin                        (reduction)
//     j = tap*Cout + co         in [0, NC), NC = KH*KW*Cout, tap = kh*KW + kw ("tap-major")
//     A[m, k] = input[m*Cin + k]             (dense channels_last: the input is A, row-major)
//     B[k, j] = weight[k, co, kh, kw]
//     out[n*os_n + (ih*SH + kh)*os_h + (iw*SW + kw)*os_w + co*os_c] = epilogue_co(sum_k A*B)
// The output offset splits into a row part and a column part (kxs_row_offset, kxs_col_offset):
//     row(m) = n*os_n + ih*(SH*os_h) + iw*(SW*os_w),   col(j) = kh*os_h + kw*os_w + co*os_c.
// For one (m, tap) the Cout channels are consecutive j, and contiguous when os_c == 1.
//
// Packed weight (launch_gemm_kxs_sm90_pack_weight): K-major, [NC_pad][Cin] of the input's
// element type with NC_pad = round_up(NC, 32):  packed[pos*Cin + k] = B[k, kxs_logical_col(pos)]
// (0 when that column is >= NC); fp32 values are stored rounded to TF32 (round_tf32_bits, the
// same rounding as cvt.rna.tf32.f32: exact TF32 values in fp32 containers). Physical GEMM
// column pos (the wgmma N index) holds logical column j = kxs_logical_col(pos), a permutation
// inside each aligned group of 32. The wgmma accumulator fragment gives lane l (q = l%4) the
// physical columns pos = 32g + 8i + 2q + e (i = 0..3, e = 0, 1): its "value k = 2i + e" of
// group g, at accumulator kxs_acc_index(g, h, k). The permutation makes value k the logical
// column 32g + kxs_lane_col(q, k):
//   16-bit: 8q + k. The lane's 8 values are 8 consecutive output channels of one tap (Cout % 8
//     == 0), stored as one 16-byte vector straight from its registers: no shuffles, no staging.
//   fp32: 16(k/4) + 4q + k%4. Values 0..3 and 4..7 are channels 4q.. and 16 + 4q.. (Cout % 4
//     == 0: 4-aligned groups of 4 logical columns are 4 consecutive channels of one tap), two
//     16-byte vectors; the quad's 4 lanes then cover 64 contiguous bytes with each store, whole
//     32-byte sectors. (8 consecutive fp32 per lane, as 16-bit has, would half-fill every sector
//     of each store: ncu counted twice the L2 sectors, docs/performance/kxs.md.)
// The A and B tiles are loaded by TMA with OOB zero fill, so M, NC and K tails need no padding
// (Cin * element size is a multiple of 16 bytes, as TMA requires of the row stride).
//
// Tile 128 (m) x BN (j) x BK (k), BK = 128 bytes of k = 64 16-bit or 32 fp32 elements; 384
// threads = warpgroup 0 (producer: one thread issues TMA) + warpgroups 1, 2 (consumers).
// Persistent: grid = min(#SMs, tiles), CTA b takes tiles b, b + grid, ...; tile t = (m tile
// t / n_tiles, n tile t % n_tiles), so the CTAs running at one time share A rows and all of B in
// L2. An n tile is BN consecutive j ("tap-major tiles"), except for the kh-row and kernel-area
// tiles of the staged store (NCHW paths below). Cooperative configs: both consumers work on every
// tile (consumer w: rows 64w..64w+63, one m64nBN accumulator). Ping-pong config: consumer w takes
// every other tile of its CTA (all 128 rows: two m64nBN accumulators), so one consumer's
// epilogue overlaps the other's MMAs.
//
// Shared memory (1024-byte aligned): STAGES x [A 128 rows | B BN rows], each row 128 bytes
// (BK k) in the TMA/wgmma 128-byte swizzle (16-byte chunk q of row r stored at q ^ (r % 8));
// per consumer two epilogue tables (double-buffered by tile parity); full/empty mbarriers.
// Ring protocol, k block counter c (per CTA, running over its tiles in order; the producer sees
// every tile, a consumer computes c = (CTA-local tile index)*KB + kb), stage s = c % STAGES,
// round r = c / STAGES:
//     producer: wait empty[s] parity (r & 1) ^ 1   (round 0: passes on the fresh barrier)
//               arrive.expect_tx(full[s], A box + B box bytes); TMA A, TMA B -> full[s]
//     consumer: wait full[s] parity r & 1; wgmma (4 k steps of 32 bytes); commit;
//               wgmma.wait_group(1) (fp32: A from registers, one group per k step, below)
//               -> the previous k block's wgmmas are done: each warp's lane 0 arrives on
//               empty[prev s] (count = consumer warps reading a stage: 8 cooperative, 4
//               ping-pong). After the last k block: wait_group(0), arrive.
// Ping-pong adds an order barrier: a consumer starts a tile's main loop only after the other
// one has issued the main loop of the previous tile (see the kernel for why the ring needs it).
// TMA counts the full box in complete_tx even where it zero-fills out of bounds, so expect_tx is
// always kStageBytes (NCHW input: less a box not loaded, below). The producer runs ahead into
// the next tile while consumers run the epilogue. Consumer per tile: epilogue table values
// loaded into registers (global loads in flight during the MMAs), MMAs, table stored to shared,
// named barrier (its 128 threads), epilogue from registers to global (or via staging, below).
//
// wgmma m64nNk16 (16-bit) / m64nNk8 (tf32) accumulator fragment, the same for both (warp v of
// the warpgroup, lane l): register d[4*c + 2*h + e] holds row 16v + l/4 + 8h, physical column
// 8c + 2*(l%4) + e.
//
// fp32 (TF32 allowed). Tensor cores read only the top 19 bits of a tf32 operand (truncation), so
// both operands are rounded to TF32 by round-to-nearest, ties away (cvt.rna) first: B once, by the
// packing kernel; A (raw fp32 input, loaded by TMA) in registers: the TF32 wgmmas take A from
// registers ("RS" form, WgmmaRsTf32). Per k step, each warp loads the fragment of its 16 rows x
// 8 k of each m64 half with one ldmatrix.x4 (b16 8x8 matrices of 16-byte rows = 4 tf32: matrix
// i = rows 8(i & 1).. of 16-byte chunk 2ks + (i >> 1), un-swizzling the 128-byte rows: chunk q
// of row r at q ^ (r % 8)), which lands exactly in mma.m16n8k8's A fragment order, rounds the 4
// values (cvt.rna) and issues the wgmma. Each k step is its own commit group, so the fragment
// registers of step ks are rewritten only after wgmma_wait<3>, when step ks of the previous k
// block (their last reader) is done; the stage of k block kb-1 is released at step 3 of block kb.
// (Rounding A rows in shared memory in place before shared-memory wgmmas instead costs 16 KB
// more read and written per stage, in a kernel bound by shared-memory bandwidth.)
//
// NCHW paths (PyTorch's default layout). Independent parts, chosen by template flags:
// * Staged store (STAGED: output channel stride os_c != 1, and every NCHW-input launch), here with
//   tap-major tiles (kh-row tiles: next item). The register path above would store a lane's 8
//   consecutive channels to 8 different planes. Instead each consumer warpgroup passes its
//   post-epilogue values (same arithmetic and rounding as the register path) through a shared
//   staging buffer, chunk by chunk: a chunk is 64 rows (its m64 half) x 64 bytes of logical columns
//   (32 16-bit / 16 fp32 columns: one permutation group, or half of one). Write: thread (q, rq)
//   puts its logical columns 32g + kxs_lane_col(q, ..) (kxs_acc_index, so the weight's column
//   permutation is undone here) of rows 16wv + rq + 8h as 16-byte unit q (fp32: values 4hf.. of
//   chunk hf); read: warp wv takes staging rows
//   32(wv&1) + lane and 16-byte units (wv>>1), (wv>>1) + 2, and stores them column by column, so
//   one warp store writes 32 consecutive GEMM rows m (consecutive iw: output columns iw*SW + kw of
//   one channel plane, every SW-th element; L2 merges the other kw, which another column tile
//   writes at about the same time). Staging row r, 16-byte unit u lives at r*64 + 16*(u ^
//   ((r>>1)&3)): conflict-free for both the 16-byte writes and reads. Two chunk buffers per
//   consumer (4 KB each, 16 KB in all, after the barriers: every config still fits the 227 KB
//   opt-in, so no config needs fewer stages; the ring cannot host them, the producer refills it
//   during the epilogue) alternate, so one named barrier (kStageBarrier + w) per chunk suffices: a
//   thread writes chunk c + 2 only after the barrier of chunk c + 1, which every thread reaches
//   after reading chunk c. Across tiles the table barrier orders the last reads of one tile before
//   the first writes of the next.
// * kh-row tiles (template RKW = KW: the staged store with KW 2 or 4, Cout % 32 == 0 and
//   os_w == 1; row_tiles_kw). With tap-major tiles a warp store writes every KW-th element of an
//   output row and the other kw comes from another tile on another SM: 32-byte sectors evicted
//   half written cost HBM read-modify-writes. A kh-row tile instead holds all KW taps of kernel
//   row kh for CB = BN / KW channels: columns (kh, kw, co0 + c), kw < KW, c < CB; n tile
//   nt = (co block nt / KH, kh = nt % KH), n_tiles = KH * ceil(Cout / CB). No repacking: the B
//   stage is KW TMA boxes {BK, CB} (a map with CB-row boxes), box kw at smem row kw*CB from packed
//   row (kh*KW + kw)*Cout + co0 (kxs_row_b0); Cout % 32 == 0 starts it on a permutation group, so
//   the fragment map is unchanged with tile logical column kw*CB + c = channel co0 + c of tap
//   (kh, kw). expect_tx stays kStageBytes; channels >= Cout (whole groups of 32, from the next
//   tap's rows or zero fill) are never stored. A staging chunk (still 64 rows x 64 bytes) holds
//   64 / PB channel slots of 64 "packets", PB = KW * element size: one pixel's KW taps in output
//   order (ow = iw*KW + kw); lane q writes the packets of its channel values kk (channel
//   kxs_lane_col(q, kKPC*sb + kk) of the group) into slot 4kk + q
//   (kxs_rstage_offset: conflict-free). Each thread reads 16-byte unit ur (pixels fixed per tile,
//   their row offsets precomputed) of two slots per chunk, i.e. 16 / PB consecutive pixels x KW
//   of one channel, and stores it as one 16-byte vector when the pixels lie on one output row and
//   the address is aligned, as two 8-byte vectors (16-bit, KW 2, 8-byte aligned), else packet by
//   packet (a PB-byte vector where aligned, else elements). A warp thus writes whole runs of
//   64 * KW consecutive output elements (wrapping at output rows) per channel.
// * Kernel-area tiles (configs 3..5 only, forced: the kh-row conditions plus KH in {2, 4},
//   KH*KW <= 8, CB = BN / (KH*KW) a multiple of 32 (BN 128: k2s2 only) and KH*KW*element size
//   <= 16 (fp32: k2s2 only); area_tiles_kh; the template Cfg = KxsAreaConfig<config, KH>, RKW =
//   KW). A kh-row tile writes output row ih*KH + kh while a sibling tile on another SM writes the
//   adjacent rows, so the 32-byte sectors where those rows meet are still written in two pieces.
//   A kernel-area tile holds every tap of CB channels: tile logical column tap*CB + c, tap =
//   kh*KW + kw, channel co0 + c, co0 = nt*CB (kxs_area_co0), n_tiles = ceil(Cout / CB). The B
//   stage is KH*KW boxes {BK, CB}, box tap at smem row tap*CB from packed row tap*Cout + co0
//   (kxs_area_b0): whole permutation groups again, so the fragment map is unchanged (column
//   tap*CB + c is accumulator group tap*CB/32 + c/32). The table is filled as for kh-row tiles
//   with the tap in place of kw and kh = 0: t_off[tap*CB + c] = col((kh*KW + kw)*Cout + co), the
//   store reads the kw = 0 columns of every kh and mul / add of tap 0. Staging chunk: the kh-row
//   chunk (packets of one pixel's KW taps, kxs_rstage_offset) whose 64 / PB slots now hold
//   (channel, kh) pairs: slot 4x + q = row kh = x % KH of lane q's channel x / KH
//   (kxs_area_slot), i.e. 64 / (PB * 4 * KH) channels per lane and chunk, all KH rows of each.
//   Each thread reads unit ur of two slots kxs_area_read_slot(rs, 0 / 1) and stores them by the
//   kh-row rules (vector / packet); the slots are chosen so that a warp's reads are all KH rows
//   of the same channel and 64 pixels. 16-bit KW 2: lanes 0-15 store row kh = 0, lanes 16-31
//   row kh = 1 of the same pixels in ONE instruction, so output rows ih*KH, ih*KH + 1 (adjacent
//   in memory) of every input row among the pixels are one contiguous 2*KW*W-element run per
//   warp store: the sectors where they meet are whole in one request (KH 4: rows 0, 1 then 2, 3
//   in the next instruction; 16-bit KW 4 / fp32: kh = 0 then kh = 1, back to back). Only the
//   sectors at the 64-pixel edges are still shared with another warp (the other consumer) or
//   tile.
// * NCHW input (NCHW_IN, 16-bit only). Within one image, A[m, k] = input[n, k, ih, iw] is
//   MN-major: for each channel k, the H*W pixels are contiguous. Tiles never straddle images:
//       t = (n*PT + pt)*n_tiles + nt,  PT = ceil(H*W / 128),  pixel = pt*128 + row (< H*W),
//       m = n*H*W + pixel (so the output index math above is unchanged).
//   TMA reads a 3-D view {H*W, Cin, N} (strides H*W and Cin*H*W elements; H*W % 8 == 0 for the
//   16-byte stride rule) in boxes {64 pixels, 64 channels, 1} with 128-byte swizzle: box row k is
//   channel kb*64 + k, holding 64 consecutive pixels, chunk c of row k at c ^ (k % 8). Two boxes
//   per A stage (rows 0..63 at +0, 64..127 at +8 KB, the same halves as the K-major A); a box
//   wholly past H*W is not loaded (expect_tx shrinks; its stale rows only feed masked rows).
//   That is wgmma's canonical MN-major 128B-swizzle layout (kxs_smem_desc_mn; imm-trans-a = 1;
//   TF32 has no transposed operands, so fp32 NCHW input is re-laid out by the caller); a k16 step
//   advances 16 channel rows = 2048 bytes. B and the epilogue are unchanged.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gemm_kxs_sm90/gemm_kxs_sm90.h"
#include "common/device_cache.h"
#include "common/tensor_map_encoder.h"
#include "common/epilogue.cuh"
#include "common/tiled_pack.cuh"
#include "common/scalar_convert.cuh"
#include "common/hopper_ptx.cuh"
#include "common/tensor_core_ptx.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DECONV_PATCH_KXS_SM90A_DEVICE 1
#endif

namespace deconv_patch {
namespace {

// Timeline probe, compiled only into benchmarks/kxs_trace.cu (DECONV_PATCH_KXS_TRACE; the
// extension never defines it): thread 0 of consumer 0 writes (%globaltimer, clock64) at four
// points of each tile into g_kxs_trace[((cta * kKxsTraceTiles + tile) * 4 + point) * 2], when
// the harness has set the pointer. Points: 0 tile start, 1 main loop done (wgmma_wait<0>),
// 2 epilogue table barrier passed, 3 stores issued.
#if defined(DECONV_PATCH_KXS_TRACE)
constexpr int kKxsTraceTiles = 32;
__device__ unsigned long long* g_kxs_trace = nullptr;
#define KXS_TRACE(point)                                                                        \
  do {                                                                                          \
    if (g_kxs_trace != nullptr && ct == 0 && cw == 0 && local < kKxsTraceTiles) {               \
      unsigned long long gt;                                                                    \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gt));                                   \
      unsigned long long* e =                                                                   \
          g_kxs_trace + (((size_t)blockIdx.x * kKxsTraceTiles + local) * 4 + (point)) * 2;      \
      e[0] = gt;                                                                                \
      e[1] = (unsigned long long)clock64();                                                     \
    }                                                                                           \
  } while (0)
#else
#define KXS_TRACE(point) \
  do {                   \
  } while (0)
#endif

using namespace tc;
using namespace hopper;

constexpr int kBM = 128;         // GEMM rows per tile
constexpr int kRowBytes = 128;   // bytes of k per tile row and stage: one 128-byte swizzle row
template <typename T>
constexpr int kBK = kRowBytes / (int)sizeof(T);  // 64 (16-bit) or 32 (fp32) k per stage
constexpr int kThreads = 384;    // producer warpgroup + 2 consumer warpgroups
constexpr int kProducerRegs = 40;   // setmaxnreg: 128*40 + 256*232 <= 64K registers
constexpr int kConsumerRegs = 232;
constexpr int kColGroup = 32;    // period of the column permutation (packed rows padded to it)
constexpr int64_t kMaxTiles = (int64_t)1 << 30;
constexpr int64_t kInt32Limit = (int64_t)1 << 31;
// Named barriers (0 is __syncthreads): consumer w's table barrier kTableBarrier + w (its 128
// threads); ping-pong "your main loop may start" barrier kOrderBarrier + w (256 threads: the
// other consumer arrives, w syncs); staged store: consumer w's "chunk staged" barrier
// kStageBarrier + w (its 128 threads).
constexpr int kTableBarrier = 1;
constexpr int kOrderBarrier = 3;
constexpr int kStageBarrier = 7;
static_assert(kTableBarrier + 2 <= kOrderBarrier && kOrderBarrier + 2 <= kStageBarrier &&
                  kStageBarrier + 2 <= 16,
              "barrier ids");
// Staged store (see the top): a chunk is 64 rows x 64 bytes; two chunk buffers per consumer.
constexpr int kStageRowBytes = 64;
constexpr int kStageChunkBytes = 64 * kStageRowBytes;     // 4 KB
constexpr int kStagingBytes = 2 * 2 * kStageChunkBytes;   // 2 consumers x 2 buffers: 16 KB
// NCHW input: an A stage is two TMA boxes of 64 pixels (128 bytes) x BK channels.
constexpr int kPixBox = 64;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "register file split");
static_assert(kProducerRegs % 8 == 0 && kConsumerRegs % 8 == 0 && kConsumerRegs <= 256,
              "setmaxnreg takes multiples of 8 in 24..256");

// BN: tile columns (wgmma N). STAGES: ring depth. PINGPONG: consumers alternate tiles.
template <int BN, int STAGES, bool PINGPONG>
struct KxsConfig {
  static constexpr int kBN = BN;
  static constexpr int kStages = STAGES;
  static constexpr bool kPingPong = PINGPONG;
  static constexpr int kMI = PINGPONG ? 2 : 1;  // m64 accumulators per consumer thread
  static constexpr int kAcc = BN / 2;           // fp32 registers per m64 accumulator
  static constexpr bool kSetMaxNreg = kMI * kAcc > 64;
  static constexpr int kReleaseCount = PINGPONG ? 4 : 8;  // consumer warps reading a stage
  static constexpr int kABytes = kBM * kRowBytes;  // = TMA box {BK, 128}
  static constexpr int kBBytes = BN * kRowBytes;   // = TMA box {BK, BN}
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kPipeBytes = STAGES * kStageBytes;
  // Epilogue table of one tile: col offset (int64), mul, add (float) per tile column.
  static constexpr int kTableBytes = BN * 16;
  static constexpr int kTableOffset = kPipeBytes;
  static constexpr int kBarOffset = kTableOffset + 2 * 2 * kTableBytes;  // 2 consumers x 2 bufs
  static constexpr int kTotalBytes = kBarOffset + 2 * STAGES * 8 + 1024;  // + alignment slack
  // Staged-store kernels only: the staging buffers after the barriers (which the unstaged
  // layout above keeps exactly as it was).
  static constexpr int kStagingOffset = kBarOffset + 128;
  static constexpr int kTotalBytesStaged = kStagingOffset + kStagingBytes + 1024;
  static_assert(2 * STAGES * 8 <= 128, "barriers fit below the staging buffers");
  static_assert(kTotalBytesStaged <= 227 * 1024, "fits the sm_90 shared-memory opt-in");
  static_assert(BN == 128 || BN == 256, "wgmma wrappers exist for n128 and n256");
  static_assert(BN % kColGroup == 0, "tiles hold whole permutation groups");
  static_assert(kStageBytes % 1024 == 0, "stages keep the 1024-byte swizzle-atom alignment");
  static_assert(kMI * kAcc <= 128, "accumulators fit the consumer register budget");
  static_assert(kSetMaxNreg || kMI * kAcc <= 64, "more than 64 accumulators need setmaxnreg");
  static_assert(kStages >= 2 && kReleaseCount == 4 * (kPingPong ? 1 : 2), "ring geometry");
  static constexpr int kAreaKH = 0;  // not a kernel-area config (KxsAreaConfig)
  static constexpr bool kF32Out = false;  // fp32 output from 16-bit operands (KxsF32OutConfig)
};
// Kernel-area tiles (see the top) of kernel height KH on config Base (configs 3..5): the same
// tile, ring and shared memory as Base; a separate type so that the kernels of configs 0..2 keep
// their template arguments.
template <class Base, int KH>
struct KxsAreaConfig : Base {
  static constexpr int kAreaKH = KH;
  static_assert(KH == 2 || KH == 4, "kernel-area tiles: KH 2 or 4");
};
// 16-bit operands, fp32 output (gemm_col2im's GEMM into its fp32 buffer, gemm_col2im/col2im.h): the
// tile, ring and shared memory of Base; only the register-path store differs (8 floats where 16-bit
// writes 8 halves). Channels_last input and output only (kxs_f32_out_resolve).
template <class Base>
struct KxsF32OutConfig : Base {
  static constexpr bool kF32Out = true;
};
// A stage is 128-byte rows whatever the element type (fp32: 32 k per stage instead of 64), so the
// same stage counts fit for every dtype: the configs are shared.
using KxsCfg0 = KxsConfig<256, 4, false>;  // 128x256s4   (209 KB; staged store 225 KB)
using KxsCfg1 = KxsConfig<128, 6, false>;  // 128x128s6   (201 KB; staged store 217 KB)
using KxsCfg2 = KxsConfig<128, 6, true>;   // 128x128s6pp (201 KB; staged store 217 KB)
// Configs 3..5: configs 0..2 with kernel-area tiles where those apply (area_tiles_kh), else
// exactly configs 0..2. Forced only: config -1 never picks them.
constexpr int kNumConfigs = 6;

struct KxsArgs {
  const void* bias;
  void* out;
  EpilogueParams epi;
  int m;          // GEMM rows N*H*W
  int hw, w;      // H*W, W
  int cout, kw;   // Cout, KW
  int nc;         // logical GEMM columns KH*KW*Cout
  int n_tiles;    // column tiles
  int tiles;      // all tiles
  int kb;         // k blocks: ceil(Cin / BK)
  int64_t os_n, os_c, os_h, os_w;  // output strides
  int64_t row_h, row_w;            // SH*os_h, SW*os_w
  bool out_vec;   // 16-byte stores: os_c == 1, Cout % (16 / element size) == 0, aligned
                  // (launcher checked)
  int pix_tiles;  // NCHW input: m tiles per image, ceil(H*W / 128) (appended: the fields above
                  // keep their offsets)
  int kh;         // KH (kh-row tiles: n tile nt = (co block nt / KH, kh = nt % KH))
};

// ---------------------------------------------------------------------------------------------
// Index functions (host and device, so a host emulation can check them).

// Group-local logical column (0..31) that lane q's value k (0..7) holds (see the top):
// 16-bit 8q + k; fp32 (f32) 16(k/4) + 4q + k%4.
__host__ __device__ __forceinline__ int kxs_lane_col(int q, int k, bool f32) {
  return f32 ? 16 * (k >> 2) + 4 * q + (k & 3) : 8 * q + k;
}
// Logical column of physical packed row / GEMM column `pos` (see the top): pos = 32g + 8i + 2q
// + e is lane q's value k = 2i + e.
__host__ __device__ __forceinline__ int kxs_logical_col(int pos, bool f32) {
  return (pos & ~31) | kxs_lane_col((pos >> 1) & 3, (((pos >> 3) & 3) << 1) | (pos & 1), f32);
}
// Physical packed row of logical column j: kxs_logical_col's inverse.
__host__ __device__ __forceinline__ int kxs_physical_col(int j, bool f32) {
  const int l = j & 31;
  const int q = f32 ? (l >> 2) & 3 : l >> 3;
  const int i = f32 ? (((l >> 4) & 1) << 1) | ((l >> 1) & 1) : (l >> 1) & 3;
  return (j & ~31) | (i << 3) | (q << 1) | (l & 1);
}
// Accumulator register (of one m64 accumulator) that holds lane q's value k of 32-column group
// g in row half h: physical column 32g + 8(k/2) + 2q + k%2, i.e. c = 4g + k/2, e = k%2.
[[maybe_unused]] __host__ __device__ __forceinline__ int kxs_acc_index(int g, int h, int k) {
  return 16 * g + 4 * (k >> 1) + 2 * h + (k & 1);
}
// Row / column parts of the output offset (see the top). m < 2^31 (supports).
[[maybe_unused]] __host__ __device__ __forceinline__ int64_t kxs_row_offset(const KxsArgs& p,
                                                                            int m) {
  const unsigned n = (unsigned)m / (unsigned)p.hw;
  const unsigned rem = (unsigned)m - n * (unsigned)p.hw;
  const unsigned ih = rem / (unsigned)p.w;
  const unsigned iw = rem - ih * (unsigned)p.w;
  return (int64_t)n * p.os_n + (int64_t)ih * p.row_h + (int64_t)iw * p.row_w;
}
[[maybe_unused]] __host__ __device__ __forceinline__ int64_t kxs_col_offset(const KxsArgs& p,
                                                                            int j) {
  const int tap = j / p.cout;
  const int co = j - tap * p.cout;
  const int kh = tap / p.kw;
  const int kw = tap - kh * p.kw;
  return (int64_t)kh * p.os_h + (int64_t)kw * p.os_w + (int64_t)co * p.os_c;
}
// kh-row tiles (staged store, KW = RKW in {2, 4}, see the top): n tile nt holds taps (kh, 0..KW-1)
// of channels co0 .. co0 + CB - 1 (CB = BN / KW): kh = nt % KH, co0 = (nt / KH) * CB. B box kw
// (smem rows kw*CB ..) starts at packed row kxs_row_b0(..) + kw*Cout; Cout % 32 == 0 and
// CB % 32 == 0 keep every box on whole permutation groups, so smem row kw*CB + r holds logical
// column (kh*KW + kw)*Cout + co0 + kxs_logical_col(r): tile-local logical column
// kxs_logical_col(kw*CB + r) = kw*CB + (channel co - co0), the same fragment map as tap-major.
[[maybe_unused]] __host__ __device__ __forceinline__ int kxs_row_kh(const KxsArgs& p, int nt) {
  return nt % p.kh;
}
[[maybe_unused]] __host__ __device__ __forceinline__ int kxs_row_co0(const KxsArgs& p, int nt,
                                                                     int cb) {
  return nt / p.kh * cb;
}
[[maybe_unused]] __host__ __device__ __forceinline__ int kxs_row_b0(const KxsArgs& p, int nt,
                                                                    int cb, int kw_taps) {
  return kxs_row_kh(p, nt) * kw_taps * p.cout + kxs_row_co0(p, nt, cb);
}
// kh-row staging chunk (see the top): 64 rows x 64 bytes as 64 / PB channel slots of 64 packets
// of PB = KW * element size bytes (one pixel's KW taps of one channel); packet (slot cs, row r)
// at byte cs*64*PB + (r*PB ^ 32*(cs % 4)): the XOR permutes 32-byte quarters inside each 128-byte
// line, so 16-byte unit reads of 8 consecutive units stay conflict-free and the packet writes of
// lanes q = cs % 4 (rows rq = 0..7) hit distinct banks.
template <int PB>
[[maybe_unused]] __host__ __device__ __forceinline__ int kxs_rstage_offset(int cs, int byte) {
  return cs * 64 * PB + (byte ^ ((cs & 3) << 5));
}
// Kernel-area tiles (staged store, KH = RKH in {2, 4}, KW = RKW, see the top): n tile nt holds
// every tap of channels co0 = nt*CB .. co0 + CB - 1 (CB = BN / (KH*KW)); B box tap (smem rows
// tap*CB ..) starts at packed row kxs_area_b0(..): tile logical column tap*CB + c is channel
// co0 + c of tap = kh*KW + kw (whole permutation groups, as for kh-row tiles).
[[maybe_unused]] __host__ __device__ __forceinline__ int kxs_area_co0(int nt, int cb) {
  return nt * cb;
}
[[maybe_unused]] __host__ __device__ __forceinline__ int kxs_area_b0(const KxsArgs& p, int co0,
                                                                     int tap) {
  return tap * p.cout + co0;
}
// Kernel-area staging chunk: the kh-row chunk (kxs_rstage_offset) with slot cs = 4x + q holding
// packets of kernel row kh = x % KH of the lane-q channel x / KH of the chunk: lane q writes its
// k-th channel's row kh to slot kxs_area_slot(q, k, kh) (cs % 4 == q: conflict-free as kh-row).
// With KH = 1 these are the kh-row chunk's slots (4k + q) and columns (kxs_area_slot_col): the
// store of both tile kinds is one piece of code.
template <int KH>
[[maybe_unused]] __host__ __device__ __forceinline__ int kxs_area_slot(int q, int k, int kh) {
  return 4 * (k * KH + kh) + q;
}
// Slot of read i2 (0, 1) of reader group rs = ct / UNITS (UNITS 16-byte units per slot: 16 or
// 32, so a warp holds R = 32 / UNITS groups): slot 4x + q with x = R*i2 + rs % R, q = rs / R.
// A warp's groups thus read lane-q channel q = warp and x = kk*KH + kh over x = 0..2R-1: the
// KH rows of the same channel and pixels, side by side in one store instruction (R = 2, KH = 2),
// in two back-to-back instructions (R = 1, KH = 2: 16-bit KW 4, fp32 KW 2), or rows 0, 1 then
// 2, 3 (R = 2, KH = 4). The 128 threads x 2 reads cover every slot once.
template <int UNITS>
[[maybe_unused]] __host__ __device__ __forceinline__ int kxs_area_read_slot(int rs, int i2) {
  constexpr int kR = 32 / UNITS;
  return 4 * (kR * i2 + rs % kR) + rs / kR;
}
// Tile column whose t_off is the output column offset of slot cs in chunk sb of 32-channel group
// gc (kpc channels per lane and chunk): tap (kh, 0) of channel 32gc + kxs_lane_col(cs % 4,
// kpc*sb + x / KH): lane cs % 4's value kpc*sb + x / KH.
template <int KH, int KW>
[[maybe_unused]] __host__ __device__ __forceinline__ int kxs_area_slot_col(int cs, int cb, int gc,
                                                                           int kpc, int sb,
                                                                           bool f32) {
  const int x = cs >> 2;
  return (x % KH) * KW * cb + kColGroup * gc + kxs_lane_col(cs & 3, kpc * sb + x / KH, f32);
}

// Byte offset of 16-byte unit u (0..3) of row r (0..63) in a staging chunk (see the top): the
// unit index XOR (r/2)%4 spreads 8 consecutive rows, or rows {2i, 2i+1} x units 0..3, over all 32
// banks (two 64-byte rows share a 128-byte bank line).
[[maybe_unused]] __host__ __device__ __forceinline__ int kxs_stage_offset(int r, int u) {
  return r * kStageRowBytes + ((u ^ ((r >> 1) & 3)) << 4);
}

// Matrix descriptor of an MN-major (imm-trans-a = 1), 128-byte-swizzled 16-bit A tile at `addr`
// (NCHW input). PTX ISA, wgmma "Canonical Layouts", MN-major 128B swizzling (T = 8 elements of
// 16 bytes): Swizzle<3,4,3> o ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO)), i.e. element (mn, k) at
//     (mn % 64) + LBO*(mn / 64) + 64*(k % 8) + SBO*(k / 8)   elements, then the 128-byte XOR
// swizzle of the byte address (16-byte chunk bits 4-6 ^= bits 7-9, as for K-major): an atom is
// 8 k rows of 128 bytes = 64 consecutive mn. The "Strides" section agrees: for swizzled MN-major
// layouts the leading byte offset is the stride between atoms along MN ("from the first
// (swizzle-byte-size/16) rows to the next") and the stride byte offset the stride between groups
// of 8 k (offsets above in elements, the values below in bytes). Our TMA box {64 pixels,
// 64 channels} puts channel row k at k*128 bytes, so
//     SBO = 8 rows * 128 = 1024 bytes (next 8 k);
//     LBO = 8192 bytes, the next 64 m (the other box); an m64 wgmma spans one atom along m, so
//           it never uses LBO: set to the true distance all the same.
// A k16 step is 2 atoms along k: +2048 bytes of start address (atom-aligned: base offset 0).
// Checked, for every stage / half / k step, against where TMA puts each (pixel, channel) by a host
// emulation of both formulas (which also reproduces the K-major path that runs on hardware).
[[maybe_unused]] __host__ __device__ __forceinline__ uint64_t kxs_smem_desc_mn(uint32_t addr) {
  return (uint64_t)((addr >> 4) & 0x3FFFu) | ((uint64_t)((kPixBox * kRowBytes) >> 4) << 16) |
         ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
// Descriptor units (16 bytes) a k step adds to the A start address: 32 bytes along K-major rows,
// 2048 bytes (16 k rows) for MN-major.
template <bool kMnMajor>
constexpr uint64_t kKStepDescA = kMnMajor ? (16 * kRowBytes) >> 4 : 32 >> 4;

// ---------------------------------------------------------------------------------------------
// Staged-store helpers (sm_90a only; the PTX wrappers are common/hopper_ptx.cuh).
#if defined(DECONV_PATCH_KXS_SM90A_DEVICE)

// Element e of a 16-byte unit (bits[4], as read from staging) stored to dst: 16-bit elements are
// halves of the 32-bit words (the lower address in the low half, as pack2 packs them).
template <typename T>
__device__ __forceinline__ void kxs_store_bits(T* dst, const uint32_t (&bits)[4], int e) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<uint32_t*>(dst) = bits[e];
  } else {
    *reinterpret_cast<unsigned short*>(dst) = (unsigned short)(bits[e >> 1] >> (16 * (e & 1)));
  }
}

// Packet i (PB bytes: one pixel's KW taps of one channel, elements i*PB/size ..) of a 16-byte
// unit (bits[4], as read from staging) stored to dst: one PB-byte vector where dst is aligned,
// else element by element.
template <typename T, int PB>
__device__ __forceinline__ void kxs_store_packet(T* dst, const uint32_t (&bits)[4], int i) {
  constexpr int kE = PB / (int)sizeof(T);
  if ((reinterpret_cast<uintptr_t>(dst) & (PB - 1)) == 0) {
    if constexpr (PB == 4) {
      *reinterpret_cast<uint32_t*>(dst) = bits[i];
    } else if constexpr (PB == 8) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(bits[2 * i], bits[2 * i + 1]);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(bits[0], bits[1], bits[2], bits[3]);
    }
  } else {
#pragma unroll
    for (int x = 0; x < kE; ++x) kxs_store_bits<T>(dst + x, bits, i * kE + x);
  }
}

#endif  // DECONV_PATCH_KXS_SM90A_DEVICE

// ---------------------------------------------------------------------------------------------
// Main kernel (body only on sm_90a; an empty kernel elsewhere). NCHW_IN: A read MN-major from
// NCHW input (16-bit); STAGED: the shared-memory-staged store; RKW (staged only): 0 = tap-major
// tiles, 2 or 4 = kh-row tiles of KW = RKW (see the top for all three). One kernel per fused
// activation kAct.
template <typename T, class Cfg, bool NCHW_IN, bool STAGED, int RKW, Activation kAct>
__global__ void __launch_bounds__(kThreads, 1)
    conv_transpose2d_gemm_kxs_sm90_kernel(const __grid_constant__ CUtensorMap tma_a,
                                          const __grid_constant__ CUtensorMap tma_b,
                                          const __grid_constant__ KxsArgs p) {
#if defined(DECONV_PATCH_KXS_SM90A_DEVICE)
  constexpr bool kTf32 = std::is_same<T, float>::value;
  static_assert(sizeof(T) == 2 || kTf32, "16-bit or fp32 (TF32) operands");
  static_assert(!NCHW_IN || (sizeof(T) == 2 && STAGED),
                "MN-major A is 16-bit only; NCHW input always uses the staged store");
  static_assert(RKW == 0 || (STAGED && (RKW == 2 || RKW == 4)), "kh-row tiles: staged, KW 2 / 4");
  static_assert(!Cfg::kF32Out || (sizeof(T) == 2 && !NCHW_IN && !STAGED && RKW == 0),
                "fp32 output: 16-bit operands, channels_last input and output (register path)");
  // The output's element type: T, or fp32 for KxsF32OutConfig.
  using OutT = typename std::conditional<Cfg::kF32Out, float, T>::type;
  // Kernel-area tiles (Cfg = KxsAreaConfig): KH = RKH, KW = RKW; else 0.
  constexpr int RKH = Cfg::kAreaKH;
  static_assert(RKH == 0 || (RKW != 0 && RKH * RKW <= 8), "kernel-area tiles: KW 2 / 4, <= 8 taps");
  constexpr int BN = Cfg::kBN;
  // kh-row / kernel-area tiles: channels per tile (CB); B boxes per stage (taps per tile).
  constexpr int kBoxes = RKH ? RKH * RKW : RKW;
  constexpr int kRowCB = RKW ? BN / kBoxes : BN;
  static_assert(kRowCB % kColGroup == 0, "kh-row B boxes hold whole permutation groups");
  constexpr int S = Cfg::kStages;
  constexpr int MI = Cfg::kMI;
  constexpr int kAcc = Cfg::kAcc;

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
    if constexpr (Cfg::kSetMaxNreg) setmaxnreg_dec<kProducerRegs>();
    if (tid == 0) {
      prefetch_tensormap(&tma_a);
      prefetch_tensormap(&tma_b);
      uint32_t c = 0;  // k block counter (see the ring protocol at the top)
      // B of k block kb for packed rows n0..: tap-major, one box of BN rows; kh-row tiles, box
      // kw of kRowCB rows at packed row n0 + kw*Cout (both input layouts).
      auto load_b = [&](uint32_t sa, uint32_t bar, int kb, int n0) {
        if constexpr (RKW == 0) {
          tma_load_2d(sa + Cfg::kABytes, &tma_b, bar, kb * kBK<T>, n0);
        } else if constexpr (RKH != 0) {
          // Kernel-area tiles: n0 = co0; box tap at smem row tap*CB (kxs_area_b0).
#pragma unroll
          for (int tap = 0; tap < kBoxes; ++tap) {
            tma_load_2d(sa + Cfg::kABytes + tap * kRowCB * kRowBytes, &tma_b, bar, kb * kBK<T>,
                        kxs_area_b0(p, n0, tap));
          }
        } else {
#pragma unroll
          for (int kw = 0; kw < RKW; ++kw) {
            tma_load_2d(sa + Cfg::kABytes + kw * kRowCB * kRowBytes, &tma_b, bar, kb * kBK<T>,
                        n0 + kw * p.cout);
          }
        }
      };
      for (int t = blockIdx.x; t < p.tiles; t += gridDim.x) {
        const int mt = t / p.n_tiles;
        if constexpr (NCHW_IN) {
          // m tile mt = (image, pixel tile): two boxes of 64 pixels x 64 channels per stage; the
          // second is not loaded when it lies wholly past H*W (those rows are never stored).
          const int img = mt / p.pix_tiles;
          const int p0 = (mt - img * p.pix_tiles) * kBM;
          const int nt = t - mt * p.n_tiles;
          // B: tap-major, packed rows n0..; kh-row tiles, box kw at packed row n0 + kw*Cout.
          const int n0 = RKH   ? kxs_area_co0(nt, kRowCB)
                         : RKW ? kxs_row_b0(p, nt, kRowCB, RKW)
                               : nt * BN;
          const bool second = p0 + kPixBox < p.hw;
          const uint32_t bytes = Cfg::kStageBytes - (second ? 0 : Cfg::kABytes / 2);
          for (int kb = 0; kb < p.kb; ++kb, ++c) {
            const uint32_t s = c % S;
            const uint32_t bar = full_bar + 8 * s;
            mbar_wait(empty_bar + 8 * s, ((c / S) & 1) ^ 1);
            mbar_arrive_expect_tx(bar, bytes);
            const uint32_t sa = base + s * Cfg::kStageBytes;
            tma_load_3d(sa, &tma_a, bar, p0, kb * kBK<T>, img);
            if (second) {
              tma_load_3d(sa + Cfg::kABytes / 2, &tma_a, bar, p0 + kPixBox, kb * kBK<T>, img);
            }
            load_b(sa, bar, kb, n0);
          }
        } else {
          const int m0 = mt * kBM;
          const int nt = t - mt * p.n_tiles;
          const int n0 = RKH   ? kxs_area_co0(nt, kRowCB)
                         : RKW ? kxs_row_b0(p, nt, kRowCB, RKW)
                               : nt * BN;
          for (int kb = 0; kb < p.kb; ++kb, ++c) {
            const uint32_t s = c % S;
            const uint32_t bar = full_bar + 8 * s;
            mbar_wait(empty_bar + 8 * s, ((c / S) & 1) ^ 1);
            mbar_arrive_expect_tx(bar, Cfg::kStageBytes);
            const uint32_t sa = base + s * Cfg::kStageBytes;
            tma_load_2d(sa, &tma_a, bar, kb * kBK<T>, m0);
            load_b(sa, bar, kb, n0);
          }
        }
      }
    }
    return;
  }

  // ---- Consumer warpgroups. ----
  if constexpr (Cfg::kSetMaxNreg) setmaxnreg_inc<kConsumerRegs>();
  const int cw = wg - 1;        // consumer 0 / 1
  const int ct = tid & 127;     // thread within the consumer warpgroup
  const int wv = ct >> 5;       // warp within it: fragment rows 16wv..
  const int lane = tid & 31;
  const int q = lane & 3;       // fragment column pair
  const int rq = lane >> 2;     // fragment row
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  OutT* __restrict__ out = static_cast<OutT*>(p.out);
  unsigned char* my_tables = smem + Cfg::kTableOffset + cw * 2 * Cfg::kTableBytes;

  // Cooperative: consumer cw reads A rows 64cw..; ping-pong: both m64 halves (mi * 64 rows).
  // Either way 64 rows are 8 KB further, K-major or (NCHW input) MN-major.
  const uint32_t a_addr0 = base + (uint32_t)((Cfg::kPingPong ? 0 : cw) * 64 * kRowBytes);
  const uint64_t a_desc0 = NCHW_IN ? kxs_smem_desc_mn(a_addr0) : smem_desc_k128(a_addr0);
  const uint64_t b_desc0 = smem_desc_k128(base + Cfg::kABytes);
  // TF32: this lane's ldmatrix addresses (see the top): rows 64cw.. (cooperative) or 0..
  // (ping-pong, both halves).
  static_assert(kRowBytes == 128, "Tf32RsLane: 128-byte swizzled rows");
  [[maybe_unused]] const Tf32RsLane<MI> a_lane(Cfg::kPingPong ? 0 : 64 * cw, wv, lane);
  constexpr uint64_t kStageDesc = Cfg::kStageBytes >> 4;  // descriptor units of 16 bytes
  constexpr uint64_t kHalfDesc = (64 * kRowBytes) >> 4;   // next 64 rows of A

  constexpr int kTE = BN / 128;  // epilogue table entries this thread fills per tile
  float acc[MI][kAcc];
  int local = 0;  // tiles done by this consumer: table buffer parity
  for (int i = Cfg::kPingPong ? cw : 0;; i += Cfg::kPingPong ? 2 : 1, ++local) {
    const int64_t t64 = (int64_t)blockIdx.x + (int64_t)i * gridDim.x;
    if (t64 >= p.tiles) break;
    KXS_TRACE(0);
    const int t = (int)t64;
    const int mt = t / p.n_tiles;
    const int m0 = NCHW_IN ? 0 : mt * kBM;  // NCHW input: rows from (image, pixel tile) below
    const int n0 = (t - mt * p.n_tiles) * BN;  // tap-major tiles: first logical column
    // kh-row tiles: kernel row and first channel (n0 is then unused).
    // Kernel-area tiles: row_kh = 0 and the "kw" of the table fill below is the tap.
    const int row_kh = RKW && !RKH ? kxs_row_kh(p, t - mt * p.n_tiles) : 0;
    const int row_co0 = RKH   ? kxs_area_co0(t - mt * p.n_tiles, kRowCB)
                        : RKW ? kxs_row_co0(p, t - mt * p.n_tiles, kRowCB)
                              : 0;

    // Epilogue table inputs of this tile's columns: loaded here, used after the MMAs, so the
    // loads are in flight during the main loop (columns >= NC, or channels >= Cout in kh-row
    // tiles, are never read back).
    T te_bias[kTE];
    float te_scale[kTE], te_shift[kTE];
    int64_t te_off[kTE];
#pragma unroll
    for (int e = 0; e < kTE; ++e) {
      const int j = n0 + ct + 128 * e;
      te_bias[e] = from_float<T>(0.f);
      te_scale[e] = 1.f;
      te_shift[e] = 0.f;
      te_off[e] = 0;
      if constexpr (RKW == 0) {
        if (j < p.nc) {
          const int co = j % p.cout;
          if (bias != nullptr) te_bias[e] = bias[co];
          if (p.epi.scale != nullptr) te_scale[e] = p.epi.scale[co];
          if (p.epi.shift != nullptr) te_shift[e] = p.epi.shift[co];
          te_off[e] = kxs_col_offset(p, j);
        }
      } else {
        // Tile column lc = kw*CB + (co - co0) (logical order; the store reads only kw = 0).
        // Kernel-area tiles: lc = tap*CB + (co - co0), "kw" = tap, row_kh = 0 (the store reads
        // the kw = 0 columns of every kernel row, and mul / add of tap 0).
        const int lc = ct + 128 * e;
        const int kw = lc / kRowCB;
        const int co = row_co0 + lc - kw * kRowCB;
        if (co < p.cout) {
          if (bias != nullptr) te_bias[e] = bias[co];
          if (p.epi.scale != nullptr) te_scale[e] = p.epi.scale[co];
          if (p.epi.shift != nullptr) te_shift[e] = p.epi.shift[co];
          te_off[e] = kxs_col_offset(p, (row_kh * RKW + kw) * p.cout + co);
        }
      }
    }

    // ---- Main loop over k blocks. ----
    // Ping-pong: start only after the other consumer has issued its whole main loop of the
    // previous tile (it arrives below). Besides ordering the tensor-core use, this is what makes
    // the shared ring safe: the other consumer has then observed every earlier phase of the
    // full barriers, so this consumer's parity wait on round r of a stage never meets a
    // barrier still in round r-1 (where parity r&1 would pass at once).
    if (Cfg::kPingPong && i > 0) named_barrier_sync(kOrderBarrier + cw, 256);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
      for (int r = 0; r < kAcc; ++r) acc[mi][r] = 0.f;
    }
    uint32_t c = (uint32_t)i * (uint32_t)p.kb;
    uint32_t prev = 0;
    if constexpr (kTf32) {
      // TF32: A from registers, one commit group per k step (see the top).
      uint32_t afr[4][MI][4];
      for (int kb = 0; kb < p.kb; ++kb, ++c) {
        const uint32_t s = c % S;
        mbar_wait(full_bar + 8 * s, (c / S) & 1);
        // No prefetch of the next step's fragment: slower here (common/hopper_ptx.cuh).
        tf32_rs_k_block<false, BN>(acc, afr, base + s * (uint32_t)Cfg::kStageBytes,
                                   b_desc0 + (uint64_t)s * kStageDesc, a_lane, kb > 0,
                                   empty_bar + 8 * prev, lane);
        prev = s;
      }
    } else {
      for (int kb = 0; kb < p.kb; ++kb, ++c) {
        const uint32_t s = c % S;
        mbar_wait(full_bar + 8 * s, (c / S) & 1);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) fence_acc(acc[mi]);
        wgmma_fence();
        const uint64_t so = (uint64_t)s * kStageDesc;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
            // k16 step (16-bit; TF32 runs the register-A loop above): 32 bytes further along
            // every 128-byte row (2 descriptor units); in-atom K offsets of a 128B-swizzled
            // K-major tile go into the start address, the hardware applies the swizzle to the
            // full address. MN-major A (NCHW input): 16 k rows = 2 whole atoms further
            // (kKStepDescA).
            Wgmma<T, BN, NCHW_IN>::run(
                acc[mi], a_desc0 + so + mi * kHalfDesc + kKStepDescA<NCHW_IN> * ks,
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
    if (Cfg::kPingPong && t64 + gridDim.x < p.tiles) {
      named_barrier_arrive(kOrderBarrier + 1 - cw, 256);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) fence_acc(acc[mi]);
    if (lane == 0) mbar_arrive(empty_bar + 8 * prev);
    KXS_TRACE(1);

    // ---- Epilogue table -> shared (buffer local & 1), then the stores. ----
    int64_t* t_off = reinterpret_cast<int64_t*>(my_tables + (local & 1) * Cfg::kTableBytes);
    float* t_mul = reinterpret_cast<float*>(t_off + BN);
    float* t_add = t_mul + BN;
#pragma unroll
    for (int e = 0; e < kTE; ++e) {
      // channel_affine on the values loaded above: the same EpilogueParams with scale / shift
      // pointing at this column's loaded entry (index 0), so (mul, add) are exactly its result.
      const float col_scale = te_scale[e], col_shift = te_shift[e];
      EpilogueParams col_epi = p.epi;
      if (col_epi.scale != nullptr) col_epi.scale = &col_scale;
      if (col_epi.shift != nullptr) col_epi.shift = &col_shift;
      const ChannelAffine a =
          channel_affine(col_epi, bias != nullptr ? to_float(te_bias[e]) : 0.f, 0);
      t_off[ct + 128 * e] = te_off[e];
      t_mul[ct + 128 * e] = a.mul;
      t_add[ct + 128 * e] = a.add;
    }
    // Table visible to the warpgroup. The other buffer was last read in the epilogue of the
    // previous tile, which every thread finished before arriving here: no second barrier.
    named_barrier_sync(kTableBarrier + cw, 128);
    KXS_TRACE(2);

    if constexpr (STAGED && RKW != 0) {
      // ---- Staged store of kh-row tiles and of kernel-area tiles (see the top). ----
      // kh-row tiles are the kernel-area layout with one kernel row (kKH = 1): slot 4kk + q,
      // tile column kw*CB + c; kernel-area tiles add the row: slot kxs_area_slot, column
      // (kh*KW + kw)*CB + c. Only the reading threads' slot assignment differs (below).
      constexpr int kKH = RKH ? RKH : 1;              // kernel rows per tile
      constexpr int kPB = RKW * (int)sizeof(T);     // packet: one pixel's KW taps of a channel
      constexpr int kRPU = 16 / kPB;                 // pixels per 16-byte unit
      constexpr int kUnits = 64 * kPB / 16;          // units per slot (64 pixels)
      constexpr int kSlots = kStageRowBytes / kPB;   // slots per chunk: (channel, kh) pairs
      constexpr int kKPC = kSlots / (4 * kKH);       // channels per lane and chunk (all KH rows)
      constexpr int kSubs = 8 / kKPC;                // chunks per 32-channel group and m64
      constexpr int kSlotsPerPass = 128 / kUnits;    // slots one pass of 128 unit reads covers
      constexpr int kGroups = kRowCB / kColGroup;    // 32-channel groups per tile
      static_assert(kKPC >= 1 && kSlots * 64 * kPB == kStageChunkBytes &&
                        2 * kSlotsPerPass == kSlots && kKPC * kSubs == 8 &&
                        (RKH == 0 || (RKH % 2 == 0 && (kUnits == 16 || kUnits == 32))),
                    "kh-row / kernel-area chunk geometry");
      // This thread reads unit ur of two slots of every chunk (kh-row: rs and rs +
      // kSlotsPerPass; kernel-area: kxs_area_read_slot(rs, 0 / 1), so that its warp covers
      // every kernel row of the same channels and pixels): tile rows (pixels) 64 * half +
      // ur * kRPU + i, i < kRPU, the same for every chunk of the tile.
      const int ur = ct % kUnits;
      const int rs = ct / kUnits;
      int64_t roff[MI][kRPU];
      unsigned rmask[MI];  // bit i: row i exists
      bool rrun[MI];       // all kRPU rows exist and are consecutive pixels of one output row
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        rmask[mi] = 0;
        rrun[mi] = true;
#pragma unroll
        for (int i = 0; i < kRPU; ++i) {
          const int r = (Cfg::kPingPong ? 64 * mi : 64 * cw) + ur * kRPU + i;  // tile row
          int m;
          bool ok;
          if constexpr (NCHW_IN) {
            // As in the tap-major staged store below.
            const int img = mt / p.pix_tiles;
            const int pix = (mt - img * p.pix_tiles) * kBM + r;
            ok = pix < p.hw;
            m = img * p.hw + pix;
          } else {
            m = m0 + r;
            ok = m < p.m;
          }
          roff[mi][i] = ok ? kxs_row_offset(p, m) : 0;
          rmask[mi] |= ok ? 1u << i : 0u;
          // os_w == 1 (launcher): consecutive pixels of one row are KW elements apart.
          rrun[mi] = rrun[mi] && ok && roff[mi][i] == roff[mi][0] + (int64_t)i * RKW;
        }
      }
      unsigned char* const my_staging = smem + Cfg::kStagingOffset + cw * 2 * kStageChunkBytes;
      // Values exactly as in the other paths: same epilogue expression and rounding; the
      // channel's (mul, add) are those of its first column (all taps share the channel).
      // (called once; as a plain block instead, nvcc compiles these kernels to other code)
      auto store_rows = [&]() {
#pragma unroll
        for (int gc = 0; gc < kGroups; ++gc) {
          // Uniform over the warpgroup. Cout % 32 == 0: a group is wholly below Cout or wholly
          // past it (and so are the later ones).
          if (row_co0 + kColGroup * gc >= p.cout) break;
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
            for (int sb = 0; sb < kSubs; ++sb) {
              // Chunk (gc, mi, sb): every kernel row of the channels 32gc + kxs_lane_col(q',
              // kKPC*sb + kk) of all q' (slot kxs_area_slot(q', kk, kh); kh-row: 4kk + q').
              unsigned char* const buf =
                  my_staging + (((gc * MI + mi) * kSubs + sb) & 1) * kStageChunkBytes;
#pragma unroll
              for (int kk = 0; kk < kKPC; ++kk) {
                const int cl = kColGroup * gc + kxs_lane_col(q, kKPC * sb + kk, kTf32);
                const float mul = t_mul[cl], add = t_add[cl];
#pragma unroll
                for (int kh = 0; kh < kKH; ++kh) {
#pragma unroll
                  for (int h = 0; h < 2; ++h) {
                    float v[RKW];
#pragma unroll
                    for (int kw = 0; kw < RKW; ++kw) {
                      // Tile logical column (kh*KW + kw)*CB + cl (kxs_row_b0 /
                      // kxs_area_b0).
                      const float a =
                          acc[mi][kxs_acc_index((kh * RKW + kw) * kGroups + gc, h, kKPC * sb + kk)];
                      v[kw] = epilogue_value<kAct>(a, mul, add, p.epi.negative_slope);
                    }
                    const int off = kxs_rstage_offset<kPB>(kxs_area_slot<kKH>(q, kk, kh),
                                                           (16 * wv + rq + 8 * h) * kPB);
                    if constexpr (kTf32) {
                      if constexpr (RKW == 2) {
                        *reinterpret_cast<float2*>(buf + off) = make_float2(v[0], v[1]);
                      } else {
                        *reinterpret_cast<float4*>(buf + off) =
                            make_float4(v[0], v[1], v[2], v[3]);
                      }
                    } else {
                      if constexpr (RKW == 2) {
                        *reinterpret_cast<uint32_t*>(buf + off) = pack2<T>(v[0], v[1]);
                      } else {
                        *reinterpret_cast<uint2*>(buf + off) =
                            make_uint2(pack2<T>(v[0], v[1]), pack2<T>(v[2], v[3]));
                      }
                    }
                  }
                }
              }
              // The chunk is complete; the other buffer's readers are done (as tap-major).
              named_barrier_sync(kStageBarrier + cw, 128);
              // Read + store: unit ur of slot cs = pixels ur*kRPU.. x KW taps of one channel and
              // kernel row, in output order (ow = iw*KW + kw): one 16-byte store where the pixels
              // run along one output row and the address is aligned, two 8-byte ones (16-bit
              // KW 2), else one packet (KW elements) per pixel.
#pragma unroll
              for (int i2 = 0; i2 < 2; ++i2) {
                int cs = rs + kSlotsPerPass * i2;
                if constexpr (RKH != 0) cs = kxs_area_read_slot<kUnits>(rs, i2);
                const uint4 w = *reinterpret_cast<const uint4*>(
                    buf + kxs_rstage_offset<kPB>(cs, 16 * ur));
                const uint32_t bits[4] = {w.x, w.y, w.z, w.w};
                const int64_t col =
                    t_off[kxs_area_slot_col<kKH, RKW>(cs, kRowCB, gc, kKPC, sb, kTf32)];
                T* const d0 = out + (roff[mi][0] + col);
                const uintptr_t a0 = reinterpret_cast<uintptr_t>(d0);
                if (rrun[mi] && (a0 & 15) == 0) {
                  *reinterpret_cast<uint4*>(d0) = w;
                } else if (kPB == 4 && rrun[mi] && (a0 & 7) == 0) {
                  *reinterpret_cast<uint2*>(d0) = make_uint2(w.x, w.y);
                  *reinterpret_cast<uint2*>(d0 + 8 / (int)sizeof(T)) = make_uint2(w.z, w.w);
                } else {
#pragma unroll
                  for (int i = 0; i < kRPU; ++i) {
                    if ((rmask[mi] >> i) & 1u) {
                      kxs_store_packet<T, kPB>(out + (roff[mi][i] + col), bits, i);
                    }
                  }
                }
              }
            }
          }
        }
      };
      store_rows();
    } else if constexpr (STAGED) {
      // ---- Staged store (see the top). ----
      // This thread stores staging row sr of every chunk (tile row 64 * half + sr), 16-byte units
      // su and su + 2 of it: each warp store covers 32 consecutive rows of one logical column.
      const int sr = 32 * (wv & 1) + lane;
      const int su = wv >> 1;
      int64_t srow_off[MI];
      bool srow_ok[MI];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int r = (Cfg::kPingPong ? 64 * mi : 64 * cw) + sr;  // tile row
        int m;
        if constexpr (NCHW_IN) {
          // Tile rows are pixels pt*128 + r of image img; m = img*H*W + pixel stays below
          // N*H*W + 128 (no int overflow, supports) and is used only where pixel < H*W.
          const int img = mt / p.pix_tiles;
          const int pix = (mt - img * p.pix_tiles) * kBM + r;
          srow_ok[mi] = pix < p.hw;
          m = img * p.hw + pix;
        } else {
          m = m0 + r;
          srow_ok[mi] = m < p.m;
        }
        srow_off[mi] = srow_ok[mi] ? kxs_row_offset(p, m) : 0;
      }
      constexpr int kUnitCols = 16 / (int)sizeof(T);               // columns per 16-byte unit
      constexpr int kChunkCols = kStageRowBytes / (int)sizeof(T);  // 32 (16-bit) / 16 (fp32)
      constexpr int kHalves = kColGroup / kChunkCols;              // chunks per group: 1 / 2
      unsigned char* const my_staging = smem + Cfg::kStagingOffset + cw * 2 * kStageChunkBytes;
      // The values are exactly the register path's: same epilogue expression, same rounding
      // (pack2 / fp32 as is); only the route to global memory differs.
      // (called once; as a plain block instead, nvcc compiles these kernels to other code)
      auto store_staged = [&]() {
#pragma unroll
        for (int g = 0; g < BN / kColGroup; ++g) {
          // Uniform over the warpgroup, as the barriers below need (later groups are past NC too).
          if (n0 + kColGroup * g >= p.nc) break;
          // This lane's values 0..3 and 4..7 are logical columns c0.. and c1.. (kxs_lane_col).
          const int c0 = kColGroup * g + kxs_lane_col(q, 0, kTf32);
          const int c1 = kColGroup * g + kxs_lane_col(q, 4, kTf32);
          float mul[8], add[8];
          *reinterpret_cast<float4*>(mul) = *reinterpret_cast<const float4*>(t_mul + c0);
          *reinterpret_cast<float4*>(mul + 4) = *reinterpret_cast<const float4*>(t_mul + c1);
          *reinterpret_cast<float4*>(add) = *reinterpret_cast<const float4*>(t_add + c0);
          *reinterpret_cast<float4*>(add + 4) = *reinterpret_cast<const float4*>(t_add + c1);
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
            float v[2][8];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
              for (int k = 0; k < 8; ++k) {
                const float a = acc[mi][kxs_acc_index(g, h, k)];
                v[h][k] = epilogue_value<kAct>(a, mul[k], add[k], p.epi.negative_slope);
              }
            }
#pragma unroll
            for (int hf = 0; hf < kHalves; ++hf) {
              // Chunk (g, mi, hf) of this tile: buffer parity by chunk index (compile time).
              unsigned char* const buf =
                  my_staging + (((g * MI + mi) * kHalves + hf) & 1) * kStageChunkBytes;
              // Write: unit q of each row. fp32 chunk hf holds columns 16hf + 4q.. of every lane
              // q: its values 4hf..4hf+3; a 16-bit chunk the 8 values of every lane.
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int r = 16 * wv + rq + 8 * h;  // row in the 64-row half
                if constexpr (kTf32) {
                  *reinterpret_cast<float4*>(buf + kxs_stage_offset(r, q)) = make_float4(
                      v[h][4 * hf], v[h][4 * hf + 1], v[h][4 * hf + 2], v[h][4 * hf + 3]);
                } else {
                  uint4 pk;
                  pk.x = pack2<T>(v[h][0], v[h][1]);
                  pk.y = pack2<T>(v[h][2], v[h][3]);
                  pk.z = pack2<T>(v[h][4], v[h][5]);
                  pk.w = pack2<T>(v[h][6], v[h][7]);
                  *reinterpret_cast<uint4*>(buf + kxs_stage_offset(r, q)) = pk;
                }
              }
              // The chunk is complete; the other buffer's readers are done (top).
              named_barrier_sync(kStageBarrier + cw, 128);
              // Read + store: unit u of row sr holds logical columns c0..c0+kUnitCols-1.
              if (srow_ok[mi]) {
#pragma unroll
                for (int i2 = 0; i2 < 2; ++i2) {
                  const int u = su + 2 * i2;
                  const uint4 w = *reinterpret_cast<const uint4*>(buf + kxs_stage_offset(sr, u));
                  const uint32_t bits[4] = {w.x, w.y, w.z, w.w};
                  const int c0 = kColGroup * g + kChunkCols * hf + kUnitCols * u;
                  int64_t off[kUnitCols];
#pragma unroll
                  for (int e = 0; e < kUnitCols; e += 2) {
                    const longlong2 o = *reinterpret_cast<const longlong2*>(t_off + c0 + e);
                    off[e] = o.x;
                    off[e + 1] = o.y;
                  }
#pragma unroll
                  for (int e = 0; e < kUnitCols; ++e) {
                    if (n0 + c0 + e < p.nc) kxs_store_bits<T>(out + srow_off[mi] + off[e], bits, e);
                  }
                }
              }
            }
          }
        }
      };
      store_staged();
    } else {
      int64_t row_off[MI][2];
      bool row_ok[MI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = m0 + (Cfg::kPingPong ? 64 * mi : 64 * cw) + 16 * wv + rq + 8 * h;
          row_ok[mi][h] = m < p.m;
          row_off[mi][h] = row_ok[mi][h] ? kxs_row_offset(p, m) : 0;
        }
      }

      // The activation and the store width (p.out_vec) are template arguments: each
      // combination is its own unrolled copy, so a tile runs one compact, contiguous stretch of
      // code. With out_vec tested per store, the scalar stores sat between the vector ones and
      // the path a tile ran spread over ~80 KB of code, which the instruction caches had to
      // fetch again after any other large kernel: ~8 us per call on U-Net up1
      // (docs/performance/kxs.md).
      auto store_tile = [&](auto vec_c) {
        constexpr bool kVec = decltype(vec_c)::value;
#pragma unroll
        for (int g = 0; g < BN / kColGroup; ++g) {
          // This lane's values 0..3 and 4..7 are logical columns c0.. and c1.. (kxs_lane_col):
          // 16-bit c1 = c0 + 4 (8 consecutive columns); fp32 c0 = 32g + 4q, c1 = c0 + 16, so
          // that a warp's store of values 0..3 (then 4..7) writes 64 contiguous bytes per row,
          // whole 32-byte sectors (the column permutation of the packed weight does what a
          // shuffle of the quad's values did before, docs/performance/kxs.md).
          const int c0 = kColGroup * g + kxs_lane_col(q, 0, kTf32);
          const int c1 = kColGroup * g + kxs_lane_col(q, 4, kTf32);
          if (n0 + c0 >= p.nc) continue;
          float mul[8], add[8];
          *reinterpret_cast<float4*>(mul) = *reinterpret_cast<const float4*>(t_mul + c0);
          *reinterpret_cast<float4*>(mul + 4) = *reinterpret_cast<const float4*>(t_mul + c1);
          *reinterpret_cast<float4*>(add) = *reinterpret_cast<const float4*>(t_add + c0);
          *reinterpret_cast<float4*>(add + 4) = *reinterpret_cast<const float4*>(t_add + c1);
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              if (!row_ok[mi][h]) continue;
              float v[8];
#pragma unroll
              for (int k = 0; k < 8; ++k) {
                const float a = acc[mi][kxs_acc_index(g, h, k)];
                v[k] = epilogue_value<kAct>(a, mul[k], add[k], p.epi.negative_slope);
              }
              OutT* const row = out + row_off[mi][h];
              // (kVec tested first: a 16-bit branch under a test that depends on the lambda's
              // arguments would make T = float reference pack2<float>, which has no body.)
              if constexpr (!kVec) {
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                  const int c = kColGroup * g + kxs_lane_col(q, k, kTf32);
                  if (n0 + c < p.nc) row[t_off[c]] = from_float<OutT>(v[k]);
                }
              } else if constexpr (Cfg::kF32Out) {
                // 16-bit operands, fp32 output: the 8 consecutive channels of one tap as two
                // 16-byte vectors (out_vec: Cout % 8 == 0, strides of 8 elements and a 16-byte
                // aligned base, so both are aligned).
                *reinterpret_cast<float4*>(row + t_off[c0]) = make_float4(v[0], v[1], v[2], v[3]);
                *reinterpret_cast<float4*>(row + t_off[c0] + 4) =
                    make_float4(v[4], v[5], v[6], v[7]);
              } else if constexpr (kTf32) {
                // os_c == 1, Cout % 4 == 0: each 4 consecutive channels of one tap, 16-byte
                // aligned; nc % 4 == 0, so a vector exists iff its first column is below
                // nc - n0 (c0's was tested above).
                *reinterpret_cast<float4*>(row + t_off[c0]) = make_float4(v[0], v[1], v[2], v[3]);
                if (n0 + c1 < p.nc) {
                  *reinterpret_cast<float4*>(row + t_off[c1]) =
                      make_float4(v[4], v[5], v[6], v[7]);
                }
              } else {
                // os_c == 1, Cout % 8 == 0: the 8 columns are consecutive channels of one tap,
                // 16-byte aligned (nc % 8 == 0, so c0 < nc - n0 covers all 8).
                uint4 pk;
                pk.x = pack2<T>(v[0], v[1]);
                pk.y = pack2<T>(v[2], v[3]);
                pk.z = pack2<T>(v[4], v[5]);
                pk.w = pack2<T>(v[6], v[7]);
                *reinterpret_cast<uint4*>(row + t_off[c0]) = pk;
              }
            }
          }
        }
      };
      if (p.out_vec) {
        store_tile(std::true_type{});
      } else {
        store_tile(std::false_type{});
      }
    }
    KXS_TRACE(3);
  }
#endif  // DECONV_PATCH_KXS_SM90A_DEVICE
}

// ---------------------------------------------------------------------------------------------
// Weight packing: packed[pos*Cin + k] = weight[k, co, kh, kw] for j = kxs_logical_col(pos) < NC
// (j = (kh*KW + kw)*Cout + co), else 0; fp32 rounded to TF32 (round_tf32_bits). A weight with
// contiguous inner elements takes the tiled pack (KxsTileLayout); any other, one thread per
// packed element, k fastest (coalesced writes). Plain CUDA: runs on any architecture.
struct KxsPackArgs {
  const void* w;
  void* packed;
  int64_t ws[4];  // weight strides: cin, cout, kh, kw
  int cin, cout, kw, nc;
  int64_t total;  // NC_pad * Cin
  bool f32;       // fp32 column permutation (kxs_logical_col)
};

// Weight element offset that packed element `idx` copies, or -1 for a zero (padding column).
__host__ __device__ __forceinline__ int64_t kxs_pack_source(const KxsPackArgs& a, int64_t idx) {
  const int k = (int)(idx % a.cin);
  const int pos = (int)(idx / a.cin);
  const int j = kxs_logical_col(pos, a.f32);
  if (j >= a.nc) return -1;
  const int tap = j / a.cout;
  const int co = j - tap * a.cout;
  const int kh = tap / a.kw;
  const int kw = tap - kh * a.kw;
  return k * a.ws[0] + co * a.ws[1] + kh * a.ws[2] + kw * a.ws[3];
}

// The tiled pack's layout (common/tiled_pack.cuh): inner element (oc, kh, kw) is logical
// column j = (kh*KW + kw)*Cout + oc, whose line is packed row kxs_physical_col(j); weight row k
// is k within it.
struct KxsTileLayout {
  int cin, cout, kw;
  bool f32;
  __host__ __device__ int64_t line(int oc, int kh, int kw_) const {
    return (int64_t)kxs_physical_col((kh * kw + kw_) * cout + oc, f32) * cin;
  }
  __host__ __device__ int64_t row(int r) const { return r; }
  template <typename T>
  __device__ void store(void* packed, int64_t at, T v) const {
    if constexpr (std::is_same<T, float>::value) {
      static_cast<float*>(packed)[at] = __uint_as_float(round_tf32_bits(__float_as_uint(v)));
    } else {
      static_cast<T*>(packed)[at] = v;
    }
  }
};

template <typename T>
__global__ void __launch_bounds__(256)
    gemm_kxs_sm90_pack_weight_kernel(const __grid_constant__ KxsPackArgs a) {
  const T* __restrict__ w = static_cast<const T*>(a.w);
  T* __restrict__ packed = static_cast<T*>(a.packed);
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < a.total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t src = kxs_pack_source(a, idx);
    if constexpr (std::is_same<T, float>::value) {
      packed[idx] = src >= 0 ? __uint_as_float(round_tf32_bits(__float_as_uint(w[src]))) : 0.f;
    } else {
      packed[idx] = src >= 0 ? w[src] : from_float<T>(0.f);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.
int64_t round_up64(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t logical_cols(const ConvTranspose2dParams& p) {
  return (int64_t)p.ph_h.kernel * p.ph_w.kernel * p.out_channels;
}
int64_t packed_rows(const ConvTranspose2dParams& p) {
  return round_up64(logical_cols(p), kColGroup);
}
bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }
// Bytes of one element of `kind` (4 for fp32, 2 for the 16-bit kinds).
int64_t elem_bytes(ScalarKind kind) { return kind == ScalarKind::kFloat32 ? 4 : 2; }
// k per stage: 128 bytes of elements.
int64_t stage_k(ScalarKind kind) { return kRowBytes / elem_bytes(kind); }

// What packing depends on (and the kernel's weight-side limits). fp32 here means TF32 allowed
// (the callers check allow_tf32).
bool weight_side_ok(const ConvTranspose2dParams& p, ScalarKind kind) {
  if (kind != ScalarKind::kFloat16 && kind != ScalarKind::kBFloat16 &&
      kind != ScalarKind::kFloat32)
    return false;
  if (p.groups != 1 || p.in_per_group != p.in_channels || p.out_per_group != p.out_channels)
    return false;
  // TMA: row stride Cin * element size a multiple of 16 bytes.
  const int64_t cin_mult = 16 / elem_bytes(kind);
  if (p.in_channels < cin_mult || p.in_channels % cin_mult != 0 || p.in_channels >= (1 << 24))
    return false;
  if (p.out_channels < 1) return false;
  if (p.ph_h.kernel < 1 || p.ph_h.kernel > 16 || p.ph_w.kernel < 1 || p.ph_w.kernel > 16)
    return false;
  for (int i = 0; i < 4; ++i)
    if (p.w_stride[i] < 0) return false;
  return packed_rows(p) < kInt32Limit - 1024;  // int32 TMA row coordinates and pack indices
}

// K-major 2-D map of a [rows][k] matrix of `kind` (row stride k elements), box {BK, box_rows}
// (128 bytes x box_rows), 128-byte swizzle (matches smem_desc_k128), out-of-bounds elements read
// as zero. fp32 is plain FLOAT32 (a byte copy: the kernel rounds A to TF32 itself).
bool encode_kmajor(CUtensorMap* map, ScalarKind kind, const void* ptr, int64_t k, int64_t rows,
                   int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows};
  const cuuint64_t strides[1] = {(cuuint64_t)(k * elem_bytes(kind))};  // bytes, dimension 1
  const cuuint32_t box[2] = {(cuuint32_t)stage_k(kind), (cuuint32_t)box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUtensorMapDataType dt = kind == ScalarKind::kFloat32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                 : kind == ScalarKind::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return encode(map, dt, 2, const_cast<void*>(ptr), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// 3-D map of dense NCHW 16-bit input as {H*W, Cin, N} (strides H*W and Cin*H*W elements),
// box {64 pixels, BK channels, 1} (128 bytes x BK rows), 128-byte swizzle (matches
// kxs_smem_desc_mn), out-of-bounds elements read as zero.
bool encode_nchw(CUtensorMap* map, ScalarKind kind, const void* ptr, int64_t hw, int64_t cin,
                 int64_t n) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr || kind == ScalarKind::kFloat32) return false;
  const cuuint64_t dims[3] = {(cuuint64_t)hw, (cuuint64_t)cin, (cuuint64_t)(n > 0 ? n : 1)};
  const cuuint64_t strides[2] = {(cuuint64_t)(hw * 2), (cuuint64_t)(cin * hw * 2)};  // bytes
  const cuuint32_t box[3] = {(cuuint32_t)kPixBox, (cuuint32_t)stage_k(kind), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUtensorMapDataType dt = kind == ScalarKind::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return encode(map, dt, 3, const_cast<void*>(ptr), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// How the kernel reads the input (supports() needs one of the first two).
enum class KxsInput { kNone, kChannelsLast, kNchw };
KxsInput input_layout(const ConvTranspose2dParams& p, ScalarKind kind) {
  if (!aligned16(p.input)) return KxsInput::kNone;  // TMA: 16-byte aligned base
  const int64_t cin = p.in_channels, hw = p.in_h * p.in_w;
  auto stride_is = [](int64_t stride, int64_t size, int64_t want) {
    return size <= 1 || stride == want;
  };
  // A is the input itself: dense channels_last, rows of Cin elements (16-byte rows: Cin *
  // element size % 16 == 0, weight_side_ok). No input is both: that needs H*W == 1 (channel
  // stride 1 == H*W), which NCHW's H*W % 8 == 0 excludes.
  if (p.in_stride[1] == 1 && stride_is(p.in_stride[3], p.in_w, cin) &&
      stride_is(p.in_stride[2], p.in_h, p.in_w * cin) &&
      stride_is(p.in_stride[0], p.batch, hw * cin))
    return KxsInput::kChannelsLast;
  // Dense NCHW, 16-bit: A is MN-major per image. TMA strides must be multiples of 16 bytes
  // (H*W % 8 == 0) and below 2^40 bytes.
  if (kind != ScalarKind::kFloat32 && hw % 8 == 0 && cin > 0 &&
      hw <= (((int64_t)1 << 39) - 1) / cin &&  // Cin*H*W < 2^39, without overflow
      stride_is(p.in_stride[1], cin, hw) && stride_is(p.in_stride[3], p.in_w, 1) &&
      stride_is(p.in_stride[2], p.in_h, p.in_w) && stride_is(p.in_stride[0], p.batch, cin * hw))
    return KxsInput::kNchw;
  return KxsInput::kNone;
}

// m tiles: 128 rows of N*H*W, or, for NCHW input, 128 pixels of one image (tiles never
// straddle images).
int64_t pixel_tiles(const ConvTranspose2dParams& p) { return (p.in_h * p.in_w + kBM - 1) / kBM; }
int64_t m_tiles(const ConvTranspose2dParams& p, bool nchw) {
  return nchw ? p.batch * pixel_tiles(p) : (p.batch * p.in_h * p.in_w + kBM - 1) / kBM;
}

// kh-row tiles (see the top): the KW (2 or 4) of the launches that use them, else 0 (tap-major).
// Only for the staged store (NCHW input, or output channel stride != 1), with output pixels of
// one row adjacent (os_w == 1: runs along output rows to store) and Cout % 32 == 0 (the B boxes
// at packed rows tap*Cout + co0 must start on permutation groups). BN / KW >= 32 in every config.
int row_tiles_kw(const ConvTranspose2dParams& p, bool nchw_in) {
  const bool staged = nchw_in || p.out_stride[1] != 1;
  const int kw = p.ph_w.kernel;
  if (!staged || (kw != 2 && kw != 4) || p.out_channels % kColGroup != 0 || p.out_stride[3] != 1)
    return 0;
  return kw;
}
// Kernel-area tiles (see the top; configs 3..5 only): the KH (2 or 4) of the launches with tiles
// of BN columns that use them, else 0 (kh-row or tap-major tiles, as configs 0..2). Where kh-row
// tiles apply (row_tiles_kw), with KH*KW <= 8 (KH 1 would be kh-row tiles), CB = BN / (KH*KW)
// whole permutation groups, and KH packets of KW elements in 16 bytes (a staging chunk's 4*KH
// slots per channel quad: 16-bit any, fp32 only k2s2).
int area_tiles_kh(const ConvTranspose2dParams& p, ScalarKind kind, bool nchw_in, int bn) {
  const int kw = row_tiles_kw(p, nchw_in);
  const int kh = p.ph_h.kernel;
  if (kw == 0 || (kh != 2 && kh != 4) || kh * kw > 8) return 0;
  const int cb = bn / (kh * kw);
  if (cb < kColGroup || cb % kColGroup != 0 || kh * kw * elem_bytes(kind) > 16) return 0;
  return kh;
}
// Column tiles of BN columns: tap-major ceil(NC / BN); kh-row tiles KH * ceil(Cout / (BN / KW));
// kernel-area tiles (rkh = KH) ceil(Cout / (BN / (KH*KW))).
int64_t col_tiles(const ConvTranspose2dParams& p, int bn, int rkw, int rkh = 0) {
  if (rkw == 0) return (logical_cols(p) + bn - 1) / bn;
  if (rkh != 0) {
    const int64_t cb = bn / (rkh * rkw);
    return (p.out_channels + cb - 1) / cb;
  }
  const int64_t cb = bn / rkw;
  return p.ph_h.kernel * ((p.out_channels + cb - 1) / cb);
}

// Config 0 (128x256) or 1 (128x128) by waves of persistent tiles: a 128x256 tile does twice
// the MMAs of a 128x128 one for 1.5x its loads, so count it as 1.8 of them; the larger tile wins
// unless its last wave is much emptier. The same rule for every input / output layout (the
// staged store adds the same work per output element to both). (Not measured yet: autotune
// should time all configs.) nt256 / nt128: column tiles of either size.
int pick_config(int64_t mt, int64_t nc, int64_t nt256, int64_t nt128, int sms) {
  if (nc <= 128 || sms <= 0) return 1;
  const int64_t waves256 = (mt * nt256 + sms - 1) / sms;
  const int64_t waves128 = (mt * nt128 + sms - 1) / sms;
  return waves256 * 18 <= waves128 * 10 ? 0 : 1;
}

// Kernel arguments for tiles of BN columns (tensor maps aside); rkw: row_tiles_kw; rkh:
// area_tiles_kh for kernel-area kernels, else 0.
KxsArgs make_kxs_args(const ConvTranspose2dParams& p, ScalarKind kind, int bn, bool nchw,
                      int rkw, int rkh = 0) {
  const int64_t M = p.batch * p.in_h * p.in_w;
  const int64_t nc = logical_cols(p);
  const int64_t n_tiles = col_tiles(p, bn, rkw, rkh);
  KxsArgs a{};
  a.bias = p.bias;
  a.out = p.output;
  a.epi = p.epi;
  a.m = (int)M;
  a.hw = (int)(p.in_h * p.in_w);
  a.w = (int)p.in_w;
  a.cout = (int)p.out_channels;
  a.kw = (int)p.ph_w.kernel;
  a.nc = (int)nc;
  a.n_tiles = (int)n_tiles;
  a.tiles = (int)(m_tiles(p, nchw) * n_tiles);
  a.kb = (int)((p.in_channels + stage_k(kind) - 1) / stage_k(kind));
  a.os_n = p.out_stride[0];
  a.os_c = p.out_stride[1];
  a.os_h = p.out_stride[2];
  a.os_w = p.out_stride[3];
  a.row_h = p.ph_h.stride * p.out_stride[2];
  a.row_w = p.ph_w.stride * p.out_stride[3];
  // 16-byte vectors of V = 16 / element size channels: 8 (16-bit) or 4 (fp32).
  const int64_t vec = 16 / elem_bytes(kind);
  auto mult = [vec](int64_t stride, int64_t size) { return size <= 1 || stride % vec == 0; };
  a.out_vec = p.out_stride[1] == 1 && p.out_channels % vec == 0 && aligned16(p.output) &&
              mult(p.out_stride[0], p.batch) && mult(p.out_stride[2], p.out_h) &&
              mult(p.out_stride[3], p.out_w);
  a.pix_tiles = (int)pixel_tiles(p);
  a.kh = (int)p.ph_h.kernel;
  return a;
}

KxsPackArgs make_pack_args(const ConvTranspose2dParams& p, void* packed, bool f32) {
  KxsPackArgs a{};
  a.f32 = f32;
  a.w = p.weight;
  a.packed = packed;
  for (int i = 0; i < 4; ++i) a.ws[i] = p.w_stride[i];
  a.cin = (int)p.in_channels;
  a.cout = (int)p.out_channels;
  a.kw = (int)p.ph_w.kernel;
  a.nc = (int)logical_cols(p);
  a.total = packed_rows(p) * p.in_channels;
  return a;
}

template <typename T, class Cfg, bool NCHW_IN, bool STAGED, int RKW>
cudaError_t launch_cfg(const ConvTranspose2dParams& p, ScalarKind kind, const void* packed,
                       cudaStream_t stream) {
  constexpr int kSmem = STAGED ? Cfg::kTotalBytesStaged : Cfg::kTotalBytes;
  constexpr int kBoxes = Cfg::kAreaKH ? Cfg::kAreaKH * RKW : RKW;  // B boxes per stage, or 0
  const KxsArgs a = make_kxs_args(p, kind, Cfg::kBN, NCHW_IN, RKW, Cfg::kAreaKH);
  const int device = current_device();
  const int sms = device_sm_count(device);
  if (sms <= 0) return cudaErrorInvalidValue;

  CUtensorMap map_a, map_b;
  const bool map_a_ok =
      NCHW_IN ? encode_nchw(&map_a, kind, p.input, p.in_h * p.in_w, p.in_channels, p.batch)
              : encode_kmajor(&map_a, kind, p.input, p.in_channels, a.m, kBM);
  // B boxes: BN rows (tap-major), BN / KW rows (kh-row tiles: KW boxes per stage) or
  // BN / (KH*KW) rows (kernel-area tiles: KH*KW boxes per stage).
  if (!map_a_ok || !encode_kmajor(&map_b, kind, packed, p.in_channels, packed_rows(p),
                                  kBoxes ? Cfg::kBN / kBoxes : Cfg::kBN))
    return cudaErrorInvalidValue;

  void (*kernel)(const CUtensorMap, const CUtensorMap, const KxsArgs) = nullptr;
  dispatch_activation(p.epi.activation, [&](auto act_c) {
    kernel = conv_transpose2d_gemm_kxs_sm90_kernel<T, Cfg, NCHW_IN, STAGED, RKW,
                                                   decltype(act_c)::value>;
  });
  if (kernel == nullptr) return cudaErrorInvalidDeviceFunction;  // (another activation's unit)
  const cudaError_t err = ensure_dynamic_smem(kernel, kSmem, device);
  if (err != cudaSuccess) return err;
  const unsigned grid = (unsigned)(a.tiles < sms ? a.tiles : sms);
  kernel<<<grid, kThreads, kSmem, stream>>>(map_a, map_b, a);
  return cudaGetLastError();
}

// A staged kernel: kh-row tiles of KW 2 / 4 where row_tiles_kw says so, else tap-major.
template <typename T, class Cfg, bool NCHW_IN>
cudaError_t launch_staged(const ConvTranspose2dParams& p, ScalarKind kind, const void* packed,
                          cudaStream_t stream) {
  switch (row_tiles_kw(p, NCHW_IN)) {
    case 2: return launch_cfg<T, Cfg, NCHW_IN, true, 2>(p, kind, packed, stream);
    case 4: return launch_cfg<T, Cfg, NCHW_IN, true, 4>(p, kind, packed, stream);
  }
  return launch_cfg<T, Cfg, NCHW_IN, true, 0>(p, kind, packed, stream);
}

// The kernel variant for the layouts: NCHW input (16-bit) always stores through the staging
// buffer; channels_last input does when the output's channel stride is not 1 (NCHW output),
// and keeps the register path (16-byte vectors where out_vec) otherwise.
template <typename T, class Cfg>
cudaError_t launch_layout(const ConvTranspose2dParams& p, ScalarKind kind, const void* packed,
                          bool nchw_in, cudaStream_t stream) {
  if (nchw_in) {
    if constexpr (sizeof(T) == 2) {
      return launch_staged<T, Cfg, true>(p, kind, packed, stream);
    } else {
      return cudaErrorInvalidValue;  // supports() never selects it for fp32
    }
  }
  if (p.out_stride[1] != 1) return launch_staged<T, Cfg, false>(p, kind, packed, stream);
  return launch_cfg<T, Cfg, false, false, 0>(p, kind, packed, stream);
}

// Kernel-area tiles of KH x KW on config Cfg (0..2); instantiated by the area files only.
template <typename T, class Cfg, int KH, int KW>
cudaError_t launch_area(const ConvTranspose2dParams& p, ScalarKind kind, const void* packed,
                        bool nchw_in, cudaStream_t stream) {
  // The geometries area_tiles_kh can pick for this BN and element size (others never run).
  if constexpr (Cfg::kBN / (KH * KW) >= kColGroup && KH * KW * (int)sizeof(T) <= 16) {
    using A = KxsAreaConfig<Cfg, KH>;
    if (nchw_in) {
      if constexpr (sizeof(T) == 2) {
        return launch_cfg<T, A, true, true, KW>(p, kind, packed, stream);
      } else {
        return cudaErrorInvalidValue;  // never selected (supports: fp32 NCHW input refused)
      }
    }
    return launch_cfg<T, A, false, true, KW>(p, kind, packed, stream);
  }
  return cudaErrorInvalidValue;
}
template <typename T, class Cfg>
cudaError_t launch_area_geometry(const ConvTranspose2dParams& p, ScalarKind kind,
                                 const void* packed, bool nchw_in, cudaStream_t stream) {
  const int kh = area_tiles_kh(p, kind, nchw_in, Cfg::kBN);
  const int kw = row_tiles_kw(p, nchw_in);
  if (kh == 2 && kw == 2) return launch_area<T, Cfg, 2, 2>(p, kind, packed, nchw_in, stream);
  if (kh == 2 && kw == 4) return launch_area<T, Cfg, 2, 4>(p, kind, packed, nchw_in, stream);
  if (kh == 4 && kw == 2) return launch_area<T, Cfg, 4, 2>(p, kind, packed, nchw_in, stream);
  return cudaErrorInvalidValue;  // run only where area_tiles_kh applies (kxs_resolve)
}

// The column tile width of configs 0..2 (KxsCfg0..2).
constexpr int kKxsBaseBN[3] = {KxsCfg0::kBN, KxsCfg1::kBN, KxsCfg2::kBN};

// What a call runs: base config 0..2 (configs 3..5 are 0..2 with kernel-area tiles where
// area_tiles_kh applies, else exactly 0..2), whether with kernel-area tiles, and whether the
// input is read as NCHW. base -1: the call cannot run.
struct KxsChoice {
  int base;
  bool area;
  bool nchw;
};

KxsChoice kxs_resolve(const ConvTranspose2dParams& p, ScalarKind kind, int config) {
  const KxsInput in = input_layout(p, kind);
  if (in == KxsInput::kNone) return {-1, false, false};
  const bool nchw = in == KxsInput::kNchw;
  if (config < 0) {
    const int rkw = row_tiles_kw(p, nchw);
    config = pick_config(m_tiles(p, nchw), logical_cols(p), col_tiles(p, 256, rkw),
                         col_tiles(p, 128, rkw), device_sm_count(current_device()));
  }
  if (config < 0 || config >= kNumConfigs) return {-1, false, nchw};
  const int base = config % 3;
  const bool area = config >= 3 && area_tiles_kh(p, kind, nchw, kKxsBaseBN[base]) != 0;
  return {base, area, nchw};
}

// 16-bit operands, fp32 output (KxsF32OutConfig): configs 0..2 (-1 picks as kxs_resolve does),
// channels_last input and output only; -1 when the call cannot run.
int kxs_f32_out_resolve(const ConvTranspose2dParams& p, ScalarKind kind, int config) {
  if (input_layout(p, kind) != KxsInput::kChannelsLast || p.out_stride[1] != 1) return -1;
  if (config < 0) {
    config = pick_config(m_tiles(p, false), logical_cols(p), col_tiles(p, 256, 0),
                         col_tiles(p, 128, 0), device_sm_count(current_device()));
  }
  return config >= 0 && config < 3 ? config : -1;
}

// The config type of base config I.
template <int I>
using KxsBaseCfg =
    std::conditional_t<I == 0, KxsCfg0, std::conditional_t<I == 1, KxsCfg1, KxsCfg2>>;

// The bodies of the generated per-config launchers (gemm_kxs_sm90_<instance>.cu), one
// translation unit per element type and config, so that a build compiles them in parallel.
template <typename T, int I>
cudaError_t kxs_launch_config(const ConvTranspose2dParams& p, ScalarKind kind, const void* packed,
                              bool nchw_in, cudaStream_t stream) {
  return launch_layout<T, KxsBaseCfg<I>>(p, kind, packed, nchw_in, stream);
}
template <typename T, int I>
cudaError_t kxs_launch_area_config(const ConvTranspose2dParams& p, ScalarKind kind,
                                   const void* packed, bool nchw_in, cudaStream_t stream) {
  return launch_area_geometry<T, KxsBaseCfg<I>>(p, kind, packed, nchw_in, stream);
}
template <typename T, int I>
cudaError_t kxs_launch_f32_out_config(const ConvTranspose2dParams& p, ScalarKind kind,
                                      const void* packed, cudaStream_t stream) {
  static_assert(sizeof(T) == 2, "fp32 output is for 16-bit operands");
  return launch_cfg<T, KxsF32OutConfig<KxsBaseCfg<I>>, false, false, 0>(p, kind, packed, stream);
}

// The tiled pack where it reads the weight (common/tiled_pack.cuh), else one thread per
// packed element.
template <typename T>
cudaError_t launch_pack(const ConvTranspose2dParams& p, void* packed, cudaStream_t stream) {
  const KxsPackArgs a = make_pack_args(p, packed, std::is_same<T, float>::value);
  TiledPackShape s;
  if (tiled_pack_shape(p, s)) {
    const size_t zero_bytes = a.nc < packed_rows(p) ? (size_t)(a.total * (int64_t)sizeof(T)) : 0;
    return launch_tiled_pack<T>(s, KxsTileLayout{a.cin, a.cout, a.kw, a.f32}, packed,
                                zero_bytes, stream);
  }
  const int64_t blocks = (a.total + 255) / 256;
  const unsigned grid = (unsigned)(blocks < 65536 ? blocks : 65536);
  gemm_kxs_sm90_pack_weight_kernel<T><<<grid, 256, 0, stream>>>(a);
  return cudaGetLastError();
}

// Everything supports() checks except the build, the driver and the device.
[[maybe_unused]] bool geometry_ok(const ConvTranspose2dParams& p, ScalarKind kind) {
  if (!weight_side_ok(p, kind)) return false;
  const int act = (int)p.epi.activation;
  if (act < (int)Activation::kNone || act > (int)Activation::kHardswish) return false;
  auto axis_ok = [](const AxisPhase& a, int64_t in, int64_t out) {
    return a.kernel == a.stride && a.pad == 0 && a.dil == 1 && in >= 0 && out == in * a.kernel;
  };
  if (!axis_ok(p.ph_h, p.in_h, p.out_h) || !axis_ok(p.ph_w, p.in_w, p.out_w)) return false;
  if (p.batch < 0) return false;
  for (int i = 0; i < 4; ++i)
    if (p.in_stride[i] < 0 || p.out_stride[i] < 0) return false;
  const KxsInput in = input_layout(p, kind);
  if (in == KxsInput::kNone) return false;
  const int64_t cin = p.in_channels;
  // int32 rows / tile indices / k block counters.
  const int64_t M = p.batch * p.in_h * p.in_w;
  if (M >= kInt32Limit - kBM) return false;
  const bool nchw = in == KxsInput::kNchw;
  // Most with BN 128.
  const int64_t tiles = m_tiles(p, nchw) * col_tiles(p, 128, row_tiles_kw(p, nchw));
  if (tiles >= kMaxTiles || tiles * ((cin + stage_k(kind) - 1) / stage_k(kind)) >= kInt32Limit)
    return false;
  if (M > 0 && p.input == nullptr) return false;
  if (p.output == nullptr && p.batch * p.out_channels * p.out_h * p.out_w > 0) return false;
  return true;
}

}  // namespace

}  // namespace deconv_patch

// The GEMM launchers (generated, tools/generate_instances.py): per element type one that picks
// the config (and the fp32-output ones for 16-bit operands), and per config the one that runs
// it, each in a translation unit of its own.
#include "gemm_kxs_sm90/gemm_kxs_sm90_instances.h"
