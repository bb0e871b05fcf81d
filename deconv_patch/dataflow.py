"""A record of one real forward: where each transposed convolution's output went.

Fusion moves a BatchNorm (and an activation) into the conv that feeds it, which is only the same
computation when that conv's output goes to that BatchNorm and nowhere else. A symbolic trace
cannot show that for every model (Python branches, optional inputs, isinstance checks), so the
evidence is the model's own eager forward on real inputs: module calls are followed with global
module hooks and every other use of a tensor with a TorchFunctionMode, and each use of a conv's
(or its BatchNorm's) output is attributed to the outermost module call or function that took it.
Reading a tensor's metadata (shape, dtype, ...) is not a use. Functional conv_transpose2d calls
are recorded too, with the module whose code made them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from .epilogue import activation_of_module

_MODULE_FILE = nn.Module._call_impl.__code__.co_filename
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
CONV_TRANSPOSE_FUNCTIONS = frozenset({torch.conv_transpose2d, F.conv_transpose2d})

# Functions that read only a tensor's metadata, which fusion leaves as it was.
_TENSOR_PROPERTIES = ("shape", "dtype", "device", "ndim", "layout", "is_cuda", "requires_grad",
                      "is_sparse", "is_quantized", "is_meta")
_TENSOR_METHODS = ("size", "dim", "numel", "nelement", "ndimension", "stride", "is_contiguous",
                   "is_floating_point", "is_complex", "element_size", "storage_offset",
                   "__len__", "get_device")
METADATA_FUNCTIONS = frozenset(
    [getattr(torch.Tensor, p).__get__ for p in _TENSOR_PROPERTIES]
    + [getattr(torch.Tensor, m) for m in _TENSOR_METHODS])


def _caller_frame(depth: int) -> Optional[FrameType]:
    frame = sys._getframe(depth + 2)
    while frame is not None and (frame.f_code.co_filename == _MODULE_FILE
                                 or frame.f_code.co_filename.startswith(_PACKAGE_DIR)):
        frame = frame.f_back
    return frame


def caller_code(depth: int = 0) -> Optional[CodeType]:
    """The code object that called the module (or function) whose hook or forward is `depth`
    frames up, looking past nn.Module's own call machinery and deconv_patch's code."""
    frame = _caller_frame(depth)
    return frame.f_code if frame is not None else None


CallSite = Tuple[CodeType, int]


def call_site(depth: int = 0) -> Optional[CallSite]:
    """(code, instruction offset) of that call: one call expression in the caller's code."""
    frame = _caller_frame(depth)
    return (frame.f_code, frame.f_lasti) if frame is not None else None


@dataclass(frozen=True, eq=False)
class Use:
    """One consumer of a recorded tensor: a module call, a function, or the model's output."""

    kind: str  # "module" | "function" | "output"
    module: Optional[nn.Module] = None
    what: str = ""


# An input's shape, strides, dtype and device: what planning a call reads of it.
InputGeometry = Tuple[Tuple[int, ...], Tuple[int, ...], torch.dtype, torch.device]


@dataclass
class ConvCall:
    """One call of a ConvTranspose2d module: the token of its output, its call site, the
    module whose forward made the call (None for the model itself) and its input's geometry."""

    output: int
    site: Optional[CallSite]
    owner: Optional[nn.Module] = None
    input: Optional[InputGeometry] = None


@dataclass
class FunctionalCall:
    """One F.conv_transpose2d / torch.conv_transpose2d call made outside a ConvTranspose2d
    module: the module whose forward was running, and the code that made the call."""

    owner: Optional[nn.Module]
    caller: Optional[CodeType]


@dataclass
class Record:
    """Everything the recorded forward showed (tensors are named by tokens, not kept)."""

    calls: Dict[int, int] = field(default_factory=dict)  # id(module) -> times called
    conv_calls: Dict[int, List[ConvCall]] = field(default_factory=dict)  # id(conv) -> calls
    uses: Dict[int, List[Use]] = field(default_factory=dict)  # token -> its consumers
    # (id(module), input token) -> output token, for BatchNorm / activation calls on a token
    produced: Dict[Tuple[int, int], int] = field(default_factory=dict)
    # id(BatchNorm / activation module) -> the module whose forward called it (its last call)
    callers: Dict[int, Optional[nn.Module]] = field(default_factory=dict)
    functional: List[FunctionalCall] = field(default_factory=list)

    def times_called(self, module: nn.Module) -> int:
        return self.calls.get(id(module), 0)

    def uses_of(self, token: int) -> List[Use]:
        return self.uses.get(token, [])

    def caller_of(self, module: nn.Module) -> Optional[nn.Module]:
        """The module whose forward called this BatchNorm or activation (None: the model)."""
        return self.callers.get(id(module))


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    return (t for t in tree_leaves(obj) if isinstance(t, torch.Tensor))


def _leaf(module: nn.Module) -> bool:
    """Modules whose inner uses of a tensor are their own business (see Recorder._use)."""
    return _follows(module) or isinstance(module, (nn.ConvTranspose2d, torch.jit.ScriptModule)) \
        or not module._modules


