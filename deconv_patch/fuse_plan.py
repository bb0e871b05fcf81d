"""Which conv -> BatchNorm -> activation chains to fuse, from a record of a real forward, and
the check that the fused model still computes what the model did.

A chain is fused only where the record shows the data flow it needs: the conv called once, its
output used once, by a BatchNorm2d (called once) or a fusable activation module, the BatchNorm's
output used once, by such an activation; no hooks that would see a different tensor. Then the
model runs twice on the same inputs, unfused and fused, in eval mode with PyTorch's kernels on
both sides; outputs must agree within the rounding folding brings, else nothing is fused.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from .kernels import planner
from .dataflow import Record
from .derived import original_class, restore_class
from .epilogue import activation_of_module
from .fused_chain import EscapeCheck, FusedChain, PENDING, folding_on_any_device, has_hooks
from .modules import FastConvTranspose2d

CHAIN_ATTR = "_fused_chain"
# Largest difference allowed between the unfused and fused outputs, relative to the largest
# unfused magnitude: a few roundings of the output dtype (folding rounds the weights once more).
# A wrong data flow (a BatchNorm skipped or applied twice) differs by far more.
_FOLD_TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 4e-2,
                   torch.float16: 5e-3}
_TF32_TOLERANCE = 5e-3  # float32 CUDA convolutions that may round operands to TF32


@dataclass
class ChainPlan:
    """The chains to fuse (conv name -> chain) and the chains declined, with why."""

    chains: Dict[str, Tuple[FastConvTranspose2d, FusedChain]] = field(default_factory=dict)
    owners: Dict[str, nn.Module] = field(default_factory=dict)  # conv name -> calling module
    declined: List[Tuple[str, str]] = field(default_factory=list)


def _is_batchnorm2d(module: nn.Module) -> bool:
    cls = original_class(module)
    return issubclass(cls, nn.BatchNorm2d) and cls.forward is nn.BatchNorm2d.forward


def _follower_problem(module: nn.Module, record: Record, is_bn: bool) -> Optional[str]:
    if has_hooks(module):
        return f"{type(module).__name__} has hooks, which would see the fused tensor"
    if is_bn and record.times_called(module) != 1:
        return f"the BatchNorm2d is called {record.times_called(module)} times"
    return None


def plan_chains(record: Record, convs: List[Tuple[str, FastConvTranspose2d]],
                names: Dict[int, str]) -> ChainPlan:
    """The chains the record proves (see the module docstring)."""
    plan = ChainPlan()
    for name, conv in convs:
        calls = record.conv_calls.get(id(conv), [])
        if not calls or CHAIN_ATTR in conv.__dict__ or conv.activation != "none":
            continue
        uses = record.uses_of(calls[0].output)
        followers = [u for call in calls for u in record.uses_of(call.output)
                     if u.module is not None and (_is_batchnorm2d(u.module)
                                                  or activation_of_module(u.module) is not None)]
        if not followers:
            continue  # nothing that could be fused
        follower = followers[0].module
        assert follower is not None
        shown = names.get(id(follower), type(follower).__name__)
        problem = None
        if len(calls) > 1:
            problem = f"the conv is called {len(calls)} times"
        elif calls[0].owner is None:
            problem = "the conv is the model itself"
        elif len(uses) > 1:
            problem = f"its output has {len(uses)} uses ({', '.join(u.what for u in uses)})"
        elif conv._forward_hooks:
            problem = "the conv has forward hooks, which must see its own output"
        bn: Optional[nn.Module] = None
        act: Optional[nn.Module] = None
        if problem is None and _is_batchnorm2d(follower):
            problem = _follower_problem(follower, record, True)
            if problem is None and (not follower.track_running_stats
                                    or follower.num_features != conv.out_channels):
                problem = "the BatchNorm2d keeps no running statistics for these channels"
            if problem is None:
                bn = follower
                token = record.produced.get((id(follower), calls[0].output))
                after = record.uses_of(token) if token is not None else []
                nxt = after[0].module if len(after) == 1 else None
                if nxt is not None and activation_of_module(nxt) is not None:
                    act_problem = _follower_problem(nxt, record, False)
                    if act_problem is None:
                        act = nxt
                    else:
                        plan.declined.append((name, f"{names.get(id(nxt), '?')}: {act_problem}"))
        elif problem is None:
            problem = _follower_problem(follower, record, False)
            act = follower if problem is None else None
        if problem is not None:
            plan.declined.append((name, f"{shown} not fused: {problem}"))
            continue
        found = activation_of_module(act) if act is not None else None
        chain = FusedChain(bn, act, found.name if found else "none",
                           found.negative_slope if found else 0.01, calls[0].site)
        # (the escape check, on the conv's caller, also sees whether the chain's modules that
        # caller calls took their hand-over: one swapped out of the model would not)
        chain.checked += tuple(m for m in (bn, act) if m is not None and
                               m not in chain.checked and record.caller_of(m) is calls[0].owner)
        plan.chains[name] = (conv, chain)
        plan.owners[name] = calls[0].owner  # type: ignore[assignment]
    return plan


def _escape_check(owner: nn.Module) -> Optional[EscapeCheck]:
    """The escape check registered on `owner`, if any."""
    return next((hook for hook in owner._forward_hooks.values()
                 if isinstance(hook, EscapeCheck)), None)


def attach_chains(plan: ChainPlan) -> None:
    for name, (conv, chain) in plan.chains.items():
        owner = plan.owners[name]
        check = chain.escape if chain.escape is not None and chain.escape.owner is owner \
            else _escape_check(owner)
        if check is None:
            check = EscapeCheck(owner)
        if chain not in check.chains:
            check.chains.append(chain)
        chain.escape = check
        chain.conv = conv
        conv.__dict__[CHAIN_ATTR] = chain
        chain.follow_mode(conv.training)  # (gates and the check's hook for an eval-mode conv)


def detach_chains(model: nn.Module, plan: ChainPlan) -> None:
    """Undoes attach_chains (a gate shared with a chain outside `plan` stays)."""
    for name, (conv, chain) in plan.chains.items():
        conv.__dict__.pop(CHAIN_ATTR, None)
        check = chain.escape if chain.escape is not None else _escape_check(plan.owners[name])
        if check is not None and chain in check.chains:
            check.chains.remove(chain)
            if check.owner is None and not check.chains:  # (one from an older pickle)
                check.owner = plan.owners[name]
            check.follow_chains()  # (off its owner once no chain left can fuse)
    still = [m.__dict__[CHAIN_ATTR] for m in model.modules() if CHAIN_ATTR in m.__dict__]
    for _, chain in plan.chains.values():
        for module, gate in chain.gates():
            if not any(module is c.bn or module is c.act for c in still):
                module.__dict__.pop(PENDING, None)
                restore_class(module, gate)


@contextlib.contextmanager
def _eval_restoring(model: nn.Module) -> Iterator[None]:
    """Eval mode, no gradients, PyTorch's kernels, buffers and random state put back."""
    modes = [(m, m.training) for m in model.modules()]
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        model.eval()
        with torch.no_grad(), torch.random.fork_rng(devices=devices), \
                planner.use_variant(planner.ATEN):
            yield
    finally:
        for m, mode in modes:
            m.training = mode
        for m, mode in modes:  # (set without train(): chains follow their conv's mode here)
            if CHAIN_ATTR in m.__dict__:
                m.__dict__[CHAIN_ATTR].follow_mode(mode)
        with torch.no_grad():
            for buf, value in saved:
                buf.copy_(value)


