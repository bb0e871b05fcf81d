"""The `deconv-patch build` command (compile the CUDA kernels now) and the `demo` command (patch
a bundled example model and compare it with PyTorch).
"""

from __future__ import annotations

import argparse

from .output import CliError
from ..exit_codes import ExitCode


def _cmd_build(args: argparse.Namespace) -> int:
    from ..kernels.extension import ExtensionUnavailableError, _capabilities, build

    try:
        info = build()
    except ExtensionUnavailableError as exc:
        # no usable GPU is CUDA_UNAVAILABLE as for every command; a missing toolchain or a
        # failed compile is a usage problem (2)
        try:
            usable_gpu = bool(_capabilities())
        except Exception:  # a broken driver: no usable GPU either
            usable_gpu = False
        raise CliError(str(exc), ExitCode.USAGE if usable_gpu else ExitCode.CUDA_UNAVAILABLE)
    archs = ", ".join(f"sm_{a}{b}" for a, b in info.capabilities)
    print(f"deconv_patch CUDA extension ready for {archs}")
    print(f"module: {info.module_path}")
    print(f"cache:  {info.cache_dir}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(batch=args.batch, autotune=args.autotune)