def _follows(module: nn.Module) -> bool:
    """Modules whose output is followed further: BatchNorms and fusable activations."""
    return isinstance(module, nn.modules.batchnorm._BatchNorm) or \
        activation_of_module(module) is not None


class Recorder(TorchFunctionMode):
    """Global module hooks + a TorchFunctionMode that fill a Record (see the module docstring)."""

    def __init__(self, root: nn.Module) -> None:
        super().__init__()
        self.root = root
        self.record = Record()
        self.tokens: Dict[int, int] = {}  # id(tensor) -> token, for recorded tensors
        self.alive: List[torch.Tensor] = []  # keeps ids unique while recording
        # module calls in progress: (module, ids of its input tensors, its own uses by id)
        self.stack: List[Tuple[nn.Module, Set[int], Dict[int, Use]]] = []

    # -- tensors
    def _token(self, t: torch.Tensor) -> Optional[int]:
        return self.tokens.get(id(t))

    def _new_token(self, t: torch.Tensor) -> int:
        token = len(self.alive)
        self.alive.append(t)
        self.tokens[id(t)] = token
        return token

    def _use(self, t: torch.Tensor, use: Use) -> Optional[Use]:
        """Records that `use` consumes `t`. Inside a module call that took `t`, a leaf module
        (BatchNorm, activation, conv, or one without children) owns all of its uses; a
        container's use is replaced by the uses inside it, so a BatchNorm inside an
        nn.Sequential block is seen as the BatchNorm."""
        token = self._token(t)
        if token is None:
            return None
        uses = self.record.uses.setdefault(token, [])
        for module, inputs, own in reversed(self.stack):
            if id(t) not in inputs:
                continue
            if _leaf(module):
                return None
            outer = own.pop(id(t), None)
            if outer is not None and outer in uses:
                uses.remove(outer)
            break
        uses.append(use)
        return use

    # -- module hooks
    def pre_hook(self, module: nn.Module, args: Tuple[Any, ...]) -> None:
        own: Dict[int, Use] = {}
        for t in _tensors(args):
            use = self._use(t, Use("module", module, type(module).__name__))
            if use is not None:
                own[id(t)] = use
        self.record.calls[id(module)] = self.record.calls.get(id(module), 0) + 1
        self.stack.append((module, {id(t) for t in _tensors(args)}, own))

    def post_hook(self, module: nn.Module, args: Tuple[Any, ...], output: Any) -> None:
        if not self.stack or self.stack[-1][0] is not module:
            return
        self.stack.pop()
        if isinstance(output, torch.Tensor):
            if isinstance(module, nn.ConvTranspose2d):
                token = self._new_token(output)
                owner = self.stack[-1][0] if self.stack else None
                x = args[0] if args and isinstance(args[0], torch.Tensor) else None
                geometry = None if x is None else \
                    (tuple(x.shape), tuple(x.stride()), x.dtype, x.device)
                self.record.conv_calls.setdefault(id(module), []).append(
                    ConvCall(token, call_site(1), owner, geometry))
            elif _follows(module) and len(args) == 1 and isinstance(args[0], torch.Tensor):
                self.record.callers[id(module)] = self.stack[-1][0] if self.stack else None
                source = self._token(args[0])
                if source is not None:
                    # (an in-place activation returns its input: later uses are its output's)
                    self.record.produced[(id(module), source)] = self._new_token(output)

    # -- recording
    def start(self) -> None:
        """Starts recording (global module hooks and this TorchFunctionMode)."""
        self._handles = (
            nn.modules.module.register_module_forward_pre_hook(self.pre_hook),
            nn.modules.module.register_module_forward_hook(self.post_hook, always_call=True))
        self.__enter__()

    def stop(self, output: Any) -> Record:
        """Stops recording; `output` (the model's) is the last use. Returns the record."""
        self.__exit__(None, None, None)
        for handle in self._handles:
            handle.remove()
        self.stack.clear()
        for t in _tensors(output):
            self._use(t, Use("output", what="model output"))
        self.alive.clear()
        self.tokens.clear()
        return self.record

    # -- everything else
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in CONV_TRANSPOSE_FUNCTIONS and not (
                self.stack and isinstance(self.stack[-1][0], nn.ConvTranspose2d)):
            owner = self.stack[-1][0] if self.stack else None
            self.record.functional.append(FunctionalCall(owner, caller_code(0)))
        if func not in METADATA_FUNCTIONS:
            name = getattr(func, "__name__", str(func))
            for t in _tensors((args, kwargs)):
                self._use(t, Use("function", what=name))
        return func(*args, **kwargs)


def record_forward(model: nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]
                   ) -> Tuple[Record, Any]:
    """Runs `model(*args, **kwargs)` once, recording it; returns the record and the output."""
    recorder = Recorder(model)
    recorder.start()
    output = None
    try:
        output = model(*args, **kwargs)
    finally:
        record = recorder.stop(output)
    return record, output


__all__ = ["CONV_TRANSPOSE_FUNCTIONS", "CallSite", "ConvCall", "FunctionalCall",
           "METADATA_FUNCTIONS", "Record", "Recorder", "Use", "call_site", "caller_code",
           "record_forward"]
