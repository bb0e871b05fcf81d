"""`swap_conv_transpose2d`: the plain patch of every nn.ConvTranspose2d submodule, in place (no
tracing, no fusion); `deconv_patch.optimize` builds on it."""

from __future__ import annotations

from typing import List, Optional

from torch import nn

from .patching import FilterFn, patch_modules


def swap_conv_transpose2d(model: nn.Module, filter_fn: Optional[FilterFn] = None) -> List[str]:
    """Patches, in place, each ConvTranspose2d submodule (at any depth) that `filter_fn`
    accepts, and returns the qualified names patched now. A module registered under several
    names is one patched object, so weight sharing survives and every name is listed; subclasses
    with their own forward and TorchScript modules are left alone."""
    return patch_modules(model, filter_fn).newly
