"""Builds (with torch.utils.cpp_extension + ninja) and loads the CUDA extension, in units.

The core (cuda/binding, cuda/relayout, cuda/direct) is the Python module: the torch binding,
the prepared calls and the direct kernel every call can fall back to. Each other kernel family
is a build unit of its own (cuda/<family>/, a shared library), compiled the first time a call
needs it. Every family, the core's included, is registered with the binding by its table's
address (cuda/common/family_unit.h) under the registry's code, so a model compiles only the
families its layers use. A family's folder also builds for one element type ("grouped.bf16"),
and a family whose kernels are compiled per fused activation for one activation too
("gemm_phase_tma@relu.f32"): a first use compiles the types and activations its layers run,
and a unit holding more (the family's whole unit), where it is built, serves them.
`load_extension()` (`deconv-patch build`) builds every family's whole unit.

Builds are cached on disk per torch version, CUDA version, GPU architecture set and source
digest, so later processes load them in milliseconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import torch

from .activations import ACTIVATIONS
from .job_pool import JobPool, ninja_joins_jobserver
from .build_units import (CORE, KINDS, ExtensionUnavailableError, cuda_source_dir, unit_flags,
                          unit_name, unit_names, unit_parts, unit_sources)

EXTENSION_NAME = "deconv_patch_cuda"
_MIN_CAPABILITY = (8, 0)


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


@functools.lru_cache(maxsize=1)
def sources_digest() -> str:
    """Hash of every file under cuda/ (headers too: torch's loader only hashes the .cpp/.cu
    list), with its path; read once per process (cache_dir() asks on every unit load)."""
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


def runtime_libstdcxx() -> List[str]:
    """The C++ runtime this process runs with (the libstdc++ that torch loaded), as a linker
    input for every unit. A compiler whose own libstdc++ is a static archive only (the `CXX` of
    some images) would otherwise link a second copy of the C++ runtime into each unit, and the
    two copies' iostream state disagree: formatting a number into an error message crashes the
    process or drops the number. Linking the loaded one is what -lstdc++ gives on an ordinary
    toolchain anyway. Empty where /proc/self/maps does not name it (not Linux)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)  # address, perms, offset, device, inode, path
        if len(fields) == 6 and Path(fields[5]).name.startswith("libstdc++.so") and Path(
                fields[5]).is_file():
            return [fields[5]]
    return []


def _library_name(unit: str) -> str:
    folder, activation, kind = unit_parts(unit)
    if unit == CORE:
        return EXTENSION_NAME
    return "__".join([f"{EXTENSION_NAME}_{folder}", *(p for p in (activation, kind) if p)])


def build_unit(unit: str, build_root: Path, cuda_flags: Sequence[str], verbose: bool = False
               ) -> object:
    """Compiles (ninja, only what changed) and loads one unit into build_root/<unit>: the core
    as a Python module, a family's unit as a shared library (its path is returned)."""
    from torch.utils import cpp_extension

    build_dir = build_root / unit
    build_dir.mkdir(parents=True, exist_ok=True)
    return cpp_extension.load(
        name=_library_name(unit),
        sources=[str(p) for p in unit_sources(unit)],
        extra_include_paths=[str(cuda_source_dir())],
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3", *cuda_flags, *unit_flags(unit)],
        extra_ldflags=runtime_libstdcxx(),
        build_directory=str(build_dir),
        is_python_module=unit == CORE,
        verbose=verbose,
    )


def register_unit(core: ModuleType, unit: str, library: str) -> None:
    """Hands the table of `unit` (deconv_patch_unit_<family>() of the loaded `library`) to the
    core, under the registry's code for its family and the activation it was built for."""
    from . import BY_NAME  # the registry: the layer above names the families

    family, activation, kind = unit_parts(unit)
    getter = getattr(ctypes.CDLL(library), f"deconv_patch_unit_{family}")
    getter.restype = ctypes.c_void_p
    core.register_family(BY_NAME[family].code, family, getter(),
                         -1 if activation is None else ACTIVATIONS[activation],
                         -1 if kind is None else KINDS[kind])


def registered_units(core: ModuleType) -> Set[str]:
    """The units whose tables the core holds."""
    activations = {code: name for name, code in ACTIVATIONS.items()}
    kinds = {code: name for name, code in KINDS.items()}
    return {unit_name(family, activations.get(activation), kinds.get(kind))
            for family, activation, kind in core.registered_families()}


def register_core_families(core: ModuleType) -> None:
    """Registers the families the core itself holds (the direct kernel's)."""
    from . import FAMILIES

    for family in FAMILIES:
        if family.needs_units == ():
            register_unit(core, family.name, str(core.__file__))


def _is_built(unit: str, build_root: Path) -> bool:
    return (build_root / unit / f"{_library_name(unit)}.so").exists()


def _progress_bar(todo: Sequence[str], build_root: Path):
    """The first-use message and a tqdm bar over the units to compile."""
    from tqdm import tqdm

    archs = ", ".join(f"sm_{a}{b}" for a, b in _capabilities())
    print(f"deconv_patch: compiling CUDA kernels for {archs} (first use of "
          f"{', '.join(todo)}) into {build_root}", file=sys.stderr, flush=True)
    return tqdm(total=len(todo), desc="deconv_patch: compiling", unit="unit", file=sys.stderr)


