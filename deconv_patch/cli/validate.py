"""The `deconv-patch validate` command, and the validation step it shares with `patch`: the
report printed, written to --report, and OUT refused when the report failed.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .loading import _check_inputs, _eager, _inputs, _is_oom, _load, _oom_error, _target
from .output import FileWriter, check_report, report_writer, write_outputs
from ..exit_codes import ExitCode


def _validate(original: Any, patched: Any, inputs: Tuple[Any, ...]) -> Any:
    """The validation report of `patched` against `original`, printed; out of GPU memory
    becomes its own exit code."""
    from ..validation import validate

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = validate(original, patched, inputs, progress=False)
    except Exception as exc:
        if _is_oom(exc):
            raise _oom_error("validation", exc)
        raise
    print(report)
    return report


def _report_files(report: Any, args: argparse.Namespace) -> Dict[Path, FileWriter]:
    """{--report path: its writer}, or nothing without --report."""
    return {Path(args.report): report_writer(report, args.report)} if args.report else {}


def _refused(report: Any, out: Path, args: argparse.Namespace) -> Optional[int]:
    """VALIDATION_FAILED (after writing the report, which says why, and saying OUT is not
    written) when the report failed, else None."""
    if report.passed:
        return None
    write_outputs(_report_files(report, args))
    print(f"error: validation failed ({report.verdict}); {out} not written", file=sys.stderr)
    return ExitCode.VALIDATION_FAILED


def _cmd_validate(args: argparse.Namespace) -> int:
    check_report(args.report, args.force)
    target = _target(args)
    original = _eager(_load(args.original, args), target)
    patched = _eager(_load(args.patched, args), target)
    inputs = _inputs(args.input_shape, target)
    _check_inputs(original, inputs)
    _check_inputs(patched, inputs)
    report = _validate(original, patched, inputs)
    write_outputs(_report_files(report, args))
    return ExitCode.OK if report.passed else ExitCode.VALIDATION_FAILED
