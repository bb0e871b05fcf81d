// Thin tensor binding: checks tensors, allocates the output in the memory format PyTorch would
// return, fills ConvTranspose2dParams and runs the call through its family's table
// (common/family_unit.h) on the current stream: the same steps for every family. Argument validation
// with PyTorch's own error wording happens one layer up (deconv_patch/arguments.py); the checks
// here are a safety net that keeps a bad call from reaching a kernel.
#include <tuple>

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include "binding/torch_binding.hpp"
#include "binding/family_units.hpp"
#include "binding/relayout_workspace.hpp"
#include "common/family_unit.h"
#include "common/params.h"
#include "relayout/relayout_channels_last.h"

namespace deconv_patch {

KernelRefused::KernelRefused(const std::string& what) : std::runtime_error(what) {}

namespace {

// A family's limits exclude this call: typed, so the caller runs PyTorch instead of failing.
template <typename... Args>
void refuse_unless(bool ok, const Args&... what) {
  if (!ok) throw KernelRefused(c10::str("deconv_patch: ", what...));
}

ScalarKind scalar_kind(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ScalarKind::kFloat32;
    case at::kHalf: return ScalarKind::kFloat16;
    case at::kBFloat16: return ScalarKind::kBFloat16;
    default: TORCH_CHECK(false, "deconv_patch CUDA kernels take float32, float16 or bfloat16, got ",
                         t.scalar_type());
  }
}

void copy_strides(const at::Tensor& t, int64_t* dst) {
  for (int i = 0; i < 4; ++i) dst[i] = t.stride(i);
}

const float* channel_vector(const c10::optional<at::Tensor>& t, int64_t channels,
                            const at::Tensor& like, const char* name) {
  if (!t.has_value() || !t->defined()) return nullptr;
  TORCH_CHECK(t->is_cuda() && t->device() == like.device() && t->scalar_type() == at::kFloat &&
                  t->is_contiguous() && t->numel() == channels,
              "deconv_patch: ", name, " must be a contiguous float32 CUDA tensor of shape [Cout]");
  return t->data_ptr<float>();
}

// The weight-side fields of the params but the pointer (what packing and gemm_out_tile's fit
// query depend on), from a weight's sizes and element strides.
void fill_weight_geometry(ConvTranspose2dParams& p, at::IntArrayRef sizes, at::IntArrayRef strides,
                          at::IntArrayRef stride, at::IntArrayRef padding,
                          at::IntArrayRef dilation, int64_t groups) {
  TORCH_CHECK(sizes.size() == 4 && strides.size() == 4 && groups > 0,
              "deconv_patch: expected a 4-D weight");
  TORCH_CHECK(stride.size() == 2 && padding.size() == 2 && dilation.size() == 2,
              "deconv_patch: stride, padding and dilation must have 2 values");
  const int64_t kh = sizes[2], kw = sizes[3];
  p.in_channels = sizes[0];
  p.groups = groups;
  p.in_per_group = sizes[0] / groups;
  p.out_per_group = sizes[1];
  p.out_channels = sizes[1] * groups;
  p.ph_h = make_axis_phase((int)stride[0], (int)padding[0], (int)dilation[0], (int)kh);
  p.ph_w = make_axis_phase((int)stride[1], (int)padding[1], (int)dilation[1], (int)kw);
  for (int i = 0; i < 4; ++i) p.w_stride[i] = strides[i];
}

}  // namespace

void fill_weight_params(ConvTranspose2dParams& p, const at::Tensor& weight, at::IntArrayRef stride,
                        at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  fill_weight_geometry(p, weight.sizes(), weight.strides(), stride, padding, dilation, groups);
  p.weight = weight.data_ptr();
}

// A channels_last copy of 4-D `input` for the kernels that read 16-byte channel rows: our tiled
// transpose for dense NCHW input of 16- or 32-bit elements, PyTorch's copy for any other layout
// (or sizes the transpose's grid cannot hold).
at::Tensor channels_last_copy(const at::Tensor& input, cudaStream_t stream) {
  if (relayout_kernel_takes(input)) {
    at::Tensor x = at::empty_like(input, at::MemoryFormat::ChannelsLast);
    if (launch_relayout_nchw_to_nhwc(input.data_ptr(), x.data_ptr(), input.size(0),
                                     input.size(1), input.size(2) * input.size(3),
                                     (int)input.element_size(), stream) == cudaSuccess)
      return x;
  }
  return input.contiguous(at::MemoryFormat::ChannelsLast);
}

