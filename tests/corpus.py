"""A corpus of small models, each carrying one thing that a model-rewriting tool can get wrong.

Every `Case` builds a fresh model and draws fresh inputs (draw 0 is the example input; later
draws differ in values and, where the hazard depends on it, in shape or type).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrizations
from torch.utils.checkpoint import checkpoint

from tests.helpers import random_bn

Inputs = Tuple[Tuple[Any, ...], Dict[str, Any]]


@dataclass
class Case:
    """One corpus model. `fuses`: eval-mode fusion expected (with example inputs: a first call
    may take a branch that proves nothing); `left`:
    transposed convolutions optimize() must report as left on PyTorch; `check(original,
    patched)`: the hazard's own assertions."""

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int], Inputs]
    train: bool = False
    fuses: bool = False
    left: int = 0
    check: Optional[Callable[[nn.Module, nn.Module], None]] = None
    tags: List[str] = field(default_factory=list)


def _x(draw: int, c: int = 4, h: int = 5, w: int = 6, n: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + draw)
    return torch.randn(n + draw % 2, c, h + draw, w, generator=g)


def _up(cin: int = 4, cout: int = 6, **kw: Any) -> nn.ConvTranspose2d:
    return nn.ConvTranspose2d(cin, cout, kw.pop("k", 4), kw.pop("s", 2), kw.pop("p", 1), **kw)


def _eval_bn(c: int) -> nn.BatchNorm2d:
    return random_bn(c).eval()


def _one(x: torch.Tensor) -> Inputs:
    return (x,), {}


# ------------------------------------------------------------------------------ models


class OptionalSkip(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = _up()

    def forward(self, x: torch.Tensor, skip: Optional[torch.Tensor] = None) -> torch.Tensor:
        y = self.up(x)
        return y if skip is None else torch.cat([y, skip], 1)


def _optional_inputs(draw: int) -> Inputs:
    x = _x(draw)
    if draw % 2 == 0:
        return (x,), {}
    skip = torch.randn(x.shape[0], 3, 2 * x.shape[2], 2 * x.shape[3])
    return (x, skip), {}


class IsinstanceAux(nn.Module):
    def __init__(self, jit_style: bool = False) -> None:
        super().__init__()
        self.up = _up()
        self.aux = _up()
        self.jit_style = jit_style

    def forward(self, x: torch.Tensor, a: Any = None) -> torch.Tensor:
        y = self.up(x)
        if (torch.jit.isinstance(a, torch.Tensor) if self.jit_style
                else isinstance(a, torch.Tensor)):
            y = y + self.aux(a)
        return y


def _maybe_tensor(draw: int) -> Inputs:
    x = _x(draw)
    return (x, (torch.randn_like(x) if draw % 2 else "no aux")), {}


class ConcatIfTensor(nn.Module):
    """MONAI BasicUNet's up-block pattern: `if x_e is not None and isinstance(x_e, Tensor)`."""

    def __init__(self) -> None:
        super().__init__()
        self.up = _up(4, 4)
        self.conv_cat = nn.Conv2d(8, 5, 3, padding=1)
        self.conv_alone = nn.Conv2d(4, 5, 3, padding=1)

    def forward(self, x: torch.Tensor, x_e: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = self.up(x)
        if x_e is not None and isinstance(x_e, torch.Tensor):
            return self.conv_cat(torch.cat([x_e, x], dim=1))
        return self.conv_alone(x)


def _maybe_skip(draw: int) -> Inputs:
    x = _x(draw)
    if draw % 2:
        return (x, torch.randn(x.shape[0], 4, 2 * x.shape[2], 2 * x.shape[3])), {}
    return (x,), {}


class Normed(nn.Module):
    def __init__(self, wrap: Callable[[nn.Module], nn.Module], bn: bool = True) -> None:
        super().__init__()
        self.up = wrap(_up())
        self.bn = _eval_bn(6) if bn else nn.Identity()
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.up(x)))


def _is_parametrized(attr: str = "up") -> Callable[[nn.Module, nn.Module], None]:
    def check(original: nn.Module, patched: nn.Module) -> None:
        from torch.nn.utils import parametrize

        assert parametrize.is_parametrized(getattr(patched, attr), "weight")
        assert type(getattr(patched, attr)).__name__ == type(getattr(original, attr)).__name__
    return check


