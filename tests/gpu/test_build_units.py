"""The kernel families' build units on the GPU (deconv_patch/kernels/extension.py): a process whose
calls run one family loads the core and that family's unit only, computes the right result
through it, and a call to a family whose unit it has not loaded is the binding's error, never
a kernel launch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert result["registered"] == ["direct", "gemm_kxs"]  # (direct: the core's own family)
    assert f"family code {BY_NAME['grouped'].code} is not loaded" in result["error"]
    assert result["finite"] and result["max_err"] <= 1e-2 * result["scale"], result
