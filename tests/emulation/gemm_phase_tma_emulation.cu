// Host emulation of gemm_phase_tma (cuda/gemm_phase_tma/gemm_phase_tma_kernel.cuh) checked
// against a float64 conv_transpose2d, so that changes to the kernel's host code and index math
// are caught on machines without a Hopper GPU (CI has none; the kernel is sm_90a only).
//
// Almost everything that decides which value goes where lives in __host__ __device__ functions
// and host argument builders. This program #includes the kernel's code and runs those same
// functions on the CPU, emulating what the hardware does in between:
//   * weight packing (pt_pack_source), its size (gemm_phase_tma_packed_weight_bytes); fp32 strict:
//     the hi/lo blocks (pt_split_tf32_bits) against an independent float split of every weight;
//     the tiled pack's index math (PtTileLayout, tiled_pack_check.h) for a contiguous and a
//     channels_last weight;
//   * box choice (pt_pick_box vs pt_best_box), launch arguments (pt_fill_args) and schedule
//     (pt_schedule, pt_next_pos): segments, empty tiles, sibling adjacency, every tile once;
//   * every role's walk over its CTA's tiles: the producer's (pt_find_segment, pt_decode_tile,
//     pt_a_coords, pt_b_row, pt_cursor_next) and both consumers' ring counters (ping-pong
//     skipping, order-barrier pairing), each stage consumed as often as it must be;
//   * TMA boxes with out-of-bounds zero fill; the wgmma accumulator fragment -> logical column
//     mapping (pt_frag_row, pt_acc_index, pt_logical_col); the three store paths (pt_row_offset,
//     pt_col_offset, PtStaging); every output element written exactly once;
//   * fp32 strict (3xTF32): the CTA's shared-memory ring with the 128-byte swizzle (stage
//     offsets, expect_tx bytes, alignment), the consumers' in-place A split, every wgmma read
//     through its descriptor, the partial-accumulator bookkeeping (pt_group_mi / pt_group_nb /
//     pt_part_acc_index), tensor-core sums modelled as truncating (or rounded to nearest).
//   * the strided correlation (a transposed convolution's input gradient, gather_h / gather_w):
//     its one-phase plan (pt_io_plan), box caps (pt_call_box) and TMA element strides, against a
//     float64 correlation.
// 16-bit / TF32 runs keep every value in double (an exact index check, to 1e-9 relative); strict
// runs use fp32 operands and must stay within 1e-5 * |scale| * sum |products| per element.
//
// Not covered: what only the hardware shows. Real timing, occupancy and register allocation;
// PTX semantics beyond the layouts modelled here (TMA, wgmma, mbarrier behaviour itself); memory
// ordering and races between the roles (waits, fences, proxies). The GPU tests cover those
// (tests/gpu/gemm_phase_tma/test_gemm_phase_tma.py).
//
// Build: host-only, no sm_90a code (the GEMM kernels are not even instantiated):
//   nvcc -std=c++17 -O2 -I cuda [-Xcompiler -fopenmp -lgomp] \
//        tests/emulation/gemm_phase_tma_emulation.cu -o gemm_phase_tma_emulation
// Run: gemm_phase_tma_emulation MODE... [--verbose]
//   light   16-bit / TF32 cases: layouts, store paths, zero-tap phases, groups, n tiles (~4 s)
//   strict  fp32 strict (3xTF32) cases, tensor-core sums truncating and rounded (~40 s)
//   medium  two benchmark-like shapes: many tiles and turns per CTA (~5 s)
// (one core; with OpenMP a case's runs spread over the cores.)
// Each mode prints one line "SUMMARY <mode>: cases=.. runs=.. checks=.. failures=.. seconds=..";
// the exit status is 1 when any check failed. tests/emulation/test_kernel_emulation.py builds and
// runs it.
#include "gemm_phase_tma/gemm_phase_tma_kernel.cuh"
#include "gemm_phase_tma/gemm_phase_tma.cu"  // the API: gemm_phase_tma_packed_weight_bytes
#include "tiled_pack_check.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace deconv_patch {
// The per-type GEMM launchers are their own translation units (device code only this program
// does not need); defined here so that the API's dispatch links. Never called.
cudaError_t gemm_phase_tma_launch_f16(const ConvTranspose2dParams&, const void*, int, int,
                                      cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t gemm_phase_tma_launch_bf16(const ConvTranspose2dParams&, const void*, int, int,
                                       cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t gemm_phase_tma_launch_tf32(const ConvTranspose2dParams&, const void*, int, int,
                                       cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t gemm_phase_tma_launch_f32x3(const ConvTranspose2dParams&, const void*, int, int,
                                        cudaStream_t) {
  return cudaErrorNotSupported;
}
}  // namespace deconv_patch

using namespace deconv_patch;

// ---- checks and counters ---------------------------------------------------------------------

// Cases and kernel-config runs emulated, checks evaluated, checks failed.
struct Tally {
  long long cases = 0, runs = 0, checks = 0, failures = 0;
  void add(const Tally& o) {
    cases += o.cases;
    runs += o.runs;
    checks += o.checks;
    failures += o.failures;
  }
};
static Tally g_tally;               // the mode's totals (folded in from the threads' counts)
static thread_local Tally t_tally;  // this thread's counts since its last fold_tally()
static bool g_verbose = false;      // one line per config run (else only failing runs print)
static std::atomic<int> g_failures_printed{0};  // per mode; the first 20 are printed

static void fold_tally() {
#pragma omp critical(tally)
  g_tally.add(t_tally);
  t_tally = Tally{};
}

// Counts the check; prints the first 20 failures of a mode (one printf each: runs may be on
// several threads).
#define CHECK(cond, ...)                                                         \
  do {                                                                           \
    ++t_tally.checks;                                                            \
    if (!(cond)) {                                                               \
      if (g_failures_printed++ < 20) {                                           \
        char check_msg[512];                                                     \
        snprintf(check_msg, sizeof check_msg, __VA_ARGS__);                      \
        printf("  FAIL %s:%d: %s | %s\n", __FILE__, __LINE__, #cond, check_msg); \
      }                                                                          \
      ++t_tally.failures;                                                        \
    }                                                                            \
  } while (0)

// ---- cases ------------------------------------------------------------------------------------

enum OutLayout {
  kNCHW = 0,
  kNHWC = 1,        // dense: vectorised stores where the channel count allows
  kNHWCPadded = 2,  // pixel stride Cout + 3: direct element stores
  kWCHN = 3,        // (W, C, H, N) order: os_w the largest but one
};

struct Case {
  std::string name;
  int N, Cin, Cout, groups, H, W, KH, KW;
  int sh, sw, ph, pw, dh, dw, oph, opw;
  ScalarKind kind;
  OutLayout layout;
  bool bias, affine;
  int in_pad;           // extra channels in the input's pixel stride (non-dense input)
  bool strict = false;  // fp32 without TF32: the 3xTF32 kernels (kind must be kFloat32)
  // The transposed convolution's input gradient instead: the strided correlation of its
  // grad_output (Cout channels, its output size) with the weight, into Cin channels of H x W
  // (ConvTranspose2dParams::gather_h / gather_w; groups 1).
  bool gather = false;
};

// Which launch variations run_case emulates besides the picked box at the first grid.
struct Variations {
  std::vector<int> grids;        // CTA counts ("SM counts" given to pt_schedule)
  bool extra_boxes;              // also four fixed box shapes (first grid, two configs)
  bool all_configs_each_grid;    // all four configs at every grid (else two past the first)
};
static Variations g_var{{5, 132, 7}, true, true};

// ---- fp32 strict: tensor-core numerics and packed data ---------------------------------------

// Tensor-core sum model of one wgmma k8 step per accumulator element: 0 = products exact, the
// sum (with the old accumulator) rounded once to nearest; 1 = truncating (Fasi et al.): terms
// aligned to the largest with 3 extra bits below its 24-bit significand, truncated toward zero,
// summed exactly, the result rounded toward zero to fp32.
static int g_tc_model = 1;

static float tc_sum(bool use_c, float c, const double* prod, int n) {
  double t[16];
  int m = 0;
  if (use_c) t[m++] = c;
  for (int k = 0; k < n; ++k) t[m++] = prod[k];
  if (g_tc_model == 0) {
    long double acc = 0;  // 9 terms of <= 48 significant bits each: exact enough
    for (int k = 0; k < m; ++k) acc += t[k];
    return (float)acc;
  }
  int emax = INT_MIN;
  for (int k = 0; k < m; ++k)
    if (t[k] != 0) {
      int e;
      std::frexp(t[k], &e);
      emax = std::max(emax, e);
    }
  if (emax == INT_MIN) return 0.f;
  const double q = std::ldexp(1.0, emax - 1 - 23 - 3);
  double sum = 0;  // multiples of q below 2^31 q: exact
  for (int k = 0; k < m; ++k) sum += std::trunc(t[k] / q) * q;
  float f = (float)sum;
  if (std::fabs((double)f) > std::fabs(sum)) f = std::nextafter(f, 0.f);
  return f;
}

// Independent TF32 rounding (to nearest, ties away, 11 significant bits) of a normal or zero
// float, to check pt_split_tf32_bits against.
static float tf32_ref(float x) {
  if (x == 0.f || !std::isfinite(x)) return x;
  int e;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, e - 11);
  const double r = std::floor(std::fabs((double)x) / ulp + 0.5) * ulp;
  return (float)std::copysign(r, (double)x);
}

static bool is_tf32(uint32_t bits) { return (bits & 0x1FFFu) == 0; }

struct StrictData {
  std::vector<float> packed2;  // [2 * rows][kmax]: hi block, then lo block
  std::vector<double> absref;  // sum |products| per output element (NCHW, as the reference)
  std::vector<double> f32out;  // fp32 FFMA reference through the epilogue (NCHW)
};

// Worst strict results of a mode: per-element error / (|mul| sum|p|), and max error over the GPU
// tests' bound (2x an fp32 FFMA reference's max error + 1 ulp of max |ref|), for the log.
struct StrictStats {
  double worst_rel = 0, worst_bound_ratio = 0;
};
static StrictStats g_strict_stats;

// Everything run_case prepares once for all configs, boxes and grids of a case.
struct CaseData {
  ConvTranspose2dParams p;
  std::vector<double> in;      // channels_last input, p.in_stride
  std::vector<double> packed;  // the packed weight (16-bit / TF32 layout), as doubles
  std::vector<double> bias, scale, shift;
  std::vector<double> ref;  // float64 result through the epilogue, NCHW
  int64_t out_elems = 0;    // elements the output strides span
  StrictData strict;        // fp32 strict cases only
};

// One TMA load of k block `rec` as the producer issued it.
struct ProdRec {
  int t, kb;
  int ax[4];  // A box coordinates {c, w, h, n}
  int bk, brow;
};

// One consumer's tile of a PtSplitConfig kernel: per k block the TMA boxes into the simulated
// shared memory `smem` (words from byte address `base`), the split pass, the wgmma groups from
// their descriptors, the partial bookkeeping; D[tile row][physical column] receives the tile
// accumulators through the fragment layout. Physical columns >= pos_end hold no stored channel
// and are not computed (their accumulators stay NaN).
template <class Cfg>
void strict_tile(const ConvTranspose2dParams& p, const PtArgs& a, const PtGeom& geo,
                 const PtBox& box, const std::vector<double>& in, const StrictData& sd,
                 const std::vector<ProdRec>& recs, uint32_t c, int nkb, int cw, int pos_end,
                 std::vector<uint32_t>& smem, uint32_t base, std::vector<double>& D) {
  constexpr int BN = Cfg::kBN, S = Cfg::kStages, MI = Cfg::kMI, kAcc = Cfg::kAcc;
  constexpr bool PP = Cfg::kPingPong;
  constexpr int kSub = Cfg::kSub, kParts = Cfg::kPartBuffers;
  constexpr int BK = kPtRowBytes / 4;
  static_assert(Cfg::kSplit && kSub == MI * (BN / 64), "split config");
  const uint32_t pipe_end = base + (uint32_t)Cfg::kPipeBytes;
  auto word = [&](uint32_t addr) -> uint32_t& {
    static thread_local uint32_t dummy;
    const bool ok = addr >= base && addr + 4 <= pipe_end && addr % 4 == 0;
    CHECK(ok, "shared address 0x%x outside the ring", addr);
    return ok ? smem[(addr - base) / 4] : dummy;
  };
  auto swz = [](uint32_t x) { return x ^ (((x >> 7) & 7u) << 4); };  // 128-byte swizzle
  auto fbits = [](double v) { return pt_float_bits((float)v); };

  // Kernel constants, spelled as in the consumer.
  const uint64_t a_desc0 = smem_desc_k128(base + (uint32_t)((PP ? 0 : cw) * 64 * kPtRowBytes));
  const uint64_t b_desc0 = smem_desc_k128(base + Cfg::kBOffset);
  constexpr uint64_t kStageDesc = Cfg::kStageBytes >> 4;
  constexpr uint64_t kHalfDesc = (64 * kPtRowBytes) >> 4;
  constexpr uint32_t kALoDesc = (uint32_t)Cfg::kALoOffset >> 4;
  constexpr uint32_t kBLoDesc = (uint32_t)(Cfg::kBLoOffset - Cfg::kBOffset) >> 4;
  constexpr uint64_t kNBDesc = (64 * kPtRowBytes) >> 4;
  const uint32_t desc_hi = (uint32_t)(a_desc0 >> 32);
  CHECK(desc_hi == (uint32_t)(b_desc0 >> 32), "descriptor high words equal");

  std::vector<float> acc((size_t)128 * MI * kAcc, 0.f);     // [ct][mi][idx]
  std::vector<float> part((size_t)kParts * 128 * 32, NAN);  // [b][ct][r]
  int tag[2] = {-1, -1};                                    // group held by each partial
  int flushed = 0;
  auto frag64 = [](int ct, int r, int& row, int& col) {  // m64nN fragment of register r
    const int wv = ct >> 5, lane = ct & 31;
    row = 16 * wv + (lane >> 2) + 8 * ((r >> 1) & 1);
    col = 8 * (r >> 2) + 2 * (lane & 3) + (r & 1);
  };

  // One wgmma m64n64k8 tf32 of the kernel into partial b, sub-tile column block nb: operands
  // read through the descriptors (low words + shared high word).
  std::vector<float> opa(64 * 8), opb(64 * 8);
  auto wgmma = [&](int b, int nb, int scale_d, uint32_t da_lo, uint32_t db_lo) {
    const uint64_t da = (uint64_t)desc_hi << 32 | da_lo, db = (uint64_t)desc_hi << 32 | db_lo;
    for (int which = 0; which < 2; ++which) {
      const uint64_t d = which ? db : da;
      CHECK(((d >> 16) & 0x3FFF) == 1 && ((d >> 32) & 0x3FFF) == 64 && (d >> 62) == 1 &&
                ((d >> 49) & 7) == 0 && ((d >> 14) & 3) == 0,
            "descriptor fields");
      const uint32_t start = (uint32_t)(d & 0x3FFF) << 4;
      std::vector<float>& op = which ? opb : opa;
      for (int r = 0; r < 64; ++r)
        for (int k = 0; k < 8; ++k) {
          const uint32_t lin = start + (uint32_t)(r / 8) * 1024 + (uint32_t)(r % 8) * 128 + 4 * k;
          const uint32_t bits = word(swz(lin));
          const float v = pt_bits_float(bits);
          CHECK(std::isfinite(v) && is_tf32(bits), "operand %s row %d k %d bits 0x%08x not TF32",
                which ? "B" : "A", r, k, bits);
          op[r * 8 + k] = v;
        }
    }
    for (int ct = 0; ct < 128; ++ct)
      for (int r = 0; r < 32; ++r) {
        int row, col;
        frag64(ct, r, row, col);
        if (64 * nb + col >= pos_end) continue;
        double prod[8];
        for (int k = 0; k < 8; ++k) prod[k] = (double)opa[row * 8 + k] * (double)opb[col * 8 + k];
        float& d = part[((size_t)b * 128 + ct) * 32 + r];
        d = tc_sum(scale_d != 0, d, prod, 8);
      }
  };
  auto add_part = [&](int b, int jg, int kb) {
    CHECK(tag[b] == kb * kSub + jg, "partial %d holds group %d, adding %d", b, tag[b],
          kb * kSub + jg);
    const int mi = pt_group_mi<BN>(jg), nb = pt_group_nb<BN>(jg);
    for (int ct = 0; ct < 128; ++ct)
      for (int r = 0; r < 32; ++r) {
        const int idx = pt_part_acc_index(nb, r);
        int row, col, row2, col2;
        frag64(ct, r, row, col);
        frag64(ct, idx, row2, col2);  // the tile accumulator's fragment (m64nBN)
        CHECK(idx >= 0 && idx < kAcc && row2 == row && col2 == 64 * nb + col,
              "partial register -> accumulator register");
        float& dst = acc[((size_t)ct * MI + mi) * kAcc + idx];
        dst = dst + part[((size_t)b * 128 + ct) * 32 + r];  // fp32 add, round to nearest
      }
    tag[b] = -1;
    ++flushed;
  };

  for (int kb = 0; kb < nkb; ++kb) {
    const uint32_t cc = c + (uint32_t)kb;
    const ProdRec& rec = recs[cc];
    const uint32_t s = cc % S;
    const uint32_t sa = base + s * (uint32_t)Cfg::kStageBytes;
    // ---- producer: expect_tx and the three boxes ----
    const int64_t a_bytes = (int64_t)BK * box.w * box.h * box.n * 4;
    const int64_t b_bytes = (int64_t)BK * BN * 4;
    CHECK(a_bytes == Cfg::kABytes && b_bytes == Cfg::kBBytes &&
              a_bytes + 2 * b_bytes == Cfg::kTxBytes,
          "expect_tx %d vs loaded %lld", Cfg::kTxBytes, (long long)(a_bytes + 2 * b_bytes));
    const uint32_t dst_a = sa, dst_bh = sa + Cfg::kBOffset, dst_bl = sa + Cfg::kBLoOffset;
    const uint32_t alo = sa + Cfg::kALoOffset;
    CHECK(dst_a % 1024 == 0 && dst_bh % 1024 == 0 && dst_bl % 1024 == 0 && alo % 1024 == 0,
          "regions on 1024-byte swizzle atoms");
    CHECK(dst_a + a_bytes <= alo && alo + Cfg::kABytes <= dst_bh && dst_bh + b_bytes <= dst_bl &&
              dst_bl + b_bytes <= sa + Cfg::kStageBytes && sa + Cfg::kStageBytes <= pipe_end,
          "regions disjoint, in order, inside the stage");
    for (int m = 0; m < 128; ++m) {
      const int nl = m / (box.w * box.h), hl = (m / box.w) % box.h, wl = m % box.w;
      const int64_t n = rec.ax[3] + nl, yy = rec.ax[2] + (int64_t)hl * a.a_sh,
                    xx = rec.ax[1] + (int64_t)wl * a.a_sw;  // (TMA element strides)
      const bool pix = n >= 0 && n < p.batch && yy >= 0 && yy < p.in_h && xx >= 0 && xx < p.in_w;
      for (int k = 0; k < BK; ++k) {
        const int64_t ch = rec.ax[0] + k;
        const double v = pix && ch >= 0 && ch < p.in_channels
                             ? in[n * p.in_stride[0] + ch * p.in_stride[1] +
                                  yy * p.in_stride[2] + xx * p.in_stride[3]]
                             : 0.0;
        word(swz(dst_a + (uint32_t)m * 128 + 4 * k)) = fbits(v);
      }
    }
    for (int which = 0; which < 2; ++which) {
      const uint32_t dst = which ? dst_bl : dst_bh;
      const int64_t row0 = (int64_t)rec.brow + (which ? a.b_split_rows : 0);
      CHECK(a.b_split_rows == geo.rows, "lo block offset");
      for (int n = 0; n < BN; ++n)
        for (int k = 0; k < BK; ++k) {
          const int64_t row = row0 + n;  // the map has 2 * rows rows; zero fill past it
          const float v = row < 2 * geo.rows && rec.bk + k < geo.kmax
                              ? sd.packed2[(size_t)(row * geo.kmax + rec.bk + k)]
                              : 0.f;
          word(swz(dst + (uint32_t)n * 128 + 4 * k)) = pt_float_bits(v);
        }
    }
    // Stale A_lo (NaN poison): a consumer may read only what its own split writes.
    for (uint32_t x = 0; x < (uint32_t)Cfg::kABytes; x += 4) word(alo + x) = 0x7FC00000u;
    // ---- consumer split pass (pt_split_tf32_smem's addresses) ----
    {
      const uint32_t rows = sa + (uint32_t)((PP ? 0 : cw) * 64 * kPtRowBytes);
      constexpr int kChunks = MI * 64 * kPtRowBytes / 16 / 128;
      std::vector<int> hit(MI * 64 * kPtRowBytes / 4, 0);
      for (int ct = 0; ct < 128; ++ct)
        for (int i = 0; i < kChunks; ++i) {
          const uint32_t addr = rows + 16u * (uint32_t)ct + (uint32_t)i * 16u * 128u;
          for (int e = 0; e < 4; ++e) {
            const uint32_t x = addr + 4 * e;
            const bool own = x >= rows && x < rows + (uint32_t)(MI * 64 * kPtRowBytes);
            CHECK(own, "split outside the consumer's A rows");
            if (!own) continue;
            hit[(x - rows) / 4]++;
            uint32_t hi, lo;
            pt_split_tf32_bits(word(x), hi, lo);
            word(x) = hi;
            word(x + (uint32_t)Cfg::kALoOffset) = lo;
          }
        }
      for (int v : hit) CHECK(v == 1, "split covers each of its A words once (%d)", v);
    }
    // ---- wgmma groups and partial bookkeeping, in the kernel's order ----
    const uint64_t so = (uint64_t)s * kStageDesc;
    for (int j = 0; j < kSub; ++j) {
      const int mi = pt_group_mi<BN>(j), nb = pt_group_nb<BN>(j);
      const int pj = j % kParts;
      CHECK(tag[pj] == -1, "partial %d reused before its add", pj);
      const uint32_t da = (uint32_t)(a_desc0 + so + mi * kHalfDesc);
      const uint32_t db = (uint32_t)(b_desc0 + so + nb * kNBDesc);
      // The 8 small terms (lo*hi, hi*lo per k step; the first with scale-d 0), then the 4 hi*hi.
      for (int ks = 0; ks < 4; ++ks) {
        wgmma(pj, nb, ks == 0 ? 0 : 1, da + kALoDesc + 2 * ks, db + 2 * ks);
        wgmma(pj, nb, 1, da + 2 * ks, db + kBLoDesc + 2 * ks);
      }
      for (int ks = 0; ks < 4; ++ks) wgmma(pj, nb, 1, da + 2 * ks, db + 2 * ks);
      tag[pj] = kb * kSub + j;
      // Two partials: the previous group is added while this one runs. One: each group but the
      // last is added at once (the last after the next block's A split, below).
      if (kParts == 2 && j > 0) add_part((j - 1) % kParts, j - 1, kb);
      if (kParts == 1 && j != kSub - 1) add_part(0, j, kb);
    }
    add_part((kSub - 1) % kParts, kSub - 1, kb);
  }
  CHECK(flushed == nkb * kSub, "every group added once (%d of %d)", flushed, nkb * kSub);
  // Tile accumulators -> D through the epilogue's fragment layout.
  for (int ct = 0; ct < 128; ++ct)
    for (int mi = 0; mi < MI; ++mi)
      for (int idx = 0; idx < kAcc; ++idx) {
        const int wv = ct >> 5, lane = ct & 31;
        const int row = pt_frag_row<PP>(mi, cw, wv, lane >> 2, (idx >> 1) & 1);
        const int phys = 8 * (idx >> 2) + 2 * (lane & 3) + (idx & 1);
        D[(size_t)row * BN + phys] = acc[((size_t)ct * MI + mi) * kAcc + idx];
      }
}

// ---- one kernel config on one case, box and grid ----------------------------------------------

// Emulates every CTA of config Cfg (producer walk, both consumers, epilogue and stores) and
// compares the output with the reference; also checks the static schedule. slices > 1: the
// launch in k slices (its tiles store into the workspace, pt_slice_params), then the reduce of
// common/k_slice_reduce.cuh (the slices added in order).
template <class Cfg>
void run_config(const Case& cs, const CaseData& d, const PtBox& box, int sms,
                const char* cfg_name, int slices = 1) {
  ++t_tally.runs;
  const long long failures_before = t_tally.failures;
  CHECK(Cfg::kSplit == cs.strict, "strict cases run the split configs");
  if (Cfg::kSplit != cs.strict) return;
  const ConvTranspose2dParams& p = d.p;
  const StrictData* sd = cs.strict ? &d.strict : nullptr;
  constexpr int BN = Cfg::kBN;
  constexpr bool PP = Cfg::kPingPong;
  const int BK = (int)pt_stage_k(cs.kind);
  const AxisPlan h = pt_io_plan(p.ph_h, p.gather_h, p.out_h);
  const AxisPlan w = pt_io_plan(p.ph_w, p.gather_w, p.out_w);
  PtArgs a;
  int64_t kbt = 0;
  const ConvTranspose2dParams q = slices > 1 ? pt_slice_params(p, nullptr) : p;
  const bool ok = pt_fill_args(a, q, cs.kind, BN, box, h, w, &kbt) &&
                  pt_apply_slices(a, q, slices);
  CHECK(ok, "fill_args");
  if (!ok) return;
  CHECK(a.k_slices == slices && (slices == 1 || (a.ncw == 1 && a.mode != kPtStoreStaged)),
        "sliced launch stores from registers, one phase per segment");
  const int64_t out_elems = slices > 1 ? slices * pt_slice_elems(p) : d.out_elems;
  const int grid = pt_schedule(a, sms, PP);
  CHECK(grid == (a.tiles < sms ? a.tiles : sms), "grid");
  CHECK(a.rot >= 0 && (grid == 0 || a.rot < grid), "rot range");
  if (a.ncw > 1 && grid > 0) {  // pos advances so that the column phase advances by one
    const int period = PP ? 2 : 1;
    CHECK(grid <= a.rot || ((int64_t)period * grid + a.rot) % a.ncw == 1 % a.ncw ||
              grid < a.ncw,
          "rot target");
  }
  const AxisPlan h0 = plan_axis(p.ph_h, 0), w0 = plan_axis(p.ph_w, 0);
  const PtGeom geo = pt_geom(p, cs.kind, h0, w0);
  std::vector<double> out(out_elems, NAN);
  std::vector<int> writes(out_elems, 0);
  std::vector<int> visited(a.tiles, 0);

  // ---- static schedule: segments, empty tiles, sibling adjacency ----
  CHECK(a.num_phases % a.ncw == 0, "segments");
  int64_t live_tiles = 0, live_kb = 0;
  for (int s = 0; s < a.num_phases; s += a.ncw) {
    CHECK(a.ph[s].tile_begin % a.ncw == 0, "segment start multiple of ncw");
    for (int x = 1; x < a.ncw; ++x) {
      CHECK(a.ph[s + x].tile_begin == a.ph[s].tile_begin &&
                a.ph[s + x].tiles_w == a.ph[s].tiles_w &&
                a.ph[s + x].tiles_hw == a.ph[s].tiles_hw,
            "segment fields repeated");
      CHECK((a.ph[s + x].rc >> 8) == (a.ph[s].rc >> 8), "segment = one row phase");
    }
  }
  {
    int s = 0;
    for (int t = 0; t < a.tiles; ++t) {
      const int tg = pt_gemm_tile(a, t);
      s = pt_find_segment(a, tg, s);
      const PtTile tl = pt_decode_tile(a, tg, s, BN);
      const PtPhase& ph = a.ph[tl.q];
      CHECK(tl.q >= s && tl.q < s + a.ncw, "phase in segment");
      CHECK(tl.live == (tl.j0 < ph.rows_w && tl.i0 < ph.rows_h && tl.n0 < a.batch),
            "live iff pixels");
      int k0, k1;
      pt_slice_blocks(a, ph.kb, pt_slice_of(a, t), k0, k1);
      CHECK(0 <= k0 && k0 <= k1 && k1 <= ph.kb, "slice blocks in range");
      CHECK(pt_slice_of(a, t) > 0 || k0 == 0, "first slice from block 0");
      CHECK(pt_slice_of(a, t) + 1 < slices || k1 == ph.kb, "last slice to the end");
      if (pt_slice_of(a, t) > 0) {  // slices of one GEMM tile adjacent and contiguous in k
        int pk0, pk1;
        pt_slice_blocks(a, ph.kb, pt_slice_of(a, t - 1), pk0, pk1);
        CHECK(pt_gemm_tile(a, t - 1) == tg && pk1 == k0, "slices contiguous");
      }
      if (tl.live) {
        if (pt_slice_of(a, t) == 0) ++live_tiles;
        live_kb += k1 - k0;
      }
      // siblings: the ncw tiles of one block share (g, box, n tile), row phase, and cover x
      const int x = (tg - a.ph[s].tile_begin) % a.ncw;
      CHECK(tl.q == s + x, "column phase fastest");
      if (x > 0) {
        const PtTile t0 = pt_decode_tile(a, tg - x, s, BN);
        CHECK(t0.g == tl.g && t0.n0 == tl.n0 && t0.i0 == tl.i0 && t0.j0 == tl.j0 &&
                  t0.col0 == tl.col0,
              "siblings adjacent");
      }
    }
  }
  CHECK(live_kb == kbt, "k block total %lld vs %lld", (long long)live_kb, (long long)kbt);

  // Strict: the CTA's shared memory ring (bytes from kSmemBase, a 1024-byte aligned address).
  constexpr uint32_t kSmemBase = 3 * 1024;
  std::vector<uint32_t> smem(Cfg::kSplit ? Cfg::kPipeBytes / 4 : 0, 0x7FC00000u);
  static_assert(Cfg::kTotalBytes <= kPtSmemLimit && Cfg::kBarOffset + 2 * Cfg::kStages * 8 +
                                                         1024 == Cfg::kTotalBytes,
                "layout totals");
  for (int b = 0; b < grid; ++b) {
    // ---- the CTA's turns (every role walks the same list) ----
    std::vector<int> turns;
    {
      int pos = b;
      for (int i = 0;; ++i) {
        const int64_t t64 = (int64_t)i * grid + pos;
        if (t64 >= a.tiles) break;
        CHECK(turns.empty() || t64 > turns.back(), "tiles increase");
        turns.push_back((int)t64);
        visited[t64]++;
        pos = pt_next_pos(pos, i, a.rot, grid, PP);
      }
    }
    // ---- producer: one record per k block, in ring order ----
    std::vector<ProdRec> recs;
    {
      int sg = 0;
      int pos = b;
      for (int i = 0;; ++i) {
        const int64_t t64 = (int64_t)i * grid + pos;
        if (t64 >= a.tiles) break;
        pos = pt_next_pos(pos, i, a.rot, grid, PP);
        const int t = (int)t64;
        const int tg = pt_gemm_tile(a, t);
        sg = pt_find_segment(a, tg, sg);
        CHECK(tg >= a.ph[sg].tile_begin &&
                  (sg + a.ncw >= a.num_phases || tg < a.ph[sg + a.ncw].tile_begin),
              "segment of tile");
        const PtTile tl = pt_decode_tile(a, tg, sg, BN);
        if (!tl.live) continue;
        const PtPhase& ph = a.ph[tl.q];
        const int brow = pt_b_row(a, ph, tl);
        int k0, k1;
        pt_slice_blocks(a, ph.kb, pt_slice_of(a, t), k0, k1);
        PtKCursor cur = pt_cursor_at(k0, a.cbs, ph.taps_w);
        for (int kb = k0; kb < k1; ++kb) {
          ProdRec r;
          r.t = t;
          r.kb = kb;
          pt_a_coords(a, ph, tl, cur, BK, r.ax);
          r.bk = kb * BK;
          r.brow = brow;
          const int tap = kb / a.cbs, cb = kb % a.cbs;
          CHECK(cur.cb == cb && cur.tw == tap % ph.taps_w && cur.th == tap / ph.taps_w, "cursor");
          recs.push_back(r);
          pt_cursor_next(cur, a.cbs, ph.taps_w);
        }
      }
    }
    // ---- consumers ----
    std::vector<int> arrive_seq[2], sync_seq[2];  // ping-pong order barrier, per owner consumer
    std::vector<int> consumed(recs.size(), 0);
    for (int cw = 0; cw < 2; ++cw) {
      int sg = 0;
      int pos = b;
      uint32_t c = 0;  // ring counter
      for (int i = 0;; ++i) {
        const int64_t t64 = (int64_t)i * grid + pos;
        if (t64 >= a.tiles) break;
        pos = pt_next_pos(pos, i, a.rot, grid, PP);
        const bool has_next = (int64_t)(i + 1) * grid + pos < a.tiles;
        CHECK(has_next == (i + 1 < (int)turns.size()), "has_next");
        CHECK(turns[i] == t64, "turn order");
        const int t = (int)t64;
        const int tg = pt_gemm_tile(a, t);
        sg = pt_find_segment(a, tg, sg);
        const PtTile tl = pt_decode_tile(a, tg, sg, BN);
        const PtPhase& ph = a.ph[tl.q];
        int k0, k1;
        pt_slice_blocks(a, ph.kb, pt_slice_of(a, t), k0, k1);
        const int nkb = tl.live ? k1 - k0 : 0;
        const int64_t slice_off = (int64_t)pt_slice_of(a, t) * a.slice_stride;
        if (PP && (i & 1) != cw) {  // the other consumer's turn: only the counter advances
          c += nkb;
          continue;
        }
        if (!tl.live) {
          if (PP && i > 0) sync_seq[cw].push_back(i);
          if (PP && has_next) arrive_seq[1 - cw].push_back(i + 1);
          continue;
        }
        if (PP && i > 0) sync_seq[cw].push_back(i);
        const int r0 = PP ? 0 : 64 * cw, r1 = PP ? 128 : 64 * cw + 64;
        // physical columns worth computing (the permutation stays inside 32-groups)
        const int valid = a.cout_g - tl.col0;
        const int pos_end = std::min(BN, (valid + 31) / 32 * 32);
        std::vector<double> D((size_t)128 * BN, 0.0);
        for (int kb = 0; kb < nkb; ++kb) {
          const uint32_t cc = c + kb;
          CHECK(cc < recs.size(), "ring counter beyond producer");
          if (cc >= recs.size()) break;
          const ProdRec& r = recs[cc];
          CHECK(r.t == t && r.kb == k0 + kb, "ring record mismatch t=%d/%d kb=%d/%d", r.t, t, r.kb,
                k0 + kb);
          consumed[cc]++;
        }
        if constexpr (Cfg::kSplit) {
          if (c + nkb <= recs.size())
            strict_tile<Cfg>(p, a, geo, box, d.in, *sd, recs, c, nkb, cw, pos_end, smem,
                             kSmemBase, D);
        } else {
          std::vector<double> A((size_t)128 * BK), Bt((size_t)BK * BN);
          for (int kb = 0; kb < nkb && c + kb < recs.size(); ++kb) {
            const ProdRec& r = recs[c + kb];
            // TMA A box: rows m = (nl*BH + hl)*BW + wl, elements k (zero fill out of bounds)
            for (int m = r0; m < r1; ++m) {
              const int nl = m / (box.w * box.h), hl = (m / box.w) % box.h, wl = m % box.w;
              const int64_t n = r.ax[3] + nl, yy = r.ax[2] + (int64_t)hl * a.a_sh,
                            xx = r.ax[1] + (int64_t)wl * a.a_sw;  // (TMA element strides)
              const bool pix =
                  n >= 0 && n < p.batch && yy >= 0 && yy < p.in_h && xx >= 0 && xx < p.in_w;
              for (int k = 0; k < BK; ++k) {
                const int64_t ch = r.ax[0] + k;
                A[(size_t)m * BK + k] =
                    pix && ch >= 0 && ch < p.in_channels
                        ? d.in[n * p.in_stride[0] + ch * p.in_stride[1] + yy * p.in_stride[2] +
                               xx * p.in_stride[3]]
                        : 0.0;
              }
            }
            // TMA B box {BK, BN} at (bk, brow) (zero fill past the map)
            for (int k = 0; k < BK; ++k)
              for (int ps = 0; ps < BN; ++ps) {
                const int64_t brow = (int64_t)r.brow + ps;
                Bt[(size_t)k * BN + ps] = brow < geo.rows && r.bk + k < geo.kmax
                                              ? d.packed[brow * geo.kmax + r.bk + k]
                                              : 0.0;
              }
            for (int m = r0; m < r1; ++m) {
              double* __restrict__ dm = &D[(size_t)m * BN];
              for (int k = 0; k < BK; ++k) {
                const double av = A[(size_t)m * BK + k];
                if (av == 0.0) continue;
                const double* __restrict__ bt = &Bt[(size_t)k * BN];
                for (int ps = 0; ps < pos_end; ++ps) dm[ps] += av * bt[ps];
              }
            }
          }
        }
        if (PP && has_next) arrive_seq[1 - cw].push_back(i + 1);
        c += nkb;
        // ---- epilogue: per logical column lc, out = acc * mul + add ----
        std::vector<double> mul(BN), add(BN);
        for (int col = 0; col < BN; ++col) {
          const int oc = tl.col0 + col;
          double bb = 0, sc = 1, sf = 0;
          if (oc < a.cout_g) {
            const int chn = tl.g * a.cout_g + oc;
            if (cs.bias) bb = d.bias[chn];
            if (cs.affine) {
              sc = d.scale[chn];
              sf = d.shift[chn];
            }
          }
          mul[col] = cs.affine ? sc : 1.0;
          add[col] = cs.affine ? bb * sc + sf : bb;
        }
        // accumulator register idx of (mi, warp wv, lane) -> (tile row, physical column)
        auto frag = [&](int mi, int wv, int lane, int idx) {
          const int cq = idx / 4, hh = (idx / 2) & 1, e = idx & 1;
          const int row = pt_frag_row<PP>(mi, cw, wv, lane >> 2, hh);
          const int phys = 8 * cq + 2 * (lane & 3) + e;
          return std::make_pair(row, phys);
        };
        auto store = [&](int64_t off, double v) {
          CHECK(off >= 0 && off < out_elems, "offset range %lld", (long long)off);
          if (off < 0 || off >= out_elems) return;
          out[off] = v;
          writes[off]++;
        };
        const int vec = 16 / (int)pt_elem_bytes(cs.kind);
        if (a.mode != kPtStoreStaged) {  // Vec and Direct: straight from registers
          for (int ct = 0; ct < 128; ++ct) {
            const int wv = ct >> 5, lane = ct & 31, q4 = lane & 3, rq = lane >> 2;
            for (int cg = 0; cg < BN / 32; ++cg) {
              const int lc = 32 * cg + 8 * q4;
              if (tl.col0 + lc >= a.cout_g) continue;
              for (int mi = 0; mi < Cfg::kMI; ++mi)
                for (int hh = 0; hh < 2; ++hh) {
                  bool rok;
                  const int m = pt_frag_row<PP>(mi, cw, wv, rq, hh);
                  const int64_t roff = pt_row_offset(a, ph, tl, m, rok) + slice_off;
                  if (!rok) continue;
                  double v[8];
                  for (int k = 0; k < 8; ++k) {
                    const int idx = pt_acc_index(cg, hh, k);
                    const auto rp = frag(mi, wv, lane, idx);
                    CHECK(rp.first == m, "frag row");
                    CHECK(pt_logical_col(rp.second) == lc + k, "perm lc");
                    v[k] = D[(size_t)rp.first * BN + rp.second] * mul[lc + k] + add[lc + k];
                  }
                  if (a.mode == kPtStoreVec) {
                    const int64_t base = roff + pt_col_offset(a, tl, lc);
                    CHECK(base % vec == 0, "vec alignment");
                    CHECK(a.os_c == 1, "vec os_c");
                    if (vec == 4) {
                      for (int k = 0; k < 4; ++k) store(base + k, v[k]);
                      if (tl.col0 + lc + 4 < a.cout_g)
                        for (int k = 4; k < 8; ++k) store(base + k, v[k]);
                    } else {
                      for (int k = 0; k < 8; ++k) store(base + k, v[k]);
                    }
                  } else {
                    for (int k = 0; k < 8; ++k)
                      if (tl.col0 + lc + k < a.cout_g)
                        store(roff + pt_col_offset(a, tl, lc + k), v[k]);
                  }
                }
            }
          }
        } else {  // Staged: through the consumer's [column][row] buffer, kCols columns a chunk
          using St = PtStaging<__half, Cfg>;  // geometry per element size
          using St4 = PtStaging<float, Cfg>;
          const int kCols = vec == 8 ? St::kCols : St4::kCols;
          const int kLd = St::kLd;
          const int R = Cfg::kRows;
          std::vector<double> stg((size_t)kCols * kLd, NAN);
          for (int chunk = 0; chunk < BN / kCols; ++chunk) {
            std::fill(stg.begin(), stg.end(), NAN);
            std::vector<int> sw((size_t)kCols * kLd, 0);
            for (int ct = 0; ct < 128; ++ct) {
              const int wv = ct >> 5, lane = ct & 31, q4 = lane & 3, rq = lane >> 2;
              for (int cg = 0; cg < BN / 32; ++cg) {
                if ((32 * cg + 31) / kCols < chunk || (32 * cg) / kCols > chunk) continue;
                const int lc = 32 * cg + 8 * q4;
                if (lc / kCols != chunk) continue;
                for (int mi = 0; mi < Cfg::kMI; ++mi)
                  for (int hh = 0; hh < 2; ++hh) {
                    const int row = (PP ? 64 * mi : 0) + 16 * wv + rq + 8 * hh;
                    for (int k = 0; k < 8; ++k) {
                      const int idx = pt_acc_index(cg, hh, k);
                      const auto rp = frag(mi, wv, lane, idx);
                      CHECK(pt_logical_col(rp.second) == lc + k, "perm lc staged");
                      CHECK(rp.first == row + (PP ? 0 : 64 * cw), "staged row");
                      const double v =
                          D[(size_t)rp.first * BN + rp.second] * mul[lc + k] + add[lc + k];
                      const int sidx = (lc + k - chunk * kCols) * kLd + row;
                      CHECK(sidx >= 0 && sidx < kCols * kLd, "staging index");
                      stg[sidx] = v;
                      sw[sidx]++;
                    }
                  }
              }
            }
            for (int ct = 0; ct < 128; ++ct) {
              const int r_row = ct & (R - 1);
              bool rok;
              const int64_t roff = pt_row_offset(a, ph, tl, (PP ? 0 : 64 * cw) + r_row, rok);
              if (!rok) continue;
              const int col_first = chunk * kCols + ct / R;
              const int cols_left = a.cout_g - tl.col0 - col_first;
              const int src0 = (ct / R) * kLd + r_row;
              int64_t dst = roff + pt_col_offset(a, tl, col_first);
              const int64_t step = (int64_t)(128 / R) * a.os_c;
              for (int it = 0; it < kCols * R / 128; ++it) {
                if (it * (128 / R) < cols_left) {
                  const int sidx = src0 + it * (128 / R) * kLd;
                  CHECK(sidx >= 0 && sidx < kCols * kLd, "staging read index");
                  CHECK(sw[sidx] == 1, "staging read of unwritten/overwritten slot %d", sw[sidx]);
                  // the slot holds logical column col_first + it*(128/R) of this row
                  CHECK(sidx == (col_first + it * (128 / R) - chunk * kCols) * kLd + r_row,
                        "staging slot");
                  store(dst, stg[sidx]);
                }
                dst += step;
              }
            }
          }
        }
      }
    }
    CHECK(arrive_seq[0] == sync_seq[0] && arrive_seq[1] == sync_seq[1], "order barrier pairing");
    for (size_t cc = 0; cc < recs.size(); ++cc)
      CHECK(consumed[cc] == (PP ? 1 : 2), "stage consumed %d times", consumed[cc]);
  }
  for (int t = 0; t < a.tiles; ++t)
    CHECK(visited[t] == 1, "tile %d visited %d times", t, visited[t]);
  if (slices > 1) {
    // Every slice wrote every workspace element once; the reduce adds the slices in order
    // (in fp32 for strict, whose partials are fp32 values) into the output's layout.
    int64_t bad_slice_writes = 0;
    for (int64_t e = 0; e < out_elems; ++e) bad_slice_writes += writes[e] != 1;
    CHECK(bad_slice_writes == 0, "%s: %lld workspace elements not written exactly once", cfg_name,
          (long long)bad_slice_writes);
    std::vector<double> fin(d.out_elems, NAN);
    std::vector<int> fin_writes(d.out_elems, 0);
    const int64_t se = pt_slice_elems(p);
    for (int64_t n = 0; n < p.batch; ++n)
      for (int64_t y = 0; y < p.out_h; ++y)
        for (int64_t x = 0; x < p.out_w; ++x)
          for (int64_t co = 0; co < p.out_channels; ++co) {
            const int64_t src = ((n * p.out_h + y) * p.out_w + x) * p.out_channels + co;
            double sum = 0;
            float sum32 = 0.f;
            for (int sl = 0; sl < slices; ++sl) {
              sum += out[sl * se + src];
              sum32 += (float)out[sl * se + src];
            }
            const int64_t off = n * p.out_stride[0] + co * p.out_stride[1] +
                                y * p.out_stride[2] + x * p.out_stride[3];
            fin[off] = sd != nullptr ? (double)sum32 : sum;
            fin_writes[off]++;
          }
    out.swap(fin);
    writes.swap(fin_writes);
  }

  // ---- compare with the reference (strict: per element |out - ref| <= 1e-5 |mul| sum|p|) ----
  double max_err = 0, max_ref = 0, worst_rel = 0, max_err_f32 = 0;
  int64_t bad_writes = 0, strict_bad = 0;
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t co = 0; co < p.out_channels; ++co)
      for (int64_t y = 0; y < p.out_h; ++y)
        for (int64_t x = 0; x < p.out_w; ++x) {
          const int64_t off = n * p.out_stride[0] + co * p.out_stride[1] + y * p.out_stride[2] +
                              x * p.out_stride[3];
          const size_t ri = (size_t)(((n * p.out_channels + co) * p.out_h + y) * p.out_w + x);
          const double r = d.ref[ri];
          if (writes[off] != 1) ++bad_writes;
          const double e = std::fabs(out[off] - r);
          if (!(e <= max_err)) max_err = std::isnan(e) ? INFINITY : e;
          max_ref = std::fmax(max_ref, std::fabs(r));
          if (sd != nullptr) {
            const double mul = cs.affine ? std::fabs(d.scale[co]) : 1.0;
            const double lim = 1e-5 * mul * sd->absref[ri];
            if (!(e <= lim) && !(e == 0)) ++strict_bad;
            if (mul * sd->absref[ri] > 0)
              worst_rel = std::fmax(worst_rel, e / (mul * sd->absref[ri]));
            max_err_f32 = std::fmax(max_err_f32, std::fabs(sd->f32out[ri] - r));
          }
        }
  int64_t extra_writes = 0;
  for (int64_t off = 0; off < d.out_elems; ++off) extra_writes += writes[off];
  extra_writes -= (int64_t)p.batch * p.out_channels * p.out_h * p.out_w;
  CHECK(bad_writes == 0 && extra_writes == 0,
        "%s: %lld elements not written exactly once, %lld extra writes", cfg_name,
        (long long)bad_writes, (long long)extra_writes);
  if (sd != nullptr) {
    CHECK(strict_bad == 0, "%s: %lld elements over the strict bound (max_err %.3e)", cfg_name,
          (long long)strict_bad, max_err);
    const double bound = 2 * max_err_f32 + 1.1920928955078125e-07 * max_ref;
#pragma omp critical(strict_stats)
    {
      g_strict_stats.worst_rel = std::fmax(g_strict_stats.worst_rel, worst_rel);
      g_strict_stats.worst_bound_ratio =
          std::fmax(g_strict_stats.worst_bound_ratio, max_err / bound);
    }
  } else {
    CHECK(max_err <= 1e-9 * (1 + max_ref), "%s: max_err %.3e vs max |ref| %.3e", cfg_name,
          max_err, max_ref);
  }
  const bool pass = t_tally.failures == failures_before;
  if (g_verbose || !pass)
    printf("  %-12s box(%d,%d,%d) mode=%d ncw=%d tiles=%d (live %lld) kblocks=%lld grid=%d "
           "rot=%d: %s (max_err %.2e, bad_writes %lld)\n",
           cfg_name, box.w, box.h, box.n, a.mode, a.ncw, a.tiles, (long long)live_tiles,
           (long long)kbt, grid, a.rot, pass ? "ok" : "FAILED", max_err, (long long)bad_writes);
}

// ---- one case: data, packing, reference, then every config / box / grid ---------------------

template <class Cfg>
std::function<void()> config_run(const Case& cs, const CaseData& d, PtBox box, int sms,
                                 int index, int slices = 1) {
  return [&cs, &d, box, sms, index, slices] {
    run_config<Cfg>(cs, d, box, sms, kPtConfigNames[index], slices);
  };
}

// Runs a case's config runs, in parallel when built with OpenMP. The runs are independent (own
// output, shared memory and counters), so one run is the unit of work: coarse enough that a
// thread on a core another process is using delays only its own runs (fine-grained loops with a
// barrier per k block ran up to 75x slower under such load).
void run_all(const std::vector<std::function<void()>>& runs) {
#pragma omp parallel
  {
#pragma omp for schedule(dynamic, 1)
    for (int i = 0; i < (int)runs.size(); ++i) runs[i]();
    fold_tally();
  }
}

void run_case(const Case& cs) {
  fold_tally();
  ++g_tally.cases;
  const long long runs_before = g_tally.runs, failures_before = g_tally.failures;
  const auto t0 = std::chrono::steady_clock::now();
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> U(-1, 1);
  CHECK(!cs.gather || cs.groups == 1, "a gathered case has one group");
  // The transposed convolution's output size; a gathered case reads it (its grad_output) and
  // writes the convolution's input size, the channel counts swapped.
  const int conv_oh = (cs.H - 1) * cs.sh - 2 * cs.ph + cs.dh * (cs.KH - 1) + cs.oph + 1;
  const int conv_ow = (cs.W - 1) * cs.sw - 2 * cs.pw + cs.dw * (cs.KW - 1) + cs.opw + 1;
  const int N = cs.N, G = cs.groups;
  const int Cin = cs.gather ? cs.Cout : cs.Cin, Cout = cs.gather ? cs.Cin : cs.Cout;
  const int IH = cs.gather ? conv_oh : cs.H, IW = cs.gather ? conv_ow : cs.W;
  const int OH = cs.gather ? cs.H : conv_oh, OW = cs.gather ? cs.W : conv_ow;
  const int Cin_g = Cin / G, Cout_g = Cout / G;
  CaseData d;
  ConvTranspose2dParams& p = d.p;
  p.batch = N;
  p.in_channels = Cin;
  p.in_h = IH;
  p.in_w = IW;
  p.out_channels = Cout;
  p.out_h = OH;
  p.out_w = OW;
  p.groups = G;
  p.in_per_group = Cin_g;
  p.out_per_group = Cout_g;
  if (cs.gather) {
    p.ph_h = make_axis_phase(1, 0, 1, cs.KH);
    p.ph_w = make_axis_phase(1, 0, 1, cs.KW);
    p.gather_h = InputGather{cs.sh, -cs.ph, cs.dh};
    p.gather_w = InputGather{cs.sw, -cs.pw, cs.dw};
  } else {
    p.ph_h = make_axis_phase(cs.sh, cs.ph, cs.dh, cs.KH);
    p.ph_w = make_axis_phase(cs.sw, cs.pw, cs.dw, cs.KW);
  }
  // input channels_last, pixel stride Cin + in_pad
  const int64_t pix = Cin + cs.in_pad;
  p.in_stride[1] = 1;
  p.in_stride[3] = pix;
  p.in_stride[2] = pix * IW;
  p.in_stride[0] = pix * IW * IH + 8 * (int64_t)(cs.in_pad > 0);
  d.in.assign(p.in_stride[0] * N, 0);
  for (auto& v : d.in) v = U(rng);
  if (cs.strict)  // fp32 operands: exact floats
    for (auto& v : d.in) v = (double)(float)v;
  // weight [Cin, Cout_g, KH, KW] stored permuted: (kh, kw, cin, cout) to exercise strides
  p.w_stride[1] = 1;
  p.w_stride[0] = Cout_g;
  p.w_stride[3] = (int64_t)Cout_g * Cin;
  p.w_stride[2] = (int64_t)Cout_g * Cin * cs.KW;
  std::vector<double> wt((size_t)Cin * Cout_g * cs.KH * cs.KW);
  for (auto& v : wt) v = U(rng);
  if (cs.strict)
    for (auto& v : wt) v = (double)(float)v;
  d.bias.resize(Cout);
  d.scale.resize(Cout);
  d.shift.resize(Cout);
  for (int i = 0; i < Cout; ++i) {
    d.bias[i] = U(rng);
    d.scale[i] = U(rng);
    d.shift[i] = U(rng);
  }
  // output strides
  d.out_elems = (int64_t)N * Cout * OH * OW;
  switch (cs.layout) {
    case kNCHW:
      p.out_stride[3] = 1;
      p.out_stride[2] = OW;
      p.out_stride[1] = (int64_t)OH * OW;
      p.out_stride[0] = (int64_t)Cout * OH * OW;
      break;
    case kNHWC:
      p.out_stride[1] = 1;
      p.out_stride[3] = Cout;
      p.out_stride[2] = (int64_t)Cout * OW;
      p.out_stride[0] = (int64_t)Cout * OW * OH;
      break;
    case kNHWCPadded:  // not vectorisable: os_w odd
      p.out_stride[1] = 1;
      p.out_stride[3] = Cout + 3;
      p.out_stride[2] = (int64_t)(Cout + 3) * OW;
      p.out_stride[0] = (int64_t)(Cout + 3) * OW * OH;
      d.out_elems = p.out_stride[0] * N;
      break;
    case kWCHN:
      p.out_stride[2] = 1;
      p.out_stride[1] = OH;
      p.out_stride[3] = (int64_t)OH * Cout;
      p.out_stride[0] = (int64_t)OH * Cout * OW;
      break;
  }
  // Fake, 16-byte aligned addresses: only alignment and null-ness matter to the host code.
  p.input = reinterpret_cast<const void*>(0x10000);
  p.weight = reinterpret_cast<const void*>(0x20000);
  p.output = reinterpret_cast<void*>(0x30000);
  p.bias = cs.bias ? reinterpret_cast<const void*>(0x40000) : nullptr;
  static float dummy[1];
  p.epi.scale = cs.affine ? dummy : nullptr;
  p.epi.shift = cs.affine ? dummy : nullptr;

  CHECK(!cs.strict || cs.kind == ScalarKind::kFloat32, "strict is fp32");
  CHECK(pt_is_split(cs.kind, !cs.strict) == cs.strict, "split mode");
  CHECK(pt_weight_side_ok(p, cs.kind, cs.strict), "weight side");
  CHECK(pt_geometry_ok(p, cs.kind, cs.strict), "geometry");
  // ---- packed weight ----
  const PtPackArgs pa = pt_pack_args(p, cs.kind, nullptr);
  const int64_t bytes = gemm_phase_tma_packed_weight_bytes(p, cs.kind, !cs.strict);
  CHECK(bytes == (cs.strict ? 2 : 1) * pa.total * pt_elem_bytes(cs.kind), "packed bytes");
  CHECK(gemm_phase_tma_packed_weight_bytes(p, cs.kind, true) == pa.total * pt_elem_bytes(cs.kind),
        "packed bytes (TF32 / 16-bit)");
  CHECK(gemm_phase_tma_packed_weight_bytes(p, cs.kind, false) ==
            (cs.kind == ScalarKind::kFloat32 ? 2 : 1) * pa.total * pt_elem_bytes(cs.kind),
        "packed bytes (allow_tf32 false: 2 blocks for fp32 only)");
  d.packed.assign(pa.total, 0.0);
  {
    std::vector<int> uses(wt.size(), 0);  // each weight element packed exactly once
    for (int64_t idx = 0; idx < pa.total; ++idx) {
      const int64_t src = pt_pack_source(pa, idx);
      if (src < 0) continue;
      d.packed[idx] = wt[src];
      uses[src]++;
    }
    for (int v : uses) CHECK(v == 1, "weight packed %d times", v);
  }
  // The tiled pack (PtTileLayout), for a contiguous, a channels_last and a channel-swapped
  // weight of this shape.
  for (const WeightLayout layout :
       {WeightLayout::kPlain, WeightLayout::kChannelsLast, WeightLayout::kSwapped}) {
    ConvTranspose2dParams q = p;
    set_weight_strides(q, layout);
    const PtPackArgs qa = pt_pack_args(q, cs.kind, nullptr);
    const std::string problem = tiled_pack_problem(
        q, qa.total, pt_tile_layout(q, qa, cs.strict),
        [&qa](int64_t idx) { return pt_pack_source(qa, idx); }, pt_pack_has_padding(qa));
    CHECK(problem.empty(), "tiled pack, weight layout %d: %s", (int)layout, problem.c_str());
  }
  // Strict: the two packed blocks exactly as the device pack kernel writes them, each element
  // checked against an independent float split of its weight.
  if (cs.strict) {
    d.strict.packed2.assign((size_t)(2 * pa.total), NAN);
    for (int64_t idx = 0; idx < pa.total; ++idx) {
      const int64_t src = pt_pack_source(pa, idx);
      uint32_t hi, lo;
      pt_split_tf32_bits(src >= 0 ? pt_float_bits((float)wt[src]) : 0u, hi, lo);
      d.strict.packed2[idx] = pt_bits_float(hi);
      d.strict.packed2[pa.total + idx] = pt_bits_float(lo);
      const float wv = src >= 0 ? (float)wt[src] : 0.f;
      const float hr = tf32_ref(wv), lr = tf32_ref((float)((double)wv - (double)hr));
      CHECK(pt_float_bits(hr) == hi && pt_float_bits(lr) == lo && is_tf32(hi) && is_tf32(lo),
            "split of weight %.9g: hi %.9g lo %.9g vs %.9g %.9g", wv, pt_bits_float(hi),
            pt_bits_float(lo), hr, lr);
      CHECK(std::fabs((double)wv - (double)hr - (double)lr) <= std::ldexp(std::fabs(wv), -21),
            "hi + lo within 2^-21 of the weight");
    }
  }
  // ---- naive float64 reference: accumulated as [n][oy][ox][co], then NCHW ----
  {
    const size_t nout = (size_t)N * OH * OW * Cout;
    std::vector<double> acc(nout, 0), absacc(cs.strict ? nout : 0, 0);
    std::vector<float> f32acc(cs.strict ? nout : 0, 0.f);
    // Output o + co gains v * wr[co] for co < count (strict: also |v * wr[co]| and an fp32 FMA).
    auto add = [&](size_t o, double v, const double* wr, int count) {
      for (int co = 0; co < count; ++co) {
        acc[o + co] += v * wr[co];
        if (cs.strict) {
          absacc[o + co] += std::fabs(v * wr[co]);
          f32acc[o + co] = std::fmaf((float)v, (float)wr[co], f32acc[o + co]);
        }
      }
    };
    if (cs.gather) {  // out[n, y, x, co] = sum of in[n, y*s - p + kh*d, ...] * w[c, co, kh, kw]
      for (int n = 0; n < N; ++n)
        for (int y = 0; y < OH; ++y)
          for (int x = 0; x < OW; ++x)
            for (int kh = 0; kh < cs.KH; ++kh) {
              const int iy = y * cs.sh - cs.ph + kh * cs.dh;
              if (iy < 0 || iy >= IH) continue;
              for (int kw = 0; kw < cs.KW; ++kw) {
                const int ix = x * cs.sw - cs.pw + kw * cs.dw;
                if (ix < 0 || ix >= IW) continue;
                const size_t o = (((size_t)n * OH + y) * OW + x) * Cout;
                for (int c = 0; c < Cin; ++c) {
                  const double v =
                      d.in[n * p.in_stride[0] + c + iy * p.in_stride[2] + ix * p.in_stride[3]];
                  add(o, v, &wt[c * p.w_stride[0] + kh * p.w_stride[2] + kw * p.w_stride[3]],
                      Cout);
                }
              }
            }
    }
    for (int n = 0; n < N && !cs.gather; ++n)
      for (int y = 0; y < cs.H; ++y)
        for (int x = 0; x < cs.W; ++x)
          for (int ci = 0; ci < Cin; ++ci) {
            const int g = ci / Cin_g;
            const double v =
                d.in[n * p.in_stride[0] + ci + y * p.in_stride[2] + x * p.in_stride[3]];
            for (int kh = 0; kh < cs.KH; ++kh) {
              const int oy = y * cs.sh - cs.ph + kh * cs.dh;
              if (oy < 0 || oy >= OH) continue;
              for (int kw = 0; kw < cs.KW; ++kw) {
                const int ox = x * cs.sw - cs.pw + kw * cs.dw;
                if (ox < 0 || ox >= OW) continue;
                const size_t o = (((size_t)n * OH + oy) * OW + ox) * Cout + g * Cout_g;
                add(o, v, &wt[ci * p.w_stride[0] + kh * p.w_stride[2] + kw * p.w_stride[3]],
                    Cout_g);
              }
            }
          }
    d.ref.assign(nout, 0);
    if (cs.strict) {
      d.strict.absref.assign(nout, 0);
      d.strict.f32out.assign(nout, 0);
    }
    for (int n = 0; n < N; ++n)
      for (int co = 0; co < Cout; ++co)
        for (int y = 0; y < OH; ++y)
          for (int x = 0; x < OW; ++x) {
            const size_t o = (((size_t)n * OH + y) * OW + x) * Cout + co;
            const size_t r = (((size_t)n * Cout + co) * OH + y) * OW + x;
            const double b = cs.bias ? d.bias[co] : 0;
            const double mul = cs.affine ? d.scale[co] : 1.0;
            const double add = cs.affine ? b * d.scale[co] + d.shift[co] : b;
            d.ref[r] = acc[o] * mul + add;
            if (cs.strict) {
              d.strict.absref[r] = absacc[o];
              d.strict.f32out[r] = (double)f32acc[o] * mul + add;
            }
          }
  }
  // ---- box choice ----
  const AxisPlan h = pt_io_plan(p.ph_h, p.gather_h, p.out_h);
  const AxisPlan w = pt_io_plan(p.ph_w, p.gather_w, p.out_w);
  const bool staged = pt_store_mode(p, cs.kind) == kPtStoreStaged;
  const PtBox picked = pt_call_box(p, cs.kind, h, w);
  const int cap_w = pt_box_log2_cap(p.gather_w.scale), cap_h = pt_box_log2_cap(p.gather_h.scale);
  CHECK(picked.w <= (1 << cap_w) && picked.h <= (1 << cap_h) &&
            picked.w * (p.gather_w.scale > 1 ? p.gather_w.scale : 1) <= 256 &&
            picked.h * (p.gather_h.scale > 1 ? p.gather_h.scale : 1) <= 256,
        "box within TMA's 256-pixel extent");
  // pt_best_box's factored tile count against the sum over every launched phase pair, for
  // every cap and minimum width.
  for (int max_lw = 0; max_lw <= 7; ++max_lw)
    for (int max_lh = 0; max_lh <= 7; ++max_lh)
      for (int min_w = 1; min_w <= (1 << max_lw); min_w *= 2) {
        int64_t tiles = 0, want_tiles = -1;
        const PtBox got = pt_best_box(p.batch, h, w, min_w, tiles, max_lw, max_lh);
        PtBox want{1 << (max_lw < 4 ? max_lw : 4), 1 << (max_lh < 3 ? max_lh : 3), 1};
        want.n = 128 / (want.w * want.h);
        for (int lw = max_lw; lw >= 0 && (1 << lw) >= min_w; --lw)
          for (int lh = (7 - lw < max_lh ? 7 - lw : max_lh); lh >= 0; --lh) {
            const PtBox b{1 << lw, 1 << lh, 1 << (7 - lw - lh)};
            int64_t t = 0;
            for (int rh = 0; rh < h.stride; ++rh)
              for (int rw = 0; rw < w.stride; ++rw)
                if (h.ph[rh].rows > 0 && w.ph[rw].rows > 0)
                  t += pt_box_tiles(b, p.batch, h.ph[rh].rows, w.ph[rw].rows);
            if (want_tiles < 0 || t < want_tiles) {
              want = b;
              want_tiles = t;
            }
          }
        CHECK(got.w == want.w && got.h == want.h && got.n == want.n && tiles == want_tiles,
              "best box: factored tile count as the sum over phase pairs");
      }
  {
    int64_t best_tiles = 0;
    const PtBox best = pt_best_box(p.batch, h, w, 1, best_tiles, cap_w, cap_h);
    int64_t picked_tiles = 0;
    for (int rh = 0; rh < h.stride; ++rh)
      for (int rw = 0; rw < w.stride; ++rw)
        if (h.ph[rh].rows > 0 && w.ph[rw].rows > 0)
          picked_tiles += pt_box_tiles(picked, p.batch, h.ph[rh].rows, w.ph[rw].rows);
    CHECK(picked_tiles * 4 <= best_tiles * 5, "picked box within 1.25x of the best");
    if (!staged) CHECK(picked.w == best.w && picked.h == best.h, "non-staged box is the best");
  }
  printf("%s: OH %d OW %d, picked box (%d,%d,%d)\n", cs.name.c_str(), OH, OW, picked.w,
         picked.h, picked.n);
  // ---- every config at the picked box and each grid; a few other boxes at the first grid ----
  std::vector<PtBox> boxes = {picked};
  if (g_var.extra_boxes) {
    const PtBox extra[] = {{16, 8, 1}, {4, 4, 8}, {2, 1, 64}, {8, 2, 8}};
    for (const PtBox& b : extra)
      if (b.w != picked.w || b.h != picked.h) boxes.push_back(b);
  }
  std::vector<std::function<void()>> runs;
  for (size_t bi = 0; bi < boxes.size(); ++bi) {
    const PtBox& box = boxes[bi];
    for (size_t gi = 0; gi < g_var.grids.size(); ++gi) {
      if (bi > 0 && gi > 0) continue;
      const int sms = g_var.grids[gi];
      const bool all = bi == 0 && (gi == 0 || g_var.all_configs_each_grid);
      if (cs.strict) {
        runs.push_back(config_run<PtSplitCfg0>(cs, d, box, sms, 0));
        runs.push_back(config_run<PtSplitCfg1>(cs, d, box, sms, 1));
        if (all) {
          runs.push_back(config_run<PtSplitCfg2>(cs, d, box, sms, 2));
          runs.push_back(config_run<PtSplitCfg3>(cs, d, box, sms, 3));
        }
      } else {
        runs.push_back(config_run<PtCfg0>(cs, d, box, sms, 0));
        runs.push_back(config_run<PtCfg1>(cs, d, box, sms, 1));
        if (all) {
          runs.push_back(config_run<PtCfg2>(cs, d, box, sms, 2));
          runs.push_back(config_run<PtCfg3>(cs, d, box, sms, 3));
        }
      }
    }
  }
  // k slices (a gathered case without bias or epilogue: an input gradient): every config in 2,
  // 3 and 5 slices at the box the launch picks for the workspace output; and the rule's pick
  // for 132 SMs against its conditions.
  if (cs.gather && !cs.bias && !cs.affine) {
    const ConvTranspose2dParams qs = pt_slice_params(p, nullptr);
    const PtBox sbox = pt_call_box(qs, cs.kind, h, w);
    const int sms = g_var.grids[0];
    for (const int sl : {2, 3, 5}) {
      if (cs.strict) {
        runs.push_back(config_run<PtSplitCfg0>(cs, d, sbox, sms, 0, sl));
        runs.push_back(config_run<PtSplitCfg1>(cs, d, sbox, sms, 1, sl));
        runs.push_back(config_run<PtSplitCfg2>(cs, d, sbox, sms, 2, sl));
        runs.push_back(config_run<PtSplitCfg3>(cs, d, sbox, sms, 3, sl));
      } else {
        runs.push_back(config_run<PtCfg0>(cs, d, sbox, sms, 0, sl));
        runs.push_back(config_run<PtCfg1>(cs, d, sbox, sms, 1, sl));
        runs.push_back(config_run<PtCfg2>(cs, d, sbox, sms, 2, sl));
        runs.push_back(config_run<PtCfg3>(cs, d, sbox, sms, 3, sl));
      }
    }
    PtArgs ra;
    CHECK(pt_fill_args(ra, qs, cs.kind, 128, sbox, h, w), "workspace call's arguments");
    const int picked = pt_pick_slices(qs, ra, 132);
    const int kb = ra.ph[0].kb;
    CHECK(picked >= 1 && picked <= kPtMaxSlices, "slices in range");
    if (picked > 1) {
      CHECK((int64_t)ra.tiles * picked <= 132 && kb >= kPtMinSliceBlocks * picked,
            "picked slices: one wave, enough k blocks each");
    } else {
      CHECK(2 * ra.tiles > 132 || kb < 2 * kPtMinSliceBlocks, "no slices: enough tiles");
    }
    printf("  %d GEMM tiles of 128 columns, %d k blocks: %d slices on 132 SMs\n", ra.tiles, kb,
           picked);
  }
  run_all(runs);  // folds every thread's counts into g_tally
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("  %lld runs %s (%.2f s)\n", g_tally.runs - runs_before,
         g_tally.failures == failures_before ? "ok" : "FAILED", secs);
}

// ---- modes ------------------------------------------------------------------------------------

const ScalarKind kH = ScalarKind::kBFloat16, kF = ScalarKind::kFloat32;

// 16-bit and TF32: store paths, layouts, zero-tap phases, groups, n tiles, odd strides.
const std::vector<Case> kLightCases = {
    // name, N, Cin, Cout, groups, H, W, KH, KW, sh, sw, ph, pw, dh, dw, oph, opw, kind, layout,
    // bias, affine, in_pad
    {"k4 s2 p1 Cin72 Cout40 NHWC vec", 3, 72, 40, 1, 5, 7, 4, 4, 2, 2, 1, 1, 1, 1, 0, 0, kH, kNHWC,
     true, true, 8},
    {"k3 s2 p1 op1 Cin 24 Cout 136 NHWC padded (direct)", 2, 24, 136, 1, 6, 5, 3, 3, 2, 2, 1, 1,
     1, 1, 1, 1, kH, kNHWCPadded, true, false, 0},
    {"k3 s2 p1 op1 even OW (34) Cin 64 Cout 40 NCHW", 2, 64, 40, 1, 9, 17, 3, 3, 2, 2, 1, 1, 1, 1,
     1, 1, kH, kNCHW, true, true, 0},
    {"k3 s2 p1 op(1,0) odd OW (33) Cin 64 Cout 40 NCHW", 2, 64, 40, 1, 9, 17, 3, 3, 2, 2, 1, 1, 1,
     1, 1, 0, kH, kNCHW, true, false, 0},
    {"k3 s2 p1 op(1,0) odd OW (17) Cin 40 Cout 24 NCHW fp32", 3, 40, 24, 1, 5, 9, 3, 3, 2, 2, 1, 1,
     1, 1, 1, 0, kF, kNCHW, true, true, 4},
    {"k3 s2 p1 op(1,0) W 9 Cin 64 Cout 40 NHWC vec", 2, 64, 40, 1, 9, 9, 3, 3, 2, 2, 1, 1, 1, 1,
     1, 0, kH, kNHWC, true, false, 0},
    {"k3 s1 d2 p2 Cin 40 Cout 20 NCHW fp32", 2, 40, 20, 1, 7, 9, 3, 3, 1, 1, 2, 2, 2, 2, 0, 0, kF,
     kNCHW, true, true, 4},
    {"k9 s3 p4 op2 Cin 56 -> Cout 1 NCHW", 2, 56, 1, 1, 5, 4, 9, 9, 3, 3, 4, 4, 1, 1, 2, 2, kH,
     kNCHW, true, false, 0},
    {"k9 s3 p4 op2 Cin 56 -> Cout 1 NCHW (11x13)", 3, 56, 1, 1, 11, 13, 9, 9, 3, 3, 4, 4, 1, 1, 2,
     2, kH, kNCHW, true, true, 0},
    {"k9 s3 p4 op2 Cin 56 -> Cout 1 NHWC fp32", 2, 56, 1, 1, 5, 4, 9, 9, 3, 3, 4, 4, 1, 1, 2, 2,
     kF, kNHWC, false, true, 0},
    {"k3x5 s1x2 p1x2 asym Cin 16 Cout 48 (W,C,H,N) out", 2, 16, 48, 1, 6, 5, 3, 5, 1, 2, 1, 2, 1,
     1, 0, 1, kH, kWCHN, true, true, 0},
    {"k3x5 s1x2 p1x2 asym Cin 16 Cout 48 NCHW", 2, 16, 48, 1, 6, 5, 3, 5, 1, 2, 1, 2, 1, 1, 0, 1,
     kH, kNCHW, true, true, 0},
    {"k1 s2 (zero-tap phases) Cin 64 Cout 32 NCHW", 3, 64, 32, 1, 4, 3, 1, 1, 2, 2, 0, 0, 1, 1,
     1, 1, kH, kNCHW, true, true, 0},
    {"k1 s2 (zero-tap phases) Cin 64 Cout 32 NHWC fp32", 3, 64, 32, 1, 4, 3, 1, 1, 2, 2, 0, 0, 1,
     1, 1, 1, kF, kNHWC, true, false, 0},
    {"k3 s2 d2 (gcd 2: zero-tap phases) Cin 8 Cout 16 NCHW", 2, 8, 16, 1, 5, 4, 3, 3, 2, 2, 1, 1,
     2, 2, 0, 1, kH, kNCHW, true, false, 0},
    {"k3 s2 d2 (gcd 2: zero-tap phases) Cin 8 Cout 16 NHWC vec", 2, 8, 16, 1, 5, 4, 3, 3, 2, 2, 1,
     1, 2, 2, 0, 1, kH, kNHWC, true, false, 0},
    {"grouped g=2 Cin_g 64 Cout_g 24 NCHW", 2, 128, 48, 2, 5, 6, 4, 4, 2, 2, 1, 1, 1, 1, 0, 0, kH,
     kNCHW, true, true, 0},
    {"grouped g=2 Cin_g 64 Cout_g 24 NHWC vec", 2, 128, 48, 2, 5, 6, 4, 4, 2, 2, 1, 1, 1, 1, 0,
     0, kH, kNHWC, true, false, 0},
    {"grouped g=2 Cin_g 64 Cout_g 24 k3 s2 op(1,0) NCHW", 2, 128, 48, 2, 5, 9, 3, 3, 2, 2, 1, 1, 1,
     1, 1, 0, kH, kNCHW, true, false, 0},
    {"grouped g=3 Cin_g 32 Cout_g 12 fp32 NHWC vec", 2, 96, 36, 3, 4, 3, 3, 3, 2, 2, 1, 1, 1, 1,
     1, 0, kF, kNHWC, false, true, 0},
    {"grouped g=3 Cin_g 32 Cout_g 12 fp32 NCHW", 2, 96, 36, 3, 4, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0,
     kF, kNCHW, false, true, 0},
    {"Cout 300 (3 n tiles of 128), k2 s2, NCHW", 2, 16, 300, 1, 3, 5, 2, 2, 2, 2, 0, 0, 1, 1, 0,
     0, kH, kNCHW, true, false, 0},
    {"s4x3 k5x4 p2x1 d1x2 fp32 NHWC padded (direct)", 2, 12, 10, 1, 3, 4, 5, 4, 4, 3, 2, 1, 1, 2,
     3, 2, kF, kNHWCPadded, true, true, 4},
    {"s4x3 k5x4 p2x1 d1x2 fp32 NCHW", 2, 12, 10, 1, 3, 4, 5, 4, 4, 3, 2, 1, 1, 2, 3, 2, kF, kNCHW,
     true, true, 4},
    // Input gradients (gather): Cin is what they write, Cout what they read.
    {"grad_input k4 s2 p1 40 <- 24 NCHW", 2, 40, 24, 1, 5, 6, 4, 4, 2, 2, 1, 1, 1, 1, 0, 0, kH,
     kNCHW, false, false, 8, false, true},
    {"grad_input k3 s2 p1 op1 36 <- 20 NHWC vec fp32", 2, 36, 20, 1, 6, 5, 3, 3, 2, 2, 1, 1, 1, 1,
     1, 1, kF, kNHWC, false, false, 0, false, true},
    {"grad_input k9 s3 p4 op2 56 <- 8 NCHW", 2, 56, 8, 1, 5, 4, 9, 9, 3, 3, 4, 4, 1, 1, 2, 2, kH,
     kNCHW, false, false, 0, false, true},
    {"grad_input k3x5 s1x2 p1x2 d2x1 16 <- 48 (W,C,H,N) out", 2, 16, 48, 1, 6, 5, 3, 5, 1, 2, 1,
     2, 2, 1, 0, 1, kH, kWCHN, false, false, 0, false, true},
    {"grad_input s8x7 k2x3 p0x1 op(3,2) 136 <- 16 NHWC padded", 1, 136, 16, 1, 5, 4, 2, 3, 8, 7,
     0, 1, 1, 1, 3, 2, kH, kNHWCPadded, false, false, 0, false, true},
    {"grad_input 1 x 1 input k4 s1 24 <- 16 NCHW", 3, 24, 16, 1, 1, 1, 4, 4, 1, 1, 0, 0, 1, 1, 0,
     0, kH, kNCHW, false, false, 0, false, true},
    {"grad_input k1 s2 p1 (offset below 0) 32 <- 16 NHWC vec", 2, 32, 16, 1, 4, 3, 1, 1, 2, 2, 1,
     1, 1, 1, 0, 0, kH, kNHWC, false, false, 0, false, true},
    {"grad_input k4 s4 (k == s) 300 <- 8 NCHW (3 n tiles)", 2, 300, 8, 1, 3, 5, 4, 4, 4, 4, 0, 0,
     1, 1, 0, 0, kH, kNCHW, false, false, 0, false, true},
};

// Benchmark-like shapes: hundreds of tiles, many turns per CTA at grid 132 (ring wrap-around,
// rotation, ping-pong order over long tile lists); staged and vectorised stores. (32x24 images
// and 256 channels took 10x as long and add little over these and the light cases.)
const std::vector<Case> kMediumCases = {
    {"k4 s2 p1 bench-like N 32, 16x12, 64->64 NCHW", 32, 64, 64, 1, 16, 12, 4, 4, 2, 2, 1, 1, 1,
     1, 0, 0, kH, kNCHW, true, false, 0},
    {"k4 s2 p1 bench-like N 32, 16x12, 64->64 NHWC", 32, 64, 64, 1, 16, 12, 4, 4, 2, 2, 1, 1, 1,
     1, 0, 0, kH, kNHWC, true, false, 0},
};

// fp32 strict (3xTF32): the same kinds of shapes through the split configs.
const std::vector<Case> kStrictCases = {
    // ..., kind, layout, bias, affine, in_pad, strict
    {"strict k4 s2 p1 Cin 40 Cout 24 NHWC vec", 2, 40, 24, 1, 5, 6, 4, 4, 2, 2, 1, 1, 1, 1, 0, 0,
     kF, kNHWC, true, true, 0, true},
    {"strict k3 s2 p1 op1 Cin 64 Cout 80 NCHW", 2, 64, 80, 1, 5, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1,
     kF, kNCHW, true, false, 0, true},
    {"strict k9 s3 p4 op2 Cin 56 -> Cout 1 NCHW", 2, 56, 1, 1, 5, 4, 9, 9, 3, 3, 4, 4, 1, 1, 2, 2,
     kF, kNCHW, true, true, 0, true},
    {"strict dilated k3 s1 d2 p2 Cin 40 Cout 20 NHWC padded (direct)", 2, 40, 20, 1, 6, 7, 3, 3,
     1, 1, 2, 2, 2, 2, 0, 0, kF, kNHWCPadded, true, true, 4, true},
    {"strict grouped g=3 Cin_g 32 Cout_g 12 k3 s2 op(1,0) NCHW", 2, 96, 36, 3, 4, 3, 3, 3, 2, 2,
     1, 1, 1, 1, 1, 0, kF, kNCHW, false, true, 0, true},
    {"strict grouped g=2 Cin_g 32 Cout_g 72 k4 s2 p1 NHWC vec", 2, 64, 144, 2, 4, 5, 4, 4, 2, 2,
     1, 1, 1, 1, 0, 0, kF, kNHWC, true, false, 0, true},
    {"strict tiny Cin 3 Cout 1 k4 s2 p1 NCHW", 3, 3, 1, 1, 6, 5, 4, 4, 2, 2, 1, 1, 1, 1, 0, 0, kF,
     kNCHW, true, false, 1, true},
    {"strict s4x3 k5x4 p2x1 d1x2 op(3,2) Cin 12 Cout 10 NCHW", 2, 12, 10, 1, 3, 4, 5, 4, 4, 3, 2,
     1, 1, 2, 3, 2, kF, kNCHW, true, true, 4, true},
    {"strict Cout 300 k2 s2 Cin 16 NCHW (n tiles)", 2, 16, 300, 1, 3, 5, 2, 2, 2, 2, 0, 0, 1, 1,
     0, 0, kF, kNCHW, true, false, 0, true},
    {"strict k3 s2 d2 (zero-tap phases) Cin 8 Cout 16 NCHW", 2, 8, 16, 1, 5, 4, 3, 3, 2, 2, 1, 1,
     2, 2, 0, 1, kF, kNCHW, true, false, 0, true},
    {"strict k1 s2 (zero-tap phases) Cin 64 Cout 32 NHWC vec", 3, 64, 32, 1, 4, 3, 1, 1, 2, 2, 0,
     0, 1, 1, 1, 1, kF, kNHWC, true, false, 0, true},
    {"strict deep k4 s2 p1 Cin 256 Cout 64 NHWC vec (K 1024 per phase)", 1, 256, 64, 1, 6, 6, 4,
     4, 2, 2, 1, 1, 1, 1, 0, 0, kF, kNHWC, true, false, 0, true},
    {"strict grad_input k4 s2 p1 40 <- 64 NCHW", 2, 40, 64, 1, 5, 6, 4, 4, 2, 2, 1, 1, 1, 1, 0, 0,
     kF, kNCHW, false, false, 4, true, true},
    {"strict grad_input k3 s2 p1 op1 d2 72 <- 32 NHWC vec", 2, 72, 32, 1, 4, 5, 3, 3, 2, 2, 1, 1,
     2, 2, 1, 1, kF, kNHWC, false, false, 0, true, true},
};

// Host-side facts of a strict config: the stage count is as many as fit.
template <class Cfg>
void check_split_config(int index) {
  CHECK(Cfg::kTotalBytes <= kPtSmemLimit &&
            Cfg::kTotalBytes + Cfg::kStageBytes + 16 > kPtSmemLimit,
        "strict config %s: %d stages of %d B in %d B: as many as fit", kPtConfigNames[index],
        Cfg::kStages, Cfg::kStageBytes, kPtSmemLimit);
}

void run_light() {
  g_var = Variations{{5, 132, 7}, true, true};
  for (const Case& c : kLightCases) run_case(c);
}

void run_medium() {
  g_var = Variations{{132, 5}, false, true};
  for (const Case& c : kMediumCases) run_case(c);
}

void run_strict() {
  check_split_config<PtSplitCfg0>(0);
  check_split_config<PtSplitCfg1>(1);
  check_split_config<PtSplitCfg2>(2);
  check_split_config<PtSplitCfg3>(3);
  // pick_config: strict never picks 128x256; Cout_g <= 64, or 128x128 tiles that fill at most
  // half of the 132 SMs -> 128x64s8pp, else 128x128s6.
  for (int64_t cout : {1, 64, 65, 128, 200, 256, 512})
    for (int64_t mt : {1, 10, 32, 33, 66, 67, 132, 133, 1000, 100000}) {
      const int c = pt_pick_config(cout, mt, 132, true);
      const int64_t t128 = mt * ((cout + 127) / 128);
      CHECK(c == (cout <= 64 || 2 * t128 <= 132 ? 3 : 1), "strict pick_config(%lld, %lld) = %d",
            (long long)cout, (long long)mt, c);
      CHECK(pt_pick_config(cout, mt, 132, false) == pt_pick_config(cout, mt, 132),
            "TF32 / 16-bit pick unchanged");
    }
  g_strict_stats = StrictStats{};
  for (int model : {0, 1}) {
    g_tc_model = model;
    printf("-- tensor-core sums %s\n", model ? "truncating" : "rounded to nearest");
    g_var = model == 1 ? Variations{{5, 132, 7}, true, true} : Variations{{132}, false, true};
    for (const Case& c : kStrictCases) run_case(c);
  }
  printf("strict: worst err/(|mul| sum|p|) %.3e (limit 1e-5), worst max_err / GPU test bound "
         "%.3f\n",
         g_strict_stats.worst_rel, g_strict_stats.worst_bound_ratio);
}

int main(int argc, char** argv) {
  std::vector<std::string> modes;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--verbose")
      g_verbose = true;
    else
      modes.push_back(arg);
  }
  if (modes.empty()) {
    fprintf(stderr, "usage: %s light|strict|medium... [--verbose]\n", argv[0]);
    return 2;
  }
  bool failed = false;
  for (const std::string& mode : modes) {
    void (*run)() = mode == "light"    ? run_light
                    : mode == "strict" ? run_strict
                    : mode == "medium" ? run_medium
                                       : nullptr;
    if (run == nullptr) {
      fprintf(stderr, "unknown mode %s\n", mode.c_str());
      return 2;
    }
    t_tally = Tally{};
    g_tally = Tally{};
    g_failures_printed = 0;
    const auto t0 = std::chrono::steady_clock::now();
    printf("== %s\n", mode.c_str());
    run();
    fold_tally();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("SUMMARY %s: cases=%lld runs=%lld checks=%lld failures=%lld seconds=%.1f\n",
           mode.c_str(), g_tally.cases, g_tally.runs, g_tally.checks, g_tally.failures, secs);
    failed = failed || g_tally.failures != 0;
  }
  fflush(stdout);
  return failed ? 1 : 0;
}
