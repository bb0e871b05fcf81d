"""Checkpoint files: recognise the format, load it safely, save it (all files or none:
deconv_patch/atomic_files.py), `deconv_patch.load`.

Safety: a whole pickled module runs arbitrary code when unpickled, so it is only loaded when the
caller says it trusts the file (`trust=True`, the CLI's --trust-checkpoint). State dicts load with
`weights_only=True`. A patched checkpoint written here is itself a pickled module (so that
`deconv_patch.load` returns a ready model): load only files you produced or trust.
"""

from __future__ import annotations

import fnmatch
import importlib
import io
import json
import os
import pickle
import pickletools
import re
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Dict, Mapping, Optional, Set, Union

import torch
from torch import nn

from . import renamed_modules
from .atomic_files import write_files
from .exit_codes import ExitCode

FORMAT_MARKER = "deconv_patch.patched_checkpoint"
FORMAT_VERSION = 1

PICKLE = "pickle"              # torch.save(model): any pickled object
STATE_DICT = "state_dict"      # a tensor mapping (possibly inside {"state_dict": ...})
EXPORT = "export"              # torch.export.save(program) (.pt2)
TORCHSCRIPT = "torchscript"    # torch.jit.save
PATCHED = "patched"            # our own format (found only after a trusted load)

_STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model", "net", "weights")
PathLike = Union[str, "os.PathLike[str]"]


class CheckpointError(Exception):
    """A checkpoint problem with a one-line message and the CLI exit code that names it."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Loaded:
    """What a checkpoint held: a module, a state_dict, or an exported program."""

    kind: str
    module: Optional[nn.Module] = None
    state_dict: Optional[Dict[str, torch.Tensor]] = None
    program: Any = None  # torch.export.ExportedProgram
    extra: Dict[str, Any] = field(default_factory=dict)  # our format's metadata


def _readable(path: Path) -> None:
    if not path.exists():
        raise CheckpointError(f"{path}: no such file", ExitCode.FILE_UNREADABLE)
    if not path.is_file():
        raise CheckpointError(f"{path}: not a regular file", ExitCode.FILE_UNREADABLE)
    if not os.access(path, os.R_OK):
        raise CheckpointError(f"{path}: permission denied", ExitCode.FILE_UNREADABLE)
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: empty file (truncated?)", ExitCode.CORRUPT_FILE)


def detect_format(path: PathLike) -> str:
    """The container format, read from the zip directory only (nothing is unpickled)."""
    path = Path(path)
    _readable(path)
    try:
        is_zip = zipfile.is_zipfile(path)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror})", ExitCode.FILE_UNREADABLE)
    if not is_zip:
        _check_legacy(path)
        return PICKLE
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise CheckpointError(f"{path}: corrupt zip archive ({exc})", ExitCode.CORRUPT_FILE)
    tails = {name.split("/", 1)[-1] for name in names}
    if "archive_format" in tails or any(t.startswith("models/") for t in tails):
        return EXPORT
    if "constants.pkl" in tails or any(t.startswith("code/") for t in tails):
        return TORCHSCRIPT
    if "data.pkl" not in tails:
        raise CheckpointError(f"{path}: not a PyTorch checkpoint (a zip archive without "
                              "data.pkl)", ExitCode.CORRUPT_FILE)
    return PICKLE


def _check_legacy(path: Path) -> None:
    """A non-zip file is a checkpoint only when it opens as torch.save's legacy format does: a
    pickled magic number. Anything else (text, random bytes, a plain pickle) is refused here,
    before any unpickling, so that --trust-checkpoint cannot be asked for it."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(64)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror})", ExitCode.FILE_UNREADABLE)
    if head.startswith(b"PK\x03\x04"):
        raise CheckpointError(f"{path}: truncated or corrupt zip archive (its directory is "
                              "missing)", ExitCode.CORRUPT_FILE)
    try:
        values = [arg for op, arg, _ in pickletools.genops(io.BytesIO(head))
                  if op.name not in ("PROTO", "FRAME", "STOP")]
    except Exception:  # genops raises ValueError and others on bytes that are no pickle
        values = []
    if values != [torch.serialization.MAGIC_NUMBER]:
        raise CheckpointError(f"{path}: not a PyTorch checkpoint (neither a zip archive nor a "
                              "legacy pickle)", ExitCode.CORRUPT_FILE)


