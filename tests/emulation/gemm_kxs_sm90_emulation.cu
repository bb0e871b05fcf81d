// Host emulation of gemm_kxs_sm90's staged (NCHW-path) store (cuda/conv_transpose2d_gemm_kxs_
// sm90_impl.cuh) checked against a float64 conv_transpose2d, so that changes to its host code and
// index math are caught on machines without a Hopper GPU (the kernel is sm_90a only).
//
// This program #includes the kernel's code and runs its host argument builders and its
// __host__ __device__ index functions on the CPU, emulating what the hardware does in between:
//   * the launcher's choice of tile mode per config (row_tiles_kw, area_tiles_kh against the
//     rules written out here) and arguments (make_kxs_args, col_tiles: n tiles, tiles);
//   * each tile's B stage: which packed rows the TMA boxes put into which shared-memory rows
//     (tap-major: one box; kh-row: kxs_row_b0; kernel-area: kxs_area_co0 / kxs_area_b0), zero
//     fill past the packed rows; the packed weight itself (kxs_pack_source), and the tiled pack's
//     index math (KxsTileLayout, tiled_pack_check.h) for a contiguous and a channels_last weight;
//   * the accumulators as a float64 GEMM of the tile's A rows with those B rows, read through
//     the wgmma fragment layout (register -> row, physical column) by kxs_acc_index;
//   * the epilogue table (t_off, t_mul, t_add per tile column, as the kernel fills it; mul / add
//     are distinct per channel, so a wrong channel shows as a wrong value);
//   * the staging chunks of all three staged stores (tap-major: kxs_stage_offset; kh-row:
//     kxs_rstage_offset; kernel-area: kxs_area_slot, kxs_area_read_slot, kxs_area_slot_col):
//     every write inside the chunk and on bytes no other live value of the chunk holds, every
//     read on written bytes, every staged value read; kernel-area: each warp stores every
//     kernel row of the (channel, pixels) it stores at all (the sector-completing order);
//   * the global stores (vector / packet / element, as the kernel picks them by run and
//     alignment): every output element written exactly once, with the float64 value.
// The tap-major and kh-row store loops are mirrored here with their own slot / column formulas
// (the kernel runs kh-row tiles through the kernel-area store with one kernel row, so this is an
// independent check of that); the kernel-area store calls the kernel's functions for every index
// it computes.
//
// Not covered: the register (channels_last output) path, the pipeline (ring, barriers, TMA and
// wgmma themselves), rounding (values stay float64), timing.
// tests/gpu/gemm_kxs_sm90/test_gemm_kxs_sm90.py covers those on the GPU.
//
// Build (host-only): nvcc -std=c++17 -O2 -I cuda tests/emulation/gemm_kxs_sm90_emulation.cu
// Run: gemm_kxs_sm90_emulation MODE... [--verbose]
//   staged  small cases: k2s2 / k2x4 / k4x2 / k1x4 / k3s3, Cout 32..256, odd H*W, batches,
//           channels_last and NCHW input, NCHW and channels_last output, 16-bit and fp32,
//           all 6 configs (~2 s)
//   medium  a Mask R-CNN-like layer (256 > 256 channels, 14x14, k2s2, 4 images) and two more
//           k2s2 layers (NCHW input; fp32), all configs (~1.5 s)
// Each mode prints "SUMMARY <mode>: cases=.. runs=.. checks=.. failures=.. seconds=.."; the exit
// status is 1 when any check failed.
#include "gemm_kxs_sm90/gemm_kxs_sm90_kernel.cuh"
#include "gemm_kxs_sm90/gemm_kxs_sm90.cu"  // the API: gemm_kxs_sm90_num_configs
#include "tiled_pack_check.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace deconv_patch {
// The per-type GEMM launchers (and their kernel-area parts) are their own translation units;
// defined here so that the API's dispatch links. Never called.
cudaError_t gemm_kxs_sm90_launch_f16(const ConvTranspose2dParams&, ScalarKind, const void*, int,
                                     cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t gemm_kxs_sm90_launch_bf16(const ConvTranspose2dParams&, ScalarKind, const void*, int,
                                      cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t gemm_kxs_sm90_launch_f32(const ConvTranspose2dParams&, ScalarKind, const void*, int,
                                     cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t gemm_kxs_sm90_launch_area_f16(const ConvTranspose2dParams&, ScalarKind, const void*,
                                          int, cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t gemm_kxs_sm90_launch_area_bf16(const ConvTranspose2dParams&, ScalarKind, const void*,
                                           int, cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t gemm_kxs_sm90_launch_area_f32(const ConvTranspose2dParams&, ScalarKind, const void*,
                                          int, cudaStream_t) {
  return cudaErrorNotSupported;
}
}  // namespace deconv_patch

using namespace deconv_patch;

struct Tally {
  long long cases = 0, runs = 0, checks = 0, failures = 0;
};
static Tally g_tally;
static bool g_verbose = false;

#define CHECK(cond, ...)                                                         \
  do {                                                                           \
    ++g_tally.checks;                                                            \
    if (!(cond)) {                                                               \
      if (g_tally.failures++ < 20) {                                             \
        char check_msg[512];                                                     \
        snprintf(check_msg, sizeof check_msg, __VA_ARGS__);                      \
        printf("  FAIL %s:%d: %s | %s\n", __FILE__, __LINE__, #cond, check_msg); \
      }                                                                          \
    }                                                                            \
  } while (0)

// ---- cases ------------------------------------------------------------------------------------

struct Case {
  int n, cin, h, w, cout, kh, kw;
  int es;          // element bytes: 2 (16-bit) or 4 (fp32, TF32)
  bool in_nchw;    // NCHW input (16-bit, H*W % 8 == 0), else channels_last
  bool out_nhwc;   // channels_last output (staged only with NCHW input), else NCHW
  int out_shift;   // output starts this many elements past a 256-byte boundary
};

static std::string describe(const Case& c) {
  char b[200];
  snprintf(b, sizeof b, "N%d Cin%d %dx%d Cout%d k%dx%d %s in_%s out_%s shift%d", c.n, c.cin, c.h,
           c.w, c.cout, c.kh, c.kw, c.es == 2 ? "16bit" : "fp32", c.in_nchw ? "nchw" : "nhwc",
           c.out_nhwc ? "nhwc" : "nchw", c.out_shift);
  return b;
}

enum class Mode { kTapMajor, kRow, kArea };
static const char* mode_name(Mode m) {
  return m == Mode::kTapMajor ? "tap-major" : m == Mode::kRow ? "kh-row" : "kernel-area";
}

// Everything one case's config runs share: params, data, the float64 GEMM, the reference.
struct CaseData {
  Case c;
  ConvTranspose2dParams p;
  ScalarKind kind;
  int64_t M, nc, prow;
  std::vector<double> x;        // [N][Cin][H][W]
  std::vector<double> wt;       // [Cin][Cout][KH][KW]
  std::vector<double> mulc, addc;
  std::vector<double> gemm;     // [M][prow]: A row m . packed row R
  std::vector<double> ref;      // output, dense buffer indexed by output offsets
  std::vector<double> mag;      // sum |products| per output element
  int64_t out_elems;            // buffer size (elements) the output offsets index
};

static void build(CaseData& d, const Case& c, uint32_t seed) {
  d.c = c;
  ConvTranspose2dParams& p = d.p;
  p = ConvTranspose2dParams{};
  d.kind = c.es == 4 ? ScalarKind::kFloat32 : ScalarKind::kBFloat16;
  p.batch = c.n;
  p.in_channels = c.cin;
  p.in_h = c.h;
  p.in_w = c.w;
  p.out_channels = c.cout;
  p.out_h = (int64_t)c.h * c.kh;
  p.out_w = (int64_t)c.w * c.kw;
  p.groups = 1;
  p.in_per_group = c.cin;
  p.out_per_group = c.cout;
  p.ph_h = make_axis_phase(c.kh, 0, 1, c.kh);
  p.ph_w = make_axis_phase(c.kw, 0, 1, c.kw);
  const int64_t hw = (int64_t)c.h * c.w;
  if (c.in_nchw) {
    const int64_t s[4] = {c.cin * hw, hw, c.w, 1};
    for (int i = 0; i < 4; ++i) p.in_stride[i] = s[i];
  } else {
    const int64_t s[4] = {hw * c.cin, 1, (int64_t)c.w * c.cin, c.cin};
    for (int i = 0; i < 4; ++i) p.in_stride[i] = s[i];
  }
  const int64_t w_s[4] = {(int64_t)c.cout * c.kh * c.kw, (int64_t)c.kh * c.kw, c.kw, 1};
  for (int i = 0; i < 4; ++i) p.w_stride[i] = w_s[i];
  const int64_t ohw = p.out_h * p.out_w;
  if (c.out_nhwc) {
    const int64_t s[4] = {ohw * c.cout, 1, p.out_w * c.cout, c.cout};
    for (int i = 0; i < 4; ++i) p.out_stride[i] = s[i];
  } else {
    const int64_t s[4] = {c.cout * ohw, ohw, p.out_w, 1};
    for (int i = 0; i < 4; ++i) p.out_stride[i] = s[i];
  }
  p.out_channels_last = c.out_nhwc;
  // Pointers are only checked for alignment / null by the host code; never dereferenced.
  p.input = reinterpret_cast<const void*>((uintptr_t)0x100000);
  p.weight = reinterpret_cast<const void*>((uintptr_t)0x200000);
  p.output = reinterpret_cast<void*>((uintptr_t)0x400000 + (uintptr_t)c.out_shift * c.es);
  d.out_elems = (int64_t)c.n * c.cout * ohw;
  d.M = (int64_t)c.n * hw;
  d.nc = (int64_t)c.kh * c.kw * c.cout;
  d.prow = packed_rows(p);

  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  d.x.resize((size_t)c.n * c.cin * hw);
  for (auto& v : d.x) v = u(rng);
  d.wt.resize((size_t)c.cin * c.cout * c.kh * c.kw);
  for (auto& v : d.wt) v = u(rng);
  d.mulc.resize(c.cout);
  d.addc.resize(c.cout);
  for (int co = 0; co < c.cout; ++co) {
    d.mulc[co] = 1.0 + 0.01 * (co + 1);
    d.addc[co] = 0.5 * u(rng) + 10.0 * co;
  }
  // Packed weight through the kernel's packing index, and the GEMM over every packed row.
  const KxsPackArgs pa = make_pack_args(p, nullptr, c.es == 4);
  std::vector<double> bp((size_t)d.prow * c.cin);
  for (int64_t idx = 0; idx < d.prow * c.cin; ++idx) {
    const int64_t src = kxs_pack_source(pa, idx);
    bp[idx] = src >= 0 ? d.wt[src] : 0.0;
  }
  // The tiled pack (KxsTileLayout), for a contiguous, a channels_last and a channel-swapped
  // weight of this shape; its row order is kxs_logical_col's inverse.
  for (int j = 0; j < 96; ++j)
    CHECK(kxs_logical_col(kxs_physical_col(j, c.es == 4), c.es == 4) == j, "physical col %d", j);
  for (const WeightLayout layout :
       {WeightLayout::kPlain, WeightLayout::kChannelsLast, WeightLayout::kSwapped}) {
    ConvTranspose2dParams q = p;
    set_weight_strides(q, layout);
    const KxsPackArgs qa = make_pack_args(q, nullptr, c.es == 4);
    const std::string problem = tiled_pack_problem(
        q, qa.total, KxsTileLayout{qa.cin, qa.cout, qa.kw, qa.f32},
        [&qa](int64_t idx) { return kxs_pack_source(qa, idx); }, qa.nc < packed_rows(q));
    CHECK(problem.empty(), "tiled pack, weight layout %d: %s", (int)layout, problem.c_str());
  }
  d.gemm.assign((size_t)d.M * d.prow, 0.0);
  std::vector<double> arow(c.cin);
  for (int64_t m = 0; m < d.M; ++m) {
    const int64_t n = m / hw, pix = m % hw;
    for (int k = 0; k < c.cin; ++k) arow[k] = d.x[((size_t)n * c.cin + k) * hw + pix];
    for (int64_t r = 0; r < d.prow; ++r) {
      double s = 0;
      const double* b = &bp[(size_t)r * c.cin];
      for (int k = 0; k < c.cin; ++k) s += arow[k] * b[k];
      d.gemm[(size_t)m * d.prow + r] = s;
    }
  }
  // Independent reference: out[n, co, ih*KH + kh, iw*KW + kw] = sum_ci x * w (then mul, add).
  d.ref.assign(d.out_elems, NAN);
  d.mag.assign(d.out_elems, 0.0);
  for (int n = 0; n < c.n; ++n)
    for (int co = 0; co < c.cout; ++co)
      for (int ih = 0; ih < c.h; ++ih)
        for (int iw = 0; iw < c.w; ++iw)
          for (int kh = 0; kh < c.kh; ++kh)
            for (int kw = 0; kw < c.kw; ++kw) {
              double s = 0, a = 0;
              for (int ci = 0; ci < c.cin; ++ci) {
                const double pr = d.x[((size_t)n * c.cin + ci) * hw + (size_t)ih * c.w + iw] *
                                  d.wt[(((size_t)ci * c.cout + co) * c.kh + kh) * c.kw + kw];
                s += pr;
                a += std::fabs(pr);
              }
              const int64_t off = n * p.out_stride[0] + co * p.out_stride[1] +
                                  (ih * c.kh + kh) * p.out_stride[2] +
                                  (iw * c.kw + kw) * p.out_stride[3];
              d.ref[off] = s * d.mulc[co] + d.addc[co];
              d.mag[off] = a * std::fabs(d.mulc[co]) + std::fabs(d.addc[co]);
            }
}

// ---- one config run ---------------------------------------------------------------------------

// One staging chunk (4 KB): which value (and element) each byte holds, and how often each
// written value was read.
struct Chunk {
  std::vector<int> owner = std::vector<int>(kStageChunkBytes, -1);
  std::vector<double> vals;
  std::vector<int> reads;
  int es;
  explicit Chunk(int es_) : es(es_) {}
  void write(int off, const double* v, int count, const char* what) {
    for (int x = 0; x < count; ++x) {
      const int o = off + x * es;
      const bool in = o >= 0 && o + es <= kStageChunkBytes && o % es == 0;
      CHECK(in, "%s: staging write at byte %d", what, o);
      if (!in) continue;
      bool free_bytes = true;
      for (int b = 0; b < es; ++b) free_bytes = free_bytes && owner[o + b] < 0;
      CHECK(free_bytes, "%s: staging bytes %d.. written twice in one chunk", what, o);
      const int id = (int)vals.size();
      vals.push_back(v[x]);
      reads.push_back(0);
      for (int b = 0; b < es; ++b) owner[o + b] = id;
    }
  }
  // The 16 / es values of the 16-byte unit at `off`.
  void read16(int off, double* v, const char* what) {
    CHECK(off >= 0 && off + 16 <= kStageChunkBytes && off % 16 == 0, "%s: staging read at %d",
          what, off);
    for (int x = 0; x < 16 / es; ++x) {
      const int o = off + x * es;
      v[x] = NAN;
      if (o < 0 || o + es > kStageChunkBytes) continue;
      const int id = owner[o];
      bool whole = id >= 0;
      for (int b = 0; b < es; ++b) whole = whole && owner[o + b] == id;
      CHECK(whole, "%s: staging read of unwritten / mixed bytes at %d", what, o);
      if (!whole) continue;
      v[x] = vals[id];
      ++reads[id];
    }
  }
  void check_all_read(const char* what) {
    int unread = 0;
    for (int r : reads) unread += r == 0;
    CHECK(unread == 0, "%s: %d staged values never read", what, unread);
  }
};

struct Run {
  const CaseData& d;
  const KxsArgs& a;
  int bn, mi_count, cb, rkw, rkh;
  bool pingpong;
  Mode mode;
  std::vector<int> count;    // writes per output element
  std::vector<double> out;
  uintptr_t out_base;

  // Global store of element `off` (output offset) with value v.
  void store(int64_t off, double v, const char* what) {
    const bool in = off >= 0 && off < d.out_elems;
    CHECK(in, "%s: store at offset %lld outside the output", what, (long long)off);
    if (!in) return;
    ++count[off];
    out[off] = v;
  }
};

// Tile-level inputs of the stores, as the kernel computes them.
struct Tile {
  int t, mt, nt, n0, row_kh, row_co0;
  std::vector<int> brow;  // packed row in each B smem row (wgmma physical column), -1 = zero
  std::vector<double> t_mul, t_add;
  std::vector<int64_t> t_off;
};

// The m of tile row r (0..127), or -1 where it does not exist (never stored).
static int tile_m(const CaseData& d, const KxsArgs& a, bool nchw, int mt, int r) {
  if (nchw) {
    const int img = mt / a.pix_tiles;
    const int pix = (mt - img * a.pix_tiles) * kBM + r;
    return pix < a.hw ? img * a.hw + pix : -1;
  }
  const int m = mt * kBM + r;
  return m < a.m ? m : -1;
}

// Accumulator register idx of m64 accumulator mi of consumer thread (cw, ct): the wgmma fragment
// (row 16v + l/4 + 8h, physical column 8c + 2(l%4) + e for d[4c + 2h + e]).
static double acc_value(const Run& R, const Tile& T, bool nchw, int cw, int ct, int mi, int idx) {
  const int wv = ct >> 5, lane = ct & 31;
  const int c = idx >> 2, h = (idx >> 1) & 1, e = idx & 1;
  const int row = (R.pingpong ? 64 * mi : 64 * cw) + 16 * wv + lane / 4 + 8 * h;
  const int col = 8 * c + 2 * (lane % 4) + e;
  CHECK(col >= 0 && col < R.bn, "accumulator column %d", col);
  const int m = tile_m(R.d, R.a, nchw, T.mt, row);
  if (m < 0) return NAN;  // rows past the data: must never be stored
  const int br = T.brow[col];
  return br < 0 ? 0.0 : R.d.gemm[(size_t)m * R.d.prow + br];
}

static void run_config(const CaseData& d, int config) {
  const Case& c = d.c;
  const ConvTranspose2dParams& p = d.p;
  const bool nchw = c.in_nchw;
  ++g_tally.runs;
  const std::string desc = describe(c) + " config " + std::to_string(config);
  const char* what = desc.c_str();

  CHECK(geometry_ok(p, d.kind), "%s: geometry_ok", what);
  CHECK(input_layout(p, d.kind) == (nchw ? KxsInput::kNchw : KxsInput::kChannelsLast),
        "%s: input layout", what);
  const int base = config % 3;
  const bool ka = config >= 3;
  const int bn = base == 0 ? 256 : 128;
  const bool pingpong = base == 2;
  const bool staged = nchw || p.out_stride[1] != 1;
  CHECK(staged, "%s: cases are staged stores", what);
  // The tile mode, by the rules written out (top of the impl) against the launcher's functions.
  const int want_rkw =
      staged && (c.kw == 2 || c.kw == 4) && c.cout % 32 == 0 && p.out_stride[3] == 1 ? c.kw : 0;
  const int rkw = row_tiles_kw(p, nchw);
  CHECK(rkw == want_rkw, "%s: row_tiles_kw %d, want %d", what, rkw, want_rkw);
  int want_rkh = 0;
  if (ka && want_rkw && (c.kh == 2 || c.kh == 4) && c.kh * c.kw <= 8) {
    const int cb = bn / (c.kh * c.kw);
    if (cb >= 32 && cb % 32 == 0 && c.kh * c.kw * c.es <= 16) want_rkh = c.kh;
  }
  const int rkh = ka ? area_tiles_kh(p, d.kind, nchw, bn) : 0;
  CHECK(rkh == want_rkh, "%s: area_tiles_kh %d, want %d", what, rkh, want_rkh);
  const Mode mode = rkh ? Mode::kArea : rkw ? Mode::kRow : Mode::kTapMajor;
  const int boxes = rkh ? rkh * rkw : rkw;
  const int cb = boxes ? bn / boxes : bn;
  const KxsArgs a = make_kxs_args(p, d.kind, bn, nchw, rkw, rkh);
  int64_t want_nt;
  if (mode == Mode::kTapMajor) {
    want_nt = (d.nc + bn - 1) / bn;
  } else if (mode == Mode::kRow) {
    want_nt = (int64_t)c.kh * ((c.cout + cb - 1) / cb);
  } else {
    want_nt = (c.cout + cb - 1) / cb;
  }
  const int64_t hw = (int64_t)c.h * c.w;
  const int64_t want_mt = nchw ? c.n * ((hw + 127) / 128) : (d.M + 127) / 128;
  CHECK(a.n_tiles == want_nt && col_tiles(p, bn, rkw, rkh) == want_nt, "%s: n_tiles %d want %lld",
        what, a.n_tiles, (long long)want_nt);
  CHECK(a.tiles == want_mt * want_nt, "%s: tiles %d", what, a.tiles);
  if (g_verbose) printf("  %s: %s, n_tiles %d, tiles %d\n", what, mode_name(mode), a.n_tiles,
                        a.tiles);

  Run R{d, a, bn, pingpong ? 2 : 1, cb, rkw, rkh, pingpong, mode, {}, {}, 0};
  R.count.assign(d.out_elems, 0);
  R.out.assign(d.out_elems, NAN);
  R.out_base = reinterpret_cast<uintptr_t>(p.output);
  const int es = c.es;
  const bool tf32 = es == 4;
  // Group-local logical column of lane q's value k, written out here (the kernel's is
  // kxs_lane_col): 16-bit 8q + k; fp32 4q + k for k < 4, 16 + 4q + (k - 4) after.
  auto lane_col = [tf32](int q, int k) {
    return tf32 ? (k < 4 ? 4 * q + k : 12 + 4 * q + k) : 8 * q + k;
  };

  for (int t = 0; t < a.tiles; ++t) {
    Tile T;
    T.t = t;
    T.mt = t / a.n_tiles;
    T.nt = t - T.mt * a.n_tiles;
    T.n0 = T.nt * bn;
    T.row_kh = mode == Mode::kRow ? kxs_row_kh(a, T.nt) : 0;
    T.row_co0 = mode == Mode::kArea  ? kxs_area_co0(T.nt, cb)
                : mode == Mode::kRow ? kxs_row_co0(a, T.nt, cb)
                                     : 0;
    // B stage (producer's boxes; TMA zero fill past the packed rows).
    T.brow.assign(bn, -1);
    auto box = [&](int smem_row0, int packed_row0, int rows) {
      for (int r = 0; r < rows; ++r) {
        const int pr = packed_row0 + r;
        T.brow[smem_row0 + r] = pr >= 0 && pr < d.prow ? pr : -1;
      }
    };
    std::vector<int> filled(bn, 0);
    if (mode == Mode::kTapMajor) {
      box(0, T.nt * bn, bn);
      for (int r = 0; r < bn; ++r) ++filled[r];
    } else if (mode == Mode::kRow) {
      const int n0 = kxs_row_b0(a, T.nt, cb, rkw);
      for (int kw = 0; kw < rkw; ++kw) {
        box(kw * cb, n0 + kw * a.cout, cb);
        for (int r = 0; r < cb; ++r) ++filled[kw * cb + r];
      }
    } else {
      const int n0 = kxs_area_co0(T.nt, cb);
      for (int tap = 0; tap < boxes; ++tap) {
        box(tap * cb, kxs_area_b0(a, n0, tap), cb);
        for (int r = 0; r < cb; ++r) ++filled[tap * cb + r];
      }
    }
    for (int r = 0; r < bn; ++r) CHECK(filled[r] == 1, "%s: B smem row %d loaded %d times",
                                       what, r, filled[r]);
    // Epilogue table (kernel: thread ct fills columns ct + 128e). NaN marks an unset entry.
    T.t_mul.assign(bn, NAN);
    T.t_add.assign(bn, NAN);
    T.t_off.assign(bn, INT64_MIN / 2);
    for (int ct = 0; ct < 128; ++ct) {
      for (int e = 0; e < bn / 128; ++e) {
        const int j = T.n0 + ct + 128 * e;
        const int lc = ct + 128 * e;
        int co = -1;
        int64_t off = 0;
        if (mode == Mode::kTapMajor) {
          if (j < a.nc) {
            co = j % a.cout;
            off = kxs_col_offset(a, j);
          }
        } else {
          const int kw = lc / cb;
          const int cch = T.row_co0 + lc - kw * cb;
          if (cch < a.cout) {
            co = cch;
            off = kxs_col_offset(a, (T.row_kh * rkw + kw) * a.cout + cch);
          }
        }
        T.t_off[lc] = off;
        T.t_mul[lc] = co >= 0 ? d.mulc[co] : NAN;
        T.t_add[lc] = co >= 0 ? d.addc[co] : NAN;
      }
    }

    const int consumers = pingpong ? 1 : 2;
    const int MI = R.mi_count;
    for (int cw = 0; cw < consumers; ++cw) {
      if (mode == Mode::kTapMajor) {
        // Mirror of the kernel's tap-major staged store.
        const int kUnitCols = 16 / es, kChunkCols = kStageRowBytes / es;
        const int kHalves = kColGroup / kChunkCols;
        for (int g = 0; g < bn / kColGroup; ++g) {
          if (T.n0 + kColGroup * g >= a.nc) break;
          for (int mi = 0; mi < MI; ++mi) {
            for (int hf = 0; hf < kHalves; ++hf) {
              Chunk ch(es);
              for (int ct = 0; ct < 128; ++ct) {
                const int wv = ct >> 5, lane = ct & 31, q = lane & 3, rq = lane >> 2;
                double v[2][8];
                for (int h = 0; h < 2; ++h)
                  for (int k = 0; k < 8; ++k) {
                    const int lc = kColGroup * g + lane_col(q, k);
                    v[h][k] = acc_value(R, T, nchw, cw, ct, mi, kxs_acc_index(g, h, k)) *
                                  T.t_mul[lc] + T.t_add[lc];
                  }
                // Unit q of each row: fp32 values 4hf..4hf+3 (columns 16hf + 4q..), 16-bit all 8.
                for (int h = 0; h < 2; ++h) {
                  const int r = 16 * wv + rq + 8 * h;
                  if (tf32) {
                    ch.write(kxs_stage_offset(r, q), v[h] + 4 * hf, 4, what);
                  } else {
                    ch.write(kxs_stage_offset(r, q), v[h], 8, what);
                  }
                }
              }
              for (int ct = 0; ct < 128; ++ct) {
                const int wv = ct >> 5, lane = ct & 31;
                const int sr = 32 * (wv & 1) + lane, su = wv >> 1;
                const int row = (pingpong ? 64 * mi : 64 * cw) + sr;
                const int m = tile_m(d, a, nchw, T.mt, row);
                const int64_t srow = m >= 0 ? kxs_row_offset(a, m) : 0;
                for (int i2 = 0; i2 < 2; ++i2) {
                  const int u = su + 2 * i2;
                  double w[8];
                  // (The kernel skips the reads of rows that do not exist; read here all the
                  // same, so that the check that every staged value is read covers the rest.)
                  ch.read16(kxs_stage_offset(sr, u), w, what);
                  if (m < 0) continue;
                  const int c0 = kColGroup * g + kChunkCols * hf + kUnitCols * u;
                  for (int e = 0; e < kUnitCols; ++e)
                    if (T.n0 + c0 + e < a.nc) R.store(srow + T.t_off[c0 + e], w[e], what);
                }
              }
              ch.check_all_read(what);
            }
          }
        }
        continue;
      }
      // kh-row and kernel-area staged stores: packets of KW elements, 16-byte unit reads.
      const int kPB = rkw * es, kRPU = 16 / kPB, kUnits = 64 * kPB / 16;
      const int kSlots = kStageRowBytes / kPB;
      const int kKPC = mode == Mode::kArea ? kSlots / (4 * rkh) : kSlots / 4;
      const int kSubs = 8 / kKPC;
      const int kSlotsPerPass = 128 / kUnits;
      const int kGroups = cb / kColGroup;
      CHECK(kKPC >= 1 && kKPC * kSubs == 8 && 2 * kSlotsPerPass == kSlots, "%s: chunk geometry",
            what);
      auto soff = [&](int cs, int byte) {
        switch (kPB) {
          case 4: return kxs_rstage_offset<4>(cs, byte);
          case 8: return kxs_rstage_offset<8>(cs, byte);
          default: return kxs_rstage_offset<16>(cs, byte);
        }
      };
      auto aslot = [&](int q, int k, int kh) {
        return rkh == 4 ? kxs_area_slot<4>(q, k, kh) : kxs_area_slot<2>(q, k, kh);
      };
      auto aslot_col = [&](int cs, int gc, int sb) {
        if (rkh == 4) return kxs_area_slot_col<4, 2>(cs, cb, gc, kKPC, sb, tf32);
        return rkw == 4 ? kxs_area_slot_col<2, 4>(cs, cb, gc, kKPC, sb, tf32)
                        : kxs_area_slot_col<2, 2>(cs, cb, gc, kKPC, sb, tf32);
      };
      CHECK(mode != Mode::kArea || rkh * rkw == 4 || rkh * rkw == 8, "%s: area taps", what);
      const int khs = mode == Mode::kArea ? rkh : 1;
      for (int gc = 0; gc < kGroups; ++gc) {
        if (T.row_co0 + kColGroup * gc >= a.cout) break;
        for (int mi = 0; mi < MI; ++mi) {
          for (int sb = 0; sb < kSubs; ++sb) {
            Chunk ch(es);
            for (int ct = 0; ct < 128; ++ct) {
              const int wv = ct >> 5, lane = ct & 31, q = lane & 3, rq = lane >> 2;
              for (int kk = 0; kk < kKPC; ++kk) {
                const int cl = kColGroup * gc + lane_col(q, kKPC * sb + kk);
                const double mul = T.t_mul[cl], add = T.t_add[cl];
                for (int kh = 0; kh < khs; ++kh) {
                  for (int h = 0; h < 2; ++h) {
                    double v[4];
                    for (int kw = 0; kw < rkw; ++kw) {
                      const int g = mode == Mode::kArea ? (kh * rkw + kw) * kGroups + gc
                                                        : kw * kGroups + gc;
                      v[kw] = acc_value(R, T, nchw, cw, ct, mi,
                                        kxs_acc_index(g, h, kKPC * sb + kk)) * mul + add;
                    }
                    const int cs = mode == Mode::kArea ? aslot(q, kk, kh) : 4 * kk + q;
                    ch.write(soff(cs, (16 * wv + rq + 8 * h) * kPB), v, rkw, what);
                  }
                }
              }
            }
            // Kernel-area: per warp, which kernel rows it stores of each (channel, unit).
            std::vector<std::vector<unsigned>> warp_rows(4, std::vector<unsigned>(64 * 64, 0));
            for (int ct = 0; ct < 128; ++ct) {
              const int ur = ct % kUnits, rsel = ct / kUnits;
              int64_t roff[8];
              unsigned rmask = 0;
              bool rrun = true;
              for (int i = 0; i < kRPU; ++i) {
                const int row = (pingpong ? 64 * mi : 64 * cw) + ur * kRPU + i;
                const int m = tile_m(d, a, nchw, T.mt, row);
                const bool ok = m >= 0;
                roff[i] = ok ? kxs_row_offset(a, m) : 0;
                rmask |= ok ? 1u << i : 0u;
                rrun = rrun && ok && roff[i] == roff[0] + (int64_t)i * rkw;
              }
              for (int i2 = 0; i2 < 2; ++i2) {
                const int cs = mode != Mode::kArea ? rsel + kSlotsPerPass * i2
                               : kUnits == 16    ? kxs_area_read_slot<16>(rsel, i2)
                                                 : kxs_area_read_slot<32>(rsel, i2);
                double w[8];
                ch.read16(soff(cs, 16 * ur), w, what);
                const int tcol = mode == Mode::kArea
                                     ? aslot_col(cs, gc, sb)
                                     : kColGroup * gc + lane_col(cs & 3, kKPC * sb + (cs >> 2));
                CHECK(tcol >= 0 && tcol < bn, "%s: table column %d", what, tcol);
                const int64_t col = T.t_off[tcol];
                if (mode == Mode::kArea) {
                  // The warp's reads: bit kh of (channel slot cs % 4 + 4 * (x / KH), unit ur).
                  const int chan = (cs & 3) + 4 * ((cs >> 2) / rkh);
                  warp_rows[ct >> 5][chan * 64 + ur] |= 1u << ((cs >> 2) % rkh);
                }
                const uintptr_t a0 = R.out_base + (uintptr_t)((roff[0] + col) * es);
                const int ew = 16 / es;
                if (rrun && (a0 & 15) == 0) {
                  for (int x = 0; x < ew; ++x) R.store(roff[0] + col + x, w[x], what);
                } else if (kPB == 4 && rrun && (a0 & 7) == 0) {
                  for (int x = 0; x < ew; ++x) R.store(roff[0] + col + x, w[x], what);
                } else {
                  for (int i = 0; i < kRPU; ++i) {
                    if (!((rmask >> i) & 1u)) continue;
                    for (int x = 0; x < rkw; ++x) R.store(roff[i] + col + x, w[i * rkw + x], what);
                  }
                }
              }
            }
            ch.check_all_read(what);
            if (mode == Mode::kArea) {
              // The same warp stores every kernel row of the (channel, pixels) it touches.
              int partial = 0;
              for (const auto& rows : warp_rows)
                for (unsigned m : rows) partial += m != 0 && m != (1u << rkh) - 1;
              CHECK(partial == 0, "%s: %d (channel, unit)s with only some kernel rows in a warp",
                    what, partial);
            }
          }
        }
      }
    }
  }
  // Every output element exactly once, with the float64 value.
  int64_t bad_count = 0, bad_val = 0, first = -1;
  for (int64_t i = 0; i < d.out_elems; ++i) {
    if (R.count[i] != 1) {
      ++bad_count;
      if (first < 0) first = i;
      continue;
    }
    const double err = std::fabs(R.out[i] - d.ref[i]);
    if (!(err <= 1e-9 * (d.mag[i] + 1.0))) {
      ++bad_val;
      if (first < 0) first = i;
    }
  }
  CHECK(bad_count == 0, "%s (%s): %lld elements not written exactly once (first %lld: %d)", what,
        mode_name(mode), (long long)bad_count, (long long)first,
        first >= 0 ? R.count[first] : 0);
  CHECK(bad_val == 0, "%s (%s): %lld wrong values (first %lld: %g, want %g)", what,
        mode_name(mode), (long long)bad_val, (long long)first, first >= 0 ? R.out[first] : 0.0,
        first >= 0 ? d.ref[first] : 0.0);
}

static void run_case(const Case& c, uint32_t seed) {
  ++g_tally.cases;
  CaseData d;
  build(d, c, seed);
  for (int config = 0; config < gemm_kxs_sm90_num_configs(); ++config) run_config(d, config);
}

static void run_staged() {
  std::vector<Case> cases;
  uint32_t seed = 1;
  // (kh, kw) geometries: k2s2, k2x4, k4x2 (kernel-area where CB allows), k1x4 (kh-row), k3s3
  // (tap-major fallback), k2x3 (tap-major: KW 3).
  const int geo[][2] = {{2, 2}, {2, 4}, {4, 2}, {1, 4}, {3, 3}, {2, 3}};
  const int couts[] = {32, 64, 96, 256};
  for (int es : {2, 4}) {
    for (const auto& g : geo) {
      for (int cout : couts) {
        if (cout == 256 && !(g[0] == 2 && g[1] == 2)) continue;  // keep the run short
        // channels_last input, NCHW output: odd H*W, a partial and a whole m tile, batch 2.
        cases.push_back({2, 16, 5, 7, cout, g[0], g[1], es, false, false, 0});
        if (cout <= 64) cases.push_back({3, 8, 9, 15, cout, g[0], g[1], es, false, false, 1});
        if (es == 2) {
          // NCHW input (H*W % 8 == 0): NCHW and channels_last output.
          cases.push_back({2, 16, 4, 6, cout, g[0], g[1], es, true, false, 0});
          if (cout <= 96) cases.push_back({2, 16, 8, 17, cout, g[0], g[1], es, true, false, 2});
          if (cout == 64) cases.push_back({2, 16, 4, 6, cout, g[0], g[1], es, true, true, 0});
        }
      }
    }
  }
  // Cout not a multiple of 32: tap-major everywhere.
  cases.push_back({2, 16, 3, 5, 40, 2, 2, 2, false, false, 0});
  cases.push_back({2, 8, 3, 5, 24, 2, 2, 4, false, false, 0});
  for (const Case& c : cases) {
    const long long before = g_tally.failures;
    run_case(c, seed++);
    if (g_verbose || g_tally.failures != before)
      printf("  case %s: %s\n", describe(c).c_str(), g_tally.failures != before ? "FAIL" : "ok");
  }
}

static void run_medium() {
  // Mask R-CNN's mask head scaled to 4 images: 256 > 256 channels, 14x14 input, k2s2, bf16,
  // NCHW output; channels_last input (the binding re-lays NCHW input with H*W % 8 != 0) and a
  // 16x16 NCHW-input variant.
  run_case({4, 256, 14, 14, 256, 2, 2, 2, false, false, 0}, 101);
  run_case({2, 64, 16, 16, 256, 2, 2, 2, true, false, 0}, 102);
  run_case({2, 64, 14, 14, 128, 2, 2, 4, false, false, 0}, 103);
}

int main(int argc, char** argv) {
  std::vector<std::string> modes;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--verbose") {
      g_verbose = true;
    } else {
      modes.push_back(arg);
    }
  }
  if (modes.empty()) {
    fprintf(stderr, "usage: %s staged|medium... [--verbose]\n", argv[0]);
    return 2;
  }
  bool failed = false;
  for (const std::string& mode : modes) {
    g_tally = Tally{};
    const auto t0 = std::chrono::steady_clock::now();
    if (mode == "staged") {
      run_staged();
    } else if (mode == "medium") {
      run_medium();
    } else {
      fprintf(stderr, "unknown mode %s\n", mode.c_str());
      return 2;
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("SUMMARY %s: cases=%lld runs=%lld checks=%lld failures=%lld seconds=%.1f\n",
           mode.c_str(), g_tally.cases, g_tally.runs, g_tally.checks, g_tally.failures, secs);
    failed = failed || g_tally.failures != 0;
  }
  return failed ? 1 : 0;
}
