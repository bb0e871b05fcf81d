// Timeline of gemm_kxs_sm90's persistent tiles on one layer (default U-Net up1, TF32, channels_
// last in and out, config 0 = 128x256s4): where a call's time goes between the main loops, the
// epilogues and the tail, and what a preceding kernel changes. A standalone program (no torch):
// it includes the kernel's header with DECONV_PATCH_KXS_TRACE, which makes thread 0 of consumer 0
// of every CTA write (%globaltimer, clock64) at four points per tile (see KXS_TRACE in the
// header). The extension is never built with it.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DDECONV_PATCH_KXS_TRACE -Icuda \
//        benchmarks/kxs_trace.cu -o /tmp/kxs_trace && /tmp/kxs_trace [N CIN COUT H W [GRID [STAGES]]]
//
// Each scenario runs the layer REPS times with one CUDA event pair per call, something before
// each call outside the events, and the trace of the last call:
//   back-to-back   nothing between calls;
//   after-copy     a 64 MB device-to-device copy (leaves the L2 full of other, dirty lines);
//   after-code     a kernel of ~128 KB of straight-line code on every SM (evicts the
//                  instruction caches, touches no memory to speak of).
// Printed per scenario: event us per call (median), and from the trace (one call): kernel
// start to the first main loop, each tile's main loop and epilogue (median / max over CTAs, us
// by %globaltimer, which ticks at 1 us or finer depending on the GPU; also SM cycles), and the
// spread of the CTAs' last stores.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gemm_kxs_sm90/gemm_kxs_sm90_kernel.cuh"
#include "standalone_util.cuh"

namespace dp = deconv_patch;

