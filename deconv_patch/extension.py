"""Builds (once, with torch.utils.cpp_extension + ninja) and loads the CUDA extension.

The build is cached on disk per torch version, CUDA version and GPU architecture set, so later
processes load it in milliseconds; torch's loader rebuilds by itself when a source changes.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import List, Optional, Sequence

import torch

EXTENSION_NAME = "deconv_patch_cuda"
_MIN_CAPABILITY = (8, 0)


class ExtensionUnavailableError(RuntimeError):
    """The CUDA kernels cannot be built or loaded here; the message says what to install."""


def cuda_source_dir() -> Path:
    """cuda/ of a source checkout (editable install), or the copy a wheel ships."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "cuda", here / "_cuda"):
        if (candidate / "binding" / "torch_binding.cpp").is_file():
            return candidate
    raise ExtensionUnavailableError(
        f"deconv_patch: CUDA sources not found next to {here}; reinstall the package"
    )


def source_files() -> List[Path]:
    """The binding's .cpp files and every kernel family's .cu files (cuda/<folder>/)."""
    src = cuda_source_dir()
    return [*sorted(src.glob("*/*.cpp")), *sorted(src.glob("*/*.cu"))]


def _capabilities() -> List[tuple]:
    caps = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
    return sorted(c for c in caps if c >= _MIN_CAPABILITY)


def gencode_flags(capabilities: Sequence[tuple]) -> List[str]:
    """-gencode flags: machine code for each GPU present, PTX of the newest for later chips.

    Hopper (9.0) gets sm_90a machine code, the architecture-specific target that has wgmma, and
    DECONV_PATCH_SM90A tells the kernels it is there (gemm_phase_sm90 refuses calls without it).
    """
    flags = []
    for a, b in capabilities:
        arch = f"{a}{b}a" if (a, b) == (9, 0) else f"{a}{b}"
        flags.append(f"-gencode=arch=compute_{arch},code=sm_{arch}")
    if capabilities:
        a, b = capabilities[-1]
        flags.append(f"-gencode=arch=compute_{a}{b},code=compute_{a}{b}")
    if (9, 0) in capabilities:
        flags.append("-DDECONV_PATCH_SM90A")
    return flags


def cache_dir(capabilities: Optional[Sequence[tuple]] = None) -> Path:
    """Where the compiled extension lives: $DECONV_PATCH_CACHE or ~/.cache/deconv_patch/..."""
    root = os.environ.get("DECONV_PATCH_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "deconv_patch"
    caps = capabilities if capabilities is not None else _capabilities()
    arch = "-".join(f"sm{a}{b}" for a, b in caps) or "noarch"
    torch_tag = torch.__version__.replace("+", "_")
    return base / f"torch{torch_tag}-cuda{torch.version.cuda}-{arch}-src{sources_digest()}"


def sources_digest() -> str:
    """Hash of every file under cuda/ (headers too: torch's loader only hashes the .cpp/.cu
    list), with its path."""
    root = cuda_source_dir()
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _missing_requirements() -> Optional[str]:
    if torch.version.cuda is None:
        return (
            "this torch build has no CUDA support (torch.version.cuda is None). Install a CUDA "
            "build of PyTorch, e.g. `pip install torch --index-url "
            "https://download.pytorch.org/whl/cu130`."
        )
    if not torch.cuda.is_available():
        return "no CUDA device is visible (torch.cuda.is_available() is False)."
    if not _capabilities():
        return "the kernels need a GPU of compute capability 8.0 (Ampere) or newer."
    from torch.utils.cpp_extension import CUDA_HOME

    if CUDA_HOME is None or not (Path(CUDA_HOME) / "bin" / "nvcc").exists():
        return (
            "nvcc was not found, so the kernels cannot be compiled. Install the CUDA toolkit "
            f"matching torch.version.cuda={torch.version.cuda} (its nvcc) and set CUDA_HOME, "
            "e.g. CUDA_HOME=/usr/local/cuda."
        )
    if not (Path(CUDA_HOME) / "include" / "cuda_runtime_api.h").exists():
        # torch derives CUDA_HOME from `which nvcc`; a wrapper script outside the toolkit
        # (e.g. /usr/local/bin/nvcc) gives a root without the CUDA headers.
        return (
            f"CUDA_HOME={CUDA_HOME} has no include/cuda_runtime_api.h (nvcc there may be a "
            "wrapper outside the toolkit). Set CUDA_HOME to the toolkit root, e.g. "
            "CUDA_HOME=/usr/local/cuda."
        )
    if shutil.which("ninja") is None:
        try:
            import ninja  # noqa: F401
        except ImportError:
            return "ninja is missing: `pip install ninja`."
    return None


@dataclass(frozen=True)
class BuildInfo:
    """What `deconv-patch build` reports."""

    module_path: str
    cache_dir: str
    capabilities: tuple


@functools.lru_cache(maxsize=1)
def load_extension() -> ModuleType:
    """The compiled extension; compiles it on first use. Cached for the process."""
    problem = _missing_requirements()
    if problem is not None:
        raise ExtensionUnavailableError(f"deconv_patch cannot use its CUDA kernels: {problem}")

    from torch.utils import cpp_extension

    caps = _capabilities()
    build_dir = cache_dir(caps)
    build_dir.mkdir(parents=True, exist_ok=True)
    sources = source_files()
    if not (build_dir / f"{EXTENSION_NAME}.so").exists():
        archs = ", ".join(f"sm_{a}{b}" for a, b in caps)
        print(
            f"deconv_patch: compiling CUDA kernels for {archs} (first use, about a minute) "
            f"into {build_dir}",
            file=sys.stderr,
            flush=True,
        )
    try:
        return cpp_extension.load(
            name=EXTENSION_NAME,
            sources=[str(p) for p in sources],
            extra_include_paths=[str(cuda_source_dir())],
            extra_cflags=["-O3"],
            extra_cuda_cflags=["-O3", "-lineinfo", *gencode_flags(caps)],
            build_directory=str(build_dir),
            verbose=bool(os.environ.get("DECONV_PATCH_VERBOSE_BUILD")),
        )
    except Exception as exc:  # compiler errors arrive as RuntimeError/OSError/CalledProcessError
        raise ExtensionUnavailableError(
            f"deconv_patch: building the CUDA extension in {build_dir} failed: {exc}. "
            "Set DECONV_PATCH_VERBOSE_BUILD=1 to see the compiler output."
        ) from exc


def loaded_extension() -> Optional[ModuleType]:
    """The extension if this process has already loaded it, else None (never builds): for
    optional speed-ups that must not trigger a first-use compile."""
    return load_extension() if load_extension.cache_info().currsize else None


def build() -> BuildInfo:
    """Pre-build the extension (the `deconv-patch build` command)."""
    module = load_extension()
    caps = _capabilities()
    return BuildInfo(module_path=str(module.__file__), cache_dir=str(cache_dir(caps)),
                     capabilities=tuple(caps))


def extension_available() -> bool:
    """True when the kernels are built or can be built here (does not build)."""
    return _missing_requirements() is None
