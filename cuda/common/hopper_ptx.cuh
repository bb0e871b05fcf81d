// Hopper (sm_90a) PTX wrappers shared by the TMA + wgmma kernels (gemm_kxs_sm90, gemm_phase_tma,
// gemm_phase_sm90): mbarriers, TMA tile loads, register reallocation, named barriers, wgmma
// issue / commit / wait (shared-memory operands, and register-A TF32), shared-memory matrix
// descriptors and the TF32 rounding of packed weights. The device-only wrappers compile only for
// sm_90a (DECONV_PATCH_HOPPER_PTX); the integer helpers are host + device so the packing kernels
// run anywhere and host emulations check the same functions.
// No torch headers: kernel files that include this still compile on their own.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/tensor_core_ptx.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DECONV_PATCH_HOPPER_PTX 1
#endif

namespace deconv_patch {
namespace hopper {

// Matrix descriptor of a K-major, 128-byte-swizzled tile at shared address `addr` (1024-byte
// aligned swizzle atoms of 8 rows x 128 bytes, stacked 1024 bytes apart along m/n): start
// address >> 4 (bits 0-13), leading byte offset 1 (unused when swizzled K-major, bits 16-29),
// stride byte offset 1024 >> 4 (bits 32-45), base offset 0, layout 1 = 128B swizzle (bits 62-63).
// This is the layout TMA's CU_TENSOR_MAP_SWIZZLE_128B writes for a box of 128-byte rows, whatever
// the box rank (the swizzle is a function of the shared address) and the element size (16-bit
// k16 and tf32 k8 steps are both 32 bytes).
[[maybe_unused]] __host__ __device__ __forceinline__ uint64_t smem_desc_k128(uint32_t addr) {
  return (uint64_t)((addr >> 4) & 0x3FFFu) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)1 << 62);
}

// fp32 bits rounded to TF32 (10 explicit mantissa bits) by round-to-nearest, ties away from zero,
// exactly as cvt.rna.tf32.f32 does on sm_90 (its SASS: add half an ulp of TF32 to the bits unless
// |x| is Inf or NaN, then clear the 13 low bits): finite values whose rounding overflows become
// Inf, subnormals round like normals. Integer-only.
[[maybe_unused]] __host__ __device__ __forceinline__ uint32_t round_tf32_bits(uint32_t bits) {
  if ((bits & 0x7FFFFFFFu) < 0x7F800000u) bits += 0x1000u;
  return bits & 0xFFFFE000u;
}

#if defined(DECONV_PATCH_HOPPER_PTX)

// ---- mbarriers ------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (TMA complete_tx) and other threads
// (with the __syncthreads that follows).
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Returns once the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

// ---- TMA tile loads: the box at coordinates (c0 innermost, ..) into shared `dst`, completing
// on mbarrier `bar` (complete_tx bytes) ----------------------------------------------------------
// c0 must be a whole number of 16-byte units of elements (negative ones too), or the load raises
// an illegal instruction at run time although cuTensorMapEncodeTiled accepted the map (seen on
// the H100). Our maps keep it so: channels or k innermost, at block offsets, or
// 128-pixel offsets (gemm_kxs_sm90's NCHW input).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- warp specialisation: register reallocation, named barriers ------------------------------
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- wgmma ----------------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N committed wgmma groups are pending. ptxas serialises a kernel's wgmmas
// (warning C7518) when it cannot prove every path waits: keep waits on paths all threads of the
// warpgroup take.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator accesses across wgmma issue / wait points.
template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Orders this thread's generic-proxy shared-memory writes (st.shared, cp.async) before later
// async-proxy reads (wgmma, TMA store), once combined with the barrier that follows.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// D(64 x N, fp32) += A(64 x K) * B(K x N), both from shared memory (descriptors), K = 32 bytes of
// elements (k16 for 16-bit, k8 for tf32), scale-d 1 (accumulate), imm-scale-a/b 1. B K-major;
// A K-major, or (TRANS_A, 16-bit only: imm-trans-a 1) MN-major. tf32 has no transpose operands.
template <typename T, int N, bool TRANS_A = false>
struct Wgmma;

#define HP_F8(i)                                                                            \
  "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), \
      "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define HP_F32(i) HP_F8(i), HP_F8((i) + 8), HP_F8((i) + 16), HP_F8((i) + 24)
#define HP_F64 HP_F32(0), HP_F32(32)
#define HP_F128 HP_F32(0), HP_F32(32), HP_F32(64), HP_F32(96)
#define HP_R32                                                                              \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                  \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define HP_R64                                                                              \
  HP_R32 ", "                                                                               \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "        \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define HP_R128                                                                             \
  HP_R64 ", "                                                                               \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "        \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "        \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "  \
  "%111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, "    \
  "%125, %126, %127"
