// NCHW -> channels_last (NHWC) copy of a dense NCHW tensor, for the kernels that read their input
// as 16-byte channel rows (gemm_phase_tma, gemm_kxs_sm90, 16-bit gemm_phase / gemm_phase_sm90)
// when the caller's input is NCHW. Per image it is the transpose of a [C][H*W] matrix into
// [H*W][C], through 32 x 32 tiles in shared memory so that both the reads (along H*W) and the
// writes (along C) are coalesced (16-bit with C and H*W even: 64 x 64 tiles moved in pairs). (PyTorch's copy to channels_last reads across the channel
// stride here: 0.57 TB/s on Mask R-CNN's 100 x 256 x 14 x 14 bf16 input, H100.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deconv_patch {

// src: dense NCHW, dst: dense NHWC of the same shape (no overlap); elem_bytes 2 or 4 (the bits
// are copied, so any 16- or 32-bit type). Any sizes: 64-bit offsets, batches beyond the grid's
// z limit are looped over. Launches on `stream` without synchronising; returns
// cudaGetLastError() (cudaSuccess for an empty tensor, cudaErrorInvalidValue for other element
// sizes or null pointers with elements).
cudaError_t launch_relayout_nchw_to_nhwc(const void* src, void* dst, int64_t n, int64_t c,
                                         int64_t hw, int elem_bytes, cudaStream_t stream);

}  // namespace deconv_patch
