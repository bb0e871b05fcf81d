"""Why our large kernels run slower right after some other kernels.

Two measurements in one process:
  * a probe kernel, one CTA per SM (as our persistent GEMMs launch), each CTA recording its SM,
    %globaltimer at start and end and the SM clock every 10 us, launched right after a filler
    (nothing, an elementwise kernel, a reduction, cuDNN's convolution, a cuBLAS mm, our kernel),
    with 0 or 200 KB of dynamic shared memory: do some SMs start late, or run slower clocks?
  * our U-Net up1 call (TF32, channels_last, inputs rotated past the L2), event time per call,
    right after fillers that include kernels of 64 KB and 256 KB of straight-line code and no
    memory traffic: is the penalty the instruction caches refilling?
On the H100 (perf-notes version 19): no late SMs and no clock change after any filler (our own
TF32 kernel leaves the clock ~5% lower for ~30 us); the straight-line-code fillers cost our call
as much as cuDNN's convolution does, so the penalty is instruction-cache refill.

    python benchmarks/launch_probe.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
from torch.utils.cpp_extension import load_inline

import deconv_patch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from event_gap import event_per_call, filler_kernels  # noqa: E402

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int kBins = 8;

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void probe_kernel(unsigned long long* out, long long spin_ns, int has_smem) {
  // out per CTA: start ns, end ns, SM id, then the SM clock (cycles) at every 10 us of the spin.
  extern __shared__ int smem[];
  unsigned long long t0 = now_ns();
  long long c0 = clock64();
  if (threadIdx.x == 0 && has_smem) smem[0] = (int)t0;
  __syncthreads();
  long long cyc[kBins];
  int bin = 0;
  unsigned long long t;
  while ((long long)((t = now_ns()) - t0) < spin_ns) {
    if (threadIdx.x == 0 && (long long)(t - t0) >= (bin + 1) * 10000ll && bin < kBins) {
      cyc[bin] = clock64() - c0;
      ++bin;
    }
  }
  if (threadIdx.x == 0) {
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    unsigned long long* o = out + blockIdx.x * (3 + kBins);
    o[0] = t0;
    o[1] = now_ns() + (has_smem ? (unsigned long long)(smem[0] & 0) : 0ull);
    o[2] = smid;
    for (int i = 0; i < kBins; ++i) o[3 + i] = i < bin ? (unsigned long long)cyc[i] : 0ull;
  }
}

// About 16 bytes of straight-line code per FFMA: N = 4096 gives 64 KB, 16384 gives 256 KB. One
// CTA per SM runs it, so it passes through every SM's instruction caches (no memory, no smem).
template <int N>
__global__ void icache_flush_kernel(float* out, float a) {
  float x = (float)threadIdx.x;
#pragma unroll
  for (int i = 0; i < N; ++i) x = fmaf(x, a, (float)i);
  if (x == 1234.5f) out[threadIdx.x] = x;
}

void icache_flush(torch::Tensor out, int64_t grid, int64_t kb) {
  auto stream = at::cuda::getCurrentCUDAStream();
  if (kb <= 64)
    icache_flush_kernel<4096><<<(unsigned)grid, 128, 0, stream>>>(out.data_ptr<float>(), 0.5f);
  else
    icache_flush_kernel<16384><<<(unsigned)grid, 128, 0, stream>>>(out.data_ptr<float>(), 0.5f);
}

void probe(torch::Tensor out, int64_t grid, int64_t smem, int64_t spin_ns) {
  cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  probe_kernel<<<(unsigned)grid, 384, (size_t)smem, at::cuda::getCurrentCUDAStream()>>>(
      (unsigned long long*)out.data_ptr<int64_t>(), spin_ns, smem > 0);
}
"""

Fn = Callable[[], object]
BINS = 8  # clock samples, one per 10 us of an 80 us spin (kBins)
SPIN_NS = 85000


