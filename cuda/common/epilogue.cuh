// The fused epilogue every conv_transpose2d kernel applies to its fp32 accumulator before the
// single rounding to the output type:
//     y = activation((acc + bias[oc]) * scale[oc] + shift[oc])
// scale/shift (a folded eval BatchNorm, or any per-channel affine) are fp32 so folding a bf16
// model's BatchNorm costs no precision; a missing scale is 1, a missing shift 0, no bias 0.
// Activation codes are mirrored in deconv_patch/epilogue.py; keep the two lists in step.
#pragma once

#include <type_traits>

#include <cuda_runtime.h>

#include "common/params.h"

namespace deconv_patch {

// Exact formulas (erff/tanhf/expf, not the fast intrinsics): the bar is PyTorch's own error.
__device__ __forceinline__ float activate(float v, Activation act, float negative_slope) {
  switch (act) {
    case Activation::kNone: return v;
    case Activation::kReLU: return v > 0.f ? v : 0.f;
    case Activation::kLeakyReLU: return v > 0.f ? v : v * negative_slope;
    case Activation::kSiLU: return v / (1.f + expf(-v));
    case Activation::kGELU: return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    case Activation::kGELUTanh: {
      const float inner = 0.79788456080286536f * (v + 0.044715f * v * v * v);
      return 0.5f * v * (1.f + tanhf(inner));
    }
    case Activation::kTanh: return tanhf(v);
    case Activation::kSigmoid: return 1.f / (1.f + expf(-v));
    case Activation::kHardswish: return v * fminf(fmaxf(v + 3.f, 0.f), 6.f) * (1.f / 6.f);
  }
  return v;
}

// Per output channel: the affine part folded into one multiply-add, y = act(acc * mul + add),
// with mul = scale and add = bias*scale + shift. Kernels tabulate (mul, add) once per channel.
struct ChannelAffine {
  float mul;
  float add;
};

__device__ __forceinline__ ChannelAffine channel_affine(const EpilogueParams& e, float bias,
                                                        int64_t oc) {
  const float s = e.scale != nullptr ? e.scale[oc] : 1.f;
  const float t = e.shift != nullptr ? e.shift[oc] : 0.f;
  // (acc + bias) * s + t, with bias*s + t precomputed. When s == 1 and t == 0 this is acc + bias,
  // rounded exactly as the unfused sum.
  return ChannelAffine{s, e.scale != nullptr || e.shift != nullptr ? fmaf(bias, s, t) : bias};
}

__device__ __forceinline__ float apply_epilogue(float acc, ChannelAffine a,
                                                const EpilogueParams& e) {
  const float v = e.scale != nullptr ? fmaf(acc, a.mul, a.add) : acc + a.add;
  return activate(v, e.activation, e.negative_slope);
}

// An activation known at compile time, for kernels whose epilogue sits in fully unrolled loops.
template <Activation A>
using ActivationC = std::integral_constant<Activation, A>;

// Calls f(ActivationC<act>{}): such kernels instantiate their store once per activation, so each
// element runs its own activation's few instructions. A runtime switch there inlined all nine
// formulas into every unrolled element, and that code (not the arithmetic) made gemm_phase_tma
// 2.5x slower with a fused ReLU and 3.8x with Tanh than without (H100,
// docs/performance/epilogue.md). The TMA families call it on the host, to pick a kernel compiled
// for one activation: nine stores in one kernel made them the slowest files to compile
// (docs/performance/build.md); the others in their kernels. The host checks the code (a value
// outside the list runs as kNone).
#pragma nv_exec_check_disable
template <typename F>
__host__ __device__ __forceinline__ void dispatch_activation(Activation act, F&& f) {
#ifdef DECONV_PATCH_UNIT_ACTIVATION
  // A unit built for one activation (common/family_unit.h) has that activation's kernels only;
  // the binding never hands it another (f is not called: the launcher reports no kernel).
  constexpr Activation kOnly = static_cast<Activation>(DECONV_PATCH_UNIT_ACTIVATION);
  if (act == kOnly) f(ActivationC<kOnly>{});
#else
  switch (act) {
    case Activation::kReLU: f(ActivationC<Activation::kReLU>{}); break;
    case Activation::kLeakyReLU: f(ActivationC<Activation::kLeakyReLU>{}); break;
    case Activation::kSiLU: f(ActivationC<Activation::kSiLU>{}); break;
    case Activation::kGELU: f(ActivationC<Activation::kGELU>{}); break;
    case Activation::kGELUTanh: f(ActivationC<Activation::kGELUTanh>{}); break;
    case Activation::kTanh: f(ActivationC<Activation::kTanh>{}); break;
    case Activation::kSigmoid: f(ActivationC<Activation::kSigmoid>{}); break;
    case Activation::kHardswish: f(ActivationC<Activation::kHardswish>{}); break;
    default: f(ActivationC<Activation::kNone>{}); break;
  }
#endif
}

// apply_epilogue with the activation fixed at compile time and (mul, add) from the channel's
// table: fmaf(acc, mul, add) is exactly apply_epilogue's affine part (without a scale mul == 1,
// and fmaf(acc, 1, add) rounds acc + add once, as the unfused sum does).
template <Activation A>
__device__ __forceinline__ float epilogue_value(float acc, float mul, float add,
                                                float negative_slope) {
  return activate(fmaf(acc, mul, add), A, negative_slope);
}

}  // namespace deconv_patch
