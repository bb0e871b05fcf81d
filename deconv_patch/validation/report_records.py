"""The records a validation report is made of: the tolerances behind PASS/FAIL (Tolerances, with
dtype_name / ulp) and the dataclasses validate() fills in for each tensor pair, timing, layer,
set of outputs and the environment. ValidationReport (deconv_patch.validation.report) holds them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

import torch


# atol / rtol defaults per dtype: torch.testing.assert_close's, so "mismatch" means what PyTorch
# users already expect from that function.
_DEFAULT_ATOL_RTOL = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-5, 1.3e-6),
    "float16": (1e-5, 1e-3),
    "bfloat16": (1e-5, 1.6e-2),
}


def dtype_name(dtype: Union[torch.dtype, str, None]) -> str:
    """'float32' for torch.float32 (and for 'float32'); '' for None."""
    if dtype is None:
        return ""
    return str(dtype).replace("torch.", "")


def ulp(dtype: Union[torch.dtype, str], magnitude: float) -> float:
    """Spacing of `dtype` floats at `magnitude` (0 for non-float dtypes): the rounding unit."""
    name = dtype_name(dtype)
    torch_dtype = getattr(torch, name, None)
    if not isinstance(torch_dtype, torch.dtype) or not torch_dtype.is_floating_point:
        return 0.0
    info = torch.finfo(torch_dtype)
    if not math.isfinite(magnitude) or magnitude < info.tiny:
        return float(info.tiny) * float(info.eps)  # subnormal spacing
    return float(info.eps) * 2.0 ** math.floor(math.log2(magnitude))


@dataclass
class Tolerances:
    """The thresholds behind PASS/FAIL; None fields take the dtype's default (see `resolved`).

    * mismatch: |patched - original| > atol + rtol * |original| (torch.testing's rule);
    * relative diff: |patched - original| / max(|original|, rel_floor);
    * accuracy gate (needs the float64 reference): patched error vs float64
      <= fp64_factor * original error vs float64 + fp64_ulps * ulp(dtype, max |float64|);
    * max_mismatch_fraction: None gates mismatches only where no float64 reference exists
      (then none are allowed), since a more accurate kernel legitimately "mismatches" a less
      accurate PyTorch (e.g. cuDNN with TF32); a number gates every comparison;
    * min_speedup: if set, end-to-end forward speedup below it fails the report.
    """

    atol: Optional[float] = None
    rtol: Optional[float] = None
    rel_floor: Optional[float] = None
    fp64_factor: float = 2.0
    fp64_ulps: float = 1.0
    max_mismatch_fraction: Optional[float] = None
    min_speedup: Optional[float] = None

    def resolved(self, dtype: Union[torch.dtype, str]) -> "Tolerances":
        """A copy with atol/rtol/rel_floor filled in for `dtype`."""
        atol, rtol = _DEFAULT_ATOL_RTOL.get(dtype_name(dtype), (0.0, 0.0))
        atol = self.atol if self.atol is not None else atol
        rtol = self.rtol if self.rtol is not None else rtol
        floor = self.rel_floor if self.rel_floor is not None else (atol or 1e-12)
        return dataclasses.replace(self, atol=atol, rtol=rtol, rel_floor=floor)

    def describe(self) -> str:
        text = (f"mismatch if |diff| > {_sci(self.atol)} + {_sci(self.rtol)}*|orig|; "
                f"rel diff floor {_sci(self.rel_floor)}; patched err vs fp64 <= "
                f"{self.fp64_factor:g} x original's + {self.fp64_ulps:g} ulp")
        if self.max_mismatch_fraction is not None:
            text += f"; mismatches <= {self.max_mismatch_fraction:.3%}"
        if self.min_speedup is not None:
            text += f"; end-to-end speedup >= {self.min_speedup:g}x"
        return text


@dataclass
class TensorComparison:
    """One tensor of the original vs the same tensor of the patched model (and float64)."""

    path: str  # where in the (nested) output: "" for a lone tensor, "[0]['boxes']", ...
    shape: List[int]
    dtype: str
    numel: int
    max_abs_diff: Optional[float] = None  # over elements finite on both sides
    max_rel_diff: Optional[float] = None  # denominator max(|original|, rel_floor)
    rel_floor: float = 0.0
    mismatches: int = 0  # outside atol/rtol, plus every element non-finite on either side
    bit_identical: float = 0.0  # fraction of elements with identical bits
    nan_original: int = 0
    inf_original: int = 0
    nan_patched: int = 0
    inf_patched: int = 0
    max_abs_fp64: Optional[float] = None  # max |float64 reference|
    original_err_fp64: Optional[float] = None  # max |original - float64|
    # TF32 allowed: max |float64 run on TF32-rounded conv operands - float64|, the error TF32
    # itself brings (the limit uses the larger of this and original_err_fp64)
    tf32_err_fp64: Optional[float] = None
    patched_err_fp64: Optional[float] = None  # max |patched - float64|
    fp64_limit: Optional[float] = None  # the largest patched_err_fp64 that passes
    problems: List[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def mismatch_fraction(self) -> float:
        return self.mismatches / self.numel if self.numel else 0.0

    @property
    def nonfinite(self) -> bool:
        return bool(self.nan_original or self.inf_original or self.nan_patched
                    or self.inf_patched)


@dataclass
class TimingStats:
    """Milliseconds per call over `reps` timed repetitions (CUDA events)."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    p25_ms: float
    p75_ms: float
    stdev_ms: float
    reps: int

    @classmethod
    def from_samples(cls, samples: Sequence[float]) -> "TimingStats":
        s = sorted(float(x) for x in samples)
        n = len(s)

        def quantile(q: float) -> float:
            pos = q * (n - 1)
            lo = math.floor(pos)
            hi = min(lo + 1, n - 1)
            return s[lo] + (s[hi] - s[lo]) * (pos - lo)

        mean = sum(s) / n
        var = sum((x - mean) ** 2 for x in s) / (n - 1) if n > 1 else 0.0
        return cls(quantile(0.5), mean, s[0], s[-1], quantile(0.25), quantile(0.75),
                   math.sqrt(var), n)


@dataclass
class SpeedComparison:
    """Both sides timed in the same process, interleaved; speedup = original / patched median."""

    original: Optional[TimingStats]
    patched: Optional[TimingStats]
    mode: str = "eager"  # or "cuda_graph"
    note: str = ""

    @property
    def speedup(self) -> Optional[float]:
        if self.original is None or self.patched is None or self.patched.median_ms <= 0:
            return None
        return self.original.median_ms / self.patched.median_ms


@dataclass
class LayerResult:
    """One patched layer: accuracy on the same input in both models, and its own time."""

    name: str
    original_type: Optional[str]  # None: no module of this name in the original
    patched_type: str
    variant: Optional[str] = None  # the patched module's `backend`, if it has one
    calls: int = 0  # times the layer ran in one forward of the patched model
    fused_with: List[str] = field(default_factory=list)  # original modules folded into it
    input_shapes: List[List[int]] = field(default_factory=list)
    comparisons: List[TensorComparison] = field(default_factory=list)  # one per output tensor
    in_model_max_abs_diff: Optional[float] = None  # diff inside the full run (errors propagate)
    forward: Optional[SpeedComparison] = None
    forward_backward: Optional[SpeedComparison] = None
    notes: List[str] = field(default_factory=list)

    @property
    def matched(self) -> bool:
        return self.original_type is not None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.comparisons)


