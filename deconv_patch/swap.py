"""Swap every nn.ConvTranspose2d submodule for a FastConvTranspose2d, by qualified name.

The plain, always-applicable patch (no tracing, no fusion). The fx pass builds on it.
"""

from __future__ import annotations

from typing import Callable, List, Optional

from torch import nn

from .modules import FastConvTranspose2d

FilterFn = Callable[[str, nn.Module], bool]


def swap_conv_transpose2d(model: nn.Module, filter_fn: Optional[FilterFn] = None) -> List[str]:
    """Replace, in place, each ConvTranspose2d child (at any depth) that `filter_fn` accepts.

    Returns the qualified names replaced. A module registered under several names is replaced
    by one FastConvTranspose2d everywhere, so weight sharing survives.
    """
    replaced: List[str] = []
    swapped = {}  # id(original) -> its replacement
    for parent_name, parent in list(model.named_modules(remove_duplicate=False)):
        # _modules, not named_children(): the latter hides a module registered twice.
        for child_name, child in list(parent._modules.items()):
            if not isinstance(child, nn.ConvTranspose2d) or isinstance(child, FastConvTranspose2d):
                continue
            if type(child).forward is not nn.ConvTranspose2d.forward:
                continue  # a subclass with its own forward computes something else: leave it
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if filter_fn is not None and not filter_fn(name, child):
                continue
            if id(child) not in swapped:
                swapped[id(child)] = FastConvTranspose2d.from_module(child)
            setattr(parent, child_name, swapped[id(child)])
            replaced.append(name)
    return replaced
