"""Nested values for validate(): the tensors inside inputs and outputs of any nesting (tuples,
lists, dicts, namedtuples, dataclasses). Mapping a function over them, flattening to (path,
leaf) pairs, cloning, casting floats, splitting example inputs into args and kwargs, and fresh
random draws shaped like them.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple

import torch


Args = Tuple[Any, ...]
Kwargs = Dict[str, Any]


def _map_tensors(fn: Callable[[torch.Tensor], Any], obj: Any) -> Any:
    """`obj` with every tensor inside (tuples, lists, dicts, namedtuples) replaced by fn(t)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map_tensors(fn, x) for x in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(fn, x) for x in obj)
    if isinstance(obj, Mapping):
        return type(obj)((k, _map_tensors(fn, v)) for k, v in obj.items())  # type: ignore
    return obj


def _flatten(obj: Any, path: str = "") -> Iterator[Tuple[str, Any]]:
    """(path, leaf) pairs, paths like "[0]['boxes']" or ".logits"; "" for a lone leaf."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        for name in obj._fields:  # type: ignore[attr-defined]
            yield from _flatten(getattr(obj, name), f"{path}.{name}")
    elif isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            yield from _flatten(x, f"{path}[{i}]")
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from _flatten(v, f"{path}[{k!r}]")
    elif hasattr(obj, "__dataclass_fields__"):
        for name in obj.__dataclass_fields__:
            yield from _flatten(getattr(obj, name), f"{path}.{name}")
    else:
        yield path, obj


def _clone(obj: Any) -> Any:
    return _map_tensors(lambda t: t.detach().clone(), obj)


def _split_inputs(example_inputs: Any, example_kwargs: Optional[Mapping[str, Any]]
                  ) -> Tuple[Args, Kwargs]:
    """A tuple is the positional arguments, a dict the keyword ones, anything else one argument."""
    kwargs = dict(example_kwargs or {})
    if isinstance(example_inputs, tuple) and not hasattr(example_inputs, "_fields"):
        return tuple(example_inputs), kwargs
    if isinstance(example_inputs, dict):
        return (), {**example_inputs, **kwargs}
    return (example_inputs,), kwargs


def _cast_floats(obj: Any, dtype: Optional[torch.dtype]) -> Any:
    if dtype is None:
        return obj
    return _map_tensors(lambda t: t.to(dtype) if t.is_floating_point() else t, obj)


def _random_like(args: Args, kwargs: Kwargs, generator: torch.Generator) -> Tuple[Args, Kwargs]:
    """Fresh normal draws with each floating tensor's own mean and spread; others unchanged."""
    def draw(t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point():
            return t
        fresh = torch.randn(t.shape, generator=generator, dtype=torch.float64)
        ref = t.detach().double()
        std = ref.std().item() if t.numel() > 1 else 1.0
        std = std if math.isfinite(std) and std > 0 else 1.0
        mean = ref.mean().item() if t.numel() else 0.0
        mean = mean if math.isfinite(mean) else 0.0
        return (fresh * std + mean).to(device=t.device, dtype=t.dtype)

    return _map_tensors(draw, args), _map_tensors(draw, kwargs)
