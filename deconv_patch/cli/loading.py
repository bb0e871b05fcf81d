"""What a `deconv-patch` command works on: the target (device, dtype, channels_last) from its
options, random inputs of the given shapes, the model loaded from a checkpoint (the architecture
built for a state_dict), and a first forward that turns a wrong --input-shape or running out of
GPU memory into a CliError.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from .output import CliError
from ..exit_codes import ExitCode


_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


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
    from ..checkpoint import CheckpointError, build_from_spec

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
    from .. import checkpoint as ck

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


def _eager(source: Source, target: Target) -> Any:
    model = source.model if source.program is None else source.program.module()
    return _place(model, target)


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
