// Thin torch binding: checks tensors, allocates the output in the memory format PyTorch would
// return, fills ConvTranspose2dParams and launches on the current stream. Argument validation
// with PyTorch's own error wording happens one layer up (deconv_patch/arguments.py); the checks
// here are a safety net that keeps a bad call from reaching a kernel.
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include "binding/torch_binding.hpp"
#include "common/kernel_family.h"
#include "direct/direct.h"
#include "gemm_col2im/col2im.h"
#include "gemm_kxs/gemm_kxs.h"
#include "gemm_kxs_sm90/gemm_kxs_sm90.h"
#include "gemm_out_tile/gemm_out_tile.h"
#include "gemm_phase/gemm_phase.h"
#include "gemm_phase_tma/gemm_phase_tma.h"
#include "gemm_phase_sm90/gemm_phase_sm90.h"
#include "ffma_tile/ffma_tile.h"
#include "grouped/grouped.h"
#include "common/params.h"
#include "relayout/relayout_channels_last.h"
#include "binding/family_units.hpp"
#include "binding/relayout_workspace.hpp"

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

// The weight-side fields of the params (everything packing depends on).
void fill_weight_params(ConvTranspose2dParams& p, const at::Tensor& weight, at::IntArrayRef stride,
                        at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  fill_weight_geometry(p, weight.sizes(), weight.strides(), stride, padding, dilation, groups);
  p.weight = weight.data_ptr();
}

}  // namespace

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

KernelFamily family_of(int64_t code) {
  TORCH_CHECK(code >= 0 && code < static_cast<int64_t>(KernelFamily::kCount),
              "deconv_patch: unknown kernel family code ", code);
  return static_cast<KernelFamily>(code);
}

