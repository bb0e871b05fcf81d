// The gradients of a transposed convolution: on CUDA cores direct (one output element per
// thread for the input gradient, per thread and 16 weight columns for the weight gradient) and
// tiled (GEMMs per group, several outputs per thread); on tensor cores as implicit GEMMs per
// group (mma: 16-bit operands, or fp32 as 3xTF32). Every hyperparameter and any strides;
// fp32 accumulation; the weight gradients sum pixel ranges on their own and then add them in a
// fixed order, so they are deterministic without atomics. Where the planner runs which:
// deconv_patch/kernels/direct_backward.py.
#pragma once

#include <cstdint>

#include "common/params.h"

namespace deconv_patch {

struct ConvTranspose2dGradParams {
  const void* input = nullptr;        // x  [N, Cin, H, W]
  const void* weight = nullptr;       // W  [Cin, Cout/groups, KH, KW]
  const void* grad_output = nullptr;  // dy [N, Cout, OH, OW]
  void* grad_input = nullptr;         // dx, x's sizes
  void* grad_weight = nullptr;        // dW, W's sizes
  float* partial = nullptr;           // [splits][Cin][Cout/groups * KH * KW] fp32 workspace

  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, out_h = 0, out_w = 0;
  int64_t groups = 1, in_per_group = 0, out_per_group = 0;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;

  // Element strides (n, c, h, w) / (cin, cout/g, kh, kw): any layout, read or written in place.
  int64_t input_stride[4] = {0, 0, 0, 0};
  int64_t weight_stride[4] = {0, 0, 0, 0};
  int64_t grad_output_stride[4] = {0, 0, 0, 0};
  int64_t grad_input_stride[4] = {0, 0, 0, 0};
  int64_t grad_weight_stride[4] = {0, 0, 0, 0};

  int splits = 1;  // weight gradient: pixel ranges, each summed on its own
};

// The weight gradient's columns per input channel: (co, kh, kw) of its group.
__host__ __device__ inline int64_t weight_grad_columns(const ConvTranspose2dGradParams& p) {
  return p.out_per_group * p.kernel_h * p.kernel_w;
}

// dx = conv2d(dy, W) with the forward's stride, padding, dilation and groups.
cudaError_t launch_direct_grad_input(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                     cudaStream_t stream);

// dx as a GEMM per group (grad_input_tiled.cu): 64 channels x 128 pixels a block, 4 x 8 a
// thread, for layers with more than a few channels per group. tiled_grad_input_fits says
// whether its grid can hold the call.
bool tiled_grad_input_fits(const ConvTranspose2dGradParams& p);
cudaError_t launch_tiled_grad_input(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                    cudaStream_t stream);

// How many pixel ranges the weight gradient sums on its own, for `sm_count` SMs.
int direct_weight_grad_splits(const ConvTranspose2dGradParams& p, int sm_count);

// dW[ci, co, kh, kw] = sum over pixels of x * dy at the tap's output pixel.
cudaError_t launch_direct_weight_grad(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                      cudaStream_t stream);

// The same dW as a GEMM per group over pixel ranges (weight_grad_tiled.cu): 64 channels x 64
// columns a block, 4 x 4 a thread; its ranges, workspace and limits are its own.
int tiled_weight_grad_splits(const ConvTranspose2dGradParams& p, int sm_count);
bool tiled_weight_grad_fits(const ConvTranspose2dGradParams& p);
cudaError_t launch_tiled_weight_grad(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                     cudaStream_t stream);

// dx as an implicit GEMM per group on tensor cores (grad_input_mma.cu): 128 pixels x 64
// channels a block; float16 and bfloat16, and float32 as 3xTF32 (fp32's accuracy).
bool mma_grad_input_fits(const ConvTranspose2dGradParams& p);
cudaError_t launch_mma_grad_input(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                  cudaStream_t stream);

// dW as a GEMM per group over pixel ranges on tensor cores (weight_grad_mma.cu): 64 channels x
// 64 columns a block; float16, bfloat16 and float32 (3xTF32).
int mma_weight_grad_splits(const ConvTranspose2dGradParams& p, int sm_count);
bool mma_weight_grad_fits(const ConvTranspose2dGradParams& p);
cudaError_t launch_mma_weight_grad(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                   cudaStream_t stream);

// How many pixel ranges a weight gradient kernel of `blocks` blocks a range sums on its own:
// four waves of `sm_count` SMs where the pixels allow, each range at least `least_pixels`, at
// most `most` ranges (the reduce adds a column's ranges one after another).
int pixel_ranges(int64_t blocks, const ConvTranspose2dGradParams& p, int sm_count,
                 int64_t least_pixels, int64_t most);

// Floats of p.partial a weight gradient needs: p.splits range sums of every column.
int64_t weight_grad_workspace_floats(const ConvTranspose2dGradParams& p);

// dW from p.partial's p.splits range sums, added in range order (every weight gradient).
cudaError_t launch_weight_grad_reduce(const ConvTranspose2dGradParams& p, ScalarKind kind,
                                      cudaStream_t stream);

}  // namespace deconv_patch
