// The backward kernels' gradients (binding/direct_backward_call.hpp): checks, the
// parameters, the fp32 workspace, and the launches on the current stream.
#include <string>

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "binding/direct_backward_call.hpp"
#include "binding/phase_tma_grad_input.hpp"
#include "binding/torch_binding.hpp"
#include "direct_backward/direct_backward.h"

namespace deconv_patch {
namespace {

void refuse_unless(bool ok, const char* what) {
  if (!ok) throw KernelRefused(std::string("deconv_patch direct backward: ") + what);
}

ScalarKind checked_kind(const at::Tensor& input, const at::Tensor& grad_output,
                        const at::Tensor& weight, at::IntArrayRef stride,
                        at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  refuse_unless(input.is_cuda() && grad_output.device() == input.device() &&
                    weight.device() == input.device(),
                "tensors on one CUDA device");
  refuse_unless(input.dim() == 4 && grad_output.dim() == 4 && weight.dim() == 4, "4-D tensors");
  const at::ScalarType dtype = weight.scalar_type();
  refuse_unless(input.scalar_type() == dtype && grad_output.scalar_type() == dtype, "one dtype");
  refuse_unless(stride.size() == 2 && padding.size() == 2 && dilation.size() == 2 && groups >= 1,
                "2-D hyperparameters");
  refuse_unless(weight.size(0) == input.size(1) && input.size(1) % groups == 0 &&
                    weight.size(1) * groups == grad_output.size(1) &&
                    grad_output.size(0) == input.size(0),
                "the sizes of one convolution");
  if (dtype == at::kFloat) return ScalarKind::kFloat32;
  if (dtype == at::kHalf) return ScalarKind::kFloat16;
  refuse_unless(dtype == at::kBFloat16, "float32, float16 or bfloat16");
  return ScalarKind::kBFloat16;
}

ConvTranspose2dGradParams params(const at::Tensor& input, const at::Tensor& grad_output,
                                 const at::Tensor& weight, at::IntArrayRef stride,
                                 at::IntArrayRef padding, at::IntArrayRef dilation,
                                 int64_t groups) {
  ConvTranspose2dGradParams p{};
  p.input = input.data_ptr();
  p.weight = weight.data_ptr();
  p.grad_output = grad_output.data_ptr();
  p.batch = input.size(0);
  p.in_channels = input.size(1);
  p.in_h = input.size(2);
  p.in_w = input.size(3);
  p.out_channels = grad_output.size(1);
  p.out_h = grad_output.size(2);
  p.out_w = grad_output.size(3);
  p.groups = groups;
  p.in_per_group = p.in_channels / groups;
  p.out_per_group = weight.size(1);
  p.kernel_h = (int)weight.size(2);
  p.kernel_w = (int)weight.size(3);
  p.stride_h = (int)stride[0];
  p.stride_w = (int)stride[1];
  p.pad_h = (int)padding[0];
  p.pad_w = (int)padding[1];
  p.dil_h = (int)dilation[0];
  p.dil_w = (int)dilation[1];
  for (int d = 0; d < 4; ++d) {
    p.input_stride[d] = input.stride(d);
    p.weight_stride[d] = weight.stride(d);
    p.grad_output_stride[d] = grad_output.stride(d);
  }
  return p;
}

int sm_count(int device) {
  int value = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device));
  return value;
}