def _is_tensor_dict(obj: Any) -> bool:
    return isinstance(obj, Mapping) and bool(obj) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())


def find_state_dict(obj: Any) -> Optional[Dict[str, torch.Tensor]]:
    """The state_dict in `obj`: obj itself, or the value under a usual key such as "state_dict"."""
    if _is_tensor_dict(obj):
        return dict(obj)
    if isinstance(obj, Mapping):
        for key in _STATE_DICT_KEYS:
            if _is_tensor_dict(obj.get(key)):
                return dict(obj[key])
    return None


def _torch_load(path: Path, weights_only: bool) -> Any:
    """torch.load on CPU; unpickling refusals re-raised as-is, damage as CORRUPT_FILE."""
    try:
        if weights_only:
            return torch.load(path, map_location="cpu", weights_only=True)
        return torch.load(path, map_location="cpu", weights_only=False,
                          pickle_module=renamed_modules)
    except pickle.UnpicklingError as exc:
        if weights_only and "Weights only load failed" in str(exc):
            raise
        raise CheckpointError(f"{path}: corrupt checkpoint ({_first_line(exc)})",
                              ExitCode.CORRUPT_FILE) from exc
    except (ImportError, AttributeError) as exc:
        raise CheckpointError(f"{path}: the pickled model's code cannot be imported "
                              f"({_first_line(exc)}); run from a directory where its package is "
                              "importable", ExitCode.NOT_A_MODEL) from exc
    except Exception as exc:  # garbage bytes make the unpickler fail in many ways
        raise CheckpointError(f"{path}: truncated or corrupt checkpoint ({_first_line(exc)})",
                              ExitCode.CORRUPT_FILE) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


UNTRUSTED_MESSAGE = (
    "{path}: holds a whole pickled model; unpickling it runs arbitrary code from the file. "
    "Refused. If you trust it, pass --trust-checkpoint; safer: save a state_dict and pass "
    "--model package.module:factory")
UNTRUSTED_OBJECTS_MESSAGE = (
    "{path}: its pickle names Python objects that weights-only loading refuses ({names}); "
    "unpickling them runs code from the file. Refused. If you trust it, pass --trust-checkpoint")


def _object_strings(path: Path) -> Set[str]:
    """Every string in the pickle that holds the saved object (data.pkl of a zip checkpoint, the
    fourth pickle of the legacy format), read with pickletools: nothing is executed or imported.
    ValueError and others when those bytes are not a well-formed pickle."""

    def strings(stream: IO[bytes]) -> Set[str]:
        return {arg for _op, arg, _pos in pickletools.genops(stream) if isinstance(arg, str)}

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.split("/", 1)[-1] == "data.pkl")
            return strings(io.BytesIO(archive.read(name)))
    with open(path, "rb") as handle:
        for _ in range(3):  # magic number, protocol version, system info
            strings(handle)
        return strings(handle)


