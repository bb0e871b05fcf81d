// col2im for the "one GEMM over every tap" variant (gemm_col2im). No torch headers.
//
// A transposed convolution is a GEMM that multiplies each input pixel by every tap of the weight,
// then a sum of the products that land on the same output pixel (col2im):
//     cols[m, (kh*KW + kw)*Cout + co] = sum_ci input[n, ci, ih, iw] * weight[ci, co, kh, kw]
//     output[n, co, oh, ow] = epilogue_co(sum over taps of cols[m, (kh*KW + kw)*Cout + co])
// with m = (n*H + ih)*W + iw, over the taps with oh = ih*SH - PH + kh*DH and ow = iw*SW - PW +
// kw*DW (0 <= ih < H, 0 <= iw < W). The first line is gemm_kxs_sm90 run on the weight viewed
// as a 1 x 1 kernel [Cin, KH*KW*Cout] (tap-major columns) into `cols` (fp32, row-major
// [N*H*W, KH*KW*Cout]); launch_col2im does the second, with the shared fused epilogue (bias,
// scale, shift, activation) and the single rounding to T. Groups == 1.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace deconv_patch {

// `p`: the layer's geometry, output (any strides), bias and epilogue (p.input and p.weight are
// not read). cudaErrorInvalidValue for groups != 1 or an output row of 2^31 elements
// (out_w * Cout: 32-bit index math within a row).
cudaError_t launch_col2im(const ConvTranspose2dParams& p, const float* cols, ScalarKind kind,
                          cudaStream_t stream);

}  // namespace deconv_patch
