// The explicit cache of NCHW -> channels_last re-layout buffers (see
// binding/relayout_workspace.hpp).
//
// Why: on the device host one caching-allocator call (at::empty_like) costs 4-6 us of CPU per
// call, and it sits before the re-layout launch, so small NCHW layers paid it in full in their
// latency (docs/performance/host-overhead.md: host time of small layers).
//
// Safety: a buffer belongs to one (thread, device, stream). Kernels on one stream run in issue
// order, so the next call's re-layout on that stream starts after the previous call's GEMM has
// read the buffer; two threads sharing a stream hold different buffers, so their interleaved
// launches never overwrite each other's input. Under CUDA-graph capture the buffer would be baked
// into the graph and could be overwritten by a later eager call before a replay, and in a graph's
// warm-up it would come from the graph's pool (binding/kept_buffers.hpp), so there the call gets
// a fresh allocation (the caller's fallback).
#include "binding/relayout_workspace.hpp"
#include "binding/kept_buffers.hpp"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <map>
#include <utility>

#include "relayout/relayout_channels_last.h"

namespace deconv_patch {
namespace {

using WorkspaceKey = std::pair<int, std::uintptr_t>;  // (device index, stream)

// This thread's buffers. Heap-allocated and never destroyed: at process exit the caching
// allocator may already be gone, and freeing into it then could crash the process.
std::map<WorkspaceKey, at::Tensor>& thread_workspaces() {
  thread_local auto* buffers = new std::map<WorkspaceKey, at::Tensor>();
  return *buffers;
}

}  // namespace

const void* relayout_into_workspace(const at::Tensor& input, cudaStream_t stream) {
  if (!relayout_kernel_takes(input) || !may_keep_buffers(stream)) return nullptr;
  const int64_t bytes = input.numel() * input.element_size();
  at::Tensor& buffer =
      thread_workspaces()[{input.get_device(), reinterpret_cast<std::uintptr_t>(stream)}];
  if (!buffer.defined() || buffer.numel() < bytes) {
    // Grown in 1 MiB steps; the old buffer goes back to PyTorch's caching allocator, which
    // reuses it only for allocations on this stream, i.e. for work queued after its readers.
    const int64_t rounded = (bytes + (1 << 20) - 1) / (1 << 20) * (1 << 20);
    buffer = at::Tensor();
    buffer = at::empty({rounded}, input.options().dtype(at::kByte));
  }
  if (launch_relayout_nchw_to_nhwc(input.data_ptr(), buffer.data_ptr(), input.size(0),
                                   input.size(1), input.size(2) * input.size(3),
                                   (int)input.element_size(), stream) != cudaSuccess)
    return nullptr;
  return buffer.data_ptr();
}

void release_relayout_workspaces() { thread_workspaces().clear(); }

}  // namespace deconv_patch
