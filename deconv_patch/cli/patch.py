"""The `deconv-patch patch` command: load IN, patch it (an eager model with optimize(), an
exported .pt2 program node by node), validate it unless --no-validate, and write OUT (plus the
plain state_dict and the report); a failed validation writes no OUT.
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import json
import sys
import warnings
from pathlib import Path
from typing import Any, Dict

from .._version import __version__
from .loading import (
    Source, Target, _check_inputs, _inputs, _is_oom, _load, _oom_error, _place, _target,
)
from .output import (
    CliError, FileWriter, check_output, check_report, state_dict_path, write_outputs,
)
from .validate import _refused, _report_files, _validate
from ..exit_codes import ExitCode
from ..patching import copy_model


def _cpu_note(target: Target) -> None:
    if target.device.type != "cuda":
        print(f"note: on {target.device} nothing is faster: without CUDA the patched model runs "
              "PyTorch's own kernels; the speedup needs a CUDA GPU")


def _cmd_patch(args: argparse.Namespace) -> int:
    import torch

    from .. import checkpoint as ck
    from ..kernels.autotune import cache
    from ..optimize import optimize
    from ..summary import get_summary

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

    from ..export_patch import count_patched, find_layers, patch_program

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
