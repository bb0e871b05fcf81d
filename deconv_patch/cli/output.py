"""What `deconv-patch` writes: checks made before any work, and the one all-or-nothing write.

Outputs are checked before loading or patching (a wrong --report path costs nothing), and OUT,
its state_dict and the report are written together (deconv_patch.atomic_files.write_files): a
failure, a full disk included, leaves none of them, so a rerun does not meet "OUT exists".
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..atomic_files import FileWriter, write_files
from ..exit_codes import ExitCode

_REPORT_SUFFIXES = (".html", ".htm", ".json", ".md")


class CliError(Exception):
    """A user-facing failure: one line of text and its exit code."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code


def check_output(path: Path, force: bool, what: str, inputs: Sequence[str] = ()) -> None:
    """Refuses, before any work, an output that would overwrite an input, exists without
    --force, is a directory, or lies in a folder that is missing or not writable."""
    for source in inputs:
        if path.exists() and Path(source).exists() and path.samefile(source):
            raise CliError(f"{what} {path} is the input file; refusing to overwrite it",
                           ExitCode.OUTPUT_EXISTS)
    if path.exists() and path.is_dir():
        raise CliError(f"{what} {path} is a directory", ExitCode.OUTPUT_EXISTS)
    if path.exists() and not force:
        raise CliError(f"{what} {path} exists; pass --force to replace it", ExitCode.OUTPUT_EXISTS)
    folder = path.parent
    if not folder.is_dir():
        raise CliError(f"cannot write {what} {path}: folder {folder} does not exist",
                       ExitCode.WRITE_FAILED)
    # the temporary file and the rename both need write and search permission on the folder;
    # os.access also reports a read-only file system (EROFS), for root too
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CliError(f"cannot write {what} {path}: folder {folder} is not writable",
                       ExitCode.WRITE_FAILED)


def check_report(path: Optional[str], force: bool) -> None:
    """The --report checks, made before any work: a known suffix and a writable place."""
    if not path:
        return
    if Path(path).suffix.lower() not in _REPORT_SUFFIXES:
        raise CliError(f"--report {path}: use .html, .json or .md", ExitCode.USAGE)
    check_output(Path(path), force, "--report")


def report_writer(report: Any, path: str) -> FileWriter:
    """write(handle) for the report in the format its suffix names (checked by check_report)."""
    suffix = Path(path).suffix.lower()
    if suffix in (".html", ".htm"):
        text = report.to_html()
    elif suffix == ".json":
        text = report.to_json() + "\n"
    else:
        text = report.to_markdown()
    data = text.encode("utf-8")
    return lambda handle: handle.write(data)


def write_outputs(files: Mapping[Path, FileWriter]) -> None:
    """All of `files` or none; a failed write becomes WRITE_FAILED, a full disk said as such."""
    try:
        write_files(files)
    except OSError as exc:
        raise write_error(exc, list(files)) from exc


def write_error(exc: OSError, paths: Sequence[Path]) -> CliError:
    names = ", ".join(str(p) for p in paths)
    nothing = "nothing was written" if len(paths) == 1 else f"none of {names} was written"
    where = exc.filename or (paths[0] if paths else "")
    if exc.errno == errno.ENOSPC:
        why = "the disk is full (no space left on device)"
    elif exc.errno == getattr(errno, "EDQUOT", -1):
        why = "the disk quota is exceeded"
    else:
        why = exc.strerror or str(exc)
    return CliError(f"cannot write {where}: {why}; {nothing}", ExitCode.WRITE_FAILED)


def state_dict_path(out: Path) -> Path:
    return out.with_name(f"{out.stem}.state_dict.pt")