// The weight re-laid-out for `family`: gemm_phase, gemm_phase_sm90, gemm_kxs_sm90, gemm_phase_tma
// and gemm_out_tile pack into their tile layouts; gemm_kxs (its tap-major config) takes [Cin,
// KH*KW, Cout/g]; gemm_col2im takes gemm_kxs_sm90's layout of the weight viewed as a 1 x 1 kernel
// (gemm_col2im/col2im.h). Depends on the weight and the hyperparameters only;
// deconv_patch/kernels/packed_weights.py caches it per version.
at::Tensor pack_weight(int64_t family_code, const at::Tensor& weight, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef output_padding,
                       at::IntArrayRef dilation, int64_t groups, bool allow_tf32) {
  const KernelFamily family = family_of(family_code);
  const char* variant = kernel_family_name(family);
  TORCH_CHECK(family == KernelFamily::kGemmPhase || family == KernelFamily::kGemmPhaseSm90 ||
                  family == KernelFamily::kGemmKxs || family == KernelFamily::kGemmKxsSm90 ||
                  family == KernelFamily::kGemmPhaseTma || family == KernelFamily::kGemmOutTile ||
                  family == KernelFamily::kGemmCol2im,
              "deconv_patch: variant ", variant, " reads no packed weight");
  TORCH_CHECK(weight.is_cuda() && weight.dim() == 4, "deconv_patch: weight must be a 4-D CUDA tensor");
  (void)output_padding;
  const ScalarKind kind = scalar_kind(weight);
  const c10::cuda::CUDAGuard guard(weight.device());
  if (family == KernelFamily::kGemmKxs) return weight.flatten(2).transpose(1, 2).contiguous();
  if (family == KernelFamily::kGemmCol2im) {
    // The weight as a 1 x 1 kernel [Cin, KH*KW*Cout] with tap-major columns (gemm_col2im/col2im.h),
    // a contiguous copy made once per weight version, packed for the GEMM that runs it:
    // gemm_kxs_sm90, or gemm_phase_tma's 3xTF32 for fp32 without TF32.
    const at::Tensor flat =
        weight.permute({0, 2, 3, 1}).reshape({weight.size(0), -1, 1, 1}).contiguous();
    const bool three_tf32 = kind == ScalarKind::kFloat32 && !allow_tf32;
    const KernelFamily gemm = three_tf32 ? KernelFamily::kGemmPhaseTma : KernelFamily::kGemmKxsSm90;
    return pack_weight(static_cast<int64_t>(gemm), flat, {1, 1}, {0, 0}, output_padding, {1, 1},
                       groups, allow_tf32);
  }
  ConvTranspose2dParams p;
  fill_weight_params(p, weight, stride, padding, dilation, groups);
  if (family == KernelFamily::kGemmOutTile) {
    const int64_t bytes = family_unit<GemmOutTileUnit>().packed_weight_bytes(p, kind, allow_tf32);
    refuse_unless(bytes > 0, variant, " does not support this weight");
    at::Tensor packed = at::empty({bytes}, weight.options().dtype(at::kByte));
    const cudaError_t err = family_unit<GemmOutTileUnit>().pack_weight(
        p, kind, allow_tf32, packed.data_ptr(), c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "deconv_patch: weight packing failed: ",
                cudaGetErrorString(err));
    return packed;
  }
  if (family == KernelFamily::kGemmKxsSm90 || family == KernelFamily::kGemmPhaseTma) {
    const bool kxs = family == KernelFamily::kGemmKxsSm90;
    const auto kxs_unit = &family_unit<GemmKxsSm90Unit>;  // called only for the family in use
    const auto tma_unit = &family_unit<GemmPhaseTmaUnit>;
    const int64_t bytes = kxs ? kxs_unit().packed_weight_bytes(p, kind)
                              : tma_unit().packed_weight_bytes(p, kind, allow_tf32);
    refuse_unless(bytes > 0, variant, " does not support this weight");
    at::Tensor packed = at::empty({bytes}, weight.options().dtype(at::kByte));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    const cudaError_t err =
        kxs ? kxs_unit().pack_weight(p, kind, allow_tf32, packed.data_ptr(), stream)
            : tma_unit().pack_weight(p, kind, allow_tf32, packed.data_ptr(), stream);
    TORCH_CHECK(err == cudaSuccess, "deconv_patch: weight packing failed: ",
                cudaGetErrorString(err));
    return packed;
  }
  const bool sm90 = family == KernelFamily::kGemmPhaseSm90;
  const auto sm90_unit = &family_unit<GemmPhaseSm90Unit>;  // called only for the family in use
  const auto phase_unit = &family_unit<GemmPhaseUnit>;
  const int64_t bytes = sm90 ? sm90_unit().packed_weight_bytes(p, kind)
                             : phase_unit().packed_weight_bytes(p, kind);
  at::Tensor packed = at::empty({bytes}, weight.options().dtype(at::kByte));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const cudaError_t err =
      sm90 ? sm90_unit().pack_weight(p, kind, allow_tf32, packed.data_ptr(), stream)
           : phase_unit().pack_weight(p, kind, allow_tf32, packed.data_ptr(), stream);
  TORCH_CHECK(err == cudaSuccess, "deconv_patch: weight packing failed: ", cudaGetErrorString(err));
  return packed;
}

