// A reused buffer for the row-reading kernels' NCHW -> channels_last input re-layout, so that a
// call does not allocate one (see binding/relayout_workspace.cpp for why and why it is safe).
#pragma once

#include <cuda_runtime_api.h>

#include <ATen/core/Tensor.h>

namespace deconv_patch {

// Whether our tiled transpose (relayout/relayout_channels_last.h) re-lays `input`: 4-D, dense NCHW,
// 16- or 32-bit elements. Other tensors take PyTorch's own channels_last copy.
inline bool relayout_kernel_takes(const at::Tensor& input) {
  return input.dim() == 4 && input.is_contiguous() &&
         (input.element_size() == 2 || input.element_size() == 4);
}

// Re-lays dense NCHW `input` (16- or 32-bit elements) on `stream` into this thread's cached
// buffer for (device, stream), grown as needed, and returns the buffer: `input`'s sizes in
// channels_last order, strides (C*H*W, 1, W*C, C). Returns nullptr, launching nothing, where the
// caller must make its own copy: other layouts or element sizes, a stream under CUDA-graph
// capture or warm-up (binding/kept_buffers.hpp), or a re-layout the kernel cannot launch.
const void* relayout_into_workspace(const at::Tensor& input, cudaStream_t stream);

// Frees this thread's buffers (back to PyTorch's caching allocator).
void release_relayout_workspaces();

}  // namespace deconv_patch
