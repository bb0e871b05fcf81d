// PTX wrappers and small integer helpers shared by the tensor-core kernels (gemm_kxs,
// gemm_phase): cp.async, ldmatrix, mma.sync for fp16/bf16/TF32, fast division by small runtime
// divisors. Device-only; no torch headers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace deconv_patch {
namespace tc {

// Division of small non-negative numerators by a runtime divisor d: q = umulhi(x, ceil(2^32/d)).
// Exact whenever x*d <= 2^32 (error of the product is below x/2^32 <= 1/d). magic == 0 encodes d == 1.
struct SmallDiv {
  uint32_t magic;
};
__host__ __device__ inline SmallDiv make_small_div(uint32_t d) {
  // For d >= 2, 0xffffffff/d + 1 == ceil(2^32/d) (2^32 is a multiple of d only for powers of 2,
  // where both sides equal 2^32/d).
  return SmallDiv{d <= 1 ? 0u : 0xffffffffu / d + 1u};
}
__device__ __forceinline__ uint32_t small_div(uint32_t x, SmallDiv s) {
  return s.magic == 0 ? x : __umulhi(x, s.magic);
}

// Two adjacent output elements stored with one instruction.
template <typename T>
struct PairOf;
template <>
struct PairOf<float> {
  using type = float2;
};
template <>
struct PairOf<__half> {
  using type = __half2;
};
template <>
struct PairOf<__nv_bfloat16> {
  using type = __nv_bfloat162;
};

// PTX wrappers.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies BYTES (4, 8 or 16) global -> shared asynchronously; bytes past src_bytes are zero-filled
// (src_bytes == 0 reads nothing, so out-of-range chunks pass any valid pointer).
template <int BYTES>
__device__ __forceinline__ void cp_async(uint32_t dst, const void* src, int src_bytes) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async sizes");
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src),
                 "n"(BYTES), "r"(src_bytes));
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                        uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1,
                                              uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]);
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                  const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_1688_tf32(float (&d)[4], const uint32_t (&a)[4],
                                              const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// 3xTF32 operand split: x = hi + lo exactly up to lo's own rounding, hi = tf32(x) and
// lo = tf32(x - hi) (the difference is exact in fp32: hi keeps x's top 11 significant bits).
__device__ __forceinline__ void tf32_hi_lo(float x, uint32_t& hi, uint32_t& lo) {
  hi = to_tf32(x);
  lo = to_tf32(x - __uint_as_float(hi));
}

// One chunk of V consecutive elements global -> shared, zero-filling past `valid` elements.
// 16-bit elements one at a time cannot use cp.async (4 bytes minimum): plain load + store.
template <typename T, int V>
__device__ __forceinline__ void copy_chunk(T* dst, const T* src, int valid, const T* dummy) {
  constexpr int kBytes = V * (int)sizeof(T);
  if constexpr (kBytes >= 4) {
    cp_async<kBytes>(smem_u32(dst), valid > 0 ? src : dummy, valid * (int)sizeof(T));
  } else {
    const unsigned short v = valid > 0 ? __ldg(reinterpret_cast<const unsigned short*>(src)) : 0;
    *reinterpret_cast<unsigned short*>(dst) = v;
  }
}

}  // namespace tc
}  // namespace deconv_patch
