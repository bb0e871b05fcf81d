"""The `deconv-patch` console script.

Every failure ends with one `error: ...` line and a distinct exit code (deconv_patch.exit_codes);
tracebacks only with --debug.
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import json
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._version import __version__
from .cli_output import (
    CliError, FileWriter, check_output, check_report, report_writer, state_dict_path,
    write_outputs,
)
from .exit_codes import ExitCode
from .patching import copy_model


# ----------------------------------------------------------------------- existing commands


def _cmd_build(args: argparse.Namespace) -> int:
    from .extension import ExtensionUnavailableError, _capabilities, build

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

    return run_demo(batch=args.batch)


# ----------------------------------------------------------------------- shared helpers

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


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


@dataclass
class Target:
    """Where and in what precision the command runs."""

    device: Any  # torch.device
    dtype: Any   # torch.dtype
    channels_last: bool


def _target(args: argparse.Namespace) -> Target:
    import torch

    name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise CliError(f"bad --device {name!r}: {exc}", ExitCode.USAGE)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise CliError(f"--device {name}: CUDA is not available on this machine (torch "
                           f"{torch.__version__}, cuda {torch.version.cuda}); use --device cpu",
                           ExitCode.CUDA_UNAVAILABLE)
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise CliError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s)",
                           ExitCode.CUDA_UNAVAILABLE)
    dtype = getattr(torch, _DTYPES[getattr(args, "dtype", "fp32") or "fp32"])
    return Target(device, dtype, bool(getattr(args, "channels_last", False)))


def _inputs(shapes: Sequence[Tuple[int, ...]], target: Target) -> Tuple[Any, ...]:
    import torch

    out = []
    for shape in shapes:
        t = torch.randn(*shape, device=target.device, dtype=target.dtype)
        if target.channels_last and t.dim() == 4:
            t = t.contiguous(memory_format=torch.channels_last)
        out.append(t)
    return tuple(out)


def _place(model: Any, target: Target) -> Any:
    import torch

    model = model.to(device=target.device, dtype=target.dtype)
    if target.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def _build_architecture(spec: Optional[str], kwargs_text: Optional[str]) -> Any:
    """Calls `package.module:factory(**json_kwargs)`; the current directory is importable, as
    with `python -m`."""
    if not spec:
        raise CliError("this checkpoint is a state_dict: pass --model package.module:factory to "
                       "build the architecture", ExitCode.BAD_MODEL_SPEC)
    try:
        kwargs = json.loads(kwargs_text) if kwargs_text else {}
    except ValueError as exc:
        raise CliError(f"--model-kwargs is not JSON: {exc}", ExitCode.BAD_MODEL_SPEC)
    if not isinstance(kwargs, dict):
        raise CliError("--model-kwargs must be a JSON object", ExitCode.BAD_MODEL_SPEC)
    from .checkpoint import CheckpointError, build_from_spec

    try:
        model = build_from_spec(spec, kwargs)
    except CheckpointError as exc:
        raise CliError(str(exc), exc.code)
    return model


@dataclass
class Source:
    """A loaded input: an eager model (and how it was made) or an exported program."""

    kind: str
    model: Any = None
    program: Any = None
    state_dict: Any = None
    extra: Any = None


def _load(path: str, args: argparse.Namespace) -> Source:
    from . import checkpoint as ck

    if os.getcwd() not in sys.path:  # pickled models name their classes by module path
        sys.path.insert(0, os.getcwd())
    loaded = ck.load_checkpoint(path, trust=bool(getattr(args, "trust_checkpoint", False)))
    if loaded.kind == ck.STATE_DICT:
        model = _build_architecture(getattr(args, "model", None),
                                    getattr(args, "model_kwargs", None))
        ck.load_state_dict_into(model, loaded.state_dict)
        return Source(ck.STATE_DICT, model=model.eval(), state_dict=loaded.state_dict)
    if loaded.kind == ck.EXPORT:
        return Source(ck.EXPORT, program=loaded.program)
    return Source(loaded.kind, model=loaded.module.eval(), extra=loaded.extra)


def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _oom_error(what: str, exc: BaseException) -> CliError:
    return CliError(f"out of GPU memory during {what}; try a smaller batch (first dimension of "
                    f"--input-shape) or --dtype bf16 ({str(exc).splitlines()[0][:120]})",
                    ExitCode.OUT_OF_MEMORY)


def _check_inputs(model: Any, inputs: Tuple[Any, ...]) -> None:
    """Runs the model once so a wrong --input-shape fails here with the model's own error."""
    import torch

    try:
        with torch.no_grad():
            model(*inputs)
    except Exception as exc:
        if _is_oom(exc):
            raise _oom_error("the first forward", exc)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        shapes = " ".join(",".join(map(str, t.shape)) for t in inputs)
        raise CliError(f"the model rejected --input-shape {shapes}: {type(exc).__name__}: "
                       f"{first}", ExitCode.BAD_INPUT_SHAPE)


