"""Classes that add deconv_patch behaviour to a user's module class without replacing the module.

Patching swaps a module's `__class__` for a subclass of its own class: the object stays the same
(hooks, parametrizations, shared references, every attribute), `isinstance` with the original
class still holds, and the subclass keeps the original's name so `print(model)` reads the same.

* `derived_class(mixin, base)`: `type(base.__name__, (mixin, base), ...)`, made once per pair
  and picklable (its instances reduce to a rebuild from the two importable classes).
* A parametrized module (torch.nn.utils.parametrize) has a class of its own made for it,
  `Parametrized<Base>`, whose first base is the class before parametrization; its patched class
  is made the same way around the derived base, so `remove_parametrizations` lands on the
  derived class and the parametrization's properties keep working.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Optional, Tuple

from torch import nn
from torch.nn.utils import parametrize

# (mixin, base) -> derived class: the one explicit cache of this module.
_DERIVED: Dict[Tuple[type, type], type] = {}
BASE_ATTR = "_deconv_patch_base"  # on derived classes: the user's class they extend


def _rebuild(mixin: type, base: type) -> Any:
    cls = derived_class(mixin, base)
    return cls.__new__(cls)


def _reduce_ex(self: nn.Module, protocol: int) -> Tuple[Any, ...]:
    cls = type(self)
    return _rebuild, (getattr(cls, "_deconv_patch_mixin"), getattr(cls, BASE_ATTR)), \
        self.__getstate__()


def derived_class(mixin: type, base: type) -> type:
    """`mixin`'s behaviour on top of `base` (a class is its own answer when it already is one)."""
    if issubclass(base, mixin):
        return base
    key = (mixin, base)
    cls = _DERIVED.get(key)
    if cls is None:
        namespace = {"__module__": base.__module__, "__qualname__": base.__qualname__,
                     "__reduce_ex__": _reduce_ex, BASE_ATTR: base, "_deconv_patch_mixin": mixin}
        cls = _DERIVED[key] = type(base.__name__, (mixin, base), namespace)
    return cls


def original_class(module: nn.Module) -> type:
    """The user's class of `module`, before any deconv_patch class or parametrization."""
    cls = parametrize.type_before_parametrizations(module)
    return cls.__dict__.get(BASE_ATTR, cls)


def patched_class(module: nn.Module, mixin: type, plain: Optional[type] = None) -> type:
    """The class `module` gets to carry `mixin`. `plain` stands for `mixin` on the exact base it
    was written for (FastConvTranspose2d for nn.ConvTranspose2d)."""
    def on(base: type) -> type:
        if plain is not None and base is plain.__mro__[1]:
            return plain
        return derived_class(mixin, base)

    if not parametrize.is_parametrized(module):
        return on(type(module))
    cls = type(module)
    namespace = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
    namespace["__deepcopy__"] = _deepcopy_without_transient
    return type(cls.__name__, (on(cls.__bases__[0]),), namespace)


def _deepcopy_without_transient(self: nn.Module, memo: Dict[int, Any]) -> nn.Module:
    """deepcopy for parametrized patched modules (parametrize's own copies `__dict__` whole):
    the mixin's per-process caches (`TRANSIENT_STATE`, e.g. prepared C++ calls) stay behind."""
    found = memo.get(id(self))
    if found is not None:
        return found
    replica = self.__new__(type(self))
    memo[id(self)] = replica
    transient = getattr(type(self), "TRANSIENT_STATE", ())
    replica.__dict__ = copy.deepcopy(
        {k: v for k, v in self.__dict__.items() if k not in transient}, memo)
    return replica


def set_class(module: nn.Module, mixin: type, plain: Optional[type] = None) -> None:
    """Gives `module` the class that carries `mixin` (no-op when it already has it)."""
    if not isinstance(module, mixin):
        module.__class__ = patched_class(module, mixin, plain)


def restore_class(module: nn.Module, mixin: type) -> None:
    """Undoes `set_class` (keeps a parametrization's own class)."""
    if not isinstance(module, mixin):
        return
    cls = type(module)
    if parametrize.is_parametrized(module):
        base = cls.__bases__[0]
        namespace = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
        module.__class__ = type(cls.__name__, (_unpatched(base, mixin),), namespace)
    else:
        module.__class__ = _unpatched(cls, mixin)


def _unpatched(cls: type, mixin: type) -> type:
    if BASE_ATTR in cls.__dict__:
        return cls.__dict__[BASE_ATTR]
    return next(c for c in cls.__mro__ if not issubclass(c, mixin))
