// Prepared calls: the per-geometry work of the Python layer done once, so that a repeated call
// is one Python -> C++ hop with three tensor arguments (measured on the H100 host: the Python
// closure + packed-weight lookup + 18-argument binding call cost 12-23 us per call, the same
// order as a small layer's GPU time).
//
//   PreparedCall    one kernel variant with its hyperparameters, output layout, TF32 flag and
//                   epilogue fixed (deconv_patch/ops.py kernel_call makes them). It keeps the
//                   packed weight it last used and asks Python's cache (`repack`, shared by all
//                   geometries of a weight) for a fresh one when the weight tensor, its storage or
//                   its version counter changes; inside a CUDA graph being captured or warmed up
//                   it packs per call.
//                   A call autograd records runs it as a node whose backward is the
//                   planner's per gradient: ATen's, or the direct, tiled or mma backward kernels
//                   (binding/recorded_call.cpp).
//   ModuleFastPath  a FastConvTranspose2d's last call geometry. An identical call (same sizes,
//                   strides, dtypes, devices, cuDNN flags, TF32 settings) made where the
//                   module's Python path would take the same branch (no dispatch or
//                   torch-function mode, no functorch transform, no tracer; autocast as armed,
//                   its casts made as ATen's) runs the planned PyTorch convolution or the
//                   PreparedCall directly (recorded, where autograd records the call and the
//                   module runs kernels in training; PyTorch's convolution where it records a
//                   call that does not train on ours). Anything else returns None and the
//                   module's Python path (which plans and re-arms it) runs.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Context.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>
#include <ATen/ops/conv_transpose2d.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include "binding/direct_backward_call.hpp"
#include "binding/kept_buffers.hpp"
#include "binding/prepared_call.hpp"
#include "binding/recorded_call.hpp"
#include "binding/tf32_settings.hpp"
#include "binding/torch_binding.hpp"

namespace deconv_patch {
namespace py = pybind11;
namespace {

using Ints = std::vector<int64_t>;
using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

// A weight as a packed copy was made from: the tensor (a weak reference keeps its TensorImpl
// allocation alive, so a different tensor can never reuse its address), its version and data.
// Inference tensors have no version counter: no copy of theirs is ever reused.
struct WeightSeen {
  std::optional<WeakImpl> impl;
  int64_t version = 0;
  const void* data = nullptr;
};
WeightSeen seen(const at::Tensor& weight) {
  if (weight.is_inference()) return {};
  return {WeakImpl(weight.getIntrusivePtr()), weight._version(), weight.data_ptr()};
}
bool same_weight(const at::Tensor& weight, const WeightSeen& s) {
  return s.impl.has_value() && !weight.is_inference() &&
         s.impl->_unsafe_get_target() == weight.unsafeGetTensorImpl() &&
         weight._version() == s.version && weight.data_ptr() == s.data;
}

class PreparedCall {
 public:
  PreparedCall(int64_t family, int64_t config, Ints stride, Ints padding, Ints output_padding,
               Ints dilation, int64_t groups, bool channels_last, bool allow_tf32,
               c10::optional<at::Tensor> scale, c10::optional<at::Tensor> shift,
               int64_t activation, double negative_slope, py::object repack,
               int64_t grad_input_kernel, int64_t weight_grad_kernel)
      : family_(family), config_(config),
        hyper_{std::move(stride), std::move(padding), std::move(output_padding),
               std::move(dilation), groups,
               gradient_kernel(/*of_input=*/true, grad_input_kernel),
               gradient_kernel(/*of_input=*/false, weight_grad_kernel)},
        channels_last_(channels_last),
        allow_tf32_(allow_tf32), scale_(std::move(scale)), shift_(std::move(shift)),
        activation_(activation), negative_slope_(negative_slope), repack_(std::move(repack)) {}

  // (input, weight, bias, out=None) -> output; a 3-D input is one unbatched sample.
  at::Tensor operator()(const at::Tensor& input, const at::Tensor& weight,
                        const c10::optional<at::Tensor>& bias,
                        const c10::optional<at::Tensor>& out) {
    return run(input, weight, bias, out, /*recorded=*/false);
  }