def _validate(original: Any, patched: Any, inputs: Tuple[Any, ...]) -> Any:
    """The validation report of `patched` against `original`, printed; out of GPU memory
    becomes its own exit code."""
    from .validation import validate

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = validate(original, patched, inputs, progress=False)
    except Exception as exc:
        if _is_oom(exc):
            raise _oom_error("validation", exc)
        raise
    print(report)
    return report


def _report_files(report: Any, args: argparse.Namespace) -> Dict[Path, FileWriter]:
    """{--report path: its writer}, or nothing without --report."""
    return {Path(args.report): report_writer(report, args.report)} if args.report else {}


def _refused(report: Any, out: Path, args: argparse.Namespace) -> Optional[int]:
    """VALIDATION_FAILED (after writing the report, which says why, and saying OUT is not
    written) when the report failed, else None."""
    if report.passed:
        return None
    write_outputs(_report_files(report, args))
    print(f"error: validation failed ({report.verdict}); {out} not written", file=sys.stderr)
    return ExitCode.VALIDATION_FAILED


def _cpu_note(target: Target) -> None:
    if target.device.type != "cuda":
        print(f"note: on {target.device} nothing is faster: without CUDA the patched model runs "
              "PyTorch's own kernels; the speedup needs a CUDA GPU")


# ----------------------------------------------------------------------- patch


def _cmd_patch(args: argparse.Namespace) -> int:
    import torch

    from . import checkpoint as ck
    from .autotune import cache
    from .optimize import optimize
    from .summary import get_summary

    out = Path(args.output)
    check_output(out, args.force, "OUT", [args.input])
    if not args.no_validate:
        check_report(args.report, args.force)
    target = _target(args)
    source = _load(args.input, args)
    if source.kind == ck.STATE_DICT:
        check_output(state_dict_path(out), args.force, "state_dict output", [args.input])
    _cpu_note(target)
    if source.kind == ck.EXPORT:
        return _patch_program(args, source, out, target)
    if not args.input_shape:
        raise CliError("--input-shape is required (one per positional input)", ExitCode.USAGE)
    original = _place(copy_model(source.model), target)
    inputs = _inputs(args.input_shape, target)
    _check_inputs(original, inputs)

    def keep(name: str, module: Any) -> bool:
        return not any(fnmatch.fnmatchcase(name, glob) for glob in args.skip or ())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            patched = optimize(original, inputs, filter_fn=keep, fuse=not args.no_fuse)
        except Exception as exc:
            if _is_oom(exc):
                raise _oom_error("patching", exc)
            raise
    summary = get_summary(patched)
    if summary is None or not summary.layers:
        print(f"nothing to patch: {summary.reason if summary else 'no ConvTranspose2d'}; "
              "nothing written")
        return ExitCode.OK
    print(summary.table())
    report = None
    if not args.no_validate:
        report = _validate(original, patched, inputs)
        refused = _refused(report, out, args)
        if refused is not None:
            return refused
    elif args.report:
        print("note: --report ignored with --no-validate", file=sys.stderr)
    payload = ck.patched_payload(
        patched, autotune=cache().export(),
        summary=ck.to_jsonable(summary.to_dict()),
        report=ck.to_jsonable({"passed": report.passed, "verdict": report.verdict})
        if report is not None else {"validated": False},
        source={"input": str(args.input), "format": source.kind, "model": args.model,
                "model_kwargs": args.model_kwargs, "dtype": args.dtype,
                "device": str(target.device), "channels_last": target.channels_last,
                "input_shapes": [list(s) for s in args.input_shape],
                "deconv_patch": __version__},
    )
    sd_path = state_dict_path(out)
    plain = {k: v.detach().cpu() for k, v in source.model.state_dict().items()}
    if ck.needs_recipe(patched):
        if source.kind != ck.STATE_DICT:
            raise CliError("the model has parametrized modules (spectral_norm / weight_norm), "
                           "which PyTorch cannot pickle: patch its state_dict with --model "
                           "instead", ExitCode.UNSUPPORTED_FORMAT)
        # rebuilt on load from the factory and state_dict (see checkpoint.needs_recipe)
        payload.update(model=None, recipe={
            "factory": args.model, "model_kwargs": json.loads(args.model_kwargs or "{}"),
            "state_dict": plain, "fuse": not args.no_fuse, "skip": list(args.skip or ())})
    files: Dict[Path, FileWriter] = {out: lambda handle: torch.save(payload, handle)}
    if source.kind == ck.STATE_DICT:
        files[sd_path] = lambda handle: torch.save(plain, handle)
    if report is not None:
        files.update(_report_files(report, args))
    write_outputs(files)
    print(f"wrote {out} (load with deconv_patch.load)")
    if source.kind == ck.STATE_DICT:
        print(f"wrote {sd_path}: plain state_dict for the original architecture")
    if report is not None and args.report:
        print(f"wrote {args.report}")
    return ExitCode.OK


