"""F.conv_transpose2d calls written in a module's forward, routed to deconv_patch's op.

The user's forward keeps its code: the same code object runs, with a view of its module's
globals in which the names that reach conv_transpose2d (`F`, `torch`, `nn`, or the function
itself imported by name) lead to `routed_conv_transpose2d` instead. Every branch, context manager
and argument of the forward stays exactly as written, and nothing else in the model is touched;
other torch functions are one attribute lookup away, as before.

Only calls written in the forward itself (or in functions and comprehensions defined inside it)
are routed. Calls made in helper methods or functions elsewhere stay on PyTorch and are reported
(dataflow.Record.functional says where each call was made).
"""

from __future__ import annotations

import types
from typing import Any, Callable, Dict, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .dataflow import CONV_TRANSPOSE_FUNCTIONS
from .grad_calls import runs_on_pytorch
from .jit_trace import in_jit_trace


def routed_conv_transpose2d(input: torch.Tensor, weight: torch.Tensor,
                            bias: Optional[torch.Tensor] = None, stride: Any = 1,
                            padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                            dilation: Any = 1) -> torch.Tensor:
    """F.conv_transpose2d on deconv_patch's op for plain CUDA tensors; PyTorch's own call
    otherwise (CPU, tensor subclasses, graph capture, torch.jit.trace, whose graph would need
    deconv_patch's op, calls autograd records: grad_calls), which it is then exactly."""
    if torch.compiler.is_compiling() or type(input) is not torch.Tensor or not input.is_cuda or \
            in_jit_trace() or runs_on_pytorch(input, weight, bias):
        return torch.conv_transpose2d(input, weight, bias, stride, padding, output_padding,
                                      groups, dilation)
    from .ops import conv_transpose2d  # (the op layer loads lazily: CPU users never need it)

    return conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups,
                            dilation)


class _Namespace:
    """A module as the routed forward sees it: `routes` replace some attributes."""

    def __init__(self, target: types.ModuleType, routes: Dict[str, Any]) -> None:
        self._target = target
        self._routes = routes

    def __getattr__(self, name: str) -> Any:
        routes = self.__dict__["_routes"]
        if name in routes:
            return routes[name]
        return getattr(self.__dict__["_target"], name)

    def __repr__(self) -> str:
        return repr(self._target)


def _functional_view() -> _Namespace:
    return _Namespace(F, {"conv_transpose2d": routed_conv_transpose2d})


def _nn_view() -> _Namespace:
    return _Namespace(nn, {"functional": _functional_view()})


def _replacement(value: Any) -> Optional[Any]:
    """What a global of the forward becomes (None: stays as it is)."""
    if value in CONV_TRANSPOSE_FUNCTIONS:
        return routed_conv_transpose2d
    if value is F:
        return _functional_view()
    if value is nn:
        return _nn_view()
    if value is torch:
        return _Namespace(torch, {"conv_transpose2d": routed_conv_transpose2d, "nn": _nn_view()})
    return None


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """`code` and every code object defined inside it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _mentions_conv_transpose(code: types.CodeType) -> bool:
    return any("conv_transpose2d" in c.co_names or "conv_transpose2d" in c.co_varnames
               for c in _codes(code))


class _Globals(dict):
    """The forward's globals with a few names replaced; every other name is looked up in the
    module's live globals at each use (so later changes to them are seen)."""

    def __init__(self, real: Dict[str, Any], replaced: Dict[str, Any]) -> None:
        super().__init__(replaced)
        self.real = real
        if "__builtins__" in real:
            self["__builtins__"] = real["__builtins__"]

    def __missing__(self, key: str) -> Any:
        return self.real[key]


def routable_forward(module: nn.Module) -> Optional[types.FunctionType]:
    """The forward function of `module`'s class when it calls conv_transpose2d in its own code
    and nothing already replaced it on the instance; else None."""
    if "forward" in module.__dict__:
        return None
    forward = getattr(type(module), "forward", None)
    if not isinstance(forward, types.FunctionType) or (forward.__module__ or "").startswith("torch."):
        return None
    if not _mentions_conv_transpose(forward.__code__):
        return None
    names = {n for c in _codes(forward.__code__) for n in c.co_names}
    if not any(_replacement(forward.__globals__.get(n)) is not None for n in names):
        return None
    return forward


def covers(forward: types.FunctionType, code: Optional[types.CodeType]) -> bool:
    """Whether a call made by `code` is routed when `forward` is."""
    return code is not None and any(c is code for c in _codes(forward.__code__))


def _routed(forward: types.FunctionType) -> types.FunctionType:
    names = {n for c in _codes(forward.__code__) for n in c.co_names}
    replaced = {}
    for name in names:
        new = _replacement(forward.__globals__.get(name))
        if new is not None:
            replaced[name] = new
    fn = types.FunctionType(forward.__code__, _Globals(forward.__globals__, replaced),
                            forward.__name__, forward.__defaults__, forward.__closure__)
    fn.__kwdefaults__ = forward.__kwdefaults__
    fn.__dict__.update(forward.__dict__)
    return fn


class FunctionalRouter:
    """A module's forward, run with its conv_transpose2d calls routed (set on the instance, so
    the class and every other instance stay as they are)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        forward: Callable[..., Any]
        if torch.compiler.is_compiling():
            forward = type(self.module).forward
        else:
            forward = self.__dict__.get("_fn") or self._build()
        return forward(self.module, *args, **kwargs)

    def _build(self) -> types.FunctionType:
        fn = self.__dict__["_fn"] = _routed(type(self.module).forward)
        return fn

    def __getstate__(self) -> dict:
        return {"module": self.module}  # (the routed function is rebuilt on first use)


def route(module: nn.Module) -> bool:
    """Routes `module`'s own conv_transpose2d calls; False when there are none to route."""
    if isinstance(module.__dict__.get("forward"), FunctionalRouter):
        return True
    if routable_forward(module) is None:
        return False
    module.forward = FunctionalRouter(module)  # type: ignore[method-assign]
    return True


def unroute(module: nn.Module) -> None:
    if isinstance(module.__dict__.get("forward"), FunctionalRouter):
        del module.__dict__["forward"]


__all__ = ["FunctionalRouter", "covers", "routable_forward", "route", "routed_conv_transpose2d",
           "unroute"]
