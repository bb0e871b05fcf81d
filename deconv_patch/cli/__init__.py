"""The `deconv-patch` console script.

Every failure ends with one `error: ...` line and a distinct exit code (deconv_patch.exit_codes);
tracebacks only with --debug.

This module holds main(); the argument parser is in parser.py, the commands in patch.py,
validate.py, info.py, bench.py and build_demo.py (demo.py: the bundled demo), loading models
and inputs in loading.py (file writing: output.py). Every name is still importable from here.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from .bench import _cmd_bench, _cpu_ms
from .build_demo import _cmd_build, _cmd_demo
from .info import _cmd_info, _p
from .loading import (
    _DTYPES, Source, Target, _build_architecture, _check_inputs, _eager, _inputs, _is_oom,
    _load, _oom_error, _place, _target,
)
from .output import CliError
from .parser import _common, build_parser, parse_shape
from .patch import _cmd_patch, _cpu_note, _patch_program
from .validate import _cmd_validate, _refused, _report_files, _validate
from ..exit_codes import ExitCode

# every name this module held before it was split, private helpers included
__all__ = [
    "_cmd_build", "_cmd_demo", "_DTYPES", "parse_shape", "Target", "_target", "_inputs", "_place",
    "_build_architecture", "Source", "_load", "_is_oom", "_oom_error", "_check_inputs",
    "_validate", "_report_files", "_refused", "_cpu_note", "_cmd_patch", "_patch_program",
    "_eager", "_cmd_validate", "_cmd_info", "_p", "_cmd_bench", "_cpu_ms", "_common",
    "build_parser", "main",
]


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:  # a missing command is an argument error
        parser.print_help(sys.stderr)
        print(f"{parser.prog}: error: a command is required", file=sys.stderr)
        return int(ExitCode.USAGE)
    from ..checkpoint import CheckpointError

    try:
        return int(args.func(args))
    except (CliError, CheckpointError) as exc:
        if getattr(args, "debug", False):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.code)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        if _is_oom(exc):
            print(f"error: {_oom_error('the run', exc)}", file=sys.stderr)
            return int(ExitCode.OUT_OF_MEMORY)
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"error: {type(exc).__name__}: {first} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)
