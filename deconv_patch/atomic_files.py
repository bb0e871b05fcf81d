"""Writing files so that readers never meet a partial one: one file by rename over it
(`atomic_write`), or a set of files all or none (`write_files`, the CLI's checkpoint, state
dict and report). A full disk raises an OSError naming the file, also where torch's writer
wrapped it in a RuntimeError."""

from __future__ import annotations

import io
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, List, Mapping, Optional, Tuple, Union

PathLike = Union[str, "os.PathLike[str]"]

FileWriter = Callable[[IO[bytes]], None]


class _Output(io.RawIOBase):
    """A temporary file handed to a writer: write() writes every byte or raises, and keeps the
    OSError, because torch's zip writer re-raises it as a RuntimeError that has lost its errno
    (a full disk then reads "[enforce fail at inline_container.cc]")."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd
        self.error: Optional[OSError] = None

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return os.lseek(self.fd, offset, whence)

    def tell(self) -> int:
        return os.lseek(self.fd, 0, os.SEEK_CUR)

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        size = len(view)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:
            self.error = exc
            raise
        return size


def _file_mode(path: Path) -> int:
    """The mode a plain open(path, "w") leaves: an existing file keeps its own, a new one gets
    0o666 less the umask (mkstemp's 0o600 would hide outputs from group and others)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mask = os.umask(0o022)  # reading the umask means setting it; restored at once
        os.umask(mask)
        return 0o666 & ~mask


def _stage(path: Path, write: Callable[[Any], None], by_path: bool) -> Path:
    """A complete, synced temporary file next to `path` (not yet renamed): write() gets its path
    (by_path) or an _Output. On failure the temporary file is removed; an OSError the writer
    hit is raised again as an OSError naming `path` (not the temporary file), also where torch
    wrapped it in a RuntimeError."""
    mode = _file_mode(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        out = _Output(fd)
        try:
            write(tmp if by_path else out)
        except Exception as exc:
            error = exc if isinstance(exc, OSError) else out.error
            if error is None:
                raise
            raise OSError(error.errno, error.strerror, str(path)) from exc
        os.fsync(fd)
        os.chmod(tmp, mode)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp


def write_files(files: Mapping[PathLike, FileWriter]) -> None:
    """Writes all of `files` (path -> write(handle)) or none: each is written to a temporary
    file next to it and synced, and only when every one is complete are they renamed into
    place. On any failure no temporary file is left and no new file is placed (one already
    renamed is removed again), so a rerun never meets half a set. A write that fails with an
    OSError (a full disk: errno ENOSPC) raises an OSError naming the file, also when torch's
    writer turned it into a RuntimeError."""
    staged: List[Tuple[Path, Path]] = []
    placed: List[Path] = []
    try:
        for path, write in files.items():
            staged.append((_stage(Path(path), write, by_path=False), Path(path)))
        for tmp, path in staged:
            os.replace(tmp, path)
            placed.append(path)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        for path in placed:
            path.unlink(missing_ok=True)
        raise


def atomic_write(path: PathLike, write: Callable[[Path], None]) -> None:
    """Calls write(tmp) on a temporary file next to `path`, then renames it over `path`, so
    readers see the old file or the complete new one, never a partial write."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _stage(path, write, by_path=True)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