@dataclass
class OutputSet:
    """The final outputs for one set of inputs (the user's, or a fresh random draw)."""

    label: str
    comparisons: List[TensorComparison] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)  # structure: keys, lengths, non-tensors

    @property
    def passed(self) -> bool:
        return not self.problems and all(c.passed for c in self.comparisons)


@dataclass
class Environment:
    """Where and how the validation ran, so two reports can be compared fairly."""

    device: str
    dtype: str
    torch_version: str
    deconv_patch_version: str
    python_version: str
    platform: str
    cuda_version: Optional[str] = None
    cudnn_version: Optional[int] = None
    gpu_name: Optional[str] = None
    gpu_capability: Optional[str] = None
    tf32_matmul: Optional[bool] = None
    tf32_cudnn: Optional[bool] = None
    float32_matmul_precision: Optional[str] = None
    cudnn_benchmark: Optional[bool] = None
    deterministic_algorithms: Optional[bool] = None
    kernels_available: Optional[bool] = None
    input_shapes: Dict[str, List[int]] = field(default_factory=dict)
    input_dtypes: Dict[str, str] = field(default_factory=dict)
    variants: Dict[str, str] = field(default_factory=dict)  # layer -> backend
    fusion: Optional[bool] = None
    fusion_details: List[str] = field(default_factory=list)


# ---------------------------------------------------------------------- number formatting (Tolerances.describe; report_text uses it too)


def _sci(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    return f"{x:.2e}"
