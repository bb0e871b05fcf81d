"""The kernel families' build units on the GPU (deconv_patch/kernels/extension.py): a process whose
calls run one family loads the core and that family's unit only, computes the right result
through it, and a call to a family whose unit it has not loaded is the binding's error, never
a kernel launch. On an empty cache, a family builds the unit of the call's element type (and,
compiled per activation, of its activation) only, and a call of another type or fusing another
activation is the binding's error too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from deconv_patch.kernels import BY_NAME

pytestmark = pytest.mark.cuda

ROOT = Path(__file__).resolve().parents[2]

# A fresh process (the on-disk cache is shared, so nothing is compiled twice): gemm_kxs on a
# k == stride layer, checked against float64 PyTorch, then the binding asked for grouped (its
# registry code).
SCRIPT = """
import json, torch
from deconv_patch import kernels, ops
from deconv_patch.kernels import extension, planner
from deconv_patch.arguments import ConvTransposeArgs

x = torch.randn(2, 16, 9, 7, device="cuda")
w = torch.randn(16, 8, 2, 2, device="cuda")
args = ConvTransposeArgs.from_values(stride=2)
y = ops.kernel_call(planner.GEMM_KXS, x, w, args)(x, w, None)
ref = torch.nn.functional.conv_transpose2d(x.double(), w.double(), stride=2)
core = extension.loaded_extension()
registered = core.registered_families()
try:
    core.conv_transpose2d_forward(kernels.BY_NAME["grouped"].code, x, w, None, [2, 2], [0, 0],
                                  [0, 0], [1, 1], 1, False, False)
    error = ""
except RuntimeError as exc:
    error = str(exc)
print(json.dumps({"registered": registered, "error": error, "finite": bool(y.isfinite().all()),
                  "max_err": (y.double() - ref).abs().max().item(),
                  "scale": ref.abs().max().item()}))
"""


def test_a_process_loads_only_the_units_its_calls_use():
    # (-X faulthandler: a crash names the script's line in stderr)
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", SCRIPT],
                          capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # (direct: the core's own family; -1: units holding every activation / element type; the
    # shared cache may hold gemm_kxs's whole unit, which then stands in for its fp32 unit)
    assert result["registered"][0] == ["direct", -1, -1]
    assert result["registered"][1] in (["gemm_kxs", -1, 0], ["gemm_kxs", -1, -1]), result
    assert len(result["registered"]) == 2, result
    assert f"family code {BY_NAME['grouped'].code} is not loaded" in result["error"]
    assert result["finite"] and result["max_err"] <= 1e-2 * result["scale"], result


# A fresh process on an empty cache: gemm_phase_tma (sm_90a, TF32) with a fused ReLU against float64
# PyTorch, then the binding asked for the same family fusing Tanh, and fusing ReLU on bf16, whose
# units it has not built.
ACTIVATION_SCRIPT = """
import json, time, torch
import torch.nn.functional as F
from deconv_patch import ops
from deconv_patch.epilogue import Epilogue
from deconv_patch.kernels import BY_NAME, extension, planner
from deconv_patch.arguments import ConvTransposeArgs

x = torch.randn(2, 64, 9, 7, device="cuda")
w = torch.randn(64, 32, 4, 4, device="cuda")
b = torch.randn(32, device="cuda")
args = ConvTransposeArgs.from_values(stride=2, padding=1)
start = time.perf_counter()
y = ops.kernel_call(planner.GEMM_PHASE_TMA, x, w, args, Epilogue(activation="relu"))(x, w, b)
seconds = time.perf_counter() - start
ref = F.relu(F.conv_transpose2d(x.double(), w.double(), b.double(), 2, 1))
core = extension.loaded_extension()
registered = core.registered_families()
try:
    core.conv_transpose2d_forward(BY_NAME["gemm_phase_tma"].code, x, w, b, [2, 2], [1, 1], [0, 0],
                                  [1, 1], 1, False, True, activation=6)
    error = ""
except RuntimeError as exc:
    error = str(exc)
xb, wb, bb = x.bfloat16(), w.bfloat16(), b.bfloat16()
try:
    core.conv_transpose2d_forward(BY_NAME["gemm_phase_tma"].code, xb, wb, bb, [2, 2], [1, 1],
                                  [0, 0], [1, 1], 1, False, True, activation=1)
    bf16_error = ""
except RuntimeError as exc:
    bf16_error = str(exc)
print(json.dumps({"registered": registered, "error": error, "bf16_error": bf16_error,
                  "seconds": seconds,
                  "max_err": (y.double() - ref).abs().max().item(),
                  "scale": ref.abs().max().item()}))
"""


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="gemm_phase_tma runs on Hopper (sm_90a)")
def test_an_empty_cache_builds_the_unit_of_the_calls_activation_and_type(tmp_path):
    env = {**os.environ, "DECONV_PATCH_CACHE": str(tmp_path)}
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", ACTIVATION_SCRIPT],
                          capture_output=True, text=True, cwd=ROOT, timeout=1200, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    code = BY_NAME["gemm_phase_tma"].code
    # 1: ReLU, 0: fp32
    assert result["registered"] == [["direct", -1, -1], ["gemm_phase_tma", 1, 0]], result
    assert (f"family code {code} is not loaded for activation 6 and element type 0"
            in result["error"]), result
    assert (f"family code {code} is not loaded for activation 1 and element type 2"
            in result["bf16_error"]), result
    assert result["max_err"] <= 1e-2 * result["scale"], result
    print(f"core + gemm_phase_tma@relu.f32 from an empty cache: {result['seconds']:.0f} s")