def _build_flags() -> List[str]:
    return ["-lineinfo", *gencode_flags(_capabilities())]


def _build_here(unit: str) -> object:
    problem = _missing_requirements()
    if problem is not None:
        raise ExtensionUnavailableError(f"deconv_patch cannot use its CUDA kernels: {problem}")
    build_root = cache_dir()
    try:
        return build_unit(unit, build_root, _build_flags(),
                          verbose=bool(os.environ.get("DECONV_PATCH_VERBOSE_BUILD")))
    except Exception as exc:  # compiler errors arrive as RuntimeError/OSError/CalledProcessError
        raise ExtensionUnavailableError(
            f"deconv_patch: building the CUDA kernels ({unit}) in {build_root / unit} failed: "
            f"{exc}. Set DECONV_PATCH_VERBOSE_BUILD=1 to see the compiler output."
        ) from exc


def unit_build_command(unit: str, build_root: Path, cuda_flags: Sequence[str]) -> List[str]:
    """The command that builds one unit in a process of its own (this module's entry point; the
    unit's own flags are added there)."""
    return [sys.executable, "-m", __name__, unit, str(build_root), *cuda_flags]


def compile_jobs(units: Sequence[str], cpus: int) -> Dict[str, int]:
    """ninja jobs per unit when `units` compile at once: cpus + 2 in all (ninja's own default
    for one build), shared in proportion to each unit's source files, at least one each. The
    core takes one job per file (up to cpus + 2) on top: its few files parse torch's headers,
    the longest compiles of a first use, and would otherwise wait on each other."""
    files = {u: len(unit_sources(u)) for u in units}
    jobs = {} if CORE not in files else {CORE: min(files.pop(CORE), cpus + 2)}
    total = sum(files.values())
    jobs.update({u: max(1, round((cpus + 2) * n / total)) for u, n in files.items()})
    return jobs


# Beside the core, a family unit's build process lowers its CPU priority by this much (its
# compilers inherit it): the core is a first use's longest path (its torch-header files), and
# the families' many small files fill the other cores. Set in the build process's environment.
_NICE_ENV = "DECONV_PATCH_BUILD_NICE"
_BEHIND_THE_CORE = 5


def unit_environments(units: Sequence[str], cpus: int,
                      pool: Optional[JobPool] = None) -> Dict[str, Dict[str, str]]:
    """What each unit's build process sets in its environment (over the caller's, less its
    MAX_JOBS and MAKEFLAGS) when `units` compile at once: the core's jobs (compile_jobs); the
    families' jobs, from `pool` where there is one (a jobserver they share as they go), else
    their fixed shares; beside the core, the families' lower CPU priority."""
    jobs = compile_jobs(units, cpus)
    behind = {_NICE_ENV: str(_BEHIND_THE_CORE)} if CORE in units else {}
    envs: Dict[str, Dict[str, str]] = {}
    for unit in units:
        if unit == CORE:
            envs[unit] = {"MAX_JOBS": str(jobs[unit])}
        elif pool is not None:
            envs[unit] = {"MAKEFLAGS": pool.makeflags, **behind}
        else:
            envs[unit] = {"MAX_JOBS": str(jobs[unit]), **behind}
    return envs


def _compile_at_once(units: Sequence[str]) -> None:
    """Compiles units that have no build yet, all at the same time: one process each (a ninja
    build of its own), with a bar over them. Loading them afterwards finds the builds."""
    families = [u for u in units if u != CORE]
    cpus = os.cpu_count() or 1
    shared = len(families) > 1 and ninja_joins_jobserver()
    with (JobPool(cpus + 2, len(families)) if shared else contextlib.nullcontext()) as pool:
        _run_builds(units, unit_environments(units, cpus, pool))


def _run_builds(units: Sequence[str], envs: Mapping[str, Mapping[str, str]]) -> None:
    import subprocess

    build_root = cache_dir()
    bar = _progress_bar(units, build_root)
    base = {k: v for k, v in os.environ.items() if k not in ("MAX_JOBS", "MAKEFLAGS")}
    running = {
        unit: subprocess.Popen(
            unit_build_command(unit, build_root, _build_flags()),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**base, **envs[unit]})
        for unit in units}
    failed = []
    try:
        while running:
            for unit, proc in list(running.items()):
                try:
                    output, _ = proc.communicate(timeout=0.5)
                except subprocess.TimeoutExpired:
                    continue
                del running[unit]
                bar.update(1)
                if proc.returncode != 0:
                    failed.append(f"{unit}: {output.strip()[-2000:]}")
    finally:
        for proc in running.values():
            proc.kill()
        bar.close()
    if failed:
        raise ExtensionUnavailableError(
            f"deconv_patch: building the CUDA kernels in {build_root} failed: "
            + "\n".join(failed) + "\nSet DECONV_PATCH_VERBOSE_BUILD=1 to see the compiler output.")


