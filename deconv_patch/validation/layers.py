"""The layers validate() reports, and what each is compared with.

find_layers pairs the patched model's layers with the original's by qualified name. A patched
layer that fused modules into its one call (BatchNorm, an activation: declared_fusion, its fused
chain) is compared with a counterpart built from the original: the layer, then the modules it
absorbed, then the activation its epilogue applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch
from torch import nn

from ..derived import original_class
from ..epilogue import activate, activation_of_module
from ..modules import FastConvTranspose2d
from .capture import _Capture


@dataclass
class _LayerPair:
    name: str
    original: Optional[nn.Module]
    patched: nn.Module
    fused_with: List[str] = field(default_factory=list)


class _Chained(nn.Module):
    """The original's counterpart of a fused layer: the layer, then the modules folded into it
    (e.g. ConvTranspose2d then BatchNorm2d). Holds references only; nothing is copied."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        super().__init__()
        self.chain = nn.ModuleList(modules)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self.chain[0](*args, **kwargs)
        for module in self.chain[1:]:
            out = module(out)
        return out

    def type_name(self) -> str:
        return "+".join(type(m).__name__ for m in self.chain)


class _FusedActivation(nn.Module):
    """The activation a patched layer applies in its epilogue, as a module: appended to the
    original's counterpart when that activation is not a module the patched model lost (a
    function call such as torch.tanh, or an activation module shared with other layers)."""

    def __init__(self, name: str, negative_slope: float) -> None:
        super().__init__()
        self.name, self.negative_slope = name, negative_slope

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return activate(y, self.name, self.negative_slope)


def _counterpart(head: Optional[nn.Module], modules: Mapping[str, nn.Module],
                 chain: Sequence[str], extra: Sequence[nn.Module]) -> Optional[nn.Module]:
    """`head` (a layer of the original, or of a float64 copy) followed by the named modules
    it absorbed and `extra` (the epilogue's activation): the counterpart of a fused layer."""
    if head is None:
        return None
    return _Chained([head] + [modules[n] for n in chain] + list(extra))


def _epilogue_activation(patched: nn.Module, chain: Sequence[nn.Module]
                         ) -> Optional[_FusedActivation]:
    """The fused activation of `patched` that `chain` (the original's absorbed modules) does not
    already compute, or None."""
    name = getattr(patched, "activation", "none")
    if name == "none" or any(activation_of_module(m) is not None for m in chain):
        return None
    return _FusedActivation(name, float(getattr(patched, "negative_slope", 0.01)))


def declared_fusion(patched: nn.Module) -> Dict[str, str]:
    """Layer name -> what it fused, from the optimize() summary attached to the model (its
    `fused` column) or a module's own `fused_ops` attribute."""
    found: Dict[str, str] = {}
    try:
        from ..summary import get_summary

        summary = get_summary(patched)
    except Exception:  # no summary module, or none attached
        summary = None
    for layer in getattr(summary, "layers", None) or ():
        fused = getattr(layer, "fused", "-")
        if fused and fused != "-":
            found[str(layer.name)] = str(fused)
    for name, module in patched.named_modules():
        ops = getattr(module, "fused_ops", None)
        if ops and name:
            found.setdefault(name, ", ".join(map(str, ops)))
    return found


def _fused_chains(patched: nn.Module) -> Dict[str, List[str]]:
    """Patched layer name -> the names of the BatchNorm / activation its fused chain runs."""
    names: Dict[int, str] = {}
    for name, module in patched.named_modules():
        names.setdefault(id(module), name)
    found: Dict[str, List[str]] = {}
    for name, module in patched.named_modules():
        chain = module.__dict__.get("_fused_chain")
        if chain is not None and name:
            found[name] = [names[id(x)] for x in (chain.bn, chain.act)
                           if x is not None and id(x) in names]
    return found


def _chain_runs_fused(layer: nn.Module) -> bool:
    """Whether the layer's fused chain runs fused in the model as it is now (eval BatchNorm,
    chain not switched off)."""
    chain = layer.__dict__.get("_fused_chain")
    return chain is not None and chain.disabled is None and (
        chain.bn is None or not chain.bn.training)


class _FusedLayer(nn.Module):
    """A patched layer running its fused chain (FastConvTranspose2d.forward_fused): what the
    model computes in eval mode in that layer's one call."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer
        chain = layer.__dict__["_fused_chain"]
        self.activation, self.negative_slope = chain.activation, chain.negative_slope

    @property
    def backend(self) -> str:
        return self.layer.backend

    def plan_for(self, input: torch.Tensor) -> Any:
        return self.layer.plan_for(input)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.layer.forward_fused(input)


def _follow_fusion(name: str, followers: Mapping[str, "_Capture"]) -> List[str]:
    """The folded-away original modules that took `name`'s output, then each other's, in order."""
    chain: List[str] = []
    producer = name
    while True:
        nxt = next((n for n, c in followers.items() if c.fed_by == producer and n not in chain),
                   None)
        if nxt is None:
            return chain
        chain.append(nxt)
        producer = nxt


def _is_patched_layer(module: nn.Module) -> bool:
    return isinstance(module, FastConvTranspose2d) or hasattr(module, "backend")


def find_layers(original: nn.Module, patched: nn.Module,
                extra: Sequence[str] = ()) -> List[_LayerPair]:
    """The layers to report: every module of `patched` with a `backend` (FastConvTranspose2d),
    every non-root module whose type differs from the same-named one in `original`, and the
    names in `extra`. Matched by qualified name; a name absent from `original` is patched-only.
    """
    orig_modules = dict(original.named_modules())
    pairs: List[_LayerPair] = []
    for name, module in patched.named_modules():
        if not name:
            continue
        counterpart = orig_modules.get(name)
        # a type change counts only for modules that compute something: hierarchy
        # placeholders (plain nn.Module, no forward) stand in for the original's containers
        differs = (counterpart is not None
                   and original_class(counterpart) is not original_class(module)
                   and type(module).forward is not nn.Module.forward)
        if _is_patched_layer(module) or differs or name in extra:
            pairs.append(_LayerPair(name, counterpart, module))
    missing = [n for n in extra if n not in {p.name for p in pairs}]
    if missing:
        raise KeyError(f"validate(layers=...): no module named {missing} in the patched model")
    return pairs