  // The same call recorded by autograd (a training step's forward); only for a call without an
  // epilogue, whose backward is the convolution's alone.
  at::Tensor recorded(const at::Tensor& input, const at::Tensor& weight,
                      const c10::optional<at::Tensor>& bias) {
    TORCH_CHECK(plain_epilogue(), "deconv_patch: a PreparedCall with a fused epilogue has no "
                "recorded form");
    const ConvForward forward = [this](const at::Tensor& x, const at::Tensor& w,
                                       const c10::optional<at::Tensor>& b) {
      return run(x, w, b, c10::nullopt, /*recorded=*/true);
    };
    return recorded_conv_transpose2d(forward, input, weight, bias, hyper_);
  }

  // No scale, shift or activation: the output is the convolution's.
  bool plain_epilogue() const {
    return activation_ == 0 && !scale_.has_value() && !shift_.has_value();
  }

 private:
  at::Tensor run(const at::Tensor& input, const at::Tensor& weight,
                 const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& out,
                 bool recorded) {
    const bool unbatched = input.dim() == 3;
    c10::optional<at::Tensor> out4 = out;
    if (unbatched && out.has_value() && out->defined()) out4 = out->unsqueeze(0);
    c10::optional<at::Tensor> packed;
    if (!repack_.is_none()) packed = packed_for(weight, recorded);
    at::Tensor y = conv_transpose2d_forward(
        family_, unbatched ? input.unsqueeze(0) : input, weight, bias, hyper_.stride,
        hyper_.padding, hyper_.output_padding, hyper_.dilation, hyper_.groups, channels_last_,
        allow_tf32_, out4, scale_, shift_, activation_, negative_slope_, packed, config_);
    return unbatched ? y.squeeze(0) : y;
  }

  // The packed copy of `weight`, re-asked from Python when the weight tensor, its storage or its
  // version differs from the last call's (WeightSeen; an inference tensor's every call).
  // A recorded call (training) packs here, not through Python's cache: its weight changes every
  // step (an optimizer step, or autocast's new cast), so no shared copy would be reused, and the
  // trip through Python cost more than a small layer's forward.
  // While a CUDA graph is being captured the pack goes into the graph, call by call: every replay
  // packs the weight as it is at that replay (an in-place update between replays -
  // load_state_dict, an EMA or optimizer step - bumps no counter a graph could check), and the
  // buffer is the call's alone. Where a buffer may not be kept (binding/kept_buffers.hpp: a
  // graph's warm-up) a changed weight is packed for the call alone too.
  // A packed copy is read only on the stream it was packed on (Python's cache keeps one per
  // stream): another stream could read it before the pack ran, or after the caching allocator,
  // which orders a freed block's reuse by the stream that made it, handed its memory out again.
  at::Tensor packed_for(const at::Tensor& weight, bool recorded) {
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(weight.get_device()).stream();
    if (stream_capturing(stream)) return pack(weight);
    if (packed_.defined() && stream == packed_stream_ && same_weight(weight, seen_))
      return packed_;
    if (!may_keep_buffers(stream)) return pack(weight);
    packed_ = recorded ? pack(weight) : repack_(weight).cast<at::Tensor>();
    seen_ = seen(weight);
    packed_stream_ = stream;
    return packed_;
  }

  // `weight` packed here, in C++, past Python's shared cache.
  at::Tensor pack(const at::Tensor& weight) const {
    return pack_weight(family_, weight.detach(), hyper_.stride, hyper_.padding,
                       hyper_.output_padding, hyper_.dilation, hyper_.groups, allow_tf32_);
  }

  const int64_t family_;  // the registry's code (binding/family_units.hpp)
  const int64_t config_;
  const ConvTransposeHyper hyper_;  // hyperparameters, and who computes a recorded call's grads
  const bool channels_last_, allow_tf32_;
  const c10::optional<at::Tensor> scale_, shift_;
  const int64_t activation_;
  const double negative_slope_;
  const py::object repack_;  // None: the variant reads the weight as it is
  at::Tensor packed_;
  cudaStream_t packed_stream_ = nullptr;  // the stream packed_ was made on
  WeightSeen seen_;
};

// Sizes, strides, dtype and device of a tensor, compared on every fast-path call.
struct TensorShape {
  Ints sizes, strides;
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;

  explicit TensorShape(const at::Tensor& t)
      : sizes(t.sizes().vec()), strides(t.strides().vec()), dtype(t.scalar_type()),
        device(t.device()) {}