def _prepare(units: Sequence[str]) -> None:
    """Compiles, before they load, the units among `units` that have no build yet: one in this
    process, several at once."""
    if not units or not extension_available():
        return  # nothing to build, or loading then raises the clear error
    build_root = cache_dir()
    todo = [u for u in units if not _is_built(u, build_root)]
    if len(todo) > 1:
        _compile_at_once(todo)
    elif todo:
        bar = _progress_bar(todo, build_root)
        try:
            _build_here(todo[0])
        finally:
            bar.update(1)
            bar.close()


@functools.lru_cache(maxsize=1)
def load_core() -> ModuleType:
    """The extension's core module (the binding); compiles it on first use. Cached for the
    process."""
    _prepare([CORE])
    core: ModuleType = _build_here(CORE)  # type: ignore[assignment]
    register_core_families(core)
    return core


@functools.lru_cache(maxsize=None)
def _load_unit(unit: str) -> str:
    """Builds (if needed), loads and registers one family's unit; cached per unit."""
    core = load_core()
    library = str(_build_here(unit))
    register_unit(core, unit, library)
    return library


def load_units(units: Iterable[str]) -> ModuleType:
    """The core, with these families' units registered. Whatever of them (the core included)
    has no build yet compiles first, all at once, with a progress bar."""
    return _load_unit_set(tuple(dict.fromkeys(units)))


@functools.lru_cache(maxsize=None)
def _load_unit_set(units: Tuple[str, ...]) -> ModuleType:
    """load_units, once per set of units: a registered unit stays registered, so later calls
    (a prepared call per plan, a weight pack per weight version) cost a dict lookup. A family's
    whole unit, where it is registered or built, stands in for its activation units."""
    core = loaded_extension()
    registered = set() if core is None else registered_units(core)
    units = tuple(dict.fromkeys(_whole_if_there(u, registered) for u in units))
    pending = [u for u in units if u not in registered]
    _prepare(([CORE] if core is None else []) + pending)
    core = load_core()
    for unit in pending:
        _load_unit(unit)
    return core


def _whole_if_there(unit: str, registered: Set[str]) -> str:
    """A registered or built unit that holds all `unit` holds (the family's whole unit, else
    its unit of the same activation or element type), else `unit`."""
    folder, activation, kind = unit_parts(unit)
    if not (activation or kind):
        return unit  # a whole unit: nothing holds more
    wider = [folder]
    if activation and kind:
        wider += [unit_name(folder, activation=activation), unit_name(folder, kind=kind)]
    build_root = cache_dir()
    for candidate in wider:
        if candidate in registered or _is_built(candidate, build_root):
            return candidate
    return unit


def load_family_any(family: str, units: Sequence[str]) -> ModuleType:
    """The core with some unit of `family` registered, for what every unit of a family answers
    alike (a weight's packing, whether a weight fits): the loaded one where there is one, else
    `units` (loaded as load_units does)."""
    core = loaded_extension()
    if core is not None and any(unit_parts(u).folder == family for u in registered_units(core)):
        return core
    return load_units(units)


def load_extension() -> ModuleType:
    """The core with every family's unit registered (the `deconv-patch build` command, tests
    of the kernels themselves)."""
    return load_units(unit_names())


def loaded_extension() -> Optional[ModuleType]:
    """The core if this process has already loaded it, else None (never builds): for
    optional speed-ups that must not trigger a first-use compile."""
    return load_core() if load_core.cache_info().currsize else None


def built_core() -> Optional[ModuleType]:
    """The core where this process has loaded it or its build is in the cache (loading it),
    else None: never a first-use compile of a core without a build (loading one brings it up
    to date, as every load does). For speed-ups worth loading a built core for: a training
    loop whose calls all run PyTorch's convolution plans none that would load it."""
    return loaded_extension() or _load_built_core()


@functools.lru_cache(maxsize=1)
def _load_built_core() -> Optional[ModuleType]:
    """built_core's look in the build cache, once per process (a core loaded later is
    loaded_extension's)."""
    if not extension_available() or not _is_built(CORE, cache_dir()):
        return None
    try:
        return load_core()
    except ExtensionUnavailableError:
        return None


def build() -> BuildInfo:
    """Pre-build the core and every family's unit (the `deconv-patch build` command)."""
    module = load_extension()
    caps = _capabilities()
    return BuildInfo(module_path=str(module.__file__), cache_dir=str(cache_dir(caps)),
                     capabilities=tuple(caps))


def extension_available() -> bool:
    """True when the kernels are built or can be built here (does not build)."""
    return _missing_requirements() is None


if __name__ == "__main__":  # one unit's build, for _compile_at_once: UNIT BUILD_ROOT FLAGS...
    if os.environ.get(_NICE_ENV) and hasattr(os, "nice"):
        os.nice(int(os.environ[_NICE_ENV]))
    build_unit(sys.argv[1], Path(sys.argv[2]), sys.argv[3:],
               verbose=bool(os.environ.get("DECONV_PATCH_VERBOSE_BUILD")))
