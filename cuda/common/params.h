// Parameters shared by every conv_transpose2d kernel in this folder.
//
// Kernel files include only this header and the CUDA runtime: no torch headers, so each .cu
// compiles on its own (CI builds them with plain nvcc). The torch binding fills the struct.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace deconv_patch {

enum class ScalarKind : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Activations the fused epilogue applies (codes mirrored in deconv_patch/epilogue.py).
enum class Activation : int {
  kNone = 0,
  kReLU = 1,
  kLeakyReLU = 2,
  kSiLU = 3,
  kGELU = 4,      // exact (erf) form, nn.GELU()
  kGELUTanh = 5,  // nn.GELU(approximate="tanh")
  kTanh = 6,
  kSigmoid = 7,
  kHardswish = 8,
};

// What happens to each accumulator after the sum, before the one rounding to the output type:
//     y = activation((acc + bias[oc]) * scale[oc] + shift[oc])      (see common/epilogue.cuh)
struct EpilogueParams {
  const float* scale = nullptr;  // [Cout] fp32, or nullptr for 1
  const float* shift = nullptr;  // [Cout] fp32, or nullptr for 0
  Activation activation = Activation::kNone;
  float negative_slope = 0.01f;  // LeakyReLU only
};

// Per spatial axis, the stride-phase constants of a transposed convolution.
//
// Output row oh receives tap kh from input row ih exactly when  ih*stride = oh + pad - kh*dil.
// With t = oh + pad and g = gcd(stride, dil), a solution exists only if g divides t, and then the
// valid kh form one residue class modulo step = stride/g:
//     kh = kh0 + j*step,   ih = ih0 - j*(dil/g),   j = 0, 1, ...
// where kh0 = (t/g mod step) * inv mod step and inv is the inverse of dil/g modulo step.
// The kernel therefore visits only taps that land on an input pixel; no `% stride` test per tap.
struct AxisPhase {
  int stride;
  int pad;
  int dil;
  int kernel;
  int gcd;       // gcd(stride, dil)
  int step;      // stride / gcd: distance between consecutive valid taps
  int in_step;   // dil / gcd: how far the input index moves per valid tap
  int inv;       // (dil/gcd)^-1 mod step  (0 when step == 1)
};

// How a call reads its input along one axis when it is not a transposed convolution's own
// call. scale >= 1 makes the call a strided correlation (conv2d) along that axis:
//     out[y] = sum over k of in[y * scale + offset + k * dil] * weight[k]
// which is a transposed convolution's input gradient (scale: its stride, offset: minus its
// padding, dil: its dilation, the weight's two channel dims swapped). ph_h / ph_w then
// describe the weight side only: stride 1, padding 0, dilation 1, one phase holding every tap.
// scale 0: the transposed convolution of ph_h / ph_w. Only gemm_phase_tma runs scale >= 1
// (the binding's input gradient sends such calls nowhere else).
struct InputGather {
  int scale = 0;
  int offset = 0;
  int dil = 1;
};

struct ConvTranspose2dParams {
  // Tensors. Element strides are given for every tensor, so any memory layout (NCHW,
  // channels_last, or a non-contiguous view) is read and written in place.
  const void* input = nullptr;   // [N, Cin, H, W]
  const void* weight = nullptr;  // [Cin, Cout/groups, KH, KW]
  const void* bias = nullptr;    // [Cout] or nullptr
  void* output = nullptr;        // [N, Cout, OH, OW]

  int64_t batch = 0;
  int64_t in_channels = 0;
  int64_t in_h = 0, in_w = 0;
  int64_t out_channels = 0;
  int64_t out_h = 0, out_w = 0;
  int64_t groups = 1;
  int64_t in_per_group = 0;   // Cin / groups
  int64_t out_per_group = 0;  // Cout / groups

  AxisPhase ph_h{}, ph_w{};

  int64_t in_stride[4] = {0, 0, 0, 0};   // n, c, h, w
  int64_t w_stride[4] = {0, 0, 0, 0};    // cin, cout/g, kh, kw
  int64_t out_stride[4] = {0, 0, 0, 0};  // n, c, h, w
  bool out_channels_last = false;        // output layout hint for kernels that specialise on it

  EpilogueParams epi{};  // bias is above; scale, shift and activation here

  InputGather gather_h{}, gather_w{};  // (a strided correlation: above)
};

// Fills AxisPhase from the hyperparameters of one axis (host or device).
inline AxisPhase make_axis_phase(int stride, int pad, int dil, int kernel) {
  AxisPhase a{};
  a.stride = stride;
  a.pad = pad;
  a.dil = dil;
  a.kernel = kernel;
  int x = stride, y = dil;
  while (y != 0) {
    int r = x % y;
    x = y;
    y = r;
  }
  a.gcd = x;
  a.step = stride / a.gcd;
  a.in_step = dil / a.gcd;
  a.inv = 0;
  for (int v = 1; v < a.step; ++v) {
    if ((int64_t)(a.in_step % a.step) * v % a.step == 1) {
      a.inv = v;
      break;
    }
  }
  return a;
}

}  // namespace deconv_patch