class Hooked(nn.Module):
    """Hooks on the conv, its BatchNorm and its activation, each changing what flows."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.up = _up()
        self.bn = _eval_bn(6)
        self.act = nn.ReLU()
        if where == "up_pre":
            self.up.register_forward_pre_hook(lambda m, a: (a[0] * 2,))
        else:
            getattr(self, where).register_forward_hook(lambda m, a, out: out + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.up(x)))


class ScriptedInside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scripted = torch.jit.script(nn.Sequential(_up(), nn.ReLU()))
        self.plain = _up(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.plain(self.scripted(x))


class AutocastInside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = _up()
        self.out = _up(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.up(x)
        return self.out(y.float()), y  # y stays bfloat16


class NoGradInside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.frozen = _up()
        self.trained = _up(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            y = self.frozen(x)
        return self.trained(y)


def _frozen_gets_no_grad(original: nn.Module, patched: nn.Module) -> None:
    patched.zero_grad(set_to_none=True)
    patched(torch.randn(2, 4, 5, 5)).sum().backward()
    assert patched.frozen.weight.grad is None and patched.trained.weight.grad is not None


class TinyVAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Conv2d(3, 8, 4, 2, 1)
        self.dec = nn.Sequential(_up(4, 6), _eval_bn(6), nn.ReLU(), _up(6, 3), nn.Tanh())
        self.latent = 4

    def encode(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        mu, logvar = self.enc(x).chunk(2, dim=1)
        return mu, logvar

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.dec(z)

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        return self.decode(torch.randn(n, self.latent, 3, 3, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu, _ = self.encode(x)
        return self.decode(mu)


def _vae_methods(original: nn.Module, patched: nn.Module) -> None:
    z = torch.randn(2, 4, 3, 5)
    with torch.no_grad():
        torch.testing.assert_close(patched.decode(z), original.decode(z), rtol=1e-5, atol=1e-6)
        a = patched.sample(3, torch.Generator().manual_seed(3))
        b = original.sample(3, torch.Generator().manual_seed(3))
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert patched.latent == 4


def _sequential_root(original: nn.Module, patched: nn.Module) -> None:
    assert isinstance(patched[0], nn.ConvTranspose2d) and len(patched) == len(original)
    assert type(patched[1:]) is nn.Sequential


class DictIn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = _up()
        self.side = _up(4, 6)

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        y = self.up(batch["image"])
        if "extra" in batch:
            y = y + self.side(batch["extra"])
        return y


def _dict_inputs(draw: int) -> Inputs:
    x = _x(draw)
    batch = {"image": x}
    if draw % 2:
        batch["extra"] = torch.randn_like(x)
    return (batch,), {}


class KwargsIn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = _up()
        self.bn = _eval_bn(6)

    def forward(self, x: torch.Tensor, *, scale: float = 1.0, shift: Optional[torch.Tensor] = None
                ) -> torch.Tensor:
        y = self.bn(self.up(x * scale))
        return y if shift is None else y + shift


def _kwargs_inputs(draw: int) -> Inputs:
    x = _x(draw)
    kwargs: Dict[str, Any] = {"scale": 0.5 + draw}
    if draw % 2:
        kwargs["shift"] = torch.randn(1, 6, 1, 1)
    return (x,), kwargs


class DictOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = _up()
        self.bn = _eval_bn(6)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        feat = self.act(self.bn(self.up(x)))
        return {"feat": feat, "mean": feat.mean(dim=(2, 3))}


Pair = collections.namedtuple("Pair", ["mask", "logits"])


class NamedTupleOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = _up(4, 2)

    def forward(self, x: torch.Tensor) -> Pair:
        logits = self.up(x)
        return Pair(logits.sigmoid() > 0.5, logits)


class ShapeBranch(nn.Module):
    """BatchNorm only for large inputs: the same conv call feeds it or not, by shape."""

    def __init__(self) -> None:
        super().__init__()
        self.up = _up()
        self.bn = _eval_bn(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(x)
        if x.shape[-2] > 5:
            y = self.bn(y)
        return y


def _shape_inputs(draw: int) -> Inputs:
    return (_x(0 if draw else 2)[:, :, : 4 + 3 * (draw % 2)],), {}


class OutputSize(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        return self.up(x, output_size=[2 * h, 2 * w])


class DropoutModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = _up()
        self.drop = nn.Dropout(0.3)
        self.out = _up(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.drop(self.up(x)))


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(_up(), random_bn(6), nn.ReLU())
        self.out = _up(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = checkpoint(self.block, x, use_reentrant=False)
        return self.out(y)


class BnTwoUsers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = _up()
        self.bn = _eval_bn(6)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.up(x))
        return self.act(y) + y  # the BN output feeds two: fold the BN, keep the ReLU


class ConvTwoUsers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = _up()
        self.bn = _eval_bn(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(x)
        return self.bn(y) * torch.sigmoid(y)


class ModuleListLoop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ups = nn.ModuleList([_up(4, 4), _up(4, 4), _up(4, 2)])
        self.bns = nn.ModuleList([_eval_bn(4), _eval_bn(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, up in enumerate(self.ups):
            x = up(x)
            if i < len(self.bns):
                x = torch.relu(self.bns[i](x))
        return x


class SharedAndGetattr(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 4, 3, padding=1)
        self.alias = self.up
        self.plain_list = [self.up]  # a plain Python reference, not registered twice
        self.names = ["up", "alias"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in self.names:
            x = getattr(self, name)(x)
        return self.plain_list[0](x)


class Wrapped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.DataParallel(nn.Sequential(_up(), _eval_bn(6), nn.ReLU()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Doubled(nn.ConvTranspose2d):
    """A subclass with its own forward: computes something else, must be left alone."""

    def forward(self, x: torch.Tensor, output_size: Optional[List[int]] = None) -> torch.Tensor:
        return 2 * super().forward(x, output_size)


class OwnInit(nn.ConvTranspose2d):
    """A subclass without its own forward: runs on our op, keeps its class and methods."""

    def __init__(self) -> None:
        super().__init__(4, 6, 4, 2, 1)
        nn.init.orthogonal_(self.weight)

    def describe(self) -> str:
        return f"OwnInit({self.in_channels}->{self.out_channels})"


class Subclasses(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.doubled = Doubled(4, 4, 3, padding=1)
        self.own = OwnInit()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.own(self.doubled(x))


def _subclasses(original: nn.Module, patched: nn.Module) -> None:
    assert type(patched.doubled) is Doubled
    assert isinstance(patched.own, OwnInit) and patched.own.describe() == "OwnInit(4->6)"
    assert type(patched.own).__name__ == "OwnInit"


class Modulated(nn.Module):
    """StyleGAN-like: the weight is computed per call, then F.conv_transpose2d."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 6, 3, 3))
        self.style = nn.Linear(5, 4)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        w = self.weight * self.style(s).mean(0).view(-1, 1, 1, 1)
        return F.conv_transpose2d(x, w, None, stride=2, padding=1, output_padding=1)