at::Tensor compute_gradient(Gradient which, GradientKernel kernel, const at::Tensor& input,
                            const at::Tensor& grad_output, const at::Tensor& weight,
                            at::IntArrayRef stride, at::IntArrayRef padding,
                            at::IntArrayRef dilation, int64_t groups) {
  const ScalarKind kind =
      checked_kind(input, grad_output, weight, stride, padding, dilation, groups);
  if (kernel == GradientKernel::kPhaseTma) {
    refuse_unless(which == Gradient::kInput, "gemm_phase_tma computes the input gradient only");
    return phase_tma_grad_input(input, grad_output, weight, stride, padding, dilation, groups,
                                kind);
  }
  const c10::cuda::CUDAGuard guard(input.device());
  const bool of_input = which == Gradient::kInput;
  at::Tensor grad = at::empty_like(of_input ? input : weight, at::MemoryFormat::Preserve);
  if (grad.numel() == 0) return grad;
  if (!of_input && (input.numel() == 0 || grad_output.numel() == 0)) return grad.zero_();
  ConvTranspose2dGradParams p = params(input, grad_output, weight, stride, padding, dilation,
                                       groups);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  if (of_input) {
    p.grad_input = grad.data_ptr();
    for (int d = 0; d < 4; ++d) p.grad_input_stride[d] = grad.stride(d);
    switch (kernel) {
      case GradientKernel::kDirect:
        C10_CUDA_CHECK(launch_direct_grad_input(p, kind, stream));
        break;
      case GradientKernel::kTiled:
        refuse_unless(tiled_grad_input_fits(p), "a grid the tiled input gradient can launch");
        C10_CUDA_CHECK(launch_tiled_grad_input(p, kind, stream));
        break;
      case GradientKernel::kMma:
        refuse_unless(mma_grad_input_fits(p), "a grid the tensor-core input gradient can launch");
        C10_CUDA_CHECK(launch_mma_grad_input(p, kind, stream));
        break;
      case GradientKernel::kPhaseTma:
        break;  // (above)
    }
    return grad;
  }
  p.grad_weight = grad.data_ptr();
  for (int d = 0; d < 4; ++d) p.grad_weight_stride[d] = grad.stride(d);
  const int sms = sm_count(input.get_device());
  switch (kernel) {
    case GradientKernel::kDirect:
      p.splits = direct_weight_grad_splits(p, sms);
      break;
    case GradientKernel::kTiled:
      refuse_unless(tiled_weight_grad_fits(p), "a grid the tiled weight gradient can launch");
      p.splits = tiled_weight_grad_splits(p, sms);
      break;
    case GradientKernel::kMma:
      refuse_unless(mma_weight_grad_fits(p), "a grid the tensor-core weight gradient can launch");
      p.splits = mma_weight_grad_splits(p, sms);
      break;
    case GradientKernel::kPhaseTma:
      break;  // (refused above)
  }
  at::Tensor partial = at::empty({weight_grad_workspace_floats(p)},
                                 input.options().dtype(at::kFloat));
  p.partial = partial.data_ptr<float>();
  switch (kernel) {
    case GradientKernel::kDirect:
      C10_CUDA_CHECK(launch_direct_weight_grad(p, kind, stream));
      break;
    case GradientKernel::kTiled:
      C10_CUDA_CHECK(launch_tiled_weight_grad(p, kind, stream));
      break;
    case GradientKernel::kMma:
      C10_CUDA_CHECK(launch_mma_weight_grad(p, kind, stream));
      break;
    case GradientKernel::kPhaseTma:
      break;  // (refused above)
  }
  return grad;
}

template <Gradient G, GradientKernel K>
at::Tensor gradient_or_undefined(const at::Tensor& input, const at::Tensor& grad_output,
                                 const at::Tensor& weight, at::IntArrayRef stride,
                                 at::IntArrayRef padding, at::IntArrayRef dilation,
                                 int64_t groups) {
  try {
    return gradient<G, K>(input, grad_output, weight, stride, padding, dilation, groups);
  } catch (const KernelRefused&) {
    return at::Tensor();
  }
}

template <Gradient G>
KernelGradient kernel_gradient(GradientKernel kernel) {
  switch (kernel) {
    case GradientKernel::kDirect: return &gradient_or_undefined<G, GradientKernel::kDirect>;
    case GradientKernel::kTiled: return &gradient_or_undefined<G, GradientKernel::kTiled>;
    case GradientKernel::kMma: return &gradient_or_undefined<G, GradientKernel::kMma>;
    case GradientKernel::kPhaseTma: return &gradient_or_undefined<G, GradientKernel::kPhaseTma>;
  }
  return nullptr;
}

}  // namespace

template <Gradient G, GradientKernel K>
at::Tensor gradient(const at::Tensor& input, const at::Tensor& grad_output,
                    const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
                    at::IntArrayRef dilation, int64_t groups) {
  return compute_gradient(G, K, input, grad_output, weight, stride, padding, dilation, groups);
}

#define DECONV_PATCH_GRADIENT(G, K)                                                       \
  template at::Tensor gradient<Gradient::G, GradientKernel::K>(                           \
      const at::Tensor&, const at::Tensor&, const at::Tensor&, at::IntArrayRef,           \
      at::IntArrayRef, at::IntArrayRef, int64_t);
DECONV_PATCH_GRADIENT(kInput, kDirect)
DECONV_PATCH_GRADIENT(kInput, kTiled)
DECONV_PATCH_GRADIENT(kInput, kMma)
DECONV_PATCH_GRADIENT(kInput, kPhaseTma)
DECONV_PATCH_GRADIENT(kWeight, kDirect)
DECONV_PATCH_GRADIENT(kWeight, kTiled)
DECONV_PATCH_GRADIENT(kWeight, kMma)
#undef DECONV_PATCH_GRADIENT

KernelGradient gradient_kernel(bool of_input, int64_t code) {
  if (code == 0) return nullptr;
  TORCH_CHECK(code >= 1 && code <= 4, "deconv_patch: unknown backward kernel code ", code);
  const auto kernel = static_cast<GradientKernel>(code);
  return of_input ? kernel_gradient<Gradient::kInput>(kernel)
                  : kernel_gradient<Gradient::kWeight>(kernel);
}

}  // namespace deconv_patch