// Runs one kernel family (common/kernel_family.h) with the fused epilogue in (scale, shift,
// activation); the planner (Python) has chosen it. config: the tile config of the packed-weight
// GEMMs and of ffma_tile (-1: the kernel's choice); for gemm_kxs 1 selects tap-major columns,
// whose weight comes from pack_weight(gemm_kxs, ...) in `packed`. A call the family's limits
// exclude throws KernelRefused (PyTorch then runs it); any other failure is an error.
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
  const KernelFamily family = family_of(family_code);
  const char* variant = kernel_family_name(family);
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
  at::Tensor x = input;  // what the kernel reads: the input, or its channels_last copy
  p.input = x.data_ptr();
  copy_strides(x, p.in_stride);
  p.weight = weight.data_ptr();
  p.bias = bias_t.defined() ? bias_t.data_ptr() : nullptr;
  p.output = output.data_ptr();
  p.batch = input.size(0);
  p.in_channels = input.size(1);
  p.in_h = input.size(2);
  p.in_w = input.size(3);
  p.out_channels = out_channels;
  p.out_h = out_h;
  p.out_w = out_w;
  p.groups = groups;
  p.in_per_group = input.size(1) / groups;
  p.out_per_group = weight.size(1);
  p.ph_h = make_axis_phase((int)stride[0], (int)padding[0], (int)dilation[0], (int)kh);
  p.ph_w = make_axis_phase((int)stride[1], (int)padding[1], (int)dilation[1], (int)kw);
  copy_strides(weight, p.w_stride);
  copy_strides(output, p.out_stride);
  p.out_channels_last = cl;
  TORCH_CHECK(activation >= 0 && activation <= (int64_t)Activation::kHardswish,
              "deconv_patch: unknown activation code ", activation);
  p.epi.scale = channel_vector(scale, out_channels, input, "scale");
  p.epi.shift = channel_vector(shift, out_channels, input, "shift");
  p.epi.activation = static_cast<Activation>(activation);
  p.epi.negative_slope = (float)negative_slope;

  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  // gemm_phase gathers its A operand 16 bytes at a time only from channels_last input; for
  // 16-bit NCHW input one re-layout pass (input is the smallest tensor of an up-sampling layer)
  // is cheaper than 2-byte gathers inside the GEMM. gemm_phase_sm90 reads only such input.
  // gemm_kxs_sm90 and gemm_phase_tma load their A operand with TMA (16-byte rows); gemm_kxs_sm90
  // also reads dense 16-bit NCHW input directly (MN-major A) where its build supports that, so
  // it is asked first. gemm_out_tile reads any layout, but NCHW one element at a time: from
  // 1 MiB of input a re-layout pass plus its 16-byte cp.async path is the faster pair
  // (docs/performance/out-tile.md); smaller inputs are read in place.
  const bool reads_rows =
      family == KernelFamily::kGemmKxsSm90 || family == KernelFamily::kGemmPhaseTma ||
      family == KernelFamily::kGemmCol2im ||
      ((family == KernelFamily::kGemmPhase || family == KernelFamily::kGemmPhaseSm90) &&
       kind != ScalarKind::kFloat32) ||
      (family == KernelFamily::kGemmOutTile &&
       input.numel() * input.element_size() >= (int64_t{1} << 20));
  const int64_t per_16_bytes = 16 / input.element_size();  // channels in one 16-byte row chunk
  if (reads_rows && (input.size(1) / groups) % per_16_bytes == 0 &&
      !input.is_contiguous(at::MemoryFormat::ChannelsLast) &&
      !(family == KernelFamily::kGemmKxsSm90 &&
        family_unit<GemmKxsSm90Unit>().supports(p, kind, allow_tf32))) {
    // This thread's reused buffer for the stream where it can (no allocation per call), else a
    // fresh channels_last copy.
    if (const void* relaid = relayout_into_workspace(input, stream)) {
      const int64_t c = input.size(1), h = input.size(2), w = input.size(3);
      p.input = relaid;
      p.in_stride[0] = c * h * w;
      p.in_stride[1] = 1;
      p.in_stride[2] = w * c;
      p.in_stride[3] = c;
    } else {
      x = channels_last_copy(input, stream);
      p.input = x.data_ptr();
      copy_strides(x, p.in_stride);
    }
  }

  cudaError_t err;
  // A packed weight of the right size, dtype and device (pack_weight's output for this call).
  auto check_packed = [&](int64_t bytes) {
    TORCH_CHECK(packed.has_value() && packed->defined() && packed->is_cuda() &&
                    packed->device() == input.device() && packed->is_contiguous() &&
                    packed->numel() * packed->element_size() == bytes,
                "deconv_patch: ", variant, " needs the packed weight from pack_weight()");
  };
  // gemm_kxs_sm90 on `q` (the call's params, or gemm_col2im's GEMM), after its checks;
  // f32_out: 16-bit operands writing fp32 (gemm_col2im's 16-bit GEMM, fewer configs).
  auto launch_kxs_sm90 = [&](const ConvTranspose2dParams& q, bool f32_out) {
    refuse_unless(family_unit<GemmKxsSm90Unit>().supports(q, kind, allow_tf32), "the ", variant,
                  " kernel does not support this call");
    check_packed(family_unit<GemmKxsSm90Unit>().packed_weight_bytes(q, kind));
    const int configs =
        f32_out ? kGemmKxsSm90F32OutConfigs : family_unit<GemmKxsSm90Unit>().num_configs();
    TORCH_CHECK(config >= -1 && config < configs,
                "deconv_patch: ", variant, " has no tile config ", config);
    return f32_out ? family_unit<GemmKxsSm90Unit>().launch_f32_out(q, kind, packed->data_ptr(),
                                                                   stream, (int)config)
                   : family_unit<GemmKxsSm90Unit>().launch(q, kind, allow_tf32,
                                                           packed->data_ptr(), stream, (int)config);
  };
  // gemm_phase_tma on `q` (the call's params, or gemm_col2im's GEMM) in `q_tf32` mode, after
  // its checks.
  auto launch_phase_tma = [&](const ConvTranspose2dParams& q, bool q_tf32) {
    refuse_unless(family_unit<GemmPhaseTmaUnit>().supports(q, kind, q_tf32), "the ", variant,
                  " kernel does not support this call");
    check_packed(family_unit<GemmPhaseTmaUnit>().packed_weight_bytes(q, kind, q_tf32));
    TORCH_CHECK(config >= -1 && config < family_unit<GemmPhaseTmaUnit>().num_configs(),
                "deconv_patch: ", variant, " has no tile config ", config);
    return family_unit<GemmPhaseTmaUnit>().launch(q, kind, q_tf32, packed->data_ptr(), stream,
                                                  (int)config);
  };
  switch (family) {
    case KernelFamily::kDirect:
      err = launch_conv_transpose2d_direct(p, kind, stream);
      break;
    case KernelFamily::kGrouped:
      refuse_unless(family_unit<GroupedUnit>().supports(p, kind),
                    "the grouped kernel does not support this call");
      err = family_unit<GroupedUnit>().launch(p, kind, stream);
      break;
    case KernelFamily::kFfmaTile:
      TORCH_CHECK(config >= -1 && config < family_unit<FfmaTileUnit>().num_configs(),
                  "deconv_patch: ffma_tile has no tile config ", config);
      refuse_unless(family_unit<FfmaTileUnit>().supports(p, kind, (int)config),
                    "the ffma_tile kernel does not support this call");
      // fp32 without TF32 sums each channel's taps apart (error as PyTorch's on deep sums).
      err = family_unit<FfmaTileUnit>().launch(p, kind, (int)config,
                                              kind == ScalarKind::kFloat32 && !allow_tf32, stream);
      break;
    case KernelFamily::kGemmKxs: {
      TORCH_CHECK(config >= -1 && config <= 1, "deconv_patch: gemm_kxs has no config ", config);
      const bool tap_major = config == 1;
      refuse_unless(family_unit<GemmKxsUnit>().supports(p, kind, tap_major),
                    "the gemm_kxs kernel does not support this call");
      const void* tap_major_weight = nullptr;
      if (tap_major) {
        check_packed(weight.numel() * weight.element_size());
        TORCH_CHECK(packed->scalar_type() == weight.scalar_type(),
                    "deconv_patch: gemm_kxs's tap-major weight has the weight's dtype");
        tap_major_weight = packed->data_ptr();
      }
      err = family_unit<GemmKxsUnit>().launch(p, kind, allow_tf32, tap_major_weight, stream);
      break;
    }
    case KernelFamily::kGemmKxsSm90:
      err = launch_kxs_sm90(p, false);
      break;
    case KernelFamily::kGemmCol2im: {
      // One GEMM over every tap: gemm_kxs_sm90 runs the layer as a 1 x 1 kernel with KH*KW*Cout
      // output channels (no bias, no epilogue) into the fp32 [N*H*W, KH*KW*Cout] matrix `cols`
      // (16-bit operands: its fp32-output kernels, so the sum of taps is rounded once), then col2im
      // sums each output pixel's taps and applies the epilogue (gemm_col2im/col2im.h). fp32 without
      // TF32 runs the GEMM as gemm_phase_tma's 3xTF32 instead (`config` is then one of its
      // configs). One group.
      refuse_unless(groups == 1, "the gemm_col2im kernel does not support this call (groups 1)");
      const bool three_tf32 = kind == ScalarKind::kFloat32 && !allow_tf32;
      const int64_t ncol = kh * kw * weight.size(1);
      at::Tensor cols = at::empty({p.batch, ncol, p.in_h, p.in_w},
                                  input.options().dtype(at::kFloat).memory_format(
                                      at::MemoryFormat::ChannelsLast));
      ConvTranspose2dParams q = p;
      // pack_weight's dense [Cin, ncol, 1, 1] copy, as a stride-1 layer
      fill_weight_geometry(q, {p.in_channels, ncol, 1, 1}, {ncol, 1, 1, 1}, {1, 1}, {0, 0},
                           {1, 1}, 1);
      q.bias = nullptr;
      q.epi = EpilogueParams{};
      q.output = cols.data_ptr();
      q.out_h = p.in_h;
      q.out_w = p.in_w;
      copy_strides(cols, q.out_stride);
      q.out_channels_last = true;
      err = three_tf32 ? launch_phase_tma(q, false)
                       : launch_kxs_sm90(q, kind != ScalarKind::kFloat32);
      if (err == cudaSuccess)
        err = family_unit<GemmCol2imUnit>().launch(p, cols.data_ptr<float>(), kind, stream);
      break;
    }
    case KernelFamily::kGemmPhaseTma:
      err = launch_phase_tma(p, allow_tf32);
      break;
    case KernelFamily::kGemmOutTile:
      refuse_unless(family_unit<GemmOutTileUnit>().supports(p, kind, allow_tf32),
                    "the gemm_out_tile kernel does not support this call");
      check_packed(family_unit<GemmOutTileUnit>().packed_weight_bytes(p, kind, allow_tf32));
      TORCH_CHECK(config >= -1 && config < family_unit<GemmOutTileUnit>().num_configs(),
                  "deconv_patch: gemm_out_tile has no tile config ", config);
      err = family_unit<GemmOutTileUnit>().launch(p, kind, allow_tf32, packed->data_ptr(),
                                                  (int)config, stream);
      break;
    case KernelFamily::kGemmPhaseSm90:
      refuse_unless(family_unit<GemmPhaseSm90Unit>().supports(p, kind, allow_tf32),
                    "the gemm_phase_sm90 kernel does not support this call");
      check_packed(family_unit<GemmPhaseSm90Unit>().packed_weight_bytes(p, kind));
      TORCH_CHECK(config >= -1 && config < family_unit<GemmPhaseSm90Unit>().num_configs(),
                  "deconv_patch: gemm_phase_sm90 has no tile config ", config);
      err = family_unit<GemmPhaseSm90Unit>().launch(p, kind, allow_tf32, packed->data_ptr(),
                                                    stream, (int)config);
      break;
    case KernelFamily::kGemmPhase:
      refuse_unless(family_unit<GemmPhaseUnit>().supports(p, kind, allow_tf32),
                    "the gemm_phase kernel does not support this call");
      check_packed(family_unit<GemmPhaseUnit>().packed_weight_bytes(p, kind));
      TORCH_CHECK(config >= -1 && config < family_unit<GemmPhaseUnit>().num_configs(),
                  "deconv_patch: gemm_phase has no tile config ", config);
      err = family_unit<GemmPhaseUnit>().launch(p, kind, allow_tf32, packed->data_ptr(),
                                               (int)config, stream);
      break;
    default:
      TORCH_CHECK(false, "deconv_patch: unknown kernel family ", family_code);
  }
  TORCH_CHECK(err == cudaSuccess, "deconv_patch: ", variant, " kernel launch failed: ",
              cudaGetErrorString(err));
  return output;
}