  bool matches(const at::Tensor& t) const {
    return t.scalar_type() == dtype && t.device() == device && t.sizes().equals(sizes) &&
           t.strides().equals(strides);
  }
};

// Whether a tensor takes part in a mechanism that must see the call as PyTorch ops (a Python
// subclass's __torch_dispatch__, a functorch wrapper).
bool is_wrapped(const at::Tensor& t) {
  const c10::DispatchKeySet keys = t.key_set();
  return keys.has(c10::DispatchKey::Python) || keys.has(c10::DispatchKey::FuncTorchBatched) ||
         keys.has(c10::DispatchKey::FuncTorchGradWrapper);
}

class ModuleFastPath {
 public:
  // Armed under CUDA autocast, `input`, `weight` and `bias` are the tensors after its casts.
  ModuleFastPath(const py::object& call, const at::Tensor& input, const at::Tensor& weight,
                 const c10::optional<at::Tensor>& bias, Ints stride, Ints padding,
                 Ints output_padding, Ints dilation, int64_t groups, bool record,
                 bool planned_kernel)
      : call_(call.is_none() ? nullptr : call.cast<std::shared_ptr<PreparedCall>>()),
        input_(input), weight_(weight),
        bias_(bias.has_value() && bias->defined() ? std::optional<TensorShape>(*bias)
                                                  : std::nullopt),
        stride_(std::move(stride)), padding_(std::move(padding)),
        output_padding_(std::move(output_padding)), dilation_(std::move(dilation)),
        groups_(groups), record_(record), planned_kernel_(planned_kernel),
        cudnn_enabled_(at::globalContext().userEnabledCuDNN()),
        allow_tf32_(conv_allows_tf32(at::globalContext())),
        matmul_tf32_(matmul_allows_tf32(at::globalContext())),
        deterministic_(deterministic_convolutions(at::globalContext())),
        benchmark_(at::globalContext().benchmarkCuDNN()),
        autocast_(at::autocast::is_autocast_enabled(at::kCUDA)),
        autocast_dtype_(at::autocast::get_autocast_dtype(at::kCUDA)) {}

  // The output, or None when this call is not the armed geometry and context.
  py::object operator()(py::handle input, py::handle weight, py::handle bias) const {
    // Exactly torch.Tensor / nn.Parameter: a subclass may override __torch_function__.
    if (!THPVariable_CheckExact(input.ptr()) || !THPVariable_CheckExact(weight.ptr()) ||
        !(bias.is_none() || THPVariable_CheckExact(bias.ptr())) ||
        bias.is_none() == bias_.has_value()) {
      return py::none();
    }
    if (!context_unchanged()) return py::none();
    at::Tensor x = THPVariable_Unpack(input.ptr());
    at::Tensor w = THPVariable_Unpack(weight.ptr());
    c10::optional<at::Tensor> b;
    if (!bias.is_none()) b = THPVariable_Unpack(bias.ptr());
    if (autocast_) {  // what ATen's autocast hands conv_transpose2d (the module's Python does too)
      x = autocast_cast(x, autocast_dtype_);
      w = autocast_cast(w, autocast_dtype_);
      if (b.has_value()) b = autocast_cast(*b, autocast_dtype_);
    }
    if (!input_.matches(x) || !weight_.matches(w) || (b.has_value() && !bias_->matches(*b))) {
      return py::none();
    }
    if (is_wrapped(x) || is_wrapped(w) || (b.has_value() && is_wrapped(*b))) return py::none();
    at::Tensor y;
    const bool recorded = planned_kernel_ && records_grad(x, w, b);
    if (!planned_kernel_ || (recorded && !record_)) {
      // PyTorch's convolution: the plan, or a recorded call that does not train on ours (a
      // kernel plan armed without a prepared call comes from such a call, with no epilogue)
      if (call_ != nullptr && !call_->plain_epilogue()) return py::none();
      y = at::conv_transpose2d(x, w, b, stride_, padding_, output_padding_, groups_, dilation_);
    } else if (call_ == nullptr) {
      return py::none();  // (no prepared call yet: the module's Python path makes one)
    } else if (recorded) {
      if (!call_->plain_epilogue()) return py::none();
      y = call_->recorded(x, w, b);
    } else {
      y = (*call_)(x, w, b, c10::nullopt);
    }
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(y)));
  }

