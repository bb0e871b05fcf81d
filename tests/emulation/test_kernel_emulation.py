"""Host emulations of gemm_phase_tma (tests/emulation/gemm_phase_tma_emulation.cu) and of
gemm_kxs_sm90's staged store (tests/emulation/gemm_kxs_sm90_emulation.cu): the kernels' host
code and index math run on the CPU against a float64 reference, so that changes to them are
caught without a GPU (see each .cu file's header for what it covers and what it does not).

Needs nvcc (host-only build, no GPU): found through $NVCC, $CUDA_HOME / $CUDA_PATH, PATH or
/usr/local/cuda; skipped without it. Each emulator is built once per run; each mode is one
test. DECONV_PATCH_EMULATION_CUDA_DIR builds them against another copy of cuda/ (e.g. a mutated
one, to see the emulation fail)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional

import pytest

pytestmark = [pytest.mark.emulation, pytest.mark.extended]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EMULATORS = {
    # name: (source, modes)
    "gemm_phase_tma": (HERE / "gemm_phase_tma_emulation.cu",
                       ("light", "strict", "medium")),
    "gemm_kxs_sm90": (HERE / "gemm_kxs_sm90_emulation.cu",
                      ("staged", "medium")),
}
CASES = [(name, mode) for name, (_, modes) in EMULATORS.items() for mode in modes]
SUMMARY = re.compile(
    r"^SUMMARY (\w+): cases=(\d+) runs=(\d+) checks=(\d+) failures=(\d+)", re.MULTILINE
)
BUILD_TIMEOUT_S = 1200
RUN_TIMEOUT_S = 900


def _find_nvcc() -> Optional[str]:
    candidates = [os.environ.get("NVCC")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(str(Path(os.environ[var]) / "bin" / "nvcc"))
    candidates += [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _tail(text: str, chars: int = 8000) -> str:
    return text if len(text) <= chars else "...\n" + text[-chars:]


def _report(output: str) -> str:
    """The emulator's first failed checks (it prints at most 20) and the end of its output."""
    fails = [line for line in output.splitlines() if line.startswith("  FAIL ")]
    return "\n".join(fails) + "\n" + _tail(output, 4000)


def _openmp_flags(nvcc: str, work: Path) -> list[str]:
    """-fopenmp for the host compiler when it has OpenMP (the emulator then runs a case's
    config runs on all cores); none otherwise."""
    probe = work / "openmp_probe.cpp"
    probe.write_text("#include <omp.h>\nint main() { return omp_get_max_threads() > 0 ? 0 : 1; }\n")
    flags = ["-Xcompiler", "-fopenmp", "-lgomp"]
    cmd = [nvcc, *flags, str(probe), "-o", str(work / "openmp_probe")]
    try:
        ok = subprocess.run(cmd, capture_output=True, timeout=300).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return flags if ok else []


@dataclass
class Build:
    binary: Optional[Path]
    error: str = ""  # the compiler's command and output when the build failed


@pytest.fixture(scope="module")
def emulator_build(tmp_path_factory) -> Callable[[str], Build]:
    """build(name): emulator `name`, compiled on first use and kept for the rest of the run."""
    builds: Dict[str, Build] = {}

    def build(name: str) -> Build:
        if name not in builds:
            builds[name] = _compile(name, tmp_path_factory)
        return builds[name]
    return build


def _compile(name: str, tmp_path_factory) -> Build:
    nvcc = _find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found ($NVCC, $CUDA_HOME/bin, PATH, /usr/local/cuda/bin): the "
                    "kernel emulation is compiled with it")
    cuda_dir = Path(os.environ.get("DECONV_PATCH_EMULATION_CUDA_DIR", ROOT / "cuda"))
    work = tmp_path_factory.mktemp(f"kernel_emulation_{name}")
    binary = work / f"{name}_emulation"
    # Host-only: no -gencode for sm_90a, so no kernel is compiled for the GPU.
    cmd = [nvcc, "-std=c++17", "-O2", "-I", str(cuda_dir), *_openmp_flags(nvcc, work),
           str(EMULATORS[name][0]), "-o", str(binary)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        return Build(None, f"{' '.join(cmd)}\ntimed out after {exc.timeout} s")
    if proc.returncode != 0:
        return Build(None, f"{' '.join(cmd)}\nexit {proc.returncode}\n"
                           f"{_tail(proc.stdout + proc.stderr)}")
    return Build(binary)


@pytest.mark.parametrize("name,mode", CASES)
def test_kernel_emulation(name: str, mode: str, emulator_build: Callable[[str], Build]):
    emulator = emulator_build(name)
    if emulator.binary is None:
        pytest.fail(f"building the {name} emulator failed:\n{emulator.error}", pytrace=False)
    try:
        proc = subprocess.run([str(emulator.binary), mode], capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{name} emulation mode {mode} ran past {exc.timeout} s", pytrace=False)
    output = proc.stdout + proc.stderr
    summaries = SUMMARY.findall(proc.stdout)
    if proc.returncode != 0 or len(summaries) != 1:
        pytest.fail(f"{name} emulation mode {mode}: exit {proc.returncode}\n{_report(output)}",
                    pytrace=False)
    seen_mode, cases, runs, checks, failures = summaries[0]
    if seen_mode != mode or int(failures) != 0 or min(int(cases), int(runs), int(checks)) == 0:
        pytest.fail(f"{name} emulation mode {mode}: unexpected summary\n{_report(output)}",
                    pytrace=False)
