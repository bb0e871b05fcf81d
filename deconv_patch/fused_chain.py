"""conv -> BatchNorm2d -> activation run as one call of the conv, on the user's own modules.

A `FusedChain` hangs on a patched conv. On each call it decides whether this call may run the
chain fused; when it may, the conv computes activation(bn(conv(x))) in one kernel (the eval
BatchNorm folded into a cached copy of the weight and bias, the activation in the epilogue) and
hands the result to the BatchNorm and activation modules, which then pass it through. Both keep
their class's behaviour for any other input: their class becomes a subclass (`BatchNormGate`,
`ActivationGate`) whose forward checks that the tensor it gets *is* the one the conv handed over.
They carry that class only while the conv is in eval mode (`FusedChain.follow_mode`, called by
the conv's `train()`, and at the next eager call where modes were assigned without it): a
training step, eager or compiled, calls the user's own classes and pays nothing for a chain (a
gate costs a Python frame per call, and torch.compile guards on it).

A call runs fused only when all of these hold, so switching to train mode, asking for
gradients, adding a hook or calling the conv from other code gives the unfused computation:
* the conv is called from the call expression the recorded forward called it from (the same
  code object and instruction: dataflow.call_site), so another line, branch or caller of the
  same conv runs it unfused;
* the conv is in eval mode (its BatchNorm and activation carry the gate classes), and the
  BatchNorm is in eval mode with running statistics;
* no forward hooks on the conv, no hooks on the BatchNorm or activation, no global module hooks
  (but those a `hooks_seen_through` block names: validate()'s captures of what the model
  computes as its user runs it);
* no tensor involved needs a gradient (with grad mode on);
* not while torch.compile traces (the compiled graph keeps PyTorch's modules, which Inductor
  fuses itself);
* the conv is the chain's own module, not an object sharing its __dict__ (nn.DataParallel's
  replicas), whose model calls other BatchNorm and activation objects;
* the input is a CUDA tensor: on other devices every layer runs PyTorch's own computation, and a
  fold would round differently from it (outputs stay bit-identical to the original's there).
  The check that a fused run agrees with the unfused one folds on any device
  (`folding_on_any_device`): it proves the data flow, wherever the model was optimized.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import warnings
import weakref
from typing import Any, FrozenSet, Iterable, Iterator, Mapping, Optional, Tuple

import torch
from torch import nn
from torch.nn.utils import parametrize

from .dataflow import CallSite, call_site
from .derived import restore_class, set_class
from .fusion import bn_scale_shift, fold_scale_shift
from .kernels.kept_buffers import may_keep_buffers, stream_key
from .scripting import refuse_scripting
from .summary import PatchWarning

# Module __dict__ key: {thread id: (weakref to the output handed over, the next module)}. Per
# thread, since threads sharing a model in eval mode (a server's workers) interleave their
# calls: one thread's BatchNorm must take that thread's hand-over, never another's. The dict
# stays once made (emptied, not removed), so that no thread's entry is lost to another's pop.
PENDING = "_deconv_patch_pending"
_thread_id = threading.get_ident
SiteKey = Tuple[str, str, int, int]


def site_key(site: Optional[CallSite]) -> Optional[SiteKey]:
    """A picklable name for a call site."""
    if site is None:
        return None
    code, offset = site
    return (code.co_filename, getattr(code, "co_qualname", code.co_name), code.co_firstlineno,
            offset)


def has_hooks(module: nn.Module) -> bool:
    """Whether a module has forward, backward or pre hooks of its own (global hooks aside)."""
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks)


# The ids of the hooks (their handles' ids) a fused chain looks through in this context.
_seen_through: contextvars.ContextVar[FrozenSet[int]] = contextvars.ContextVar(
    "deconv_patch_hooks_seen_through", default=frozenset())


_fold_anywhere: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "deconv_patch_fold_on_any_device", default=False)


@contextlib.contextmanager
def folding_on_any_device() -> Iterator[None]:
    """Inside the block, chains fold and hand over on every device, not only on CUDA: for the
    check that fused and unfused runs agree (fuse_plan.verify_chains), which proves the data
    flow on a model optimized on the CPU, and for tests of the chain's logic without a GPU."""
    token = _fold_anywhere.set(True)
    try:
        yield
    finally:
        _fold_anywhere.reset(token)


