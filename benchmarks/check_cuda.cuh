// CHECK_CUDA for the standalone benchmark programs (kxs_trace.cu, store_pattern.cu): a failed
// CUDA call prints where and why, and exits.
#pragma once
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CHECK_CUDA(x)                                                                     \
  do {                                                                                    \
    cudaError_t err_ = (x);                                                               \
    if (err_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)
