// Whether a device buffer allocated now may be kept past the call that allocates it (a packed
// weight, a re-layout workspace).
//
// Not while the stream is captured into a CUDA graph: the buffer would be written by the graph's
// replays only. And not while Inductor's CUDA-graph trees (torch.compile's "reduce-overhead")
// warm a graph up: every allocation of the thread then comes from the graph's private pool, whose
// memory the trees hand out again to the graph's tensors, and a buffer kept there is a live
// allocation they do not know of (they stop with "tensor(s) in the cudagraph pool not tracked as
// outputs"). The allocator cannot be asked where allocations go; the trees turn off ATen's
// conv-benchmark cache emptying for their warm-up runs (their recording is a stream capture),
// and that flag is what is read here. A user who turns it off too only gets buffers made per
// call.
#pragma once

#include <ATen/native/ConvUtils.h>
#include <cuda_runtime_api.h>

namespace deconv_patch {

inline bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) != cudaSuccess ||
         status != cudaStreamCaptureStatusNone;
}

inline bool may_keep_buffers(cudaStream_t stream) {
  return !stream_capturing(stream) && at::native::_cudnn_get_conv_benchmark_empty_cache();
}

}  // namespace deconv_patch
