// How fast one SM stores a finished fp32 tile of gemm_kxs_sm90 (128 rows x 1 KB, the rows 4 KB
// apart: U-Net up1's NHWC output, 256 channels of one tap per row) with 8 warps of 16-byte
// stores, by the shape of each warp store:
//   8x64   8 rows x 64 bytes (4 lanes a row): the accumulator fragment's own layout, what the
//          register-path store does today;
//   4x128  4 rows x 128 bytes (8 lanes a row): whole 128-byte lines, after lanes of two row
//          quads trade halves;
//   1x512  one row, 512 contiguous bytes;
//   bulk   the bulk-copy (TMA) engine from shared memory, one 1 KB copy per row (below).
// The first three: same bytes, same addresses, same number of store instructions; only the
// grouping differs.
// Each CTA stores TILES tiles (tile t of CTA b at rows (t*grid + b)*128..), timed with events,
// for 132 CTAs (every SM) and 33 (a quarter: the SMs do not compete for L2 / DRAM).
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a benchmarks/store_pattern.cu \
//        -o /tmp/store_pattern && /tmp/store_pattern
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include "standalone_util.cuh"

namespace {

constexpr int kRows = 128, kRowBytes = 1024, kRowStride = 4096, kTiles = 12;

// PATTERN 0: 8x64, 1: 4x128, 2: 1x512. Warp w of 8 stores rows 16w..16w+15; 32 instructions a
// lane, 16 bytes each (16 rows x 1 KB = 16 KB a warp = 32 x 512 bytes).
template <int PATTERN>
__global__ void __launch_bounds__(256) store_tiles(char* out, int grid_tiles, float v) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const float4 val = make_float4(v, v + 1.f, v + 2.f, v + 3.f);
  for (int t = 0; t < kTiles; ++t) {
    const long long tile = (long long)t * gridDim.x + blockIdx.x;
    if (tile >= grid_tiles) break;
    char* base = out + tile * kRows * (long long)kRowStride;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      int row, off;
      if (PATTERN == 0) {  // instruction i: group g = i / 4, half h = (i / 2) % 2, c = i % 2
        row = 16 * w + (lane >> 2) + 8 * ((i >> 1) & 1);
        off = 128 * (i >> 2) + 16 * (lane & 3) + 64 * (i & 1);
      } else if (PATTERN == 1) {  // instruction i: row block i % 4, group i / 4
        row = 16 * w + 4 * (i & 3) + (lane >> 3);
        off = 128 * (i >> 2) + 16 * (lane & 7);
      } else {  // instruction i: row i / 2, half i % 2
        row = 16 * w + (i >> 1);
        off = 512 * (i & 1) + 16 * lane;
      }
      *reinterpret_cast<float4*>(base + (long long)row * kRowStride + off) = val;
    }
  }
}

// PATTERN 3: the same tile from shared memory by the bulk-copy (TMA) engine: the CTA's threads
// fill 128 KB of shared memory once, then per tile thread 0 issues one 1 KB
// cp.async.bulk.global.shared::cta per row, commits, and waits until the engine has read the
// buffer (wait_group.read 0: when the buffer could be reused), then, before the kernel ends, for
// the writes too.
__global__ void __launch_bounds__(256) bulk_store_tiles(char* out, int grid_tiles, float v,
                                                        long long* read_cycles) {
  extern __shared__ __align__(128) char buf[];
  for (int i = threadIdx.x; i < kRows * kRowBytes / 16; i += blockDim.x) {
    reinterpret_cast<float4*>(buf)[i] = make_float4(v, v, v, v);
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x != 0) return;
  const unsigned sbase = (unsigned)__cvta_generic_to_shared(buf);
  for (int t = 0; t < kTiles; ++t) {
    const long long tile = (long long)t * gridDim.x + blockIdx.x;
    if (tile >= grid_tiles) break;
    char* base = out + tile * kRows * (long long)kRowStride;
    const long long c0 = clock64();
    for (int r = 0; r < kRows; ++r) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                   :: "l"(base + (long long)r * kRowStride), "r"(sbase + r * kRowBytes),
                      "r"(kRowBytes) : "memory");
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    if (t == kTiles / 2) read_cycles[blockIdx.x] = clock64() - c0;
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

}  // namespace

int main() {
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int total_tiles = sms * kTiles;  // enough for every grid below
  const size_t bytes = (size_t)total_tiles * kRows * kRowStride;
  char* out;
  CHECK_CUDA(cudaMalloc(&out, bytes));
  CHECK_CUDA(cudaMemset(out, 0, bytes));
  long long* read_cycles;
  CHECK_CUDA(cudaMallocManaged(&read_cycles, sms * sizeof(long long)));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  const char* names[4] = {"8x64", "4x128", "1x512", "bulk"};
  const int bulk_smem = kRows * kRowBytes;
  CHECK_CUDA(cudaFuncSetAttribute(bulk_store_tiles, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  bulk_smem));
  std::printf("per-tile store time (128 KB a CTA, 8 warps), us: median of 20 launches of %d tiles "
              "a CTA\n", kTiles);
  for (int grid : {sms, sms / 4}) {
    for (int pat = 0; pat < 4; ++pat) {
      std::vector<double> ms_per_launch;
      for (int r = 0; r < 23; ++r) {
        CHECK_CUDA(cudaEventRecord(e0));
        const int n = grid * kTiles;
        if (pat == 0) store_tiles<0><<<grid, 256>>>(out, n, 1.f);
        if (pat == 1) store_tiles<1><<<grid, 256>>>(out, n, 1.f);
        if (pat == 2) store_tiles<2><<<grid, 256>>>(out, n, 1.f);
        if (pat == 3) bulk_store_tiles<<<grid, 256, bulk_smem>>>(out, n, 1.f, read_cycles);
        CHECK_CUDA(cudaEventRecord(e1));
        CHECK_CUDA(cudaEventSynchronize(e1));
        float ms;
        CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 3) ms_per_launch.push_back(ms);
      }
      const double us = median(ms_per_launch) * 1e3 / kTiles;
      const double gbs = (double)grid * kRows * kRowBytes / (us * 1e3);
      std::printf("  %3d CTAs  %-6s %6.2f us a tile  (%6.0f GB/s in all, %5.1f GB/s a CTA)",
                  grid, names[pat], us, gbs, gbs / grid);
      if (pat == 3) {  // the last launch's CTA 0: cycles from the first copy to the buffer read
        std::printf("; buffer read after %lld cycles", read_cycles[0]);
      }
      std::printf("\n");
    }
  }
  return 0;
}