def _difference(expected: Any, got: Any) -> Optional[str]:
    """Why `got` is not `expected` up to folding's rounding (None when it is)."""
    leaves_e, spec_e = tree_flatten(expected)
    leaves_g, spec_g = tree_flatten(got)
    if spec_e != spec_g:
        return "the fused model returned a differently structured output"
    for e, g in zip(leaves_e, leaves_g):
        if not isinstance(e, torch.Tensor):
            if e != g:
                return "a non-tensor output changed"
            continue
        if not isinstance(g, torch.Tensor) or e.shape != g.shape or e.dtype != g.dtype:
            return "an output's shape or dtype changed"
        if not e.is_floating_point():
            if not torch.equal(e, g):
                return "an integer output changed"
            continue
        if e.numel() == 0:
            continue
        tol = _FOLD_TOLERANCE.get(e.dtype, 1e-4)
        if e.dtype == torch.float32 and e.is_cuda and planner.conv_tf32():
            tol = _TF32_TOLERANCE
        scale = e.detach().abs().max().double().item()
        err = (e.double() - g.double()).abs().max().item()
        if not err <= tol * max(scale, 1e-30) + 1e-30:  # (NaN fails too)
            return f"outputs differ by {err:.3g} (largest magnitude {scale:.3g})"
    return None


def verify_chains(model: nn.Module, plan: ChainPlan, args: Tuple[Any, ...],
                  kwargs: Dict[str, Any]) -> Optional[str]:
    """Runs `model` unfused and fused on the same inputs; the problem, or None when they agree.
    Chains fold on the inputs' device, whichever it is: the check is of the data flow."""
    if not plan.chains:
        return None
    with _eval_restoring(model), folding_on_any_device():
        detach_chains(model, plan)
        torch.manual_seed(0)
        expected = model(*args, **kwargs)
        attach_chains(plan)
        torch.manual_seed(0)
        got = model(*args, **kwargs)
    return _difference(expected, got)