@contextlib.contextmanager
def hooks_seen_through(handles: Iterable[Any]) -> Iterator[None]:
    """Inside the block, the hooks of these handles (torch.utils.hooks.RemovableHandle) do not
    switch fused chains off: hooks that record what the model computes as it runs (a fused
    conv's output is then the chain's output, which its BatchNorm and activation pass on)."""
    token = _seen_through.set(_seen_through.get() | {h.id for h in handles})
    try:
        yield
    finally:
        _seen_through.reset(token)


def _opaque(hooks: Mapping[int, Any]) -> bool:
    """Whether any of `hooks` (a module's hook dict, by handle id) is not seen through."""
    if not hooks:
        return False
    seen = _seen_through.get()
    return any(key not in seen for key in hooks)


def _hooked_opaquely(module: nn.Module) -> bool:
    """has_hooks, leaving out the hooks seen through in this context (on every fused call: the
    usual module without hooks is two dict tests)."""
    forward, pre = module._forward_hooks, module._forward_pre_hooks
    return bool(((forward or pre) and (_opaque(forward) or _opaque(pre)))
                or module._backward_hooks or module._backward_pre_hooks)


def _member(module: nn.Module, name: str) -> Any:
    """module.<name> for a parameter or buffer, read from its dict when it is there."""
    found = module._parameters.get(name)
    if found is None:
        found = module._buffers.get(name)
    return found if found is not None else getattr(module, name, None)


def _global_hooks() -> bool:
    m = nn.modules.module
    return bool(m._global_forward_hooks or m._global_forward_pre_hooks
                or m._global_backward_hooks or m._global_backward_pre_hooks)


def _pass_through(module: nn.Module, input: Any) -> bool:
    """Whether `input` is the output a fused conv handed to `module` in this thread (then the
    hand-over is consumed, and the next module of the chain gets it; an unconsumed one is
    caught by EscapeCheck)."""
    table = module.__dict__.get(PENDING)
    thread = _thread_id()
    pending = table.get(thread) if table else None
    if pending is None or pending[0]() is not input or torch.compiler.is_compiling():
        return False
    table.pop(thread, None)  # type: ignore[union-attr]
    next_module = pending[1]
    if next_module is not None:  # (written out, as in FusedChain.hand_over: every fused call)
        table = next_module.__dict__.get(PENDING)
        if table is None:
            table = next_module.__dict__.setdefault(PENDING, {})
        table[thread] = (pending[0], None)
    return True


class _PassThroughGate(nn.Module):
    """Mixin for a module whose work a fused conv already did for the tensor it handed over:
    that tensor is returned as it is, any other call computes as the module's class does."""

    TRANSIENT_STATE = (PENDING,)  # (a weak reference: never copied or pickled)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # The hand-over is taken here, before nn.Module's call machinery (two Python frames
        # per call on the fused path); a module with hooks takes it in forward, after them.
        # Cheapest test first: the tensor handed over is this call's only argument.
        table = self.__dict__.get(PENDING)
        if table and len(args) == 1 and not kwargs and \
                not (has_hooks(self) or _global_hooks()) and _pass_through(self, args[0]):
            return args[0]
        return super().__call__(*args, **kwargs)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        # (the dict test first: most calls have no hand-over)
        if self.__dict__.get(PENDING) and _pass_through(self, input):
            return input
        return super().forward(input)  # type: ignore[misc]

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop(PENDING, None)
        return state

    def __prepare_scriptable__(self) -> nn.Module:
        refuse_scripting(self)
        return self


class BatchNormGate(_PassThroughGate):
    """For a BatchNorm whose work a fused conv already did for the tensor it handed over."""