def main() -> int:
    ext = load_inline("launch_probe", cpp_sources="void probe(torch::Tensor out, int64_t grid, "
                      "int64_t smem, int64_t spin_ns);\nvoid icache_flush(torch::Tensor out, "
                      "int64_t grid, int64_t kb);", cuda_sources=CUDA_SRC,
                      functions=["probe", "icache_flush"], extra_cuda_cflags=["-O3"],
                      verbose=False)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{torch.cuda.get_device_name()}, {sms} SMs, torch {torch.__version__}")
    x = torch.randn(8, 1024, 28, 28, device="cuda").contiguous(memory_format=torch.channels_last)
    deconv = torch.nn.ConvTranspose2d(1024, 512, 2, 2, device="cuda")
    fast = deconv_patch.FastConvTranspose2d.from_module(deconv)
    kernels = filler_kernels()
    fillers: Dict[str, Optional[Fn]] = {
        "probe": None, **{k: kernels[k] for k in ("64 MB written", "1 MB read", "small conv",
                                                  "small mm")},
        "cudnn up1": lambda: deconv(x), "ours up1": lambda: fast(x)}
    print("start spread = latest CTA start - earliest (us), median over reps; late SMs = CTAs "
          "starting > 2 us after the earliest; span = last end - first start (spin 85 us); then "
          "the SM clock in each 10 us of the spin")
    print(f"  {'smem':>6s} {'filler':13s} {'spread':>7s} {'p90':>6s} {'late':>5s} {'span':>6s}"
          f"  late SM ids (one rep)")
    with torch.no_grad():
        for smem in (200 * 1024,):
            for name, filler in fillers.items():
                spreads: List[float] = []
                p90s: List[float] = []
                lates: List[int] = []
                spans: List[float] = []
                late_ids: List[int] = []
                mhz: List[List[float]] = []
                outs = [torch.zeros(sms * (3 + BINS), dtype=torch.int64, device="cuda")
                        for _ in range(30)]
                for out in outs:
                    if filler is not None:
                        filler()
                    else:
                        ext.probe(torch.empty_like(out), sms, smem, SPIN_NS)
                    ext.probe(out, sms, smem, SPIN_NS)
                torch.cuda.synchronize()
                for rep, out in enumerate(outs[5:]):
                    t = out.view(sms, 3 + BINS).cpu()
                    cyc = t[:, 3:].double()
                    # MHz in each 10 us bin, averaged over the CTAs: cycles per 10 us / 10.
                    deltas = torch.diff(cyc, dim=1, prepend=torch.zeros(sms, 1, dtype=cyc.dtype))
                    mhz.append((deltas / 10.0).mean(0).tolist())
                    starts = (t[:, 0] - t[:, 0].min()).double() / 1e3
                    spreads.append(starts.max().item())
                    p90s.append(starts.quantile(0.9).item())
                    late = starts > 2.0
                    lates.append(int(late.sum()))
                    spans.append((t[:, 1].max() - t[:, 0].min()).item() / 1e3)
                    if rep == 0:
                        late_ids = sorted(int(s) for s in t[late, 2].tolist())
                print(f"  {smem // 1024:5d}K {name:13s} {statistics.median(spreads):7.2f} "
                      f"{statistics.median(p90s):6.2f} {statistics.median(lates):5.0f} "
                      f"{statistics.median(spans):6.2f}  {late_ids[:8]}  MHz per 10 us: " +
                      " ".join(f"{statistics.median(m[i] for m in mhz):5.0f}"
                               for i in range(BINS)), flush=True)
    ours_after_fillers(ext, sms)
    return 0


def ours_after_fillers(ext, sms: int, reps: int = 60) -> None:
    """Our up1 TF32 NHWC call (inputs rotated past the L2), event time per call, right after a
    filler: is the penalty after some kernels the instruction caches?"""
    conv = torch.nn.ConvTranspose2d(1024, 512, 2, 2, device="cuda")
    fast = deconv_patch.FastConvTranspose2d.from_module(conv)
    xs = [torch.randn(8, 1024, 28, 28, device="cuda").contiguous(
        memory_format=torch.channels_last) for _ in range(4)]
    sink = torch.empty(1024, device="cuda")
    kernels = filler_kernels()
    fillers: Dict[str, Optional[Fn]] = {
        "nothing": None, "64 MB written": kernels["64 MB written"],
        "1 MB read": kernels["1 MB read"],
        "code 64KB": lambda: ext.icache_flush(sink, sms, 64),
        "code 256KB": lambda: ext.icache_flush(sink, sms, 256),
        "cudnn up1": lambda: conv(xs[0])}
    print("\nour up1 TF32 NHWC call after a filler (event us per call, median; the filler runs "
          "outside the events):")
    turn = [0]

    def ours() -> object:
        turn[0] += 1
        return fast(xs[turn[0] % len(xs)])

    with torch.no_grad():
        for name, filler in fillers.items():
            print(f"  {name:13s} {event_per_call(ours, reps, before=filler):7.1f}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
