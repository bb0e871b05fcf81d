"""Where and how validate() ran (the report's Environment): versions, GPU, TF32 and cuDNN
settings, input shapes and dtypes, each patched layer's variant, and whether the patched model
fused anything.
"""

from __future__ import annotations

import platform
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn

from .._version import __version__
from ..kernels.precision import conv_tf32, matmul_tf32
from .report import Environment, dtype_name
from .layers import _LayerPair, declared_fusion
from .values import Args, Kwargs, _flatten


def _environment(device: torch.device, dtype: Optional[torch.dtype], args: Args,
                 kwargs: Kwargs, original: nn.Module, pairs: Sequence[_LayerPair],
                 patched: nn.Module) -> Environment:
    env = Environment(
        device=str(device),
        dtype=dtype_name(dtype) if dtype is not None else _main_dtype(original, args, kwargs),
        torch_version=torch.__version__,
        deconv_patch_version=__version__,
        python_version=platform.python_version(),
        platform=platform.platform(),
        cuda_version=torch.version.cuda,
        cudnn_version=torch.backends.cudnn.version() if torch.backends.cudnn.is_available()
        else None,
        tf32_matmul=matmul_tf32(),
        tf32_cudnn=conv_tf32(),
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
        deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
    )
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        env.gpu_name = torch.cuda.get_device_name(index)
        env.gpu_capability = "%d.%d" % torch.cuda.get_device_capability(index)
    from ..kernels.extension import extension_available

    env.kernels_available = extension_available()
    for path, leaf in _flatten((args, kwargs)):
        if isinstance(leaf, torch.Tensor):
            key = _input_label(path)
            env.input_shapes[key] = list(leaf.shape)
            env.input_dtypes[key] = dtype_name(leaf.dtype)
    for pair in pairs:
        backend = getattr(pair.patched, "backend", None)
        if isinstance(backend, str):
            env.variants[pair.name] = backend
    env.fusion, env.fusion_details = _fusion(original, patched, pairs)
    return env


def _input_label(path: str) -> str:
    """'(args, kwargs)' paths to 'args[0]' / "kwargs['x']"."""
    if path.startswith("[0]"):
        return "args" + path[3:]
    if path.startswith("[1]"):
        return "kwargs" + path[3:]
    return path


def _main_dtype(model: nn.Module, args: Args, kwargs: Kwargs) -> str:
    for _, leaf in _flatten((args, kwargs)):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            return dtype_name(leaf.dtype)
    for p in model.parameters():
        return dtype_name(p.dtype)
    return "float32"


def _fusion(original: nn.Module, patched: nn.Module, pairs: Sequence[_LayerPair]
            ) -> Tuple[bool, List[str]]:
    """Whether the patched model fused anything: layers declaring it (see declared_fusion), or
    modules of the original that are gone from the patched one (folded away, or renamed)."""
    details = [f"{name}: {what}" for name, what in declared_fusion(patched).items()]
    patched_names = {n for n, _ in patched.named_modules()}
    gone = [n for n, _ in original.named_modules() if n and n not in patched_names]
    if gone:
        shown = ", ".join(gone[:5]) + (", ..." if len(gone) > 5 else "")
        details.append(f"{len(gone)} module(s) of the original absent from the patched model "
                       f"(fused or renamed): {shown}")
    return bool(details), details
