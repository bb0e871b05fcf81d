"""The C++ runtime the build units link (deconv_patch/kernels/extension.py, runtime_libstdcxx):
a compiler that links its libstdc++ statically puts a second copy of the C++ runtime into an
extension, and a number formatted into a torch error message then crashes the process or goes
missing. Built with that library on the link line, the same extension formats it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deconv_patch.kernels.extension import runtime_libstdcxx

pytestmark = pytest.mark.extended  # two small extension builds: about a minute on 2 cores

# Builds a one-function extension whose error message formats an integer, then calls it.
SCRIPT = """
import random, sys
from torch.utils.cpp_extension import load_inline
from deconv_patch.kernels.extension import runtime_libstdcxx
code = random.randint(10, 10**6)
source = 'void f(int64_t c) { TORCH_CHECK(c < 0, "family code ", c, " is not loaded"); }'
flags = runtime_libstdcxx() if sys.argv[1] == "linked" else []
module = load_inline(name="runtime_probe_" + sys.argv[1], cpp_sources=[source], functions=["f"],
                     extra_ldflags=flags, build_directory=sys.argv[2])
try:
    module.f(code)
except RuntimeError as exc:
    print("expected", f"family code {code} is not loaded")
    print("message", str(exc).splitlines()[0])
"""


def _static_runtime_compiler(folder: Path) -> Path:
    """A compiler that links libstdc++ statically, as a toolchain with only libstdc++.a does."""
    gxx = shutil.which("g++")
    if gxx is None or not shutil.which("ninja"):
        pytest.skip("needs g++ and ninja")
    archive = subprocess.run([gxx, "-print-file-name=libstdc++.a"], capture_output=True,
                             text=True).stdout.strip()
    if not os.path.isabs(archive):
        pytest.skip("this g++ has no static libstdc++ to link")
    wrapper = folder / "g++-static-runtime"
    wrapper.write_text(f'#!/bin/sh\nexec {gxx} -static-libstdc++ "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def _probe(kind: str, tmp_path: Path, compiler: Path) -> subprocess.CompletedProcess:
    build = tmp_path / kind
    build.mkdir()
    return subprocess.run([sys.executable, "-c", SCRIPT, kind, str(build)], capture_output=True,
                          text=True, timeout=900, cwd=Path(__file__).resolve().parents[2],
                          env={**os.environ, "CXX": str(compiler)})


def _message(done: subprocess.CompletedProcess) -> tuple:
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines()
                 if line.startswith(("expected ", "message ")))
    return lines.get("expected"), lines.get("message")


def test_units_link_the_process_cxx_runtime(tmp_path):
    assert runtime_libstdcxx() and Path(runtime_libstdcxx()[0]).name.startswith("libstdc++.so")
    compiler = _static_runtime_compiler(tmp_path)

    linked = _probe("linked", tmp_path, compiler)
    assert linked.returncode == 0, linked.stderr[-3000:]
    expected, message = _message(linked)
    assert expected and message == expected, linked.stdout

    # The same build without it shows the failure the flag prevents (a crash or a message that
    # lost its number), so the check above is not vacuous on this toolchain.
    alone = _probe("alone", tmp_path, compiler)
    expected, message = _message(alone)
    assert alone.returncode != 0 or message != expected, alone.stdout