UnitCall unit_call(ScalarKind kind, bool allow_tf32, int64_t config) {
  return UnitCall{kind, kind, allow_tf32, static_cast<int>(config), nullptr, nullptr,
                  c10::cuda::getCurrentCUDAStream().stream(), &find_family_unit};
}

at::Tensor unit_workspace(const FamilyUnit& unit, const ConvTranspose2dParams& p, UnitCall& call,
                          const at::TensorOptions& options) {
  at::Tensor workspace;
  if (const int64_t bytes = unit.workspace_bytes(p, call); bytes > 0) {
    workspace = at::empty({bytes}, options.dtype(at::kByte));
    call.workspace = workspace.data_ptr();
  }
  return workspace;
}

// The weight re-laid-out for family `family_code` (its pack_weight: the tile layouts of the
// packed-weight GEMMs, gemm_kxs's tap-major copy, gemm_col2im's GEMM weight). Depends on the
// weight and the hyperparameters only; deconv_patch/kernels/packed_weights.py caches it per
// version.
at::Tensor pack_weight(int64_t family_code, const at::Tensor& weight, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef output_padding,
                       at::IntArrayRef dilation, int64_t groups, bool allow_tf32) {
  const FamilyUnit& unit = family_unit(family_code, kEveryActivation, kEveryKind);
  TORCH_CHECK(weight.is_cuda() && weight.dim() == 4, "deconv_patch: weight must be a 4-D CUDA tensor");
  (void)output_padding;
  const c10::cuda::CUDAGuard guard(weight.device());
  ConvTranspose2dParams p;
  fill_weight_params(p, weight, stride, padding, dilation, groups);
  const UnitCall call = unit_call(scalar_kind(weight), allow_tf32, -1);
  const int64_t bytes = unit.packed_weight_bytes(p, call);
  TORCH_CHECK(bytes != 0, "deconv_patch: variant ", unit.name, " reads no packed weight");
  refuse_unless(bytes > 0, unit.name, " does not support this weight");
  at::Tensor packed = at::empty({bytes}, weight.options().dtype(at::kByte));
  const cudaError_t err = unit.pack_weight(p, call, packed.data_ptr());
  TORCH_CHECK(err == cudaSuccess, "deconv_patch: weight packing failed: ", cudaGetErrorString(err));
  return packed;
}

