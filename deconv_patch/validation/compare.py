"""Comparing tensors for validate(): every accuracy figure for one original / patched tensor pair
(differences, mismatches, identical bits, NaN/Inf, error against the float64 reference) judged
against the tolerances (compare_tensors), and two nested outputs compared leaf by leaf
(compare_outputs).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from .report import OutputSet, TensorComparison, Tolerances, dtype_name, ulp
from .values import _flatten


def _bits(t: torch.Tensor) -> torch.Tensor:
    """An integer view of a float tensor's bits (so NaN payloads and -0.0 count)."""
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}
    if t.is_floating_point() and t.element_size() in ints:
        return t.contiguous().view(ints[t.element_size()])
    return t


def _amax(t: torch.Tensor) -> Optional[float]:
    return float(t.max().item()) if t.numel() else None


def compare_tensors(path: str, original: torch.Tensor, patched: torch.Tensor,
                    reference: Optional[torch.Tensor], tol: Tolerances,
                    tf32_reference: Optional[torch.Tensor] = None) -> TensorComparison:
    """Every accuracy figure for one tensor pair; `tol` must be resolved (no None atol/rtol)."""
    assert tol.atol is not None and tol.rtol is not None and tol.rel_floor is not None
    comp = TensorComparison(path=path, shape=list(original.shape), dtype=dtype_name(original.dtype),
                            numel=original.numel(), rel_floor=tol.rel_floor)
    if original.shape != patched.shape:
        comp.problems.append(f"shape differs: original {list(original.shape)}, patched "
                             f"{list(patched.shape)}")
        return comp
    if original.dtype != patched.dtype:
        comp.problems.append(f"dtype differs: original {dtype_name(original.dtype)}, patched "
                             f"{dtype_name(patched.dtype)}")
    a = original.detach()
    b = patched.detach().to(a.device)
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    same_bits = (_bits(a) == _bits(b)) if a.dtype == b.dtype else (a.double() == b.double())
    comp.bit_identical = float(same_bits.double().mean().item()) if a.numel() else 1.0
    da, db = a.double(), b.double()
    fa, fb = torch.isfinite(da), torch.isfinite(db)
    comp.nan_original, comp.nan_patched = int(da.isnan().sum()), int(db.isnan().sum())
    comp.inf_original, comp.inf_patched = int(da.isinf().sum()), int(db.isinf().sum())
    both = fa & fb
    diff = (da - db).abs()[both]
    mag = da.abs()[both]
    comp.max_abs_diff = _amax(diff)
    comp.max_rel_diff = _amax(diff / mag.clamp_min(tol.rel_floor))
    outside = int((diff > tol.atol + tol.rtol * mag).sum())
    comp.mismatches = outside + int((~both).sum())
    del diff, mag, same_bits
    if comp.nonfinite:
        comp.problems.append(
            f"non-finite values: original {comp.nan_original} NaN / {comp.inf_original} Inf, "
            f"patched {comp.nan_patched} NaN / {comp.inf_patched} Inf")
    if reference is not None and reference.shape == original.shape:
        ref = reference.detach().to(device=a.device, dtype=torch.float64)
        if ref.is_complex():
            ref = torch.view_as_real(ref)
        fr = torch.isfinite(ref)
        comp.max_abs_fp64 = _amax(ref.abs()[fr]) or 0.0
        comp.original_err_fp64 = _amax((da - ref).abs()[fr & fa])
        comp.patched_err_fp64 = _amax((db - ref).abs()[fr & fb])
        if tf32_reference is not None and tf32_reference.shape == ref.shape:
            rt = tf32_reference.detach().to(device=a.device, dtype=torch.float64)
            comp.tf32_err_fp64 = _amax((rt - ref).abs()[fr & torch.isfinite(rt)])
        if comp.original_err_fp64 is not None and comp.patched_err_fp64 is not None:
            inherent = max(comp.original_err_fp64, comp.tf32_err_fp64 or 0.0)
            comp.fp64_limit = (tol.fp64_factor * inherent
                               + tol.fp64_ulps * ulp(original.dtype, comp.max_abs_fp64))
            if comp.patched_err_fp64 > comp.fp64_limit:
                comp.problems.append(
                    f"patched error vs float64 {comp.patched_err_fp64:.3e} exceeds "
                    f"{comp.fp64_limit:.3e} (original's {comp.original_err_fp64:.3e})")
    gate = tol.max_mismatch_fraction
    if gate is None and comp.fp64_limit is None:
        gate = 0.0
    if gate is not None and comp.mismatch_fraction > gate and not comp.nonfinite:
        comp.problems.append(f"{comp.mismatches} of {comp.numel} elements mismatch "
                             f"(atol {tol.atol:g}, rtol {tol.rtol:g}; allowed {gate:.3%})")
    return comp


def compare_outputs(label: str, original: Any, patched: Any, reference: Any,
                    tol: Tolerances, tf32_reference: Any = None) -> OutputSet:
    """Compares two (nested) outputs leaf by leaf, matched by path (see compare_tensors)."""
    result = OutputSet(label)
    leaves_o = dict(_flatten(original))
    leaves_p = dict(_flatten(patched))
    leaves_r = dict(_flatten(reference)) if reference is not None else {}
    leaves_t = dict(_flatten(tf32_reference)) if tf32_reference is not None else {}
    for path in leaves_o.keys() - leaves_p.keys():
        result.problems.append(f"output{path} is missing from the patched model's output")
    for path in leaves_p.keys() - leaves_o.keys():
        result.problems.append(f"output{path} exists only in the patched model's output")
    for path, leaf_o in leaves_o.items():
        if path not in leaves_p:
            continue
        leaf_p = leaves_p[path]
        if isinstance(leaf_o, torch.Tensor) and isinstance(leaf_p, torch.Tensor):
            ref, ref_t = leaves_r.get(path), leaves_t.get(path)
            result.comparisons.append(compare_tensors(
                path, leaf_o, leaf_p, ref if isinstance(ref, torch.Tensor) else None, tol,
                ref_t if isinstance(ref_t, torch.Tensor) else None))
        elif isinstance(leaf_o, torch.Tensor) or isinstance(leaf_p, torch.Tensor):
            result.problems.append(f"output{path}: a tensor on one side only")
        elif _differs(leaf_o, leaf_p):
            result.problems.append(f"output{path}: {leaf_o!r} vs {leaf_p!r}")
    return result


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return not (a == b)  # NaN != NaN: reported, never equal
    try:
        return bool(a != b)
    except Exception:  # objects without a usable comparison
        return type(a) is not type(b)
