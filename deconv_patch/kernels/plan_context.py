"""What a context tells the planner: a variant forced for every call inside a block
(`use_variant`: tests, benchmarks, checks), and gemm_out_tile's weight fit taken as given while
a call's build units are listed ahead of it (modules.example_plan: asking its binding would
compile its unit). Context variables: per thread or task, never process-global."""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Optional

from .. import kernels

_forced_variant: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar(
    "deconv_patch_forced_variant", default=None
)
_assumed_out_tile_fit: contextvars.ContextVar[Optional[bool]] = contextvars.ContextVar(
    "deconv_patch_assumed_out_tile_fit", default=None
)


@contextlib.contextmanager
def _set_in_context(var: contextvars.ContextVar, value: object) -> Iterator[None]:
    """`var` holds `value` inside the block (this thread or task only), then what it held."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


@contextlib.contextmanager
def use_variant(variant: str) -> Iterator[None]:
    """Force `variant` for every deconv_patch CUDA call made inside the block."""
    if not kernels.is_variant(variant):
        raise ValueError(f"unknown deconv_patch variant {variant!r}; choose from "
                         f"{kernels.NAMED_VARIANTS}")
    with _set_in_context(_forced_variant, variant):
        yield


def forced_variant() -> Optional[str]:
    """The variant `use_variant` forces in this context, if any."""
    return _forced_variant.get()


def forced_variant_var() -> contextvars.ContextVar[Optional[str]]:
    """The context variable use_variant sets (the op's C++ kernel reads it on every call)."""
    return _forced_variant


@contextlib.contextmanager
def out_tile_fit_assumed(fits: bool) -> Iterator[None]:
    """Plans made inside the block take gemm_out_tile's weight fit as `fits`, unasked."""
    with _set_in_context(_assumed_out_tile_fit, fits):
        yield


def assumed_out_tile_fit() -> Optional[bool]:
    """out_tile_fit_assumed's answer in this context, or None (ask the binding)."""
    return _assumed_out_tile_fit.get()
