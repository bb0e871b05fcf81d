// The op's CUDA kernel in C++. torch.ops.deconv_patch.conv_transpose2d's Python kernel plans a
// call geometry once (deconv_patch/kernel_calls.py) and then only looks the plan up, but the
// dispatcher's trip into Python and the lookup made the op cost more host time per call than an
// aten convolution: every call of a compiled graph or an exported program paid it. Once the core
// is loaded, this kernel takes the op's CUDA key (registered over the Python kernel, which stays
// registered beneath it) and keeps, per call geometry, what the Python side said it may: PyTorch's
// convolution or the prepared kernel call. A call it has no entry for, or made inside a
// use_variant block, goes to the Python side (`miss`), which plans, runs and answers
// (output, what to keep, prepared call).
//
// The op's autograd kernel for CUDA is C++ too: torch.library's Python autograd wrapper ran on
// every call, under no_grad as well (tens of microseconds a call: a compiled graph's op cost
// more host time than its kernel). This one goes straight below autograd where no gradient is
// recorded, and records one as the module's training calls do (binding/recorded_call.cpp:
// ATen's convolution_backward) where it is.
#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>

#include <ATen/Context.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/conv_transpose2d.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "binding/op_kernel.hpp"
#include "binding/prepared_call.hpp"
#include "binding/recorded_call.hpp"
#include "binding/tf32_settings.hpp"