class ActivationGate(_PassThroughGate):
    """For an activation module that a fused conv already applied to the tensor it handed
    over (other callers, e.g. of a shared nn.ReLU, get the activation as usual)."""


class FusedChain:
    """The BatchNorm and/or activation that follow one conv in the recorded forward.
    `disabled` (with why) once a call showed the data flow differs from the recorded one."""

    disabled: Optional[str] = None
    escape: Optional["EscapeCheck"] = None  # (set by fuse_plan.attach_chains)
    # The conv the chain hangs on (set by attach_chains). A module object sharing the conv's
    # __dict__ (nn.DataParallel's replicas, copy.copy) shares the chain, whose BatchNorm and
    # activation are not the ones that object's model calls: its calls run unfused.
    conv: Optional[nn.Module] = None

    def __init__(self, bn: Optional[nn.Module], act: Optional[nn.Module], activation: str,
                 negative_slope: float, site: Optional[CallSite]) -> None:
        self.bn = bn
        self.act = act
        # The modules whose hand-over the escape check looks for after the conv's caller
        # returns: the first module, and any other the caller calls itself
        # (fuse_plan.plan_chains adds those). Each took its hand-over unless the data flow
        # changed.
        self.checked: Tuple[nn.Module, ...] = tuple(m for m in (bn, act) if m is not None)[:1]
        self.activation = activation
        self.negative_slope = negative_slope
        self.site_key = site_key(site)
        self._site: Optional[CallSite] = site
        self._folded_key: Optional[tuple] = None
        self._folded_sources: Optional[tuple] = None
        self._folded: Optional[Tuple[torch.Tensor, torch.Tensor]] = None

    @property
    def what(self) -> str:
        """The summary's `fused` column."""
        parts = (["bn(folded)"] if self.bn is not None else []) + \
            ([self.activation] if self.activation != "none" else [])
        return "+".join(parts)

    def gates(self) -> Iterator[Tuple[nn.Module, type]]:
        """(module, its gate class) for the chain's BatchNorm and activation, where present."""
        for module, gate in ((self.bn, BatchNormGate), (self.act, ActivationGate)):
            if module is not None:
                yield module, gate

    def gated(self) -> bool:
        """Whether the BatchNorm and activation carry the gate classes (a fused call hands its
        output over only to modules that pass it through). Written out rather than over
        gates(): every fused call asks."""
        return (self.bn is None or isinstance(self.bn, BatchNormGate)) and \
            (self.act is None or isinstance(self.act, ActivationGate))

    def lead_training(self) -> bool:
        """Whether the chain's BatchNorm (else its activation) is in training mode, however that
        was set: by train() / eval(), or by assigning `training` directly, as some training
        loops put modes back (PyTorch Lightning after each validation run)."""
        lead = self.bn if self.bn is not None else self.act
        return lead is not None and lead.training

    def follow_mode(self, training: bool) -> None:
        """Gives the BatchNorm and activation their gate classes for a conv in eval mode, and
        their own classes back for one in training mode, where no call fuses; the escape
        check's hook follows (EscapeCheck.follow_chains). A parametrized module keeps its gate
        (its class is made per module: swapping it on every mode change would make a new class
        each time). A hand-over still pending stays, so that the EscapeCheck finds it and
        recomputes that call."""
        for module, gate in self.gates():
            if not training:
                set_class(module, gate)
            elif not parametrize.is_parametrized(module):
                restore_class(module, gate)
                if not module.__dict__.get(PENDING, True):  # (an emptied table: none waits)
                    del module.__dict__[PENDING]
        if self.escape is not None:
            self.escape.follow_chains()

    def folded(self, conv: nn.Module, input: torch.Tensor, weight: torch.Tensor,
               bias: Optional[torch.Tensor], recorded: bool
               ) -> Optional[Tuple[torch.Tensor, Optional[torch.Tensor]]]:
        """(weight, bias) to run this call fused with, or None to run it as it is. `recorded`:
        whether autograd records the call (grad_calls.records_grad). Called only outside
        torch.compile, on every eager call of the conv, so module state is read from its dicts
        (nn.Module.__getattr__ costs about a microsecond per name)."""
        if self.disabled is not None or recorded or (
                not input.is_cuda and not _fold_anywhere.get()):
            return None
        own = self.conv
        if own is not conv:
            if own is not None:
                return None  # a replica's (or a shallow copy's) call
            self.conv = conv  # (a chain pickled before it knew its conv: the first caller)
        if not self.gated():
            if not conv.training and not self.lead_training():
                # Eval mode set without eval() (modes assigned directly): the gates come back
                # for the next call. This one runs unfused: the escape check registered now
                # would miss it, its owner's call having started without the hook.
                self.follow_mode(False)
            return None
        site = call_site(1)  # (this method <- forward <- nn.Module's call)
        known = self._site
        if site is None or known is None or site[0] is not known[0] or site[1] != known[1]:
            if site_key(site) != self.site_key:
                return None
            self._site = site  # a copy or an unpickled chain meets its code object
        bn, act = self.bn, self.act
        hooks = conv._forward_hooks
        if (hooks and _opaque(hooks)) or _global_hooks() or (
                act is not None and _hooked_opaquely(act)):
            return None
        if bn is None:
            return weight, bias
        if bn.training or _hooked_opaquely(bn) or not input.is_floating_point():
            return None
        buffers = bn._buffers
        mean, var = buffers.get("running_mean"), buffers.get("running_var")
        if mean is None or var is None:
            return None
        return self._fold(conv, (weight, bias, mean, var, _member(bn, "weight"),
                                 _member(bn, "bias"), buffers.get("num_batches_tracked")))

    def fold_for(self, conv: nn.Module, weight: torch.Tensor, bias: Optional[torch.Tensor]
                 ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(weight, bias) with the BatchNorm folded in (as they are without one)."""
        bn = self.bn
        if bn is None:
            return weight, bias
        return self._fold(conv, (weight, bias, bn.running_mean, bn.running_var, bn.weight,
                                 bn.bias, bn._buffers.get("num_batches_tracked")))

    def _fold(self, conv: nn.Module, sources: tuple) -> Tuple[torch.Tensor, torch.Tensor]:
        """The BatchNorm folded into a copy of (weight, bias), cached until any of `sources`
        (weight, bias, running mean and variance, BatchNorm weight and bias, its count of
        batches tracked) or eps changes: identity (the cache holds the sources themselves),
        version counter or storage (`.data =` keeps the first two), so any in-place change
        (load_state_dict included) refolds; and until the current stream changes (a fold is
        read only on the stream that made it: kept_buffers). A training forward updates the
        running statistics in the kernel, which bumps no version counter of theirs; it bumps
        the count's (nn.BatchNorm2d's forward adds 1), so a BatchNorm without that count folds
        on every call."""
        bn = self.bn
        try:
            key: Optional[tuple] = tuple([None if t is None else (t._version, t.data_ptr())
                                          for t in sources]) \
                + (bn.eps, stream_key(sources[0].device))  # type: ignore[union-attr]
        except RuntimeError:  # inference tensors have no version counter: fold every call
            key = None
        if sources[6] is None:
            key = None
        if key is not None and not may_keep_buffers(sources[0].device):
            # A CUDA graph being captured: the fold goes into the graph, so each replay folds
            # the parameters as they are then (in-place updates between replays bump no counter
            # a graph could check), and its output, filled only by replays, is not cached; nor
            # one made in a graph's warm-up, from the graph's pool (kernels/kept_buffers.py).
            key = None
        cached = self._folded_sources
        if key is not None and key == self._folded_key and cached is not None and \
                all([a is b for a, b in zip(sources, cached)]):
            return self._folded  # type: ignore[return-value]
        weight, bias = sources[0], sources[1]
        with torch.no_grad():
            scale, shift = bn_scale_shift(bn)  # type: ignore[arg-type]
            folded = fold_scale_shift(weight, bias, scale, shift, conv.groups)
        if key is not None:
            self._folded_key, self._folded = key, folded
            self._folded_sources = sources
        return folded

    def hand_over(self, output: torch.Tensor) -> None:
        """Tells the first module of the chain that `output` already went through it."""
        first, next_module = (self.bn, self.act) if self.bn is not None else (self.act, None)
        if first is not None:
            table = first.__dict__.get(PENDING)
            if table is None:
                table = first.__dict__.setdefault(PENDING, {})
            table[_thread_id()] = (weakref.ref(output), next_module)

    def outstanding(self, thread: int) -> bool:
        """Whether a fused output was handed over in `thread` and its first module never took
        it, or a module of the chain that the conv's caller calls did not (one replaced in the
        model after optimize(), say)."""
        for module in self.checked:
            table = module.__dict__.get(PENDING)
            if table and thread in table:
                return True
        return False

    def disable(self, why: str) -> None:
        """Switches the chain off for good; this thread's hand-overs go (another thread's still
        pass through: that call was fused before this one was found out)."""
        self.disabled = why
        for module in (self.bn, self.act):
            table = module.__dict__.get(PENDING) if module is not None else None
            if table:
                table.pop(_thread_id(), None)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(_site=None, _folded_key=None, _folded_sources=None, _folded=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "checked" not in state:  # (pickled before the escape check looked past the first)
            self.checked = tuple(m for m in (self.bn, self.act) if m is not None)[:1]


class EscapeCheck:
    """Forward hook on the module whose forward calls fused convs: when a call left a fused
    output unconsumed (another branch of that forward used it instead of the BatchNorm /
    activation), that chain is switched off for good and the call is made again, unfused, so
    its result is the model's own. It is registered on `owner` only while one of its chains
    can fuse (follow_chains): a hook takes nn.Module's call off its fast path."""

    owner: Optional[nn.Module] = None  # (None: registered for good, as by older pickles)

    def __init__(self, owner: Optional[nn.Module] = None) -> None:
        self.chains: list = []
        self.owner = owner

    def registered_key(self) -> Optional[int]:
        """This hook's key among its owner's forward hooks, or None."""
        hooks = self.owner._forward_hooks if self.owner is not None else {}
        return next((key for key, hook in hooks.items() if hook is self), None)

    def follow_chains(self) -> None:
        """Registers this hook on its owner while any of its chains is gated (its conv in eval
        mode), and takes it off while none is."""
        if self.owner is None:
            return
        key = self.registered_key()
        wanted = any(chain.gated() for chain in self.chains)
        if wanted and key is None:
            self.owner.register_forward_hook(self, with_kwargs=True)
        elif key is not None and not wanted:
            self.owner._forward_hooks.pop(key, None)
            self.owner._forward_hooks_with_kwargs.pop(key, None)

    def __call__(self, module: nn.Module, args: Tuple[Any, ...], kwargs: dict, output: Any
                 ) -> Any:
        if torch.compiler.is_compiling():
            return None
        thread = _thread_id()
        escaped = [chain for chain in self.chains if chain.outstanding(thread)]
        if not escaped:
            for chain in self.chains:
                lead = chain.bn if chain.bn is not None else chain.act  # (lead_training)
                if lead is not None and lead.training and chain.gated():
                    # Training mode set without train() (modes assigned directly): no call of
                    # this chain can fuse, so its modules get their own classes back, and this
                    # hook goes once no chain of it is gated (nn.Module's call iterates over a
                    # copy of the hooks).
                    chain.follow_mode(True)
            return None
        for chain in escaped:
            chain.disable("a call used the conv's output elsewhere than in the recorded run")
        warnings.warn(f"deconv_patch: {type(module).__name__}'s forward used a fused conv's "
                      "output differently from the recorded run: that fusion is off from now "
                      "on, and this call was recomputed unfused", PatchWarning, stacklevel=2)
        return module.forward(*args, **kwargs)


__all__ = ["ActivationGate", "BatchNormGate", "EscapeCheck", "FusedChain", "site_key"]
