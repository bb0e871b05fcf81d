// The register tiles of the tiled gradient kernels. One step: acc[i][j] += a[i] * b[j],
// a and b read from shared memory as float4s (TM and TN multiples of 4, 16-byte aligned).
#pragma once

namespace deconv_patch {

template <int TM, int TN>
__device__ __forceinline__ void add_outer_product(float (&acc)[TM][TN], const float* a,
                                                  const float* b) {
  static_assert(TM % 4 == 0 && TN % 4 == 0, "float4 reads");
  float av[TM], bv[TN];
#pragma unroll
  for (int i = 0; i < TM; i += 4) {
    const float4 v = *reinterpret_cast<const float4*>(a + i);
    av[i] = v.x; av[i + 1] = v.y; av[i + 2] = v.z; av[i + 3] = v.w;
  }
#pragma unroll
  for (int j = 0; j < TN; j += 4) {
    const float4 v = *reinterpret_cast<const float4*>(b + j);
    bv[j] = v.x; bv[j + 1] = v.y; bv[j + 2] = v.z; bv[j + 3] = v.w;
  }
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
}

// A thread's share of the product of two loaded shared-memory tiles, STEPS rows each (a and b
// point at the thread's columns of their first rows; rows A_PITCH and B_PITCH floats apart),
// between the barriers that make the tiles visible and free them for the next load.
template <int STEPS, int A_PITCH, int B_PITCH, int TM, int TN>
__device__ __forceinline__ void multiply_tiles(float (&acc)[TM][TN], const float* a,
                                               const float* b) {
  __syncthreads();
#pragma unroll
  for (int r = 0; r < STEPS; ++r) add_outer_product(acc, a + r * A_PITCH, b + r * B_PITCH);
  __syncthreads();
}

// acc += part, then part = 0: partial sums of a few steps kept apart from the running one, so
// rounding error grows with the number of parts rather than of products.
template <int TM, int TN>
__device__ __forceinline__ void add_and_clear(float (&acc)[TM][TN], float (&part)[TM][TN]) {
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      acc[i][j] += part[i][j];
      part[i][j] = 0.f;
    }
}

}  // namespace deconv_patch