// N/2 accumulators are operands 0..N/2-1 (REGS; ACCS() lists them, a function-like macro so that
// it expands only here); then the A descriptor (DA), the B descriptor (DB) and scale-d (SD);
// TAIL: the immediates after scale-d.
#define HP_DEFINE_WGMMA(TYPE, PTX_TYPE, K, TAIL, N, REGS, ACCS, DA, DB, SD, TA)              \
  template <>                                                                                \
  struct Wgmma<TYPE, N, TA> {                                                                \
    static __device__ __forceinline__ void run(float (&d)[N / 2], uint64_t da, uint64_t db) { \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SD ", 0;\n"                          \
                   "wgmma.mma_async.sync.aligned.m64n" #N K ".f32." PTX_TYPE "." PTX_TYPE    \
                   " {" REGS "}, " DA ", " DB ", p, " TAIL ";\n}\n"                           \
                   : ACCS()                                                                  \
                   : "l"(da), "l"(db), "r"(1));                                              \
    }                                                                                        \
  };
#define HP_T16 "1, 1, 0, 0"   // imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b
#define HP_T16T "1, 1, 1, 0"  // the same with A MN-major
#define HP_T32 "1, 1"         // imm-scale-a, imm-scale-b
#define HP_DEFINE_WGMMA_N(N, REGS, ACCS, DA, DB, SD)                                          \
  HP_DEFINE_WGMMA(__nv_bfloat16, "bf16", "k16", HP_T16, N, REGS, ACCS, DA, DB, SD, false)    \
  HP_DEFINE_WGMMA(__half, "f16", "k16", HP_T16, N, REGS, ACCS, DA, DB, SD, false)            \
  HP_DEFINE_WGMMA(float, "tf32", "k8", HP_T32, N, REGS, ACCS, DA, DB, SD, false)             \
  HP_DEFINE_WGMMA(__nv_bfloat16, "bf16", "k16", HP_T16T, N, REGS, ACCS, DA, DB, SD, true)    \
  HP_DEFINE_WGMMA(__half, "f16", "k16", HP_T16T, N, REGS, ACCS, DA, DB, SD, true)
#define HP_ACC64() HP_F32(0)
#define HP_ACC128() HP_F64
#define HP_ACC256() HP_F128
HP_DEFINE_WGMMA_N(64, HP_R32, HP_ACC64, "%32", "%33", "%34")
HP_DEFINE_WGMMA_N(128, HP_R64, HP_ACC128, "%64", "%65", "%66")
HP_DEFINE_WGMMA_N(256, HP_R128, HP_ACC256, "%128", "%129", "%130")
// D(64 x N, fp32) += A(64 x 8, tf32, registers) * B(8 x N, tf32, shared memory, K-major), scale-d
// 1: the register-A form ("RS"). Warp v of the warpgroup holds rows 16v..16v+15 of A as in
// mma.m16n8k8: lane l, g = l/4, t = l%4: a[0] = (g, t), a[1] = (g + 8, t), a[2] = (g, t + 4),
// a[3] = (g + 8, t + 4). The registers must stay unchanged until the wgmma has completed
// (wgmma_wait), and a wgmma_fence must separate their writes from the wgmma.
template <int N>
struct WgmmaRsTf32;
#define HP_DEFINE_WGMMA_RS_TF32(N, REGS, ACCS, A0, A1, A2, A3, DB, SD)                       \
  template <>                                                                                \
  struct WgmmaRsTf32<N> {                                                                    \
    static __device__ __forceinline__ void run(float (&d)[N / 2], const uint32_t (&a)[4],     \
                                               uint64_t db) {                                \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SD ", 0;\n"                          \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32"                 \
                   " {" REGS "}, {" A0 ", " A1 ", " A2 ", " A3 "}, " DB ", p, 1, 1;\n}\n"      \
                   : ACCS()                                                                  \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));          \
    }                                                                                        \
  };
HP_DEFINE_WGMMA_RS_TF32(64, HP_R32, HP_ACC64, "%32", "%33", "%34", "%35", "%36", "%37")
HP_DEFINE_WGMMA_RS_TF32(128, HP_R64, HP_ACC128, "%64", "%65", "%66", "%67", "%68", "%69")
HP_DEFINE_WGMMA_RS_TF32(256, HP_R128, HP_ACC256, "%128", "%129", "%130", "%131", "%132", "%133")
#undef HP_DEFINE_WGMMA_RS_TF32

// This lane's ldmatrix.x4 addresses for the TF32 register-A k block (tf32_rs_k_block), computed
// once per kernel. The warpgroup reads A rows first_row + 64 * mi.. (m64 half mi) of a stage of
// 128-byte swizzled rows; warp wv holds rows 16wv..16wv+15 of each half. Matrix lane / 8 of the
// x4 load is rows 8 * (matrix & 1) + lane % 8 of the warp's 16, 16-byte chunk 2ks + matrix / 2,
// stored at chunk ^ (row % 8) (the 128-byte swizzle; rows start 8-aligned, so row % 8 = lane % 8).
template <int MI>
struct Tf32RsLane {
  uint32_t row_off[MI];  // byte offset of this lane's row in a stage, per m64 half
  uint32_t chunk;        // matrix / 2: 0 or 1
  uint32_t rr;           // row % 8: the swizzle's XOR
  __device__ __forceinline__ Tf32RsLane(int first_row, int wv, int lane) {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const int row = first_row + 64 * mi + 16 * wv + 8 * ((lane >> 3) & 1) + (lane & 7);
      row_off[mi] = (uint32_t)(row * 128);
    }
    chunk = (uint32_t)(lane >> 4);
    rr = (uint32_t)(lane & 7);
  }
};