namespace deconv_patch {
namespace py = pybind11;
namespace {

// What the Python side lets this cache keep for a geometry (kernel_calls.py: KEEP_*).
constexpr int kKeepNothing = 0, kKeepAten = 1, kKeepCall = 2;
// Geometries kept before the cache starts over (as the Python cache does).
constexpr size_t kCacheLimit = 1024;

// Everything a plan depends on, as the Python key (op_call_key) has it, less the forced
// variant (a call inside a use_variant block never reaches the cache): each tensor's dim,
// sizes, strides, dtype and device; the hyperparameters; cuDNN's flags, cuBLAS's TF32 setting
// and deterministic mode (which of the TF32 settings a call follows: tf32_settings.hpp).
constexpr int kTensorFields = 11;  // dim, 4 sizes, 4 strides, dtype, device index
constexpr int kKeyFields = 3 * kTensorFields + 9 + 5;
using CallKey = std::array<int64_t, kKeyFields>;

struct CallKeyHash {
  size_t operator()(const CallKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (const int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct Entry {
  bool aten = false;
  // The prepared kernel call, where !aten; shared, so that a call in progress keeps it even if
  // the cache starts over meanwhile (a re-pack runs Python, which may call the op again).
  std::shared_ptr<const ConvForward> call;
};

using OpSignature = at::Tensor(const at::Tensor&, const at::Tensor&,
                               const c10::optional<at::Tensor>&, c10::IntArrayRef,
                               c10::IntArrayRef, c10::IntArrayRef, int64_t, c10::IntArrayRef);

// The process's kernel state: the Python side's entry points and the kept plans. Allocated
// once and never freed: it holds Python objects, which must not be released after the
// interpreter has finalized.
struct OpKernelState {
  c10::TypedOperatorHandle<OpSignature> op;  // the op, for calls below autograd
  py::object miss;            // (input, weight, bias, hyperparameters...) -> (out, keep, call)
  py::object forced_variant;  // plan_context's ContextVar of use_variant
  std::unordered_map<CallKey, Entry, CallKeyHash> entries;
  std::unique_ptr<torch::Library> library, autograd_library;
};
OpKernelState* state = nullptr;  // guarded by the GIL

// Writes t's fields at k[at...]; false where the cache does not cover the tensor.
bool put_tensor(CallKey& k, int at, const at::Tensor& t, int min_dim, int max_dim) {
  const int64_t dim = t.dim();
  if (dim < min_dim || dim > max_dim || !t.is_cuda() || t.is_sparse()) return false;
  k[at] = dim;
  for (int64_t i = 0; i < 4; ++i) {
    k[at + 1 + i] = i < dim ? t.size(i) : -1;
    k[at + 5 + i] = i < dim ? t.stride(i) : -1;
  }
  k[at + 9] = static_cast<int64_t>(t.scalar_type());
  k[at + 10] = t.get_device();
  return true;
}

bool put_pair(CallKey& k, int at, c10::IntArrayRef v) {
  if (v.size() != 2) return false;
  k[at] = v[0];
  k[at + 1] = v[1];
  return true;
}

// The call's key, or false where the call is not one the cache covers (the Python side then
// plans it, and raises PyTorch's error for an invalid one).
bool make_key(CallKey& k, const at::Tensor& input, const at::Tensor& weight,
              const c10::optional<at::Tensor>& bias, c10::IntArrayRef stride,
              c10::IntArrayRef padding, c10::IntArrayRef output_padding, int64_t groups,
              c10::IntArrayRef dilation) {
  k.fill(-1);
  if (!put_tensor(k, 0, input, 3, 4) || !put_tensor(k, kTensorFields, weight, 4, 4)) return false;
  if (bias.has_value() && bias->defined() && !put_tensor(k, 2 * kTensorFields, *bias, 1, 1))
    return false;
  int at = 3 * kTensorFields;
  if (!put_pair(k, at, stride) || !put_pair(k, at + 2, padding) ||
      !put_pair(k, at + 4, output_padding) || !put_pair(k, at + 6, dilation))
    return false;
  k[at + 8] = groups;
  const at::Context& ctx = at::globalContext();
  k[at + 9] = ctx.userEnabledCuDNN();
  k[at + 10] = conv_allows_tf32(ctx);
  k[at + 11] = ctx.benchmarkCuDNN();
  k[at + 12] = matmul_allows_tf32(ctx);
  k[at + 13] = deterministic_convolutions(ctx);
  return true;
}

// Whether a use_variant block is open in this thread's (or task's) context.
bool variant_forced() {
  PyObject* value = nullptr;
  if (PyContextVar_Get(state->forced_variant.ptr(), nullptr, &value) != 0) throw py::error_already_set();
  const bool forced = value != nullptr && value != Py_None;
  Py_XDECREF(value);
  return forced;
}

at::Tensor conv_transpose2d_cuda(const at::Tensor& input, const at::Tensor& weight,
                                 const c10::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                 c10::IntArrayRef padding, c10::IntArrayRef output_padding,
                                 int64_t groups, c10::IntArrayRef dilation) {
  // The GIL guards the state, and a prepared call re-packs a changed weight through Python.
  py::gil_scoped_acquire gil;
  CallKey key;
  const bool keyed = make_key(key, input, weight, bias, stride, padding, output_padding, groups,
                              dilation);
  const bool forced = variant_forced();
  if (keyed && !forced) {
    const auto found = state->entries.find(key);
    if (found != state->entries.end()) {
      const Entry e = found->second;
      if (e.aten)
        return at::conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups,
                                    dilation);
      return (*e.call)(input, weight, bias);
    }
  }
  py::tuple answer = state->miss(input, weight, bias, stride.vec(), padding.vec(),
                                 output_padding.vec(), groups, dilation.vec());
  at::Tensor out = answer[0].cast<at::Tensor>();
  const int keep = answer[1].cast<int>();
  if (keyed && !forced && keep != kKeepNothing) {
    if (state->entries.size() >= kCacheLimit) state->entries.clear();
    Entry e;
    e.aten = keep == kKeepAten;
    if (keep == kKeepCall)
      e.call = std::make_shared<const ConvForward>(prepared_call_forward(answer[2]));
    state->entries.emplace(key, std::move(e));
  }
  return out;
}

at::Tensor conv_transpose2d_autograd_cuda(const at::Tensor& input, const at::Tensor& weight,
                                          const c10::optional<at::Tensor>& bias,
                                          c10::IntArrayRef stride, c10::IntArrayRef padding,
                                          c10::IntArrayRef output_padding, int64_t groups,
                                          c10::IntArrayRef dilation) {
  const c10::TypedOperatorHandle<OpSignature> op = state->op;
  if (!records_grad(input, weight, bias)) {
    at::AutoDispatchBelowADInplaceOrView below;
    return op.call(input, weight, bias, stride, padding, output_padding, groups, dilation);
  }
  const ConvTransposeHyper hyper{stride.vec(), padding.vec(), output_padding.vec(),
                                 dilation.vec(), groups};
  const ConvForward forward = [&](const at::Tensor& x, const at::Tensor& w,
                                  const c10::optional<at::Tensor>& b) {
    at::AutoDispatchBelowADInplaceOrView below;
    return op.call(x, w, b, hyper.stride, hyper.padding, hyper.output_padding, hyper.groups,
                   hyper.dilation);
  };
  return recorded_conv_transpose2d(forward, input, weight, bias, hyper);
}

// A handler that drops warnings: registering over the Python kernel is meant, and a torch
// version that warns about an overridden kernel would only alarm users.
struct QuietWarnings : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

// Registers the kernels (once per process): true when this call registered them.
bool install_op_kernel(py::object miss, py::object forced_variant) {
  if (state != nullptr) return false;
  state = new OpKernelState{
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("deconv_patch::conv_transpose2d", "")
          .typed<OpSignature>()};
  state->miss = std::move(miss);
  state->forced_variant = std::move(forced_variant);
  QuietWarnings quiet;
  c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  state->library = std::make_unique<torch::Library>(
      torch::Library::IMPL, "deconv_patch", c10::DispatchKey::CUDA, __FILE__, __LINE__);
  state->library->impl("conv_transpose2d", TORCH_FN(conv_transpose2d_cuda));
  state->autograd_library = std::make_unique<torch::Library>(
      torch::Library::IMPL, "deconv_patch", c10::DispatchKey::AutogradCUDA, __FILE__, __LINE__);
  state->autograd_library->impl("conv_transpose2d", TORCH_FN(conv_transpose2d_autograd_cuda));
  return true;
}

}  // namespace

void bind_op_kernel(py::module& m) {
  m.def("install_op_kernel", &install_op_kernel,
        "Registers the op's C++ CUDA and AutogradCUDA kernels over its Python ones (once per "
        "process; True when this call did). miss(input, weight, bias, stride, padding, "
        "output_padding, groups, dilation) -> (output, keep, prepared call) runs a call the "
        "kernel has no plan for; "
        "forced_variant is use_variant's ContextVar",
        py::arg("miss"), py::arg("forced_variant"));
  m.def("clear_op_kernel_cache", [] {
    if (state != nullptr) state->entries.clear();
  }, "Forgets every plan the op's C++ kernel kept");
  m.def("op_kernel_cache_size", [] {
    return state == nullptr ? 0 : state->entries.size();
  }, "Call geometries the op's C++ kernel answers by itself");
}

}  // namespace deconv_patch