// Runs one kernel family with the fused epilogue in (scale, shift, activation); the planner
// (Python) has chosen it. config: the family's tile config (-1: its own choice; a family
// without configs passes it on, as gemm_col2im does to its GEMM); `packed` is pack_weight's
// buffer where the config reads one. A call the family's limits exclude throws KernelRefused
// (PyTorch then runs it); any other failure is an error.
at::Tensor conv_transpose2d_forward(int64_t family_code, const at::Tensor& input,
                                    const at::Tensor& weight,
                                    const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                    at::IntArrayRef padding, at::IntArrayRef output_padding,
                                    at::IntArrayRef dilation, int64_t groups, bool channels_last,
                                    bool allow_tf32, const c10::optional<at::Tensor>& out,
                                    const c10::optional<at::Tensor>& scale,
                                    const c10::optional<at::Tensor>& shift, int64_t activation,
                                    double negative_slope,
                                    const c10::optional<at::Tensor>& packed, int64_t config) {
  TORCH_CHECK(activation >= 0 && activation <= (int64_t)Activation::kHardswish,
              "deconv_patch: unknown activation code ", activation);
  TORCH_CHECK(input.is_cuda() && weight.is_cuda(), "deconv_patch: input and weight must be CUDA");
  TORCH_CHECK(input.dim() == 4 && weight.dim() == 4, "deconv_patch: expected 4-D input and weight");
  TORCH_CHECK(stride.size() == 2 && padding.size() == 2 && output_padding.size() == 2 &&
                  dilation.size() == 2,
              "deconv_patch: stride, padding, output_padding and dilation must have 2 values");
  TORCH_CHECK(groups > 0 && input.size(1) == weight.size(0) && input.size(1) % groups == 0,
              "deconv_patch: channel/group mismatch");
  TORCH_CHECK(weight.scalar_type() == input.scalar_type(), "deconv_patch: dtype mismatch");
  TORCH_CHECK(weight.device() == input.device(), "deconv_patch: device mismatch");
  const ScalarKind kind = scalar_kind(input);
  const FamilyUnit& unit = family_unit(family_code, activation, static_cast<int64_t>(kind));
  const int configs = unit.num_configs();
  TORCH_CHECK(config >= -1 && (configs == 0 || config < configs), "deconv_patch: ", unit.name,
              " has no tile config ", config);

  const c10::cuda::CUDAGuard guard(input.device());
  const int64_t kh = weight.size(2), kw = weight.size(3);
  const int64_t out_h = (input.size(2) - 1) * stride[0] - 2 * padding[0] +
                        dilation[0] * (kh - 1) + output_padding[0] + 1;
  const int64_t out_w = (input.size(3) - 1) * stride[1] - 2 * padding[1] +
                        dilation[1] * (kw - 1) + output_padding[1] + 1;
  TORCH_CHECK(out_h > 0 && out_w > 0, "deconv_patch: output size is too small");
  const int64_t out_channels = weight.size(1) * groups;

  // The layout PyTorch would return is decided one layer up (deconv_patch/layout.py).
  const bool cl = channels_last;
  const auto memory_format = cl ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  at::Tensor output;
  if (out.has_value() && out->defined() && out->numel() == 0) return *out;
  if (out.has_value() && out->defined()) {
    // Caller-provided output (tests pass one poisoned with NaN to catch unwritten elements).
    output = *out;
    TORCH_CHECK(output.sizes() == at::IntArrayRef({input.size(0), out_channels, out_h, out_w}) &&
                    output.scalar_type() == input.scalar_type() &&
                    output.device() == input.device() && output.is_contiguous(memory_format),
                "deconv_patch: `out` must match the output's shape, dtype, device and layout");
  } else {
    output = at::empty({input.size(0), out_channels, out_h, out_w},
                       input.options().memory_format(memory_format));
  }
  if (output.numel() == 0) return output;

  at::Tensor bias_t;
  if (bias.has_value() && bias->defined()) {
    bias_t = bias->contiguous();
    TORCH_CHECK(bias_t.is_cuda() && bias_t.scalar_type() == input.scalar_type() &&
                    bias_t.numel() == out_channels,
                "deconv_patch: bias must be a CUDA tensor of dtype input.dtype and shape [Cout]");
  }

  ConvTranspose2dParams p;
  // (the channel counts from the weight: input.size(1) == weight.size(0) is checked above)
  fill_weight_params(p, weight, stride, padding, dilation, groups);
  at::Tensor x = input;  // what the kernel reads: the input, or its channels_last copy
  p.input = x.data_ptr();
  copy_strides(x, p.in_stride);
  p.bias = bias_t.defined() ? bias_t.data_ptr() : nullptr;
  p.output = output.data_ptr();
  p.batch = input.size(0);
  p.in_h = input.size(2);
  p.in_w = input.size(3);
  p.out_h = out_h;
  p.out_w = out_w;
  copy_strides(output, p.out_stride);
  p.out_channels_last = cl;
  p.epi.scale = channel_vector(scale, out_channels, input, "scale");
  p.epi.shift = channel_vector(shift, out_channels, input, "shift");
  p.epi.activation = static_cast<Activation>(activation);
  p.epi.negative_slope = (float)negative_slope;

  UnitCall call = unit_call(kind, allow_tf32, config);
  // A family that reads 16-byte channel rows gets a channels_last copy of other layouts, where
  // a group's channels fill whole rows.
  const int64_t per_16_bytes = 16 / input.element_size();  // channels in one 16-byte row chunk
  if ((input.size(1) / groups) % per_16_bytes == 0 &&
      !input.is_contiguous(at::MemoryFormat::ChannelsLast) && unit.reads_rows(p, call)) {
    // This thread's reused buffer for the stream where it can (no allocation per call), else a
    // fresh channels_last copy.
    if (const void* relaid = relayout_into_workspace(input, call.stream)) {
      const int64_t c = input.size(1), h = input.size(2), w = input.size(3);
      p.input = relaid;
      p.in_stride[0] = c * h * w;
      p.in_stride[1] = 1;
      p.in_stride[2] = w * c;
      p.in_stride[3] = c;
    } else {
      x = channels_last_copy(input, call.stream);
      p.input = x.data_ptr();
      copy_strides(x, p.in_stride);
    }
  }
  // The workspace first: a family whose GEMM writes into it asks that GEMM about the call
  // (gemm_col2im), and the GEMM checks its output.
  const at::Tensor workspace = unit_workspace(unit, p, call, input.options());
  refuse_unless(unit.supports(p, call), "the ", unit.name, " kernel does not support this call");
  if (unit.reads_packed(call)) {
    // pack_weight's output for this call: the right size, on the input's device.
    TORCH_CHECK(packed.has_value() && packed->defined() && packed->is_cuda() &&
                    packed->device() == input.device() && packed->is_contiguous() &&
                    packed->numel() * packed->element_size() == unit.packed_weight_bytes(p, call),
                "deconv_patch: ", unit.name, " needs the packed weight from pack_weight()");
    call.packed = packed->data_ptr();
  }
  const cudaError_t err = unit.launch(p, call);
  TORCH_CHECK(err == cudaSuccess, "deconv_patch: ", unit.name, " kernel launch failed: ",
              cudaGetErrorString(err));
  return output;
}

