"""Patching a user's model in place: each nn.ConvTranspose2d module object becomes a
FastConvTranspose2d by a change of class, nothing else.

The module keeps its identity, so every reference to it (a parent's attribute, a ModuleList, a
plain list, a closure, a DataParallel wrapper, another name it is registered under) now reaches
the patched layer; its hooks, parametrizations (spectral / weight norm, both APIs), state_dict
keys and attributes stay as they were. Modules that would compute something else on our op are
left alone, each with its reason.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from .derived import original_class, set_class
from .modules import FastConvTranspose2d

FilterFn = Callable[[str, Optional[nn.Module]], bool]


@dataclass
class ModulePatch:
    """What patching the modules did: the patched layers by qualified name (a module registered
    under several names appears under its first), the ones left alone with why, and the ones
    the caller's filter kept on PyTorch."""

    patched: List[Tuple[str, FastConvTranspose2d]] = field(default_factory=list)
    left: List[Tuple[str, str]] = field(default_factory=list)
    filtered: List[str] = field(default_factory=list)
    newly: List[str] = field(default_factory=list)  # every name whose module this call patched


def unpatchable_reason(module: nn.Module) -> Optional[str]:
    """Why an nn.ConvTranspose2d cannot run on our op as it is (None when it can)."""
    cls = original_class(module)
    if cls.forward is not nn.ConvTranspose2d.forward and not isinstance(module, FastConvTranspose2d):
        return f"{cls.__name__} has its own forward, which may compute something else"
    if isinstance(module, nn.modules.lazy.LazyModuleMixin) and module.has_uninitialized_params():
        return "lazy module not initialised yet: run the model once before optimize()"
    return None


def _script_layers(name: str, module: torch.jit.ScriptModule) -> List[str]:
    """Qualified names of the ConvTranspose2d layers compiled into a TorchScript module."""
    found = []
    for sub_name, sub in module.named_modules():
        if getattr(sub, "original_name", None) == "ConvTranspose2d":
            found.append(".".join(p for p in (name, sub_name) if p))
    return found


def patch_modules(model: nn.Module, filter_fn: Optional[FilterFn] = None) -> ModulePatch:
    """Patches, in place, every nn.ConvTranspose2d reachable from `model` that `filter_fn`
    accepts (`filter_fn(name, module)`; False keeps that layer on PyTorch)."""
    result = ModulePatch()
    seen: Dict[int, bool] = {}  # id -> whether this call patched it

    def visit(prefix: str, module: nn.Module) -> None:
        if isinstance(module, torch.jit.ScriptModule):
            for name in _script_layers(prefix, module):
                result.left.append((name, "inside a TorchScript module, which runs its own "
                                          "compiled code"))
            return
        if isinstance(module, nn.ConvTranspose2d) and id(module) not in seen:
            seen[id(module)] = False
            reason = unpatchable_reason(module)
            if reason is not None:
                result.left.append((prefix, reason))
            elif filter_fn is not None and not isinstance(module, FastConvTranspose2d) \
                    and not filter_fn(prefix, module):
                result.filtered.append(prefix)
            else:
                seen[id(module)] = not isinstance(module, FastConvTranspose2d)
                set_class(module, FastConvTranspose2d, FastConvTranspose2d)
                result.patched.append((prefix, module))  # type: ignore[arg-type]
        if seen.get(id(module)):
            result.newly.append(prefix)
        # _modules, not named_children(): the latter hides a module registered twice.
        for child_name, child in module._modules.items():
            if child is not None:
                visit(f"{prefix}.{child_name}" if prefix else child_name, child)

    visit("", model)
    return result


def copy_model(model: nn.Module, memo: Optional[Dict[int, object]] = None) -> nn.Module:
    """copy.deepcopy that also copies modules holding tensors computed from their parameters
    (legacy weight_norm / spectral_norm keep `weight` as such a tensor, which deepcopy refuses):
    those are copied detached; their hooks recompute them before every forward anyway.
    `memo` (copy.deepcopy's) maps each original object to its copy afterwards."""
    memo = {} if memo is None else memo
    for module in model.modules():
        for value in module.__dict__.values():
            if isinstance(value, torch.Tensor) and not value.is_leaf:
                memo[id(value)] = value.detach().clone()
    return copy.deepcopy(model, memo)


__all__ = ["FilterFn", "ModulePatch", "copy_model", "patch_modules", "unpatchable_reason"]
