"""torch.jit.script and a patched model: a clear refusal instead of TorchScript's own error.

TorchScript compiles each module's `forward` from its source. A patched layer's forward, a
fused chain's gates and its escape check are Python that TorchScript does not take, and
`__prepare_scriptable__` could only swap a module for a scriptable one by replacing it in the
user's own model (torch.jit.script assigns what it returns back into the parent module). So
the patched modules refuse, before TorchScript compiles anything, and say what works instead.
"""

from __future__ import annotations

from torch import nn


class NotScriptableError(RuntimeError):
    """torch.jit.script was asked to compile a module deconv_patch patched."""


def refuse_scripting(module: nn.Module) -> None:
    raise NotScriptableError(
        f"deconv_patch: torch.jit.script cannot compile a patched model ({type(module).__name__} "
        "runs Python that TorchScript does not take). Script the original model, trace this "
        "one with torch.jit.trace (a trace records PyTorch's convolution), or use "
        "torch.compile / torch.export, which keep deconv_patch's kernels.")


__all__ = ["NotScriptableError", "refuse_scripting"]