namespace {

// ~128 KB of straight-line code (a dependent FMA chain the compiler cannot fold), one warp per SM.
__global__ void code_filler(float* out, float a) {
  float x = (float)threadIdx.x;
#pragma unroll
  for (int i = 0; i < 8192; ++i) x = fmaf(x, a, (float)(i & 7));
  if (x == 12345.f) out[0] = x;
}

__global__ void fill_random(float* p, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = ((float)(h & 0xFFFFFF) / 16777216.f - 0.5f) * scale;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t N = argc > 1 ? atoll(argv[1]) : 8, CIN = argc > 2 ? atoll(argv[2]) : 1024,
                COUT = argc > 3 ? atoll(argv[3]) : 512, H = argc > 4 ? atoll(argv[4]) : 28,
                W = argc > 5 ? atoll(argv[5]) : 28;
  const int K = 2, REPS = 30;
  const int64_t OH = H * K, OW = W * K;
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));

  // Channels_last input and output, a dense [Cin][Cout][K][K] weight, a bias.
  dp::ConvTranspose2dParams p{};
  float *x, *w, *b, *y, *packed, *copy_a, *copy_b, *sink;
  const size_t nx = N * H * W * CIN, nw = CIN * COUT * K * K, ny = N * OH * OW * COUT;
  CHECK_CUDA(cudaMalloc(&x, nx * 4));
  CHECK_CUDA(cudaMalloc(&w, nw * 4));
  CHECK_CUDA(cudaMalloc(&b, COUT * 4));
  CHECK_CUDA(cudaMalloc(&y, ny * 4));
  fill_random<<<1024, 256>>>(x, nx, 1, 2.f);
  fill_random<<<1024, 256>>>(w, nw, 2, 0.1f);
  fill_random<<<64, 256>>>(b, COUT, 3, 1.f);
  p.input = x;
  p.weight = w;
  p.bias = b;
  p.output = y;
  p.batch = N;
  p.in_channels = CIN;
  p.in_h = H;
  p.in_w = W;
  p.out_channels = COUT;
  p.out_h = OH;
  p.out_w = OW;
  p.groups = 1;
  p.in_per_group = CIN;
  p.out_per_group = COUT;
  p.ph_h = dp::make_axis_phase(K, 0, 1, K);
  p.ph_w = dp::make_axis_phase(K, 0, 1, K);
  const int64_t in_s[4] = {H * W * CIN, 1, W * CIN, CIN};
  const int64_t w_s[4] = {COUT * K * K, K * K, K, 1};
  const int64_t out_s[4] = {OH * OW * COUT, 1, OW * COUT, COUT};
  for (int i = 0; i < 4; ++i) {
    p.in_stride[i] = in_s[i];
    p.w_stride[i] = w_s[i];
    p.out_stride[i] = out_s[i];
  }
  p.out_channels_last = true;
  const dp::ScalarKind kind = dp::ScalarKind::kFloat32;
  if (!dp::geometry_ok(p, kind)) {
    std::fprintf(stderr, "geometry not supported\n");
    return 1;
  }
  CHECK_CUDA(cudaMalloc(&packed, dp::packed_rows(p) * CIN * 4));
  CHECK_CUDA(dp::launch_pack<float>(p, packed, stream));
  const size_t copy_bytes = (size_t)64 << 20;
  CHECK_CUDA(cudaMalloc(&copy_a, copy_bytes));
  CHECK_CUDA(cudaMalloc(&copy_b, copy_bytes));
  CHECK_CUDA(cudaMalloc(&sink, 4));

  int sms = 0, clock_khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const dp::KxsArgs args = dp::make_kxs_args(p, kind, dp::KxsCfg0::kBN, false, 0);
  // GRID (argument 6, optional): that many CTAs instead of one per SM (fewer SMs storing at
  // once: tells a per-SM store limit from a shared one). STAGES (argument 7, optional): 2 or 3
  // runs config 0's tile with that ring depth instead of 4 (what a staging buffer in the freed
  // shared memory would cost the main loop).
  const int grid_arg = argc > 6 ? atoi(argv[6]) : 0;
  const int stages = argc > 7 ? atoi(argv[7]) : 4;
  if (stages < 2 || stages > 4) {
    std::fprintf(stderr, "STAGES must be 2, 3 or 4\n");
    return 1;
  }
  const int grid = std::min(args.tiles, grid_arg > 0 ? grid_arg : sms);
  const size_t trace_n = (size_t)grid * dp::kKxsTraceTiles * 4 * 2;
  unsigned long long* trace;
  CHECK_CUDA(cudaMalloc(&trace, trace_n * 8));
  std::printf("layer N%lld Cin%lld Cout%lld %lldx%lld k%d s%d, TF32, channels_last; %d tiles on %d "
              "CTAs (128x256, %d stages); SM clock attribute %d MHz\n",
              (long long)N, (long long)CIN, (long long)COUT, (long long)H, (long long)W, K, K,
              args.tiles, grid, stages, clock_khz / 1000);

  // The default call is the extension's own launch (launch_layout: tensor maps encoded at each
  // call, as in the extension). A grid or ring depth of its own: launch_cfg's steps with those.
  auto launch = [&](auto cfg) {
    using Cfg = decltype(cfg);
    CUtensorMap map_a, map_b;
    if (!dp::encode_kmajor(&map_a, kind, p.input, p.in_channels, args.m, dp::kBM) ||
        !dp::encode_kmajor(&map_b, kind, packed, p.in_channels, dp::packed_rows(p), Cfg::kBN)) {
      std::fprintf(stderr, "tensor map encoding failed\n");
      std::exit(1);
    }
    auto kernel = dp::conv_transpose2d_gemm_kxs_sm90_kernel<float, Cfg, false, false, 0>;
    CHECK_CUDA(dp::ensure_dynamic_smem(kernel, Cfg::kTotalBytes, 0));
    kernel<<<grid, dp::kThreads, Cfg::kTotalBytes, stream>>>(map_a, map_b, args);
    CHECK_CUDA(cudaGetLastError());
  };
  auto run = [&]() {
    if (stages == 4 && grid_arg <= 0) {
      CHECK_CUDA((dp::launch_layout<float, dp::KxsCfg0>(p, kind, packed, false, stream)));
    } else if (stages == 4) {
      launch(dp::KxsCfg0{});
    } else if (stages == 3) {
      launch(dp::KxsConfig<256, 3, false>{});
    } else {
      launch(dp::KxsConfig<256, 2, false>{});
    }
  };
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  const char* names[3] = {"back-to-back", "after-copy", "after-code"};
  for (int sc = 0; sc < 3; ++sc) {
    std::vector<double> ev;
    unsigned long long* none = nullptr;
    for (int r = 0; r < REPS + 5; ++r) {
      const bool last = r == REPS + 4;
      CHECK_CUDA(cudaMemcpyToSymbolAsync(dp::g_kxs_trace, last ? &trace : &none, sizeof(trace), 0,
                                         cudaMemcpyHostToDevice, stream));
      if (last) CHECK_CUDA(cudaMemsetAsync(trace, 0, trace_n * 8, stream));
      if (sc == 1) CHECK_CUDA(cudaMemcpyAsync(copy_b, copy_a, copy_bytes,
                                              cudaMemcpyDeviceToDevice, stream));
      if (sc == 2) code_filler<<<sms, 32, 0, stream>>>(sink, 0.999f);
      CHECK_CUDA(cudaEventRecord(e0, stream));
      run();
      CHECK_CUDA(cudaEventRecord(e1, stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 5) ev.push_back(ms * 1e3);
    }
    std::vector<unsigned long long> t(trace_n);
    CHECK_CUDA(cudaMemcpy(t.data(), trace, trace_n * 8, cudaMemcpyDeviceToHost));
    auto at = [&](int cta, int tile, int point, int which) {
      return t[(((size_t)cta * dp::kKxsTraceTiles + tile) * 4 + point) * 2 + which];
    };
    unsigned long long t0 = ~0ull, t_end_max = 0, t_end_min = ~0ull;
    int max_tiles = 0;
    for (int c = 0; c < grid; ++c) {
      t0 = std::min(t0, at(c, 0, 0, 0));
      int n = 0;
      while (n < dp::kKxsTraceTiles && at(c, n, 0, 0) != 0) ++n;
      max_tiles = std::max(max_tiles, n);
      t_end_max = std::max(t_end_max, at(c, n - 1, 3, 0));
      t_end_min = std::min(t_end_min, at(c, n - 1, 3, 0));
    }
    std::printf("\n%s: event %.1f us per call (median of %d); traced call: first tile start to "
                "last stores issued %.1f us, CTAs' last stores spread %.1f us\n",
                names[sc], median(ev), REPS, (t_end_max - t0) / 1e3, (t_end_max - t_end_min) / 1e3);
    std::printf("  tile  start(us, med/max)  main loop us (cycles)  table us  stores us (cycles)\n");
    for (int k = 0; k < max_tiles; ++k) {
      std::vector<double> st, ml, tb, sto, mlc, stc;
      for (int c = 0; c < grid; ++c) {
        if (at(c, k, 0, 0) == 0) continue;
        st.push_back((at(c, k, 0, 0) - t0) / 1e3);
        ml.push_back((at(c, k, 1, 0) - at(c, k, 0, 0)) / 1e3);
        tb.push_back((at(c, k, 2, 0) - at(c, k, 1, 0)) / 1e3);
        sto.push_back((at(c, k, 3, 0) - at(c, k, 2, 0)) / 1e3);
        mlc.push_back((double)(at(c, k, 1, 1) - at(c, k, 0, 1)));
        stc.push_back((double)(at(c, k, 3, 1) - at(c, k, 2, 1)));
      }
      std::printf("  %4d  %7.1f / %7.1f  %7.1f (%8.0f)  %8.2f  %6.2f (%6.0f)   [%zu CTAs]\n", k,
                  median(st), *std::max_element(st.begin(), st.end()), median(ml), median(mlc),
                  median(tb), median(sto), median(stc), st.size());
    }
  }
  return 0;
}