// ldmatrix.x4 of this warp's fragment of k step ks, each m64 half mi (unrounded fp32 bits).
template <int MI>
__device__ __forceinline__ void tf32_rs_load(uint32_t (&a)[MI][4], uint32_t stage,
                                             const Tf32RsLane<MI>& a_lane, int ks) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    const uint32_t chunk = ((uint32_t)(2 * ks) + a_lane.chunk) ^ a_lane.rr;
    tc::ldsm_x4(stage + a_lane.row_off[mi] + (chunk << 4), a[mi][0], a[mi][1], a[mi][2],
                a[mi][3]);
  }
}
// dst = src rounded to TF32 (cvt.rna); dst may be src.
template <int MI>
__device__ __forceinline__ void tf32_rs_round(uint32_t (&dst)[MI][4],
                                              const uint32_t (&src)[MI][4]) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dst[mi][e] = tc::to_tf32(__uint_as_float(src[mi][e]));
  }
}

// One k block (4 k steps of k8) of a TF32 tile with A from registers, for gemm_kxs_sm90 and
// gemm_phase_tma (the scheme and its index math: gemm_kxs_sm90/gemm_kxs_sm90_kernel.cuh, "fp32").
// Per k step ks: wait until at most 3 commit groups are pending (step ks of the previous k block,
// the last reader of afr[ks], is then done); at step 3, when `release` is set, the whole previous
// block is done and lane 0 arrives on `release_bar` (its stage's empty barrier); round this
// warp's fragment of each m64 half (tf32_rs_load: ldmatrix.x4 at stage + a_lane.row_off[mi] +
// 16 * ((2ks + a_lane.chunk) ^ a_lane.rr)) into afr[ks] (cvt.rna) and issue the register-A
// wgmmas against B at b_desc (+ 32 bytes per step) as one commit group.
// PREFETCH: step ks + 1's ldmatrix is issued before step ks's wgmmas, into 4 * MI more
// registers, so its latency is not on the next step's path. Measured per kernel (H100, forced,
// TF32 NHWC, docs/performance/phase-gemms.md): gemm_phase_tma's ping-pong configs 10-15% faster
// with it; gemm_kxs_sm90's ping-pong config 7-8% slower on Mask R-CNN and YOLO (K = 256), so
// gemm_kxs_sm90 loads each step's fragment at the step.
template <bool PREFETCH, int BN, int MI, int ACC>
__device__ __forceinline__ void tf32_rs_k_block(float (&acc)[MI][ACC], uint32_t (&afr)[4][MI][4],
                                                uint32_t stage, uint64_t b_desc,
                                                const Tf32RsLane<MI>& a_lane, bool release,
                                                uint32_t release_bar, int lane) {
  static_assert(ACC == BN / 2, "an m64nBN accumulator per m64 half");
  [[maybe_unused]] uint32_t raw[MI][4];
  if constexpr (PREFETCH) tf32_rs_load<MI>(raw, stage, a_lane, 0);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    wgmma_wait<3>();
    if (ks == 3 && release) {
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) fence_acc(acc[mi]);
      if (lane == 0) mbar_arrive(release_bar);
    }
    if constexpr (PREFETCH) {
      tf32_rs_round<MI>(afr[ks], raw);
      if (ks < 3) tf32_rs_load<MI>(raw, stage, a_lane, ks + 1);
    } else {
      tf32_rs_load<MI>(afr[ks], stage, a_lane, ks);
      tf32_rs_round<MI>(afr[ks], afr[ks]);
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) fence_acc(acc[mi]);
    wgmma_fence();
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) WgmmaRsTf32<BN>::run(acc[mi], afr[ks][mi], b_desc + 2 * ks);
    wgmma_commit();
  }
}
#undef HP_ACC256
#undef HP_ACC128
#undef HP_ACC64
#undef HP_DEFINE_WGMMA_N
#undef HP_T32
#undef HP_T16T
#undef HP_T16
#undef HP_DEFINE_WGMMA
#undef HP_R128
#undef HP_R64
#undef HP_R32
#undef HP_F128
#undef HP_F64
#undef HP_F32
#undef HP_F8

// ---- epilogue and operand helpers -----------------------------------------------------------
// Two fp32 values rounded to nearest even (as from_float) and packed, `lo` at the lower address.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

#endif  // DECONV_PATCH_HOPPER_PTX

}  // namespace hopper
}  // namespace deconv_patch