 private:
  // Backend flags as armed, and nothing active that must see PyTorch ops.
  bool context_unchanged() const {
    const at::Context& ctx = at::globalContext();
    return ctx.userEnabledCuDNN() == cudnn_enabled_ && conv_allows_tf32(ctx) == allow_tf32_ &&
           matmul_allows_tf32(ctx) == matmul_tf32_ && ctx.benchmarkCuDNN() == benchmark_ &&
           deterministic_convolutions(ctx) == deterministic_ &&
           at::autocast::is_autocast_enabled(at::kCUDA) == autocast_ &&
           (!autocast_ || at::autocast::get_autocast_dtype(at::kCUDA) == autocast_dtype_) &&
           c10::impl::TorchDispatchModeTLS::stack_len() == 0 &&
           at::impl::PythonTorchFunctionTLS::stack_len() == 0 &&
           !c10::impl::tls_is_dispatch_key_included(
               c10::DispatchKey::FuncTorchDynamicLayerFrontMode) &&
           !torch::jit::tracer::isTracing();
  }

  const std::shared_ptr<PreparedCall> call_;  // null: PyTorch's convolution is the plan
  const TensorShape input_, weight_;
  const std::optional<TensorShape> bias_;
  const Ints stride_, padding_, output_padding_, dilation_;
  const int64_t groups_;
  const bool record_;  // calls autograd records run the kernel (the module's kernels_in_training)
  const bool planned_kernel_;  // the plan is a kernel of ours (call_ may still be null)
  const bool cudnn_enabled_, allow_tf32_, matmul_tf32_, deterministic_, benchmark_;
  const bool autocast_;
  const at::ScalarType autocast_dtype_;
};

}  // namespace

ConvForward prepared_call_forward(const py::handle& call) {
  std::shared_ptr<PreparedCall> prepared = call.cast<std::shared_ptr<PreparedCall>>();
  return [prepared](const at::Tensor& input, const at::Tensor& weight,
                    const c10::optional<at::Tensor>& bias) {
    return (*prepared)(input, weight, bias, c10::nullopt);
  };
}

void bind_prepared_call(py::module& m) {
  py::class_<PreparedCall, std::shared_ptr<PreparedCall>>(
      m, "PreparedCall", "One kernel family and config prepared for calls of one geometry")
      .def(py::init<int64_t, int64_t, Ints, Ints, Ints, Ints, int64_t, bool, bool,
                    c10::optional<at::Tensor>, c10::optional<at::Tensor>, int64_t, double,
                    py::object, int64_t, int64_t>(),
           py::arg("family"), py::arg("config"), py::arg("stride"), py::arg("padding"),
           py::arg("output_padding"), py::arg("dilation"), py::arg("groups"),
           py::arg("channels_last"), py::arg("allow_tf32"), py::arg("scale"), py::arg("shift"),
           py::arg("activation"), py::arg("negative_slope"), py::arg("repack"),
           py::arg("grad_input_kernel") = 0, py::arg("weight_grad_kernel") = 0)
      .def("__call__", &PreparedCall::operator(), py::arg("input"), py::arg("weight"),
           py::arg("bias") = py::none(), py::arg("out") = py::none())
      .def("recorded", &PreparedCall::recorded, py::arg("input"), py::arg("weight"),
           py::arg("bias") = py::none(),
           "The call as autograd records it: ATen's convolution backward")
      .def_property_readonly("plain_epilogue", &PreparedCall::plain_epilogue);
  py::class_<ModuleFastPath>(m, "ModuleFastPath",
                             "A FastConvTranspose2d's last call geometry, run without Python")
      .def(py::init<const py::object&, const at::Tensor&, const at::Tensor&,
                    const c10::optional<at::Tensor>&, Ints, Ints, Ints, Ints, int64_t, bool,
                    bool>(),
           py::arg("call"), py::arg("input"), py::arg("weight"), py::arg("bias"),
           py::arg("stride"), py::arg("padding"), py::arg("output_padding"),
           py::arg("dilation"), py::arg("groups"), py::arg("record"),
           py::arg("planned_kernel"))
      .def("__call__", &ModuleFastPath::operator(), py::arg("input"), py::arg("weight"),
           py::arg("bias"));
}

}  // namespace deconv_patch