// Whether gemm_out_tile can run a layer with a weight of these sizes (dense) and dtype
// ("float32", "float16" or "bfloat16") and these hyperparameters on CUDA device `device_index`,
// whatever the input size, with the weights of all channels in shared memory at once (one
// channel block): gemm_out_tile_weight_fits. The planner asks before making gemm_out_tile a
// layer's untimed default; it passes sizes, not a tensor, so that planning stays free of tensor
// data (fake and wrapped tensors plan too).
bool gemm_out_tile_fits(int64_t device_index, const std::string& dtype,
                        at::IntArrayRef weight_sizes, at::IntArrayRef stride,
                        at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                        bool allow_tf32) {
  TORCH_CHECK(weight_sizes.size() == 4, "deconv_patch: gemm_out_tile_fits takes 4 weight sizes");
  ScalarKind kind;
  if (dtype == "float32") kind = ScalarKind::kFloat32;
  else if (dtype == "float16") kind = ScalarKind::kFloat16;
  else if (dtype == "bfloat16") kind = ScalarKind::kBFloat16;
  else TORCH_CHECK(false, "deconv_patch: gemm_out_tile_fits: unknown dtype ", dtype);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
  const int64_t kh = weight_sizes[2], kw = weight_sizes[3];
  const int64_t dense[4] = {weight_sizes[1] * kh * kw, kh * kw, kw, 1};
  ConvTranspose2dParams p;
  fill_weight_geometry(p, weight_sizes, dense, stride, padding, dilation, groups);
  return family_unit<GemmOutTileUnit>().weight_fits(p, kind, allow_tf32);
}

