"""One pool of compile jobs for several ninja builds at once: a GNU make jobserver (the fifo
style of make 4.4), which ninja 1.13 and later joins when MAKEFLAGS names one and no `-j` is
given. Units compiled at once then share the cores as they go (a unit that finishes early
hands its jobs to the others) instead of each keeping a fixed share."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Tuple

# The first ninja release that joins a jobserver as a client.
_JOBSERVER_NINJA = (1, 13)


def _version(text: str) -> Optional[Tuple[int, int]]:
    match = re.match(r"\s*(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def joins_jobserver(version_text: str) -> bool:
    """Whether a ninja reporting `version_text` (`ninja --version`) joins a jobserver."""
    version = _version(version_text)
    return version is not None and version >= _JOBSERVER_NINJA


@functools.lru_cache(maxsize=1)
def ninja_joins_jobserver() -> bool:
    """Whether the ninja on PATH (the one torch.utils.cpp_extension runs) joins a jobserver.
    Cached for the process."""
    ninja = shutil.which("ninja")
    if ninja is None or not hasattr(os, "mkfifo"):
        return False
    try:
        out = subprocess.run([ninja, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and joins_jobserver(out.stdout)


class JobPool:
    """`slots` jobs in all for `clients` ninja builds, each of which always runs one job of its
    own: the fifo holds the rest as tokens. Use as a context manager; `makeflags` is the
    MAKEFLAGS value of each build's environment (which must not set MAX_JOBS: an explicit -j
    makes ninja leave the pool)."""

    def __init__(self, slots: int, clients: int) -> None:
        self.tokens = max(0, slots - clients)
        self.slots = slots
        self._dir: Optional[str] = None
        self._fd: Optional[int] = None

    @property
    def path(self) -> Path:
        assert self._dir is not None, "JobPool used outside its with block"
        return Path(self._dir) / "jobs"

    @property
    def makeflags(self) -> str:
        return f"-j{self.slots} --jobserver-auth=fifo:{self.path}"

    def __enter__(self) -> "JobPool":
        self._dir = tempfile.mkdtemp(prefix="deconv_patch_jobs_")
        os.mkfifo(self.path, 0o600)
        # Held open for reading and writing, so the fifo never reads as closed while builds
        # come and go, and the tokens can be written before any build opens it.
        self._fd = os.open(self.path, os.O_RDWR)
        os.write(self._fd, b"+" * self.tokens)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
