"""Weights re-laid-out once for the kernels that want their own layout (gemm_phase).

Packing reads the whole weight, so it happens once per weight and hyperparameters, not per call:
the packed copy is cached against the weight tensor and its version counter, which PyTorch bumps
on every in-place change (optimizer steps, `load_state_dict`, `copy_`), so a changed weight is
re-packed on its next use and a stale copy is never read. Each stream gets its own copy
(kept_buffers.stream_key says why). Inference tensors (made under
torch.inference_mode) have no version counter, so theirs are packed afresh on every call. A call
made while a CUDA graph is captured does not ask here: it packs inside the graph, so that every
replay reads the weight as it is then (cuda/binding/prepared_call.cpp). Nothing is kept while a
CUDA graph is captured or warmed up (kept_buffers.py).
"""

from __future__ import annotations

import weakref
from typing import Dict, Optional, Tuple

import torch

from .. import kernels
from ..arguments import ConvTransposeArgs
from .extension import load_family_any
from .kept_buffers import may_keep_buffers, stream_key

_MAX_ENTRIES = 1024


class LayoutKey:
    """(variant, hyperparameters, TF32 flag) hashed once: what a packed layout depends on
    besides the weight. Made once per prepared call (ops.kernel_call), so the per-call lookup
    does not re-hash the hyperparameters."""

    __slots__ = ("value", "_hash")

    def __init__(self, variant: str, args: ConvTransposeArgs, allow_tf32: bool) -> None:
        self.value = (variant, args, allow_tf32)
        self._hash = hash(self.value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, LayoutKey) and self.value == other.value)


class PackedWeightCache:
    """Packed weights keyed by (weight tensor identity, variant, hyperparameters, TF32, the
    current stream)."""

    def __init__(self) -> None:
        # key -> (weak reference to the weight, its version when packed, packed tensor)
        self._entries: Dict[tuple, Tuple[weakref.ref, int, torch.Tensor]] = {}
        self.packs = 0  # how many times a weight was (re)packed: tests read it

    def get(self, variant: str, weight: torch.Tensor, args: ConvTransposeArgs,
            allow_tf32: bool, layout_key: Optional[LayoutKey] = None) -> torch.Tensor:
        """`layout_key`: LayoutKey(variant, args, allow_tf32), made once by a caller that asks
        on every call (ops.kernel_call)."""
        if layout_key is None:
            layout_key = LayoutKey(variant, args, allow_tf32)
        if weight.is_inference() or not may_keep_buffers(weight.device):
            # No version counter to notice in-place changes by, or a CUDA graph's capture or
            # warm-up (kept_buffers): packed afresh for this call.
            self.packs += 1
            return self._pack(variant, weight, args, allow_tf32)
        key = (id(weight), weight.data_ptr(), weight.dtype, weight.shape, weight.stride(),
               layout_key, stream_key(weight.device))  # (one copy per stream: kept_buffers)
        version = weight._version
        found = self._entries.get(key)
        if found is not None and found[0]() is weight and found[1] == version:
            return found[2]
        if len(self._entries) >= _MAX_ENTRIES:
            self._entries = {k: e for k, e in self._entries.items() if e[0]() is not None}
            if len(self._entries) >= _MAX_ENTRIES:
                self._entries.clear()
        packed = self._pack(variant, weight, args, allow_tf32)
        self._entries[key] = (weakref.ref(weight), version, packed)
        self.packs += 1
        return packed

    @staticmethod
    def _pack(variant: str, weight: torch.Tensor, args: ConvTransposeArgs,
              allow_tf32: bool) -> torch.Tensor:
        family = kernels.BY_NAME[variant]
        # (every unit of a family packs alike: the call's own is loaded by now)
        return load_family_any(family.name, family.units_for("none", weight.dtype)).pack_weight(
            family.code, weight.detach(), list(args.stride), list(args.padding),
            list(args.output_padding), list(args.dilation), args.groups, allow_tf32)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_CACHE: Optional[PackedWeightCache] = None


def cache() -> PackedWeightCache:
    """The process's packed-weight cache."""
    global _CACHE
    if _CACHE is None:
        _CACHE = PackedWeightCache()
    return _CACHE


def packed_weight(variant: str, weight: torch.Tensor, args: ConvTransposeArgs,
                  allow_tf32: bool, layout_key: Optional[LayoutKey] = None) -> torch.Tensor:
    """`weight` in `variant`'s layout (cached; see the module doc). The layout depends on the
    weight and the hyperparameters only, not on the input's size."""
    return cache().get(variant, weight, args, allow_tf32, layout_key)
