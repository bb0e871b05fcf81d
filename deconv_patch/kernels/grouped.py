"""grouped: a register-tiled direct kernel (FFMA) for few channels per group (depthwise,
grouped; also dense layers with few channels): exact in every mode."""

from __future__ import annotations

from .family import KernelFamily

NAME = "grouped"
MAX_DEFAULT_CHANNELS = 32  # per group, in and out: its home ground (measured)
MAX_CANDIDATE_CHANNELS = 64  # per group, in and out: its limit; autotune times it up to here

FAMILY = KernelFamily(
    NAME, 1, "register-tiled FFMA kernel for few channels per group")