def _patch_program(args: argparse.Namespace, source: Source, out: Path, target: Target) -> int:
    import torch

    from .export_patch import count_patched, find_layers, patch_program

    program = source.program
    original = copy.deepcopy(program)
    found = find_layers(program)
    layers = patch_program(program, all_layers=args.all_layers)
    left = [layer.node for layer in found if layer not in layers]
    if not layers:
        already = count_patched(program)
        on_gpu = ("cuDNN runs them as fast" if target.device.type == "cuda"
                  else "on a CUDA GPU, cuDNN runs them as fast")
        why = (f"none of its {len(left)} transposed convolution(s) would run a deconv_patch "
               f"kernel ({on_gpu}; --all-layers routes them anyway)" if left
               else "no transposed convolutions in the exported graph")
        print(f"nothing to patch: {why}" + (f" ({already} already patched)" if already else "")
              + "; nothing written")
        return ExitCode.OK
    print(f"patched {len(layers)} transposed convolution node(s) of the exported graph: "
          + ", ".join(layer.node for layer in layers))
    if left:
        print(f"left on PyTorch (no deconv_patch kernel would run them; --all-layers routes "
              f"them anyway): {', '.join(left)}")
    report = None
    if not args.no_validate:
        shapes = args.input_shape
        if shapes:
            inputs = _inputs(shapes, target)
        else:  # the program's own example inputs, when it carries them
            example = getattr(program, "example_inputs", None)
            if not example or not example[0]:
                raise CliError("--input-shape is required for this .pt2 (no example inputs)",
                               ExitCode.USAGE)
            inputs = tuple(t.to(target.device) for t in example[0])
        ref = original.module().to(target.device)
        _check_inputs(ref, inputs)
        # validate a copy: moving program.module() to the device would move the program's own
        # weights, and the .pt2 written below must stay on the device it came from
        candidate = copy.deepcopy(program).module().to(target.device)
        report = _validate(ref, candidate, inputs)
        refused = _refused(report, out, args)
        if refused is not None:
            return refused
    files: Dict[Path, FileWriter] = {out: lambda handle: torch.export.save(program, handle)}
    if report is not None:
        files.update(_report_files(report, args))
    write_outputs(files)
    print(f"wrote {out} (torch.export.load reads it after `import deconv_patch`)")
    if report is not None and args.report:
        print(f"wrote {args.report}")
    return ExitCode.OK


# ----------------------------------------------------------------------- validate / info / bench


def _eager(source: Source, target: Target) -> Any:
    model = source.model if source.program is None else source.program.module()
    return _place(model, target)


def _cmd_validate(args: argparse.Namespace) -> int:
    check_report(args.report, args.force)
    target = _target(args)
    original = _eager(_load(args.original, args), target)
    patched = _eager(_load(args.patched, args), target)
    inputs = _inputs(args.input_shape, target)
    _check_inputs(original, inputs)
    _check_inputs(patched, inputs)
    report = _validate(original, patched, inputs)
    write_outputs(_report_files(report, args))
    return ExitCode.OK if report.passed else ExitCode.VALIDATION_FAILED


