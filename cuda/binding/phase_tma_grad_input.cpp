// The input gradient on gemm_phase_tma (binding/phase_tma_grad_input.hpp): the gathered call's
// params, the weight packed for it, the launch through the family's table on the current stream.
#include "binding/phase_tma_grad_input.hpp"

#include <string>

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "binding/family_units.hpp"
#include "binding/tf32_settings.hpp"
#include "binding/torch_binding.hpp"
#include "common/family_unit.h"
#include "common/params.h"

namespace deconv_patch {
namespace {

void refuse_unless(bool ok, const char* what) {
  if (!ok) throw KernelRefused(std::string("deconv_patch gemm_phase_tma input gradient: ") + what);
}

}  // namespace

at::Tensor phase_tma_grad_input(const at::Tensor& input, const at::Tensor& grad_output,
                                const at::Tensor& weight, at::IntArrayRef stride,
                                at::IntArrayRef padding, at::IntArrayRef dilation,
                                int64_t groups, ScalarKind kind) {
  // With groups the weight read with its channel dims swapped is no strided view.
  refuse_unless(groups == 1, "one group");
  const FamilyUnit* unit = find_family_unit("gemm_phase_tma", kind);
  refuse_unless(unit != nullptr, "gemm_phase_tma's unit registered");
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();

  at::Tensor grad = at::empty_like(input, at::MemoryFormat::Preserve);
  if (grad.numel() == 0) return grad;
  if (grad_output.numel() == 0 || weight.numel() == 0) return grad.zero_();
  const at::Tensor dy = grad_output.is_contiguous(at::MemoryFormat::ChannelsLast)
                            ? grad_output
                            : channels_last_copy(grad_output, stream);

  // The call: dy (Cout channels) in, grad (Cin channels) out, the weight read as
  // [Cout, Cin, kh, kw]; one phase over every tap on the weight side, the gather on the input.
  ConvTranspose2dParams p;
  fill_weight_params(p, weight.transpose(0, 1), {1, 1}, {0, 0}, {1, 1}, 1);
  p.gather_h = InputGather{(int)stride[0], -(int)padding[0], (int)dilation[0]};
  p.gather_w = InputGather{(int)stride[1], -(int)padding[1], (int)dilation[1]};
  p.input = dy.data_ptr();
  for (int i = 0; i < 4; ++i) p.in_stride[i] = dy.stride(i);
  p.batch = dy.size(0);
  p.in_h = dy.size(2);
  p.in_w = dy.size(3);
  p.output = grad.data_ptr();
  for (int i = 0; i < 4; ++i) p.out_stride[i] = grad.stride(i);
  p.out_h = grad.size(2);
  p.out_w = grad.size(3);
  p.out_channels_last = grad.is_contiguous(at::MemoryFormat::ChannelsLast);

  // TF32 as PyTorch's own call would have it: the forward's output_padding, from the sizes,
  // tells whether cuDNN could run it.
  bool output_padding_reaches_stride = false;
  for (int d = 0; d < 2; ++d) {
    const int64_t exact = (input.size(2 + d) - 1) * stride[d] - 2 * padding[d] +
                          dilation[d] * (weight.size(2 + d) - 1) + 1;
    output_padding_reaches_stride |= grad_output.size(2 + d) - exact >= stride[d];
  }
  const bool allow_tf32 =
      kind == ScalarKind::kFloat32 &&
      call_allows_tf32(at::globalContext(), output_padding_reaches_stride,
                       dilation[0] != 1 || dilation[1] != 1);
  UnitCall call = unit_call(kind, allow_tf32, -1);
  refuse_unless(unit->supports(p, call), "a call the kernel supports");
  const int64_t bytes = unit->packed_weight_bytes(p, call);
  refuse_unless(bytes > 0, "a weight the kernel packs");
  // The weight changes every training step, so it is packed per call.
  const at::Tensor packed = at::empty({bytes}, weight.options().dtype(at::kByte));
  C10_CUDA_CHECK(unit->pack_weight(p, call, packed.data_ptr()));
  call.packed = packed.data_ptr();
  // Few output tiles with deep sums run in k slices: fp32 partials reduced in order.
  const at::Tensor workspace = unit_workspace(*unit, p, call, weight.options());
  C10_CUDA_CHECK(unit->launch(p, call));
  return grad;
}

}  // namespace deconv_patch
