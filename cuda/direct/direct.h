// The direct gather kernel: one thread per output pixel and a tile of output channels.
// Correct for every hyperparameter combination; the reference-grade CUDA path.
#pragma once

#include "common/params.h"

namespace deconv_patch {

// Returns the launch status (cudaSuccess when nothing needed launching).
cudaError_t launch_conv_transpose2d_direct(const ConvTranspose2dParams& p, ScalarKind kind,
                                           cudaStream_t stream);

}  // namespace deconv_patch