def _cmd_info(args: argparse.Namespace) -> int:
    from torch import nn

    from .arguments import ConvTransposeArgs
    from .planner import plan_layer

    target = _target(args)
    source = _load(args.input, args)
    rows: List[List[str]] = []
    if source.program is not None:
        from .export_patch import count_patched, find_layers

        for layer in find_layers(source.program):
            k = layer.weight_shape[2:] or ("?", "?")
            cargs = ConvTransposeArgs(layer.stride, layer.padding, layer.output_padding,  # type: ignore[arg-type]
                                      layer.dilation, layer.groups)  # type: ignore[arg-type]
            per_group = ((layer.weight_shape[0] // layer.groups, layer.weight_shape[1])
                         if layer.weight_shape else None)
            plan = plan_layer(target.device, target.dtype, k, cargs, per_group)  # type: ignore[arg-type]
            cin = layer.weight_shape[0] if layer.weight_shape else "?"
            cout = layer.weight_shape[1] * layer.groups if layer.weight_shape else "?"
            rows.append([layer.node, str(cin), str(cout), _p(k), _p(layer.stride),
                         _p(layer.padding), _p(layer.output_padding), _p(layer.dilation),
                         str(layer.groups), str(layer.bias), plan.variant, plan.reason])
        done = count_patched(source.program)
        if done:
            print(f"{done} node(s) already call torch.ops.deconv_patch.conv_transpose2d")
    else:
        for name, m in source.model.named_modules():
            if isinstance(m, nn.ConvTranspose2d):
                cargs = ConvTransposeArgs(m.stride, m.padding, m.output_padding,  # type: ignore[arg-type]
                                          m.dilation, m.groups)  # type: ignore[arg-type]
                plan = plan_layer(target.device, target.dtype, m.kernel_size, cargs,
                                  (m.in_channels // m.groups, m.out_channels // m.groups))
                rows.append([name, str(m.in_channels), str(m.out_channels), _p(m.kernel_size),
                             _p(m.stride), _p(m.padding), _p(m.output_padding), _p(m.dilation),
                             str(m.groups), str(m.bias is not None), plan.variant, plan.reason])
    if not rows:
        print(f"nothing to patch: {args.input} has no ConvTranspose2d")
        return ExitCode.OK
    from .report import format_table

    print(f"{len(rows)} ConvTranspose2d layer(s) in {args.input} ({source.kind}); variant on "
          f"{target.device} {str(target.dtype).replace('torch.', '')}:")
    print(format_table(["layer", "in", "out", "k", "s", "p", "op", "d", "g", "bias", "variant",
                        "why"], rows))
    return ExitCode.OK


def _p(v: Sequence[Any]) -> str:
    a, b = tuple(v)
    return str(a) if a == b else f"{a}x{b}"


def _cmd_bench(args: argparse.Namespace) -> int:
    import torch

    from .optimize import optimize

    target = _target(args)
    source = _load(args.input, args)
    original = _eager(source, target)
    inputs = _inputs(args.input_shape, target)
    _check_inputs(original, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        patched = original if source.kind == "patched" else optimize(original, inputs)
    try:
        with torch.no_grad():
            if target.device.type == "cuda":
                from .timing import time_interleaved

                t_o, t_p = time_interleaved([lambda: original(*inputs), lambda: patched(*inputs)],
                                            args.warmup, args.reps)
                ms_o, ms_p = _median(t_o), _median(t_p)
            else:
                ms_o, ms_p = (_cpu_ms(lambda: f(*inputs), args.warmup, args.reps)
                              for f in (original, patched))
    except Exception as exc:
        if _is_oom(exc):
            raise _oom_error("timing", exc)
        raise
    where = f"{target.device} {str(target.dtype).replace('torch.', '')}"
    if target.device.type == "cuda":
        print(f"forward on {where}: PyTorch {ms_o:.3f} ms, deconv_patch {ms_p:.3f} ms, speedup "
              f"{ms_o / ms_p:.2f}x (median of {args.reps})")
        return ExitCode.OK
    # both sides run PyTorch's kernels here: a ratio would be timing noise presented as a result
    print(f"forward on {where}: original {ms_o:.3f} ms, patched {ms_p:.3f} ms (median of "
          f"{args.reps}); this compares PyTorch with PyTorch: off CUDA the patched model runs "
          "PyTorch's own kernels, so nothing is faster here; run bench on a CUDA GPU to measure "
          "deconv_patch")
    return ExitCode.OK


def _median(samples: Any) -> float:
    for attr in ("median_ms", "median"):
        if hasattr(samples, attr):
            return float(getattr(samples, attr))
    return float(statistics.median(samples))


def _cpu_ms(fn: Callable[[], Any], warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


# ----------------------------------------------------------------------- parser


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
    p_demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:  # a missing command is an argument error
        parser.print_help(sys.stderr)
        print(f"{parser.prog}: error: a command is required", file=sys.stderr)
        return int(ExitCode.USAGE)
    from .checkpoint import CheckpointError

    try:
        return int(args.func(args))
    except (CliError, CheckpointError) as exc:
        if getattr(args, "debug", False):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.code)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        if _is_oom(exc):
            print(f"error: {_oom_error('the run', exc)}", file=sys.stderr)
            return int(ExitCode.OUT_OF_MEMORY)
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"error: {type(exc).__name__}: {first} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)


if __name__ == "__main__":
    sys.exit(main())