// `t` as ATen's CUDA autocast hands it to a lower-precision op, through ATen's per-region cast
// cache: a weight is cast once per autocast region, not once per call (and so stays one tensor,
// whose packed copy is then reused).
at::Tensor autocast_cast(const at::Tensor& t, at::ScalarType dtype) {
  return at::autocast::cached_cast(dtype, t, at::kCUDA);
}

}  // namespace deconv_patch

namespace {

// A kernel's tile config names, in config order, from its header's count and name functions
// (the planner's config tuples are checked against them).
std::vector<std::string> config_names(int (*count)(), const char* (*name)(int)) {
  std::vector<std::string> names;
  for (int i = 0; i < count(); ++i) names.emplace_back(name(i));
  return names;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "deconv_patch CUDA kernels";
  py::register_exception<deconv_patch::KernelRefused>(m, "KernelRefused", PyExc_RuntimeError);
  m.def("kernel_family_names", []() {
    std::vector<std::string> names;
    for (int i = 0; i < static_cast<int>(deconv_patch::KernelFamily::kCount); ++i)
      names.emplace_back(deconv_patch::kernel_family_name(
          static_cast<deconv_patch::KernelFamily>(i)));
    return names;
  }, "The kernel families by code (common/kernel_family.h)");
  m.def("conv_transpose2d_forward", &deconv_patch::conv_transpose2d_forward,
        "Transposed convolution with one kernel family", py::arg("family"),
        py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("stride"),
        py::arg("padding"), py::arg("output_padding"), py::arg("dilation"), py::arg("groups"),
        py::arg("channels_last"), py::arg("allow_tf32"), py::arg("out") = py::none(),
        py::arg("scale") = py::none(), py::arg("shift") = py::none(), py::arg("activation") = 0,
        py::arg("negative_slope") = 0.01, py::arg("packed") = py::none(),
        py::arg("config") = -1);
  m.def("register_family", [](int64_t family, uintptr_t table) {
    deconv_patch::register_family_unit(family, table);
  }, "Registers a kernel family's loaded build unit by its table's address "
     "(deconv_patch_unit_<family>(), common/family_unit.h)", py::arg("family"), py::arg("table"));
  m.def("registered_families", &deconv_patch::registered_family_units,
        "The kernel families whose build units are registered, by code");
  deconv_patch::bind_prepared_call(m);
  m.def("channels_last_copy", [](const at::Tensor& input) {
    TORCH_CHECK(input.is_cuda(), "deconv_patch: channels_last_copy takes a CUDA tensor");
    const c10::cuda::CUDAGuard guard(input.device());
    return deconv_patch::channels_last_copy(
        input, c10::cuda::getCurrentCUDAStream().stream());
  }, "A channels_last copy of a 4-D CUDA tensor, as the kernels' input re-layout makes it",
        py::arg("input"));
  m.def("release_relayout_workspaces", &deconv_patch::release_relayout_workspaces,
        "Frees this thread's cached NCHW -> channels_last re-layout buffers");
  m.def("autocast_cast", &deconv_patch::autocast_cast,
        "A tensor cast as CUDA autocast casts it (with autocast's cast cache)", py::arg("tensor"),
        py::arg("dtype"));
  m.def("gemm_phase_num_configs",
        []() { return deconv_patch::family_unit<deconv_patch::GemmPhaseUnit>().num_configs(); },
        "Number of gemm_phase tile configs");
  m.def("gemm_kxs_sm90_num_configs",
        []() { return deconv_patch::family_unit<deconv_patch::GemmKxsSm90Unit>().num_configs(); },
        "Number of gemm_kxs_sm90 tile configs");
  m.def("gemm_phase_tma_config_names", []() {
    return config_names(deconv_patch::family_unit<deconv_patch::GemmPhaseTmaUnit>().num_configs,
                        deconv_patch::family_unit<deconv_patch::GemmPhaseTmaUnit>().config_name);
  }, "gemm_phase_tma's tile config names, in config order");
  m.def("gemm_out_tile_config_names", []() {
    return config_names(deconv_patch::family_unit<deconv_patch::GemmOutTileUnit>().num_configs,
                        deconv_patch::family_unit<deconv_patch::GemmOutTileUnit>().config_name);
  }, "gemm_out_tile's tile config names, in config order");
  m.def("ffma_tile_config_names", []() {
    return config_names(deconv_patch::family_unit<deconv_patch::FfmaTileUnit>().num_configs,
                        deconv_patch::family_unit<deconv_patch::FfmaTileUnit>().config_name);
  }, "ffma_tile's tile config names, in config order");
  m.def("gemm_out_tile_fits", &deconv_patch::gemm_out_tile_fits,
        "Whether gemm_out_tile's smallest tile holds a layer's weights at once (weight sizes, "
        "dtype name, hyperparameters) on a CUDA device", py::arg("device_index"), py::arg("dtype"),
        py::arg("weight_sizes"), py::arg("stride"), py::arg("padding"), py::arg("dilation"),
        py::arg("groups"), py::arg("allow_tf32"));
  m.def("gemm_phase_sm90_num_configs",
        []() { return deconv_patch::family_unit<deconv_patch::GemmPhaseSm90Unit>().num_configs(); },
        "Number of gemm_phase_sm90 tile configs");
  m.def("pack_weight", &deconv_patch::pack_weight,
        "The weight in a family's packed layout", py::arg("family"), py::arg("weight"),
        py::arg("stride"), py::arg("padding"), py::arg("output_padding"), py::arg("dilation"),
        py::arg("groups"), py::arg("allow_tf32"));
}
