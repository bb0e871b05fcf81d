"""The `deconv-patch` argument parser: the subcommands, their options, and --input-shape
parsing."""

from __future__ import annotations

import argparse
from typing import Tuple

from .._version import __version__
from .bench import _cmd_bench
from .build_demo import _cmd_build, _cmd_demo
from .info import _cmd_info
from .loading import _DTYPES
from .patch import _cmd_patch
from .validate import _cmd_validate


def parse_shape(text: str) -> Tuple[int, ...]:
    """'1,3,256,256' -> (1, 3, 256, 256); argparse turns the ValueError into a usage error."""
    try:
        dims = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: want comma-separated ints")
    if not dims or any(d < 0 for d in dims):
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: want comma-separated ints >= 1")
    if 0 in dims:
        raise argparse.ArgumentTypeError(
            f"bad shape {text!r}: a zero dimension makes an empty input, and comparing empty "
            "outputs proves nothing; every dimension must be >= 1")
    return dims


def _common(p: argparse.ArgumentParser, *, shapes: bool, required_shape: bool = False,
            model: bool = True) -> None:
    if shapes:
        p.add_argument("--input-shape", action="append", type=parse_shape,
                       required=required_shape, metavar="N,C,H,W",
                       help="shape of one positional input (repeat for several inputs)")
        p.add_argument("--dtype", choices=sorted(_DTYPES), default="fp32",
                       help="cast model copies and inputs to this dtype (default fp32)")
        p.add_argument("--channels-last", action="store_true",
                       help="channels_last model and inputs")
    p.add_argument("--device", default=None,
                   help="e.g. cpu, cuda, cuda:0 (default: cuda when available, else cpu)")
    if model:
        p.add_argument("--model", metavar="PKG.MODULE:FACTORY",
                       help="builds the architecture for a state_dict checkpoint (the current "
                            "directory is importable)")
        p.add_argument("--model-kwargs", metavar="JSON", help="keyword arguments for --model")
    p.add_argument("--trust-checkpoint", action="store_true",
                   help="allow loading whole pickled models (runs code from the file: only for "
                        "files you trust)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deconv-patch",
        description="Make PyTorch models with transposed convolutions faster, same results.",
        epilog="Exit codes: see deconv_patch/exit_codes.py (0 ok, 1 validation failed, ...).",
    )
    parser.add_argument("--version", action="version", version=f"deconv-patch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("patch", help="patch a checkpoint, validate it, save it",
                       description="Load IN (state_dict + --model, pickled model with "
                       "--trust-checkpoint, or torch.export .pt2), patch, validate, save OUT.")
    p.add_argument("input", metavar="IN")
    p.add_argument("-o", "--output", metavar="OUT", required=True)
    _common(p, shapes=True)
    p.add_argument("--no-fuse", action="store_true", help="do not fold BatchNorm into the convs")
    p.add_argument("--skip", action="append", metavar="NAME_GLOB",
                   help="leave layers whose name matches on PyTorch (repeatable)")
    p.add_argument("--report", metavar="FILE", help="write the report (.html, .json or .md)")
    p.add_argument("--no-validate", action="store_true", help="save without validating")
    p.add_argument("--force", action="store_true", help="replace an existing OUT / report")
    p.add_argument("--all-layers", action="store_true",
                   help=".pt2 only: route every transposed convolution through deconv_patch's "
                   "op, also those the planner would leave on cuDNN")
    p.set_defaults(func=_cmd_patch)

    p = sub.add_parser("validate", help="side-by-side report of two checkpoints",
                       description="Compare PATCHED with ORIGINAL on random inputs.")
    p.add_argument("original", metavar="ORIGINAL")
    p.add_argument("patched", metavar="PATCHED")
    _common(p, shapes=True, required_shape=True)
    p.add_argument("--report", metavar="FILE", help="write the report (.html, .json or .md)")
    p.add_argument("--force", action="store_true", help="replace an existing report")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("info", help="list ConvTranspose2d layers and the variant each would get",
                       description="List every ConvTranspose2d of IN without patching.")
    p.add_argument("input", metavar="IN")
    _common(p, shapes=False)
    p.add_argument("--dtype", choices=sorted(_DTYPES), default="fp32")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("bench", help="time IN before and after patching",
                       description="Forward timing only, PyTorch vs deconv_patch.")
    p.add_argument("input", metavar="IN")
    _common(p, shapes=True, required_shape=True)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=20)
    p.set_defaults(func=_cmd_bench)

    p_build = sub.add_parser("build", help="compile the CUDA kernels now and print the cache path")
    p_build.set_defaults(func=_cmd_build)
    p_demo = sub.add_parser("demo", help="patch a bundled example model and compare with PyTorch")
    p_demo.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    p_demo.add_argument("--autotune", action="store_true",
                        help="turn cudnn.benchmark on for the run: cuDNN times its algorithms "
                             "and deconv_patch its kernels (the first run then compiles every "
                             "candidate's kernels); default: PyTorch's default settings")
    p_demo.set_defaults(func=_cmd_demo)
    return parser