def _modulated_inputs(draw: int) -> Inputs:
    return (_x(draw), torch.randn(3, 5, generator=torch.Generator().manual_seed(draw))), {}


class HelperFunctional(nn.Module):
    """F.conv_transpose2d in a helper method: not routable, must be reported when it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3, 2, 2))

    def _deconv(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv_transpose2d(x, self.weight, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._deconv(x) * 2


class FunctionalStyles(nn.Module):
    """Every spelling of the call in one forward, including a comprehension."""

    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(4, 3, 3, 3))
        self.w2 = nn.Parameter(torch.randn(3, 2, 2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.conv_transpose2d(x, self.w1, None, 2, 1, 1)
        y = torch.nn.functional.conv_transpose2d(y, self.w2, stride=(2, 2))
        parts = [F.conv_transpose2d(p, self.w2[:1, :1]) for p in y.split(1, dim=1)]
        return torch.cat(parts, 1)


class Unbatched(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = _up()
        self.act = nn.LeakyReLU(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.up(x))


def _unbatched_inputs(draw: int) -> Inputs:
    return (_x(draw)[0],), {}


class InplaceChain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(_up(), _eval_bn(6), nn.ReLU(inplace=True), _up(6, 3), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TrainBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(_up(), random_bn(6), nn.ReLU(), _up(6, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ValueBranch(nn.Module):
    """The conv output skips the BatchNorm on some inputs, from the same line."""

    def __init__(self) -> None:
        super().__init__()
        self.up = _up()
        self.bn = _eval_bn(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(x)
        return self.bn(y) if float(x.mean()) > 0 else y


def _signed_inputs(draw: int) -> Inputs:
    x = _x(draw).abs() + 0.1
    return ((x if draw % 2 == 0 else -x),), {}


class DirectChildCall(nn.Module):
    """A block whose conv is also called directly (a feature probe outside forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(_up(), _eval_bn(6), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)

    def probe(self, x: torch.Tensor) -> torch.Tensor:
        return self.block[0](x)


def _probe_is_the_conv_alone(original: nn.Module, patched: nn.Module) -> None:
    x = torch.randn(2, 4, 5, 5)
    with torch.no_grad():
        assert torch.equal(patched.probe(x), original.probe(x))
        assert torch.equal(patched.block[0](x), original.block[0](x))


class FunctionalActivation(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = _up()
        self.bn = _eval_bn(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.up(x)))


class _SeededLazy(nn.LazyConvTranspose2d):
    """Initialises from its own generator, so every copy materialises the same weights."""

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params():
            g = torch.Generator().manual_seed(7)
            with torch.no_grad():
                self.weight.copy_(torch.randn(self.weight.shape, generator=g) * 0.1)
                if self.bias is not None:
                    self.bias.copy_(torch.randn(self.bias.shape, generator=g) * 0.1)


class Lazy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = _SeededLazy(6, 4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(x)


def _weight_norm_legacy(m: nn.Module) -> nn.Module:
    return nn.utils.weight_norm(m, dim=1)


def _spectral_norm_legacy(m: nn.Module) -> nn.Module:
    return nn.utils.spectral_norm(m)


CASES: List[Case] = [
    Case("optional_input", OptionalSkip, _optional_inputs),
    Case("isinstance_branch", IsinstanceAux, _maybe_tensor),
    Case("jit_isinstance_branch", lambda: IsinstanceAux(jit_style=True), _maybe_tensor),
    Case("not_none_and_isinstance", ConcatIfTensor, _maybe_skip),
    Case("spectral_norm", lambda: Normed(parametrizations.spectral_norm), lambda d: _one(_x(d)),
         fuses=True, check=_is_parametrized()),
    Case("weight_norm", lambda: Normed(lambda m: parametrizations.weight_norm(m, dim=1)),
         lambda d: _one(_x(d)), fuses=True, check=_is_parametrized()),
    Case("spectral_norm_legacy", lambda: Normed(_spectral_norm_legacy), lambda d: _one(_x(d)),
         fuses=True),
    Case("weight_norm_legacy", lambda: Normed(_weight_norm_legacy), lambda d: _one(_x(d)),
         fuses=True),
    Case("spectral_norm_train", lambda: Normed(parametrizations.spectral_norm, bn=False),
         lambda d: _one(_x(d)), train=True),
    Case("hook_on_conv", lambda: Hooked("up"), lambda d: _one(_x(d))),
    Case("pre_hook_on_conv", lambda: Hooked("up_pre"), lambda d: _one(_x(d)), fuses=True),
    Case("hook_on_bn", lambda: Hooked("bn"), lambda d: _one(_x(d))),
    Case("hook_on_activation", lambda: Hooked("act"), lambda d: _one(_x(d)), fuses=True),
    Case("scripted_submodule", ScriptedInside, lambda d: _one(_x(d)), left=1),
    Case("autocast_inside", AutocastInside, lambda d: _one(_x(d)), tags=["fp32_only"]),
    Case("no_grad_inside", NoGradInside, lambda d: _one(_x(d)), train=True,
         check=_frozen_gets_no_grad),
    Case("vae_methods", TinyVAE, lambda d: _one(torch.randn(2 + d % 2, 3, 6 + 2 * d, 8)),
         fuses=True, check=_vae_methods),
    Case("sequential_root", lambda: nn.Sequential(_up(), _eval_bn(6), nn.GELU(), _up(6, 2)),
         lambda d: _one(_x(d)), fuses=True, check=_sequential_root),
    Case("dict_input", DictIn, _dict_inputs),
    Case("kwargs_input", KwargsIn, _kwargs_inputs, fuses=True),
    Case("dict_output", DictOut, lambda d: _one(_x(d)), fuses=True),
    Case("namedtuple_output", NamedTupleOut, lambda d: _one(_x(d))),
    Case("shape_branch", ShapeBranch, _shape_inputs),
    Case("output_size", OutputSize, lambda d: _one(_x(d))),
    Case("dropout_train", DropoutModel, lambda d: _one(_x(d)), train=True),
    Case("checkpoint_train", Checkpointed, lambda d: _one(_x(d)), train=True),
    Case("checkpoint_eval", Checkpointed, lambda d: _one(_x(d))),
    Case("bn_output_two_users", BnTwoUsers, lambda d: _one(_x(d)), fuses=True),
    Case("conv_output_two_users", ConvTwoUsers, lambda d: _one(_x(d))),
    Case("module_list_loop", ModuleListLoop, lambda d: _one(_x(d)), fuses=True),
    Case("shared_and_getattr", SharedAndGetattr, lambda d: _one(_x(d))),
    Case("data_parallel", Wrapped, lambda d: _one(_x(d)), fuses=True),
    Case("subclasses", Subclasses, lambda d: _one(_x(d)), left=1, check=_subclasses),
    Case("modulated_functional", Modulated, _modulated_inputs),
    Case("functional_in_helper", HelperFunctional, lambda d: _one(_x(d)), left=1),
    Case("functional_styles", FunctionalStyles, lambda d: _one(_x(d))),
    Case("unbatched", Unbatched, _unbatched_inputs, fuses=True),
    Case("inplace_relu_chain", InplaceChain, lambda d: _one(_x(d)), fuses=True),
    Case("train_mode_bn", TrainBN, lambda d: _one(_x(d)), train=True),
    Case("value_branch", ValueBranch, _signed_inputs, fuses=True),
    Case("direct_child_call", DirectChildCall, lambda d: _one(_x(d)), fuses=True,
         check=_probe_is_the_conv_alone),
    Case("functional_activation", FunctionalActivation, lambda d: _one(_x(d)), fuses=True),
    Case("lazy_uninitialised", Lazy, lambda d: _one(_x(d)), left=1, tags=["lazy"]),
]


# ------------------------------------------------------------------ models from libraries


def _monai_basic_unet() -> nn.Module:
    from monai.networks.nets import BasicUNet

    return BasicUNet(spatial_dims=2, in_channels=1, out_channels=2,
                     features=(4, 4, 8, 8, 16, 4), upsample="deconv")


def _monai_unet() -> nn.Module:
    from monai.networks.nets import UNet

    return UNet(spatial_dims=2, in_channels=1, out_channels=2, channels=(4, 8, 16),
                strides=(2, 2), norm="batch")


def _image(draw: int) -> Inputs:
    g = torch.Generator().manual_seed(2000 + draw)
    return (torch.randn(1 + draw % 2, 1, 32 + 16 * (draw % 2), 32, generator=g),), {}


def _mask_rcnn() -> nn.Module:
    from examples.mask_rcnn import build_model

    return build_model(small=True)


def _images(draw: int) -> Inputs:
    g = torch.Generator().manual_seed(3000 + draw)
    return ([torch.rand(3, 120 + 8 * draw, 150, generator=g)],), {}


def library_cases() -> List[Case]:
    """MONAI's BasicUNet (deconv upsampling) and UNet, torchvision's Mask R-CNN."""
    return [
        Case("monai_basic_unet", _monai_basic_unet, _image, tags=["monai"]),
        Case("monai_unet_batchnorm", _monai_unet, _image, fuses=True, tags=["monai"]),
        Case("monai_unet_train", _monai_unet, _image, train=True, tags=["monai"]),
        Case("mask_rcnn", _mask_rcnn, _images, fuses=True, tags=["torchvision"]),
    ]