def _untrusted(path: Path, refusal: pickle.UnpicklingError) -> CheckpointError:
    """Why weights-only loading refused `path`: a pickled nn.Module (whose state always names
    _parameters, _buffers and _modules), other Python objects, or bytes that are no pickle."""
    try:
        strings = _object_strings(path)
    except Exception as exc:
        return CheckpointError(f"{path}: corrupt checkpoint (its pickle is damaged: "
                               f"{_first_line(exc)})", ExitCode.CORRUPT_FILE)
    if {"_parameters", "_buffers", "_modules"} <= strings:
        return CheckpointError(UNTRUSTED_MESSAGE.format(path=path), ExitCode.UNTRUSTED_PICKLE)
    try:
        names = sorted(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    except Exception:  # the legacy format: the refusal names the first global it refused
        names = re.findall(r"GLOBAL ([\w.]+)", str(refusal))[:1]
    return CheckpointError(UNTRUSTED_OBJECTS_MESSAGE.format(
        path=path, names=", ".join(names) or "outside torch's allowlist"),
        ExitCode.UNTRUSTED_PICKLE)


def load_checkpoint(path: PathLike, *, trust: bool = False) -> Loaded:
    """Reads any supported checkpoint; whole pickled modules only with `trust=True`."""
    path = Path(path)
    kind = detect_format(path)
    if kind == TORCHSCRIPT:
        raise CheckpointError(
            f"{path}: TorchScript is not supported (its graph cannot be re-targeted); patch the "
            "Python model instead: save its state_dict and pass --model, or torch.export it "
            "(.pt2)", ExitCode.UNSUPPORTED_FORMAT)
    if kind == EXPORT:
        try:
            from . import ops  # noqa: F401  (a patched .pt2 names our op)

            return Loaded(EXPORT, program=torch.export.load(str(path)))
        except Exception as exc:
            raise CheckpointError(f"{path}: corrupt or unreadable torch.export archive "
                                  f"({_first_line(exc)})", ExitCode.CORRUPT_FILE) from exc
    try:
        obj = _torch_load(path, weights_only=True)
    except pickle.UnpicklingError as refusal:
        refused = _untrusted(path, refusal)
        # a damaged pickle is refused even when trusted: unpickling garbage proves nothing
        if not trust or refused.code == ExitCode.CORRUPT_FILE:
            raise refused from refusal
        obj = _torch_load(path, weights_only=False)
    return _classify(path, obj)


def _classify(path: Path, obj: Any) -> Loaded:
    if isinstance(obj, Mapping) and obj.get("format") == FORMAT_MARKER:
        module = obj.get("model")
        if not isinstance(module, nn.Module):
            raise CheckpointError(f"{path}: deconv_patch checkpoint without a model",
                                  ExitCode.CORRUPT_FILE)
        return Loaded(PATCHED, module=module, extra={k: v for k, v in obj.items() if k != "model"})
    if isinstance(obj, torch.jit.ScriptModule):
        raise CheckpointError(f"{path}: TorchScript is not supported", ExitCode.UNSUPPORTED_FORMAT)
    if isinstance(obj, nn.Module):
        return Loaded(PICKLE, module=obj)
    state = find_state_dict(obj)
    if state is not None:
        return Loaded(STATE_DICT, state_dict=state)
    raise CheckpointError(f"{path}: holds a {type(obj).__name__}, neither a model nor a "
                          "state_dict", ExitCode.NOT_A_MODEL)


def load_state_dict_into(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Strict load; a "module." prefix (DataParallel) is dropped. Mismatch -> one-line error."""
    if all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items()
              if k in state and tuple(state[k].shape) != tuple(v.shape)]
    if missing or unexpected or shapes:
        parts = []
        for label, items in (("missing", missing), ("unexpected", unexpected),
                             ("shape mismatch", shapes)):
            if items:
                more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
                parts.append(f"{len(items)} {label}: {', '.join(items[:3])}{more}")
        raise CheckpointError("state_dict does not match the --model architecture: "
                              + "; ".join(parts), ExitCode.STATE_DICT_MISMATCH)
    model.load_state_dict(state, strict=True)


# ------------------------------------------------------------------------------- saving


def build_from_spec(spec: str, kwargs: Mapping[str, Any]) -> nn.Module:
    """`package.module:factory(**kwargs)`, the current directory importable as with
    `python -m`; BAD_MODEL_SPEC errors say what went wrong."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CheckpointError(f"--model {spec!r}: want package.module:factory",
                              ExitCode.BAD_MODEL_SPEC)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        factory: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            factory = getattr(factory, part)
        model = factory(**kwargs)
    except Exception as exc:
        raise CheckpointError(f"--model {spec}: {type(exc).__name__}: {exc}",
                              ExitCode.BAD_MODEL_SPEC) from exc
    if not isinstance(model, nn.Module):
        raise CheckpointError(f"--model {spec} returned a {type(model).__name__}, not an "
                              "nn.Module", ExitCode.BAD_MODEL_SPEC)
    return model


def needs_recipe(model: nn.Module) -> bool:
    """Whether `model` cannot be pickled as it is: PyTorch refuses to pickle parametrized
    modules (parametrizations.spectral_norm / weight_norm); such a checkpoint stores how to
    rebuild the patched model instead (`recipe`)."""
    from torch.nn.utils import parametrize

    return any(parametrize.is_parametrized(m) for m in model.modules())


def _rebuild(recipe: Mapping[str, Any], map_location: Any) -> nn.Module:
    """The patched model a recipe describes: the architecture from its factory, the saved
    state_dict, then optimize() with the saved settings (fusion is decided on its first call)."""
    from .optimize import optimize

    model = build_from_spec(recipe["factory"], recipe.get("model_kwargs") or {})
    state = {k: v.to(map_location) if isinstance(v, torch.Tensor) else v
             for k, v in recipe["state_dict"].items()}
    load_state_dict_into(model, state)
    skip = list(recipe.get("skip") or ())

    def keep(name: str, module: Any) -> bool:
        return not any(fnmatch.fnmatchcase(name, glob) for glob in skip)

    return optimize(model.eval(), filter_fn=keep, fuse=bool(recipe.get("fuse", True)))


def patched_payload(model: nn.Module, *, autotune: Mapping[str, Any],
                    summary: Optional[Mapping[str, Any]] = None,
                    report: Optional[Mapping[str, Any]] = None,
                    source: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The dict a patched checkpoint holds: marker, version, model, planner choices, summaries
    (plain data, so they read without deconv_patch)."""
    return {
        "format": FORMAT_MARKER, "version": FORMAT_VERSION, "model": model,
        "autotune": dict(autotune), "summary": dict(summary or {}), "report": dict(report or {}),
        "source": dict(source or {}),
    }


def save_patched(path: PathLike, payload: Mapping[str, Any]) -> None:
    write_files({path: lambda handle: torch.save(dict(payload), handle)})


def load(path: PathLike, *, import_autotune: bool = True, map_location: Any = "cpu") -> nn.Module:
    """The patched model saved by `deconv-patch patch` (or `save_patched`).

    Unpickles the model (weights_only=False), which runs code from the file: use it only on files
    you produced or trust. Files that are not deconv_patch checkpoints are refused. The planner's
    recorded choices are merged into the autotune cache; the patch summary and validation report
    are on `model.deconv_patch_info` (plain data).
    """
    path = Path(path)
    if detect_format(path) != PICKLE:
        raise CheckpointError(f"{path}: not a deconv_patch checkpoint (use torch.export.load for "
                              ".pt2 files)", ExitCode.NOT_A_MODEL)
    try:
        obj = torch.load(path, map_location=map_location, weights_only=False,
                         pickle_module=renamed_modules)
    except Exception as exc:
        raise CheckpointError(f"{path}: truncated or corrupt checkpoint ({_first_line(exc)})",
                              ExitCode.CORRUPT_FILE) from exc
    if not (isinstance(obj, Mapping) and obj.get("format") == FORMAT_MARKER):
        raise CheckpointError(f"{path}: not a deconv_patch checkpoint (no format marker); load "
                              "it with torch.load", ExitCode.NOT_A_MODEL)
    if int(obj.get("version", 0)) > FORMAT_VERSION:
        raise CheckpointError(f"{path}: written by a newer deconv_patch (format version "
                              f"{obj.get('version')})", ExitCode.UNSUPPORTED_FORMAT)
    model = obj["model"]
    if model is None and isinstance(obj.get("recipe"), Mapping):
        model = _rebuild(obj["recipe"], map_location)
    if import_autotune and obj.get("autotune"):
        from .kernels.autotune import cache

        cache().import_(obj["autotune"])
    object.__setattr__(model, "deconv_patch_info", {
        k: obj.get(k) for k in ("summary", "report", "source", "autotune", "version")})
    return model


def to_jsonable(data: Any) -> Any:
    """`data` passed through JSON (tuples -> lists, odd objects -> str): plain, picklable-safe."""
    return json.loads(json.dumps(data, default=str))


__all__ = [
    "CheckpointError", "EXPORT", "FORMAT_MARKER", "FORMAT_VERSION", "Loaded", "PATCHED",
    "PICKLE", "STATE_DICT", "TORCHSCRIPT", "build_from_spec", "detect_format",
    "find_state_dict", "needs_recipe",
    "load", "load_checkpoint", "load_state_dict_into", "patched_payload", "save_patched",
    "to_jsonable",
]
