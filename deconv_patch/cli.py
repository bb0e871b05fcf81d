"""The `deconv-patch` console script."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ._version import __version__


def _cmd_build(args: argparse.Namespace) -> int:
    from .extension import ExtensionUnavailableError, build

    try:
        info = build()
    except ExtensionUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    archs = ", ".join(f"sm_{a}{b}" for a, b in info.capabilities)
    print(f"deconv_patch CUDA extension ready for {archs}")
    print(f"module: {info.module_path}")
    print(f"cache:  {info.cache_dir}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(batch=args.batch)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deconv-patch",
        description="Make PyTorch models with transposed convolutions faster, same results.",
    )
    parser.add_argument("--version", action="version", version=f"deconv-patch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p_build = sub.add_parser("build", help="compile the CUDA kernels now and print the cache path")
    p_build.set_defaults(func=_cmd_build)
    p_demo = sub.add_parser("demo", help="patch a bundled example model and compare with PyTorch")
    p_demo.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    p_demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
