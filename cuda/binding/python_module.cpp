// The extension's Python module: the tensor-level entry points (binding/torch_binding.hpp),
// the unit registration (binding/family_units.hpp) and the prepared calls
// (binding/prepared_call.cpp). torch's pybind11 header (with its tensor caster), not torch's
// whole extension header, which would double this file's compile time.
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/utils/pybind.h>

#include "binding/family_units.hpp"
#include "binding/op_kernel.hpp"
#include "binding/direct_backward_call.hpp"
#include "binding/prepared_call.hpp"
#include "binding/relayout_workspace.hpp"
#include "binding/torch_binding.hpp"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "deconv_patch CUDA kernels";
  py::register_exception<deconv_patch::KernelRefused>(m, "KernelRefused", PyExc_RuntimeError);
  m.def("conv_transpose2d_forward", &deconv_patch::conv_transpose2d_forward,
        "Transposed convolution with one kernel family", py::arg("family"),
        py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("stride"),
        py::arg("padding"), py::arg("output_padding"), py::arg("dilation"), py::arg("groups"),
        py::arg("channels_last"), py::arg("allow_tf32"), py::arg("out") = py::none(),
        py::arg("scale") = py::none(), py::arg("shift") = py::none(), py::arg("activation") = 0,
        py::arg("negative_slope") = 0.01, py::arg("packed") = py::none(),
        py::arg("config") = -1);
  m.def("register_family", [](int64_t family, const std::string& name, uintptr_t table,
                              int64_t activation, int64_t kind) {
    deconv_patch::register_family_unit(family, name, table, activation, kind);
  }, "Registers a kernel family's table by its address (deconv_patch_unit_<family>() of its "
     "loaded unit, common/family_unit.h) under the registry's code and name, and the activation "
     "and element type its unit was built for (-1: every one)", py::arg("family"),
     py::arg("name"), py::arg("table"), py::arg("activation") = deconv_patch::kEveryActivation,
     py::arg("kind") = deconv_patch::kEveryKind);
  m.def("registered_families", [] {
    std::vector<std::tuple<std::string, int64_t, int64_t>> units;
    for (const auto& u : deconv_patch::registered_family_units())
      units.emplace_back(u.family, u.activation, u.kind);
    return units;
  }, "The registered units, by family code: (family name, activation, element type; -1 for "
     "every one)");
  m.def("config_names", &deconv_patch::config_names,
        "A registered family's tile config names, in config order (None: unnamed)",
        py::arg("family"));
  deconv_patch::bind_prepared_call(m);
  deconv_patch::bind_op_kernel(m);
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
  m.def("weight_fits", &deconv_patch::weight_fits,
        "Whether a registered family takes a layer's weight whatever the input (weight sizes, "
        "dtype name, hyperparameters) on a CUDA device", py::arg("family"),
        py::arg("device_index"), py::arg("dtype"), py::arg("weight_sizes"), py::arg("stride"),
        py::arg("padding"), py::arg("dilation"), py::arg("groups"), py::arg("allow_tf32"));
  m.def("pack_weight", &deconv_patch::pack_weight,
        "The weight in a family's packed layout", py::arg("family"), py::arg("weight"),
        py::arg("stride"), py::arg("padding"), py::arg("output_padding"), py::arg("dilation"),
        py::arg("groups"), py::arg("allow_tf32"));
  // The backward kernels' gradients, each taking the same arguments.
  using deconv_patch::Gradient;
  using deconv_patch::GradientKernel;
  const auto def_gradient = [&m](const char* name, auto fn, const char* doc) {
    m.def(name, fn, doc, py::arg("input"), py::arg("grad_output"), py::arg("weight"),
          py::arg("stride"), py::arg("padding"), py::arg("dilation"), py::arg("groups"));
  };
  def_gradient("direct_grad_input",
               &deconv_patch::gradient<Gradient::kInput, GradientKernel::kDirect>,
               "conv_transpose2d's input gradient on the direct backward kernels, in the "
               "input's layout; KernelRefused where they do not run");
  def_gradient("tiled_grad_input",
               &deconv_patch::gradient<Gradient::kInput, GradientKernel::kTiled>,
               "conv_transpose2d's input gradient as a GEMM per group on CUDA cores (4 x 8 "
               "outputs a thread), in the input's layout; KernelRefused where it does not run");
  def_gradient("tiled_weight_grad",
               &deconv_patch::gradient<Gradient::kWeight, GradientKernel::kTiled>,
               "conv_transpose2d's weight gradient as a GEMM per group on CUDA cores over pixel "
               "ranges added in order (4 x 4 sums a thread), in the weight's layout, "
               "deterministic; KernelRefused where it does not run");
  def_gradient("mma_grad_input", &deconv_patch::gradient<Gradient::kInput, GradientKernel::kMma>,
               "conv_transpose2d's input gradient as an implicit GEMM per group on tensor cores "
               "(float16, bfloat16; float32 as 3xTF32), in the input's layout; KernelRefused "
               "where it does not run");
  def_gradient("phase_tma_grad_input",
               &deconv_patch::gradient<Gradient::kInput, GradientKernel::kPhaseTma>,
               "conv_transpose2d's input gradient as a strided correlation on gemm_phase_tma's "
               "TMA + wgmma kernel (one group; Hopper; that family's unit registered)");
  def_gradient("mma_weight_grad",
               &deconv_patch::gradient<Gradient::kWeight, GradientKernel::kMma>,
               "conv_transpose2d's weight gradient as a GEMM per group on tensor cores over "
               "pixel ranges added in order (float16, bfloat16; float32 as 3xTF32), in the "
               "weight's layout, deterministic; KernelRefused where it does not run");
  def_gradient("direct_weight_grad",
               &deconv_patch::gradient<Gradient::kWeight, GradientKernel::kDirect>,
               "conv_transpose2d's weight gradient on the direct backward kernels, in the "
               "weight's layout, deterministic; KernelRefused where they do not run");
}
