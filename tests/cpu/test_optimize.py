"""`deconv_patch.optimize`: the user-facing contract (the user's own model patched in place,
copies, modes, idempotence, fusion proved on a real run, summary and warnings)."""

from __future__ import annotations

import copy
import io
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from deconv_patch.fused_chain import ActivationGate, BatchNormGate, EscapeCheck
from deconv_patch.kernels import plan_context
from deconv_patch.modules import FastConvTranspose2d
from deconv_patch.optimize import optimize
from deconv_patch.summary import PatchSummary, PatchWarning, summary
from tests.helpers import forwards_interleaved, random_bn


_eval_bn = random_bn


class Decoder(nn.Module):
    """ConvT+BN+ReLU twice, then a plain ConvT: two folds, one plain swap."""

    def __init__(self) -> None:
        super().__init__()
        self.block1 = nn.Sequential(nn.ConvTranspose2d(8, 6, 4, 2, 1, bias=False), _eval_bn(6),
                                    nn.ReLU())
        self.block2 = nn.Sequential(nn.ConvTranspose2d(6, 4, 3, 2, 1, 1), _eval_bn(4), nn.ReLU())
        self.out = nn.ConvTranspose2d(4, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.out(self.block2(self.block1(x))))


class Branchy(nn.Module):
    """Data-dependent control flow: each call takes the branch its input asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 4, 2, 2)
        self.bn = _eval_bn(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.mean() > 0:
            return self.bn(self.up(x))
        return self.up(-x)


def _x() -> torch.Tensor:
    return torch.randn(2, 8, 5, 5)


def _count(model: nn.Module, cls: type) -> int:
    return sum(1 for m in model.modules() if isinstance(m, cls))


def test_patches_the_model_itself_folds_and_matches():
    model = Decoder().eval()
    x = _x()
    patched = optimize(model, x)
    info = summary(patched, quiet=True)
    assert type(patched) is Decoder and info.path == "in-place"
    assert info.num_patched == _count(model, nn.ConvTranspose2d) == 3
    # torch.tanh is a function call in forward: only module activations are fused
    assert [layer.fused for layer in info.layers] == ["bn(folded)+relu", "bn(folded)+relu", "-"]
    assert _count(patched, FastConvTranspose2d) == 3 and _count(patched, nn.BatchNorm2d) == 2
    assert patched.state_dict().keys() == model.state_dict().keys()
    fresh = torch.randn(3, 8, 7, 6)  # not the example input
    with torch.no_grad():
        # On the CPU the chains run PyTorch's modules as they are: bit for bit the original's.
        assert torch.equal(patched(fresh), model(fresh))


def test_fusion_without_example_inputs_is_decided_on_the_first_call():
    model = Decoder().eval()
    patched = optimize(model)
    info = summary(patched, quiet=True)
    assert [layer.fused for layer in info.layers] == ["-", "-", "-"]
    assert any("first call" in note for note in info.notes)
    x = _x()
    with torch.no_grad():
        first = patched(x)
        assert torch.equal(first, model(x))  # the recorded call itself runs unfused
        second = patched(x)
    info = summary(patched, quiet=True)
    assert [layer.fused for layer in info.layers] == ["bn(folded)+relu", "bn(folded)+relu", "-"]
    assert not any("first call" in note for note in info.notes)
    assert not patched._forward_hooks and not patched._forward_pre_hooks  # hooks gone again
    torch.testing.assert_close(second, first, rtol=1e-5, atol=1e-6)


def test_mode_device_dtype_and_values_kept():
    for train in (False, True):
        model = Decoder().double().train(train)
        model.block2[1].eval()  # a submodule whose mode differs from its parent's
        before = copy.deepcopy(model.state_dict())
        patched = optimize(model, _x().double())
        assert patched.training == train
        assert patched.get_submodule("block2.0").training == train
        assert patched.get_submodule("block2").training == train
        assert patched.get_submodule("block2.1").training is False
        for p in patched.parameters():
            assert p.dtype == torch.float64 and p.device.type == "cpu"
        for key, value in model.state_dict().items():  # the original is untouched
            assert torch.equal(value, before[key]), key
            assert torch.equal(patched.state_dict()[key], value), key


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_training_mode_runs_unfused_with_identical_gradients_and_statistics():
    model = Decoder().train()
    patched = optimize(model, _x())
    x = torch.randn(4, 8, 6, 5)
    out_ref, out = model(x), patched(x)
    assert torch.equal(out, out_ref)  # same ATen math on CPU, batch statistics
    out_ref.square().sum().backward()
    out.square().sum().backward()
    for (name, p_ref), p in zip(model.named_parameters(), patched.parameters()):
        torch.testing.assert_close(p.grad, p_ref.grad, rtol=0, atol=0, msg=name)
    for (name, b_ref), b in zip(model.named_buffers(), patched.named_buffers()):
        assert torch.equal(b_ref, b[1]), name
    patched.eval()  # the chain switches on with eval mode
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(patched(x), model(x), rtol=1e-5, atol=1e-6)


_CHAINS = {"block1": ("block1.1", "block1.2"), "block2": ("block2.1", "block2.2")}


def _batch_norm_calls(monkeypatch) -> list:
    """The shapes F.batch_norm is called on from here on (a fused chain's BatchNorm is not)."""
    calls: list = []
    batch_norm = F.batch_norm

    def counted(input, *args, **kwargs):
        calls.append(tuple(input.shape))
        return batch_norm(input, *args, **kwargs)

    monkeypatch.setattr(F, "batch_norm", counted)
    return calls


def _gated(model: nn.Module, block: str) -> bool:
    bn, act = (model.get_submodule(name) for name in _CHAINS[block])
    return isinstance(bn, BatchNormGate) and isinstance(act, ActivationGate)


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_chain_gates_follow_the_convs_mode(monkeypatch):
    """The BatchNorm and activation of a chain carry the gate classes only while the conv is in
    eval mode: a training step calls the user's own classes (and pays nothing for the chain)."""
    reference = Decoder().train()
    patched = optimize(copy.deepcopy(reference), _x())
    for names in _CHAINS.values():
        for name, cls in zip(names, (nn.BatchNorm2d, nn.ReLU)):
            assert type(patched.get_submodule(name)) is cls, name
    calls = _batch_norm_calls(monkeypatch)
    x = torch.randn(3, 8, 6, 7)
    assert torch.equal(patched(x), reference(x))  # batch statistics, ATen on both sides
    assert len(calls) == 4

    patched.eval()
    reference.eval()
    assert _gated(patched, "block1") and _gated(patched, "block2")
    calls.clear()
    with torch.no_grad():
        out = patched(x)
    assert calls == []  # both chains ran fused
    with torch.no_grad():
        torch.testing.assert_close(out, reference(x), rtol=1e-5, atol=1e-6)

    # One conv back in training mode: its chain leaves its modules their own classes and
    # runs unfused; the other chain still fuses.
    patched.get_submodule("block1.0").train()
    reference.get_submodule("block1.0").train()
    assert not _gated(patched, "block1") and _gated(patched, "block2")
    calls.clear()
    with torch.no_grad():
        out = patched(x)
    assert calls == [(3, 6, 12, 14)]  # block1's BatchNorm only
    with torch.no_grad():
        torch.testing.assert_close(out, reference(x), rtol=1e-5, atol=1e-6)

    patched.train()
    for names in _CHAINS.values():
        for name, cls in zip(names, (nn.BatchNorm2d, nn.ReLU)):
            assert type(patched.get_submodule(name)) is cls, name


def _assign_modes(model: nn.Module, training: bool) -> None:
    """Modes put back as PyTorch Lightning puts them back after a validation run: by assigning
    each module's `training`, not by train() / eval()."""
    for module in model.modules():
        module.training = training


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_modes_assigned_directly_catch_up_with_the_chains(monkeypatch):
    """After modes are assigned without train() / eval(), a gated chain whose BatchNorm trains
    drops its gates and escape check at its module's next call, and an ungated chain whose conv
    and BatchNorm are in eval mode takes them back at its next call; every call computes what
    the original computes."""
    reference = Decoder().eval()
    patched = optimize(copy.deepcopy(reference), _x())
    calls = _batch_norm_calls(monkeypatch)
    x = torch.randn(3, 8, 6, 7)
    with torch.no_grad():
        torch.testing.assert_close(patched(x), reference(x), rtol=1e-5, atol=1e-6)
    assert len(calls) == 2  # the reference's two; both chains ran fused

    _assign_modes(patched, True)
    _assign_modes(reference, True)
    assert _gated(patched, "block1") and _gated(patched, "block2")
    for _ in range(2):  # training steps: batch statistics, gradients, ATen on both sides
        out, expected = patched(x), reference(x)
        assert torch.equal(out, expected)
        out.square().sum().backward()
        expected.square().sum().backward()
        assert not _gated(patched, "block1") and not _gated(patched, "block2")
        assert not any(m._forward_hooks for m in patched.modules())
    for p, q in zip(patched.parameters(), reference.parameters()):
        assert torch.equal(p.grad, q.grad)
    for b, c in zip(patched.buffers(), reference.buffers()):
        assert torch.equal(b, c)

    _assign_modes(patched, False)
    _assign_modes(reference, False)
    calls.clear()
    with torch.no_grad():
        assert torch.equal(patched(x), reference(x))  # this call unfused: bit for bit
        assert len(calls) == 4
        assert _gated(patched, "block1") and _gated(patched, "block2")
        assert _escape_checks(patched.block1) == 1 and _escape_checks(patched.block2) == 1
        calls.clear()
        torch.testing.assert_close(patched(x), reference(x), rtol=1e-5, atol=1e-6)
        assert len(calls) == 2  # the reference's: the chains fuse again

    # Only one chain's BatchNorm set to train: its chain runs unfused (batch statistics) and
    # drops its gates; the other chain keeps fusing.
    patched.block2[1].training = reference.block2[1].training = True
    with torch.no_grad():
        calls.clear()
        torch.testing.assert_close(patched(x), reference(x), rtol=1e-5, atol=1e-6)
        # the patched model's block2 BatchNorm, then the reference's two
        assert calls == [(3, 4, 24, 28), (3, 6, 12, 14), (3, 4, 24, 28)]
        assert _gated(patched, "block1") and not _gated(patched, "block2")


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_a_training_loop_with_validation_runs_computes_as_the_original():
    """Validation runs inside training, as PyTorch Lightning makes them: modes captured, eval(),
    the forward under inference_mode, modes put back by assignment; between them SGD steps
    (new weights, running statistics). Every output, loss and parameter stays the original's
    (validation outputs within folding's rounding) and training steps run no gate."""
    torch.manual_seed(0)
    reference = Decoder().train()
    patched = optimize(copy.deepcopy(reference), _x())
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
                  for m in (reference, patched)]

    def validation(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        modes = {name: m.training for name, m in model.named_modules()}
        model.eval()
        with torch.inference_mode():
            out = model(x)
        for name, m in model.named_modules():
            m.training = modes[name]
        return out

    for epoch in range(3):
        x = torch.randn(2, 8, 5, 5)
        expected, got = validation(reference, x), validation(patched, x)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        for _ in range(2):
            x = torch.randn(4, 8, 5, 6)
            losses = []
            for model, opt in zip((reference, patched), optimizers):
                opt.zero_grad()
                loss = model(x).square().mean()
                loss.backward()
                opt.step()
                losses.append(loss)
            assert torch.equal(losses[0], losses[1]), epoch
            assert not _gated(patched, "block1") and not _gated(patched, "block2")
        for a, b in zip(reference.state_dict().values(), patched.state_dict().values()):
            assert torch.equal(a, b)


def test_torch_jit_trace_records_what_the_original_traces_to(monkeypatch):
    """A trace (TorchScript, the ONNX export built on it) records dispatcher calls only: the
    patched model traces to PyTorch's convolution with its chains unfused, never through the
    kernel path, so the traced graph computes the original's outputs on any input. The run
    the trace's own check compares the record to takes PyTorch's path too (on the kernels it
    would differ by their rounding, and the check would warn)."""
    reference = Decoder().eval()
    patched = optimize(copy.deepcopy(reference), _x())

    real = FastConvTranspose2d._conv
    kernel_path_calls = []

    def counted(*args, **kwargs):
        kernel_path_calls.append(torch._C._is_tracing())
        return real(*args, **kwargs)

    with torch.no_grad():
        patched(_x())  # fused chains armed, folds cached
        monkeypatch.setattr(FastConvTranspose2d, "_conv", counted)
        with warnings.catch_warnings():
            warnings.simplefilter("error", torch.jit.TracerWarning)
            traced = torch.jit.trace(patched, _x(), check_inputs=[(_x(),), (_x(),)])
        assert kernel_path_calls == [], "the kernel path ran in torch.jit.trace or its check"
        patched(_x())
        assert kernel_path_calls and not any(kernel_path_calls), "the kernel path after it"
        ops = [node.kind() for node in traced.inlined_graph.nodes()]
        assert ops.count("aten::batch_norm") == 2 and ops.count("aten::_convolution") == 3
        for _ in range(2):
            x = torch.randn(3, 8, 4, 6)  # another shape than the traced one
            assert torch.equal(traced(x), reference(x))


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_torch_jit_script_refuses_a_patched_model_clearly_and_leaves_it_as_it_was(mode):
    """TorchScript compiles forward's source, which a patched layer's (and a gate's) is not
    made for: torch.jit.script stops with deconv_patch's message before compiling anything,
    and the model stays patched and computes as before. The original still scripts."""
    from deconv_patch.scripting import NotScriptableError

    reference = getattr(Decoder(), mode)()
    patched = optimize(copy.deepcopy(reference), _x())
    classes = [type(m) for m in patched.modules()]
    with pytest.raises(NotScriptableError, match="torch.jit.script cannot compile a patched "
                                                 "model .*torch.jit.trace"):
        torch.jit.script(patched)
    assert [type(m) for m in patched.modules()] == classes
    with pytest.raises(NotScriptableError):
        torch.jit.script(FastConvTranspose2d.from_module(nn.ConvTranspose2d(4, 3, 3)))
    scripted = torch.jit.script(reference)
    x = torch.randn(2, 8, 3, 4)
    with torch.no_grad():
        assert torch.equal(scripted(x), reference(x))
        torch.testing.assert_close(patched(x), reference(x), rtol=1e-5, atol=1e-6)


def test_a_later_optimize_leaves_earlier_chains_in_their_convs_mode():
    """optimize()'s fused check runs the whole model in eval mode: the chains of an earlier
    call come back to the training mode their convs are in, not gated."""
    model = Decoder().train()
    optimize(model, _x(), inplace=True, filter_fn=lambda name, module: name != "block2.0")
    assert "_fused_chain" in model.get_submodule("block1.0").__dict__
    optimize(model, _x(), inplace=True)
    assert "_fused_chain" in model.get_submodule("block2.0").__dict__
    assert not _gated(model, "block1") and not _gated(model, "block2")
    assert model.training and not any(m._forward_hooks for m in model.modules())


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_a_chain_without_its_gates_never_hands_over(monkeypatch):
    """A conv in eval mode whose BatchNorm lost its gate class (a mode set module by module)
    computes the chain unfused rather than hand a fused output to a module that would apply
    itself again."""
    reference = Decoder().eval()
    patched = optimize(copy.deepcopy(reference), _x())
    bn = patched.get_submodule("block2.1")
    bn.__class__ = nn.BatchNorm2d
    calls = _batch_norm_calls(monkeypatch)
    x = torch.randn(2, 8, 4, 5)
    with torch.no_grad():
        out = patched(x)
    assert calls == [(2, 4, 16, 20)]
    with torch.no_grad():
        torch.testing.assert_close(out, reference(x), rtol=1e-5, atol=1e-6)


class _Scaled(nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight * 1.5


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_a_parametrized_batchnorm_keeps_its_gate_across_modes():
    """Its class is made for that module: it keeps its gate in training mode (one class, not a
    new one per mode change), and the chain still fuses in eval and matches the original."""
    from torch.nn.utils import parametrize

    reference = nn.Sequential(nn.ConvTranspose2d(8, 6, 4, 2, 1), random_bn(6), nn.ReLU()).eval()
    parametrize.register_parametrization(reference[1], "weight", _Scaled())
    patched = optimize(copy.deepcopy(reference), _x())
    assert [layer.fused for layer in summary(patched, quiet=True).layers] == ["bn(folded)+relu"]
    cls = type(patched[1])
    x = torch.randn(2, 8, 3, 6)
    for _ in range(2):
        patched.train()
        assert type(patched[1]) is cls and type(patched[2]) is nn.ReLU
        assert torch.equal(patched(x), reference.train()(x))
        patched.eval()
        assert type(patched[1]) is cls and isinstance(patched[2], ActivationGate)
        with torch.no_grad():
            torch.testing.assert_close(patched(x), reference.eval()(x), rtol=1e-5, atol=1e-6)


class Leaky(nn.Module):
    """The conv's output goes to its BatchNorm, unless `leak`: then the same call's output is
    returned as it is (the recorded run, without `leak`, saw only the chain)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 5, 2, 2)
        self.bn = random_bn(5)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor, leak: bool = False) -> torch.Tensor:
        y = self.up(x)
        if leak:
            return y * 2
        return self.act(self.bn(y))


def _escape_checks(module: nn.Module) -> int:
    return sum(isinstance(hook, EscapeCheck) for hook in module._forward_hooks.values())


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_an_escaped_fused_output_is_recomputed_and_its_chain_switched_off():
    reference = Leaky().eval()
    patched = optimize(copy.deepcopy(reference), torch.randn(1, 4, 3, 3))
    assert [layer.fused for layer in summary(patched, quiet=True).layers] == ["bn(folded)+relu"]
    x = torch.randn(2, 4, 5, 4)
    with torch.no_grad():
        torch.testing.assert_close(patched(x), reference(x), rtol=1e-5, atol=1e-6)
        with pytest.warns(PatchWarning, match="fusion is off"):
            leaked = patched(x, leak=True)
        assert torch.equal(leaked, reference(x, leak=True))  # recomputed unfused
        assert patched.up.__dict__["_fused_chain"].disabled is not None
        assert torch.equal(patched(x), reference(x))  # unfused from now on


@pytest.mark.usefixtures("chains_fold_on_cpu")
@pytest.mark.parametrize("swapped", ["block1.1", "block1.2"], ids=["batchnorm", "activation"])
def test_a_chain_module_swapped_out_after_optimize_is_caught_and_recomputed(swapped):
    """Model surgery after optimize(): the chain's BatchNorm or activation replaced in its
    Sequential. The fused conv's hand-over is then never taken; the escape check on the
    conv's caller sees that, recomputes the call unfused and switches the chain off."""
    reference = Decoder().eval()
    patched = optimize(copy.deepcopy(reference), _x())
    x = torch.randn(2, 8, 5, 3)
    with torch.no_grad():
        patched(x)  # fused
        parent, index = swapped.rsplit(".", 1)
        for model in (reference, patched):
            model.get_submodule(parent)[int(index)] = nn.Tanh()
        with pytest.warns(PatchWarning, match="fusion is off"):
            out = patched(x)
        torch.testing.assert_close(out, reference(x), rtol=1e-5, atol=1e-6)  # (block2 fused)
        assert patched.block1[0].__dict__["_fused_chain"].disabled is not None
        torch.testing.assert_close(patched(x), reference(x), rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_threads_sharing_a_model_each_get_their_own_hand_over(monkeypatch):
    """Two threads run one patched model in eval mode (a server's workers sharing it): thread
    B's whole forward runs between thread A's fused conv call and A's BatchNorm. Each thread's
    BatchNorm takes its own thread's hand-over, so both outputs are the original's."""
    reference = Decoder().eval()
    patched = optimize(copy.deepcopy(reference), _x())
    inputs = {"A": torch.randn(2, 8, 5, 5), "B": torch.randn(3, 8, 4, 6)}
    outputs = forwards_interleaved(patched, inputs, monkeypatch)
    with torch.no_grad():
        for name, x in inputs.items():
            torch.testing.assert_close(outputs[name], reference(x), rtol=1e-5, atol=1e-6)
    assert all(m.__dict__.get("_fused_chain") is None or m.__dict__["_fused_chain"].disabled
               is None for m in patched.modules())  # (no escape: nothing was recomputed)


def _replicate(model: nn.Module) -> nn.Module:
    """What nn.DataParallel makes for each GPU (torch.nn.parallel.replicate), made on the CPU:
    per module an object sharing the contents of its __dict__ (its fused chain included), with
    its own children and copies of the parameters and buffers."""
    replicas = {m: m._replicate_for_data_parallel() for m in model.modules()}
    for m, replica in replicas.items():
        for name, child in m._modules.items():
            replica._modules[name] = None if child is None else replicas[child]
        for name, p in m._parameters.items():
            replica._parameters[name] = None if p is None else p.detach().clone()
        for name, b in m._buffers.items():
            replica._buffers[name] = None if b is None else b.clone()
    return replicas[model]


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_a_data_parallel_replica_runs_its_chains_unfused(monkeypatch):
    """A replica's conv shares the original conv's chain, whose BatchNorm and activation (and,
    on the GPU, their device) are the original's, not the ones the replica's model calls: its
    calls run unfused, bit for bit the original's, while the model itself still fuses."""
    from deconv_patch.fused_chain import FusedChain

    reference = Decoder().eval()
    patched = optimize(copy.deepcopy(reference), _x())
    replica = _replicate(patched)
    handed_over = []
    real = FusedChain.hand_over
    monkeypatch.setattr(FusedChain, "hand_over",
                        lambda self, output: handed_over.append(self) or real(self, output))
    x = torch.randn(3, 8, 4, 6)
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(replica(x), reference(x))
        assert handed_over == []
        torch.testing.assert_close(patched(x), reference(x), rtol=1e-5, atol=1e-6)
        assert len(handed_over) == 2  # (both chains of the model itself)
        assert torch.equal(replica(x), reference(x))


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_the_escape_check_hook_is_on_its_module_only_in_eval_mode():
    """A hook takes nn.Module's call off its fast path: training mode, where no call fuses,
    runs the user's module without it; eval mode puts it back, and it still does its work."""
    reference = Leaky().train()
    patched = optimize(copy.deepcopy(reference), torch.randn(1, 4, 3, 3))
    assert not patched._forward_hooks
    patched.eval()
    assert _escape_checks(patched) == 1
    copied = copy.deepcopy(patched.train())  # a copy follows its own modes
    assert not copied._forward_hooks and not patched._forward_hooks
    copied.eval()
    assert _escape_checks(copied) == 1 and not patched._forward_hooks
    reference.eval()
    x = torch.randn(3, 4, 2, 5)
    with torch.no_grad():
        torch.testing.assert_close(copied(x), reference(x), rtol=1e-5, atol=1e-6)
        with pytest.warns(PatchWarning, match="fusion is off"):
            assert torch.equal(copied(x, leak=True), reference(x, leak=True))
    patched.eval()
    patched.up.train()
    assert not patched._forward_hooks  # its only chain's conv trains


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_eval_with_gradients_runs_unfused():
    model = Decoder().eval()
    patched = optimize(model, _x())
    x = torch.randn(2, 8, 5, 5, requires_grad=True)
    out_ref, out = model(x), patched(x)
    assert torch.equal(out, out_ref)
    g_ref, = torch.autograd.grad(out_ref.sum(), x)
    g, = torch.autograd.grad(out.sum(), x)
    assert torch.equal(g, g_ref)


def test_example_inputs_run_leaves_buffers_alone():
    model = Decoder().train()
    before = {k: v.clone() for k, v in model.named_buffers()}
    patched = optimize(model, _x())
    for name, buf in patched.named_buffers():
        if name in before:
            assert torch.equal(buf, before[name]), name


def test_idempotent():
    model = Decoder().eval()
    once = optimize(model, _x())
    twice = optimize(once, _x())
    assert summary(twice, quiet=True).layers == summary(once, quiet=True).layers
    sd1, sd2 = once.state_dict(), twice.state_dict()
    assert sd1.keys() == sd2.keys() and all(torch.equal(sd1[k], sd2[k]) for k in sd1)
    x = _x()
    with torch.no_grad():
        assert torch.equal(twice(x), once(x))
    branchy = optimize(Branchy())
    again = optimize(branchy)
    assert summary(again, quiet=True).layers == summary(branchy, quiet=True).layers


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_state_dict_round_trip_fused_or_not():
    for fuse in (False, True):
        model = Decoder().eval()
        patched = optimize(model, _x(), fuse=fuse)
        assert patched.state_dict().keys() == model.state_dict().keys()
        other = Decoder().eval()  # different random weights and statistics
        patched.load_state_dict(other.state_dict())
        x = _x()
        with torch.no_grad():  # a fused chain refolds after load_state_dict
            torch.testing.assert_close(patched(x), other(x), rtol=1e-5, atol=1e-6)
        model.load_state_dict(patched.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(model(x), patched(x), rtol=1e-5, atol=1e-6)


def _changes():
    """Ways a fused chain's sources change after its first fold: in place (version counter),
    by a new tensor whose version counter equals the old one's (identity), by `.data =` (new
    storage, same tensor and version), and by training forwards, whose running statistics'
    update bumps no counter of theirs."""
    def in_place(m):
        with torch.no_grad():
            m.block1[0].weight.mul_(1.5)
            m.block1[1].running_var.add_(0.25)

    def same_version(old, new):
        with torch.no_grad():
            while new._version < old._version:
                new.add_(0)
        assert new._version == old._version
        return new

    def replaced(m):
        bn = m.block1[1]
        bn.running_mean = same_version(bn.running_mean, bn.running_mean * 0.5 + 0.25)
        bn.weight = nn.Parameter(same_version(bn.weight, bn.weight.detach() * 0.75 + 0.5))

    def eps(m):
        m.block2[1].eps = 0.5

    def data_assigned(m):
        # `.data =` swaps a tensor's storage under the same object and version counter
        # (older training code, conversion helpers); in-place writes through `.data` are not
        # seen (README)
        bn = m.block1[1]
        bn.running_mean.data = bn.running_mean.data * 0.5 + 1.0
        m.block2[0].weight.data = m.block2[0].weight.data.flip(0).contiguous()

    def trained(m):
        versions = [b._version for b in (m.block1[1].running_mean, m.block1[1].running_var)]
        torch.manual_seed(5)
        m.train()
        for _ in range(3):  # (running statistics update with or without gradients)
            m(torch.randn(4, 8, 5, 6) * 2 + 1)
        m.eval()
        assert [b._version for b in (m.block1[1].running_mean, m.block1[1].running_var)] \
            == versions  # (what a version counter alone would miss)

    return [in_place, replaced, data_assigned, eps, trained]


@pytest.mark.usefixtures("chains_fold_on_cpu")
@pytest.mark.parametrize("change", _changes(), ids=lambda f: f.__name__)
def test_fused_chain_refolds_when_a_source_changes(change):
    model = Decoder().eval()
    patched = optimize(copy.deepcopy(model), _x())
    x = _x()
    with torch.no_grad():
        patched(x)  # folded and cached
        change(model)
        change(patched)
        torch.testing.assert_close(patched(x), model(x), rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_each_stream_gets_its_own_fold(monkeypatch):
    """A fold is read only on the stream that made it (kept_buffers.stream_key): another
    stream could read it before the fold ran. The current stream is stood in for here; on the
    GPU, tests/gpu/test_streams.py runs the race itself."""
    from deconv_patch import fused_chain

    stream = [1]
    monkeypatch.setattr(fused_chain, "stream_key", lambda device: stream[0])
    folds = []
    real = fused_chain.fold_scale_shift
    monkeypatch.setattr(fused_chain, "fold_scale_shift",
                        lambda *args: folds.append(stream[0]) or real(*args))
    model = Decoder().eval()
    patched = optimize(copy.deepcopy(model), _x())
    x = _x()
    with torch.no_grad():
        patched(x)
        folds.clear()
        patched(x)
        assert folds == []  # cached on this stream
        stream[0] = 2
        out = patched(x)
        assert folds == [2, 2]  # both chains fold again for the other stream
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-6)


def test_inplace():
    model = Decoder().eval()
    patched = optimize(model, inplace=True, fuse=False)
    assert patched is model and isinstance(model.out, FastConvTranspose2d)
    branchy = Branchy()
    assert optimize(branchy, inplace=True) is branchy
    assert isinstance(branchy.up, FastConvTranspose2d)


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_data_dependent_branches_run_as_written():
    model = Branchy().eval()
    patched = optimize(model, torch.rand(2, 3, 4, 4) + 0.1)
    info = summary(patched, quiet=True)
    assert info.path == "in-place" and [layer.name for layer in info.layers] == ["up"]
    assert isinstance(patched.up, FastConvTranspose2d) and type(model.up) is nn.ConvTranspose2d
    # the example took the BN branch, but the conv's output also feeds `-x`'s branch later:
    # fusion is only ever used for calls from the recorded code, and the other branch is fine
    for sign in (1.0, -1.0):  # both branches
        x = sign * (torch.rand(2, 3, 4, 4) + 0.1)
        with torch.no_grad():
            torch.testing.assert_close(patched(x), model(x), rtol=1e-5, atol=1e-6)


def test_model_without_conv_transpose_is_returned_unchanged():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    with pytest.warns(UserWarning, match="returned unchanged"):
        patched = optimize(model)
    info = summary(patched, quiet=True)
    assert info.path == "none" and info.num_patched == 0
    assert type(patched) is nn.Sequential and patched is not model
    x = torch.randn(1, 3, 6, 6)
    assert torch.equal(patched(x), model(x))
    with pytest.warns(UserWarning, match="no ConvTranspose2d"):
        optimize(nn.Sequential(nn.Conv2d(3, 3, 1)), inplace=True)


def test_filter_fn():
    model = Decoder().eval()
    patched = optimize(model, _x(), filter_fn=lambda name, m: name != "block2.0")
    info = summary(patched, quiet=True)
    assert [layer.name for layer in info.layers] == ["block1.0", "out"]
    assert info.skipped == ("block2.0",)
    assert type(patched.get_submodule("block2.0")) is nn.ConvTranspose2d
    assert type(patched.get_submodule("block2.1")) is nn.BatchNorm2d  # not fused either
    with pytest.warns(UserWarning, match="returned unchanged"):
        skipped = optimize(Branchy(), filter_fn=lambda name, m: False)
    assert summary(skipped, quiet=True).path == "none"
    assert summary(skipped, quiet=True).skipped == ("up",)


def test_shared_module_used_twice_and_registered_twice():
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.ConvTranspose2d(3, 3, 3, padding=1)
            self.alias = self.up  # same module under a second name
            self.bn = _eval_bn(3)

        def forward(self, x):
            return self.bn(self.alias(self.up(x)))

    model = Shared().eval()
    with pytest.warns(PatchWarning, match="called 2 times"):
        patched = optimize(model, torch.randn(1, 3, 4, 4))
    info = summary(patched, quiet=True)
    (layer,) = info.layers
    assert layer.calls == 2 and layer.fused == "-"
    assert info.declined and "called 2 times" in info.declined[0][1]
    assert patched.get_submodule("alias") is patched.get_submodule("up")
    assert patched.state_dict().keys() == model.state_dict().keys()
    x = torch.randn(2, 3, 5, 5)
    with torch.no_grad():
        assert torch.equal(patched(x), model(x))


def test_functional_conv_transpose_with_parameter_weights():
    class Fn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(4, 2, 3, 3))
            self.bias = nn.Parameter(torch.randn(2))

        def forward(self, x):
            return F.conv_transpose2d(x, self.weight, self.bias, stride=2, padding=1,
                                      output_padding=1)

    model = Fn()
    patched = optimize(model)
    info = summary(patched, quiet=True)
    assert type(patched) is Fn and [layer.kind for layer in info.layers] == ["function"]
    assert type(patched).forward is Fn.forward  # the class is the user's, untouched
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    out_ref, out = model(x), patched(x)
    assert torch.equal(out, out_ref)
    g_ref = torch.autograd.grad(out_ref.sum(), (x, model.weight))
    g = torch.autograd.grad(out.sum(), (x, patched.weight))
    assert all(torch.equal(a, b) for a, b in zip(g, g_ref))


def test_summary_table_and_errors():
    patched = optimize(Decoder().eval(), _x())
    buffer = io.StringIO()
    info = summary(patched, file=buffer)
    text = buffer.getvalue()
    assert isinstance(info, PatchSummary) and text == info.table() + "\n"
    for expected in ("path=in-place", "block1.0", "block2.0", "out", "bn(folded)", "fused",
                     "activation in the conv kernel", "aten"):
        assert expected in text
    assert summary(copy.deepcopy(patched), quiet=True).layers == info.layers
    with pytest.raises(ValueError, match="not returned by deconv_patch.optimize"):
        summary(Decoder())
    with pytest.raises(TypeError):
        optimize("not a module")  # type: ignore[arg-type]


def test_progress_bar_only_for_many_layers(capsys):
    many = nn.Sequential(*[nn.ConvTranspose2d(2, 2, 1) for _ in range(25)])
    optimize(many)
    assert "deconv_patch" in capsys.readouterr().err
    optimize(Decoder())
    assert "deconv_patch" not in capsys.readouterr().err


def test_validate_needs_example_inputs():
    with pytest.raises(ValueError, match="example_inputs"):
        optimize(Decoder(), validate=True)


def test_validate_attaches_report():
    pytest.importorskip("deconv_patch.validation")
    model = Decoder().eval()
    patched = optimize(model, _x(), validate=True)
    report = summary(patched, quiet=True).validation
    assert report is not None
    assert report.passed, str(report)  # fused layers compared as conv + BN + ReLU
    assert [layer.fused_with for layer in report.layers] == [
        ["block1.1", "block1.2"], ["block2.1", "block2.2"], []]


@pytest.mark.parametrize("with_inputs", [False, True])
def test_patched_model_compiles_without_graph_breaks(with_inputs):
    """The op has a fake kernel and the chains step aside while Dynamo traces, so
    Dynamo/AOTAutograd trace straight through the patched model."""
    model = Decoder().eval()
    patched = optimize(model, _x() if with_inputs else None)
    torch._dynamo.reset()
    compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
    x = _x()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)


class _NoLookupWhileCompiling:
    """Stands in for the forced-variant ContextVar: Dynamo in some torch versions (2.11 among
    them) cannot trace ContextVar.get and breaks the graph there, so nothing may ask for the
    forced variant while Dynamo traces."""

    def get(self) -> None:
        if torch.compiler.is_compiling():
            raise AssertionError("the forced variant was looked up while compiling")
        return None


@pytest.mark.parametrize("train", [False, True])
def test_compiled_step_with_gradients_is_one_graph(train, monkeypatch):
    """With autograd recording (a training step, or an eval model whose parameters require
    gradients) the patched model still compiles to one graph, and its outputs and gradients
    are the original's."""
    model = Decoder().train(train)
    patched = optimize(copy.deepcopy(model), _x())
    monkeypatch.setattr(plan_context, "_forced_variant", _NoLookupWhileCompiling())
    torch._dynamo.reset()
    compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
    x = _x()
    got, want = compiled(x), model(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    grad = torch.randn_like(want)
    got_grads = torch.autograd.grad(got, list(patched.parameters()), grad)
    want_grads = torch.autograd.grad(want, list(model.parameters()), grad)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_example_inputs_check_leaves_the_random_state_alone():
    model = nn.Sequential(nn.ConvTranspose2d(3, 3, 2, 2), nn.Dropout(0.5)).train()
    x = torch.randn(1, 3, 4, 4)
    state = torch.random.get_rng_state()
    optimize(model, x)
    assert torch.equal(torch.random.get_rng_state(), state)