// Whether family `family_code` takes a layer's weight whatever the input (its weight_fits): for
// gemm_out_tile, that the weights of all channels fit its smallest tile's shared memory at once.
// Weight sizes (dense), dtype ("float32", "float16" or "bfloat16") and hyperparameters on CUDA
// device `device_index`; the planner passes sizes, not a tensor, so that planning stays free of
// tensor data (fake and wrapped tensors plan too).
bool weight_fits(int64_t family_code, int64_t device_index, const std::string& dtype,
                 at::IntArrayRef weight_sizes, at::IntArrayRef stride, at::IntArrayRef padding,
                 at::IntArrayRef dilation, int64_t groups, bool allow_tf32) {
  const FamilyUnit& unit = family_unit(family_code, kEveryActivation, kEveryKind);
  TORCH_CHECK(weight_sizes.size() == 4, "deconv_patch: weight_fits takes 4 weight sizes");
  ScalarKind kind;
  if (dtype == "float32") kind = ScalarKind::kFloat32;
  else if (dtype == "float16") kind = ScalarKind::kFloat16;
  else if (dtype == "bfloat16") kind = ScalarKind::kBFloat16;
  else TORCH_CHECK(false, "deconv_patch: weight_fits: unknown dtype ", dtype);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
  const int64_t kh = weight_sizes[2], kw = weight_sizes[3];
  const int64_t dense[4] = {weight_sizes[1] * kh * kw, kh * kw, kw, 1};
  ConvTranspose2dParams p;
  fill_weight_geometry(p, weight_sizes, dense, stride, padding, dilation, groups);
  return unit.weight_fits(p, unit_call(kind, allow_tf32, -1));
}

// A family's tile config names, in config order; None for configs its unit leaves unnamed (the
// registry names them, and the count is checked against it).
std::vector<c10::optional<std::string>> config_names(int64_t family_code) {
  const FamilyUnit& unit = family_unit(family_code, kEveryActivation, kEveryKind);
  std::vector<c10::optional<std::string>> names;
  for (int i = 0; i < unit.num_configs(); ++i) {
    const char* name = unit.config_name(i);
    names.emplace_back(name ? c10::optional<std::string>(name) : c10::nullopt);
  }
  return names;
}

}  // namespace deconv_patch
