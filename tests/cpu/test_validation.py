"""validate(): accuracy per layer and per output, NaN handling, nesting, the speed plumbing (a
wall-clock timer; GPU timing: tests/gpu/test_validation.py)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from deconv_patch.cli.demo import DemoGenerator
from deconv_patch.modules import FastConvTranspose2d
from deconv_patch.validation.report import Tolerances, ulp
from deconv_patch.swap import swap_conv_transpose2d
from deconv_patch.validation import compare_tensors, find_layers, validate
from tests.helpers import randomize_bn

LAYERS = ["net.0", "net.3", "net.6", "net.9"]


class Skewed(FastConvTranspose2d):
    """A patched layer that is wrong by a known amount."""

    shift = 1e-3

    def forward(self, input, output_size=None):
        return super().forward(input, output_size) + self.shift


class PoisonOne(FastConvTranspose2d):
    """A patched layer that writes NaN into one element."""

    def forward(self, input, output_size=None):
        out = super().forward(input, output_size).clone()
        out.view(-1)[7] = float("nan")
        return out


def _pair(width: int = 8):
    original = DemoGenerator(latent=16, width=width).eval()
    patched = copy.deepcopy(original)
    assert swap_conv_transpose2d(patched) == LAYERS
    return original, patched


def _replace(model: nn.Module, name: str, cls: type) -> None:
    parent_name, _, child = name.rpartition(".")
    old = model.get_submodule(name)
    new = cls.from_module(nn.ConvTranspose2d(old.in_channels, old.out_channels, old.kernel_size,
                                             old.stride, old.padding, bias=old.bias is not None))
    new.weight, new.bias = old.weight, old.bias
    setattr(model.get_submodule(parent_name), child, new)


def _z(batch: int = 4) -> torch.Tensor:
    return torch.randn(batch, 16, 1, 1)


def _fused_pair(seed: int):
    """The demo generator with random BatchNorm statistics and its optimize()d copy (each
    conv -> BatchNorm -> activation chain fused, proved on a fresh example input)."""
    from deconv_patch import optimize

    torch.manual_seed(seed)
    original = DemoGenerator(latent=16, width=8)
    randomize_bn(original)
    original.eval()
    return original, optimize(original, (_z(),))


def test_diff_shows_up_in_exactly_the_changed_layer():
    original, patched = _pair()
    _replace(patched, "net.6", Skewed)
    report = validate(original, patched, _z())
    rows = {layer.name: layer for layer in report.layers}
    assert list(rows) == LAYERS
    bad = rows["net.6"].comparisons[0]
    assert bad.max_abs_diff == pytest.approx(Skewed.shift, rel=1e-3)
    assert bad.mismatches == bad.numel and bad.bit_identical < 0.01
    assert bad.patched_err_fp64 > bad.fp64_limit > 0
    assert not rows["net.6"].passed and rows["net.6"].patched_type == "Skewed"
    for name in ("net.0", "net.3", "net.9"):
        c = rows[name].comparisons[0]
        assert c.max_abs_diff == 0 and c.bit_identical == 1.0 and c.mismatches == 0
        assert c.patched_err_fp64 == c.original_err_fp64 > 0
        assert rows[name].passed
    # the last layer itself is exact, but inside the full run it sees net.6's error
    assert rows["net.9"].in_model_max_abs_diff > 0
    assert rows["net.3"].in_model_max_abs_diff == 0
    assert not report.passed
    layer_failures = [f for f in report.failures if f.startswith("layer ")]
    assert layer_failures and all(f.startswith("layer net.6") for f in layer_failures)
    assert report.outputs[0].comparisons[0].max_abs_diff > 0
    assert str(report).splitlines()[-1].startswith("FAIL")


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_the_output_compared_end_to_end_is_the_fused_models_own(monkeypatch):
    """validate() captures each layer's call with hooks, which switch fused chains off inside
    the model's forward; the output it compares end to end comes from a run without them, so a
    fault in the model's own fused path fails the end-to-end check. The fault here: the fused
    output is not handed over, so the BatchNorm and ReLU modules after the conv apply
    themselves a second time (only the model's forward hands over; the per-layer rows run
    each chain on its own)."""
    from deconv_patch.fused_chain import FusedChain

    original, patched = _fused_pair(3)
    fused = [n for n, m in patched.named_modules() if "_fused_chain" in m.__dict__]
    assert fused == LAYERS
    z = _z(3)  # not the example input
    assert validate(original, patched, (z,)).passed
    monkeypatch.setattr(FusedChain, "hand_over", lambda self, output: None)
    report = validate(original, patched, (z,))
    assert all(layer.passed for layer in report.layers)
    assert not report.outputs[0].passed and not report.passed
    assert report.outputs[0].comparisons[0].max_abs_diff > 1e-3


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_validate_runs_every_fused_layer_fused(monkeypatch):
    """Fused chains look through validate()'s capture hooks: each patched layer runs its chain
    fused in the model's forward and in its own row, so validate() needs no unfused kernel of
    a fused layer (nor compiles one); the captured layer outputs are the chains' outputs."""
    original, patched = _fused_pair(4)
    slots = []
    real = FastConvTranspose2d._conv

    def recording(self, input, weight, bias, output_size, activation, negative_slope, slot):
        slots.append((activation, slot))
        return real(self, input, weight, bias, output_size, activation, negative_slope, slot)

    monkeypatch.setattr(FastConvTranspose2d, "_conv", recording)
    report = validate(original, patched, _z(3), random_inputs=1)
    assert report.passed, report.failures
    assert slots and all(slot == "_fast_path_fused" and activation != "none"
                         for activation, slot in slots), slots
    for layer in report.layers:
        assert layer.fused_with and layer.calls == 1
        assert layer.in_model_max_abs_diff is not None and layer.in_model_max_abs_diff < 1e-4


@pytest.mark.usefixtures("chains_fold_on_cpu")
def test_a_users_hook_still_sees_its_convs_own_output_during_validate():
    """Only validate()'s own hooks are looked through: a user's forward hook on a fused conv
    keeps it unfused in validate()'s run too, and sees the conv's own output (before its
    BatchNorm), as in the user's runs."""
    original, patched = _fused_pair(5)
    seen = []
    handle = patched.get_submodule("net.0").register_forward_hook(
        lambda module, args, output: seen.append((args[0].clone(), output.clone())))
    try:
        report = validate(original, patched, _z(3))
    finally:
        handle.remove()
    assert report.passed, report.failures
    assert seen
    conv = original.get_submodule("net.0")
    with torch.no_grad():
        for x, y in seen:
            torch.testing.assert_close(y, conv(x), rtol=1e-5, atol=1e-6)


def test_identical_models_zero_diff_all_bits_identical():
    original, _ = _pair()
    swap_conv_transpose2d(original)
    patched = copy.deepcopy(original)
    report = validate(original, patched, _z(), random_inputs=2)
    assert report.passed, report.failures
    assert [o.label for o in report.outputs] == ["inputs", "random 1", "random 2"]
    comps = [c for o in report.outputs for c in o.comparisons]
    comps += [c for layer in report.layers for c in layer.comparisons]
    assert len(comps) == 3 + 4
    for c in comps:
        assert c.max_abs_diff == 0 and c.max_rel_diff == 0 and c.mismatches == 0
        assert c.bit_identical == 1.0 and not c.nonfinite
        assert c.original_err_fp64 == c.patched_err_fp64
    # fresh random draws really are different inputs
    errs = {o.comparisons[0].original_err_fp64 for o in report.outputs}
    assert len(errs) == 3
    assert str(report).splitlines()[-1].startswith("PASS")


def test_plain_pytorch_vs_swapped_on_cpu_is_exact():
    original, patched = _pair()
    report = validate(original, patched, _z())
    assert report.passed
    assert [layer.original_type for layer in report.layers] == ["ConvTranspose2d"] * 4
    assert [layer.variant for layer in report.layers] == ["aten"] * 4
    assert report.environment.variants == {n: "aten" for n in LAYERS}
    assert all(layer.comparisons[0].bit_identical == 1.0 for layer in report.layers)


def test_nan_in_patched_output_fails():
    original, patched = _pair()
    _replace(patched, "net.9", PoisonOne)
    report = validate(original, patched, _z())
    assert not report.passed
    out = report.outputs[0].comparisons[0]
    assert out.nan_patched == 1 and out.nan_original == 0 and out.mismatches >= 1
    layer = report.layers[-1].comparisons[0]
    assert layer.nan_patched == 1 and not layer.passed
    assert any("non-finite" in f and "net.9" in f for f in report.failures)
    assert any("non-finite" in f and f.startswith("output") for f in report.failures)
    assert "NaN/Inf" in str(report)


class Logs(nn.Module):
    """NaN on both sides (log of negatives): must not pass as 'equal'."""

    def forward(self, x):
        return torch.log(x)


def test_nan_on_both_sides_is_reported_not_equal():
    x = torch.randn(64).abs() + 0.1
    x[3] = -1.0
    report = validate(Logs(), Logs(), x)
    c = report.outputs[0].comparisons[0]
    assert c.nan_original == 1 and c.nan_patched == 1
    assert c.mismatches == 1 and not report.passed
    assert c.max_abs_diff == 0  # the finite elements agree


class Nested(nn.Module):
    def __init__(self, bump: float = 0.0) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 4, 3, 2, 1)
        self.bump = bump

    def forward(self, x, scale: float = 1.0):
        y = self.up(x) * scale
        boxes = y.mean(dim=(2, 3))
        return {
            "image": y,
            "parts": (y.sum(), [y.amax(dim=1), {"boxes": boxes + self.bump}]),
            "count": 3,
        }


def test_nested_outputs_are_compared_leaf_by_leaf():
    original = Nested()
    patched = copy.deepcopy(original)
    patched.bump = 0.5
    report = validate(original, patched, (torch.randn(2, 3, 5, 5),),
                      example_kwargs={"scale": 2.0})
    by_path = {c.path: c for c in report.outputs[0].comparisons}
    assert set(by_path) == {"['image']", "['parts'][0]", "['parts'][1][0]",
                            "['parts'][1][1]['boxes']"}
    assert by_path["['parts'][1][1]['boxes']"].max_abs_diff == pytest.approx(0.5)
    for path in ("['image']", "['parts'][0]", "['parts'][1][0]"):
        assert by_path[path].bit_identical == 1.0
    assert not report.passed
    assert all("boxes" in f for f in report.failures)
    assert report.environment.input_shapes == {"args[0]": [2, 3, 5, 5]}


def test_detection_style_structure_mismatch_fails():
    class Det(nn.Module):
        def __init__(self, drop: bool) -> None:
            super().__init__()
            self.drop = drop

        def forward(self, images):
            out = [{"boxes": im[:, :2].flatten(), "labels": im.argmax(0)} for im in images]
            if self.drop:
                del out[1]["labels"]
            return out

    images = [torch.randn(3, 4, 4), torch.randn(3, 6, 6)]  # a list: one argument
    good = validate(Det(False), Det(False), images)
    assert good.passed and len(good.outputs[0].comparisons) == 4
    assert {c.path for c in good.outputs[0].comparisons} == {
        "[0]['boxes']", "[0]['labels']", "[1]['boxes']", "[1]['labels']"}
    bad = validate(Det(False), Det(True), images)
    assert not bad.passed
    assert any("[1]['labels'] is missing" in f for f in bad.failures)


def test_type_change_without_backend_is_reported_as_layer():
    original, patched = _pair()
    patched.net[2] = nn.LeakyReLU(0.1)  # same name, different type
    report = validate(original, patched, _z())
    names = [layer.name for layer in report.layers]
    assert names == ["net.0", "net.2", "net.3", "net.6", "net.9"]
    relu = report.layers[1]
    assert (relu.original_type, relu.patched_type) == ("ReLU", "LeakyReLU")
    assert relu.comparisons[0].max_abs_diff > 0 and not relu.passed
    assert all(layer.passed for layer in report.layers if layer.name != "net.2")


def test_renamed_layers_are_patched_only_and_extra_layers_by_name():
    class Renamed(nn.Module):
        def __init__(self, gen: DemoGenerator) -> None:
            super().__init__()
            self.body = gen.net

        def forward(self, z):
            return self.body(z)

    original, patched = _pair()
    renamed = Renamed(patched)
    report = validate(original, renamed, _z(), layers=["body.1"])
    assert [layer.name for layer in report.layers] == [
        "body.0", "body.1", "body.3", "body.6", "body.9"]
    fast = [layer for layer in report.layers if layer.patched_type == "FastConvTranspose2d"]
    assert all(not layer.matched and not layer.comparisons for layer in fast)
    assert all("patched side only" in layer.notes[0] for layer in fast)
    assert report.passed and report.outputs[0].comparisons[0].bit_identical == 1.0
    assert report.environment.fusion is True  # net.* are gone from the patched model
    assert "fused or renamed" in report.environment.fusion_details[0]
    with pytest.raises(KeyError):
        find_layers(original, renamed, ["nope"])


def test_dtype_casts_copies_and_leaves_user_models_alone():
    original, patched = _pair()
    original.train()
    patched.train()
    before = copy.deepcopy(original.state_dict())
    report = validate(original, patched, _z(8), dtype=torch.float64)
    assert report.environment.dtype == "float64"
    assert report.environment.input_dtypes == {"args[0]": "float64"}
    assert report.tolerances.atol == 1e-7 and report.layers[0].comparisons[0].dtype == "float64"
    assert next(original.parameters()).dtype == torch.float32
    assert report.passed
    # training-mode BatchNorm statistics are restored in the user's model
    report = validate(original, patched, _z(8))
    for key, value in original.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert report.passed


def test_speed_is_skipped_on_cpu_with_reason():
    if torch.cuda.is_available():
        pytest.skip("CPU-only behaviour")
    original, patched = _pair()
    report = validate(original, patched, _z(), backward=True,
                      tolerances=Tolerances(min_speedup=1.1))
    assert report.forward is None and report.forward_backward is None
    assert all(layer.forward is None for layer in report.layers)
    assert "CUDA" in report.speed_skipped_reason
    assert "speed not measured" in str(report)
    assert report.passed and any("min_speedup" in n for n in report.notes)


def test_mismatch_gate_without_fp64_follows_tolerances():
    original, patched = _pair()
    _replace(patched, "net.3", Skewed)
    strict = validate(original, patched, _z(), fp64=False)
    c = strict.layers[1].comparisons[0]
    assert c.original_err_fp64 is None and c.fp64_limit is None
    assert not strict.passed and "mismatch" in strict.failures[0]
    loose = validate(original, patched, _z(), fp64=False, tolerances=Tolerances(atol=1e-2))
    assert loose.layers[1].comparisons[0].mismatches == 0
    assert loose.passed, loose.failures
    assert loose.tolerances.atol == 1e-2 and loose.tolerances.rtol == 1.3e-6


def test_compare_tensors_values():
    tol = Tolerances().resolved(torch.float32)
    a = torch.tensor([1.0, 2.0, -0.0, 4.0, 1e-9])
    b = torch.tensor([1.0, 2.5, 0.0, 4.0, 2e-9])
    ref = a.double() + 1e-8
    c = compare_tensors("", a, b, ref, tol)
    assert c.max_abs_diff == 0.5
    assert c.max_rel_diff == pytest.approx(0.25)
    assert c.bit_identical == pytest.approx(2 / 5)  # -0.0 and +0.0 differ in bits
    assert c.mismatches == 1
    assert c.original_err_fp64 == pytest.approx(1e-8, rel=1e-3)
    assert c.patched_err_fp64 == pytest.approx(0.5, rel=1e-6)
    assert c.fp64_limit == pytest.approx(2e-8 + ulp(torch.float32, 4.0), rel=1e-3)
    assert not c.passed
    shape = compare_tensors("", a, b[:4], None, tol)
    assert "shape differs" in shape.problems[0]


def test_tf32_reference_raises_the_limit_to_tf32s_own_error():
    tol = Tolerances().resolved(torch.float32)
    torch.manual_seed(0)
    ref = torch.randn(64, dtype=torch.float64)
    original = (ref + 1e-7).float()  # a full-fp32 run: tiny error
    patched = (ref + 3e-4).float()   # a TF32 run: larger error
    strict = compare_tensors("", original, patched, ref, tol)
    assert not strict.passed and strict.tf32_err_fp64 is None
    tf32_ref = ref + 2e-4  # the float64 run on TF32-rounded operands
    allowed = compare_tensors("", original, patched, ref, tol, tf32_ref)
    assert allowed.tf32_err_fp64 == pytest.approx(2e-4, rel=1e-6)
    assert allowed.fp64_limit == pytest.approx(4e-4 + ulp(torch.float32, ref.abs().max().item()),
                                               rel=1e-6)
    assert allowed.passed
    worse = compare_tensors("", original, (ref + 5e-4).float(), ref, tol, tf32_ref)
    assert not worse.passed  # still bounded: 2x TF32's own error


def test_tf32_reference_rounds_only_the_named_layers():
    from deconv_patch.reference import tf32_round
    from deconv_patch.validation import _tf32_reference

    torch.manual_seed(0)
    model = nn.Sequential(nn.ConvTranspose2d(4, 4, 3), nn.ConvTranspose2d(4, 2, 3)).double()
    rounded = _tf32_reference(model, ["1"])
    assert torch.equal(rounded[0].weight, model[0].weight)
    assert torch.equal(rounded[1].weight, tf32_round(model[1].weight))
    assert not torch.equal(rounded[1].weight, model[1].weight)
    x = torch.randn(1, 4, 5, 5, dtype=torch.float64)
    with torch.no_grad():
        expected = model[1].double().__class__.forward(rounded[1], tf32_round(model[0](x)))
        assert torch.equal(rounded(x), expected)
    assert not model[1]._forward_pre_hooks  # the user's reference model is untouched


def test_ulp():
    assert ulp(torch.float32, 1.0) == 2.0 ** -23
    assert ulp(torch.float32, 3.0) == 2.0 ** -22
    assert ulp(torch.bfloat16, 1.0) == 2.0 ** -7
    assert ulp(torch.int64, 5.0) == 0.0
    assert 0 < ulp(torch.float16, 0.0) < 1e-7
    assert math.isfinite(ulp("float64", 1e300))



class Float32Only(nn.Module):
    """Stands in for an op without a float64 kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(2, 3, 2, 2)

    def forward(self, x):
        if x.dtype == torch.float64:
            raise TypeError("no float64 kernel")
        return self.up(x)


def test_failing_float64_reference_is_a_note_not_a_crash():
    original = Float32Only()
    patched = copy.deepcopy(original)
    swap_conv_transpose2d(patched)
    report = validate(original, patched, torch.randn(2, 2, 3, 3))
    out = report.outputs[0].comparisons[0]
    assert out.patched_err_fp64 is None and out.bit_identical == 1.0
    assert any("float64 reference failed" in n for n in report.notes)
    # the layer itself runs in float64, so its row still has the float64 columns
    assert report.layers[0].name == "up"
    assert report.layers[0].comparisons[0].patched_err_fp64 is not None
    assert report.passed


def test_progress_bar_when_asked(capsys):
    original, patched = _pair()
    validate(original, patched, _z(), progress=True)
    assert "deconv_patch validate" in capsys.readouterr().err
    validate(original, patched, _z(), progress=False)
    assert capsys.readouterr().err == ""


def test_speed_plumbing_with_a_wall_clock_timer(monkeypatch):
    """The timing code paths (per layer, end to end, forward+backward) on CPU, with the CUDA
    event timer swapped for a wall clock; the GPU tests cover the real timer."""
    import time

    import deconv_patch.validation as validation

    calls = []

    def wall_clock(fns, warmup, reps):
        calls.append(len(fns))
        samples = [[] for _ in fns]
        for _ in range(reps):
            for i, fn in enumerate(fns):
                start = time.perf_counter()
                fn()
                samples[i].append((time.perf_counter() - start) * 1e3)
        return samples

    monkeypatch.setattr(validation, "_speed_skip_reason", lambda device: None)
    monkeypatch.setattr(validation, "time_interleaved", wall_clock)
    original, patched = _pair()
    before = [p.grad for p in original.parameters()]
    report = validate(original, patched, _z(), reps=3, backward=True)
    assert report.speed_skipped_reason is None
    for layer in report.layers:
        assert layer.forward.original.reps == 3 and layer.forward.speedup > 0
        assert layer.forward_backward.speedup > 0
    assert report.forward.speedup > 0 and report.forward_backward.speedup > 0
    assert calls == [2] * (2 * 4 + 2)
    assert [p.grad for p in original.parameters()] == before  # no .grad written
    assert "sum of layers" in str(report)


def _fold(conv: nn.ConvTranspose2d, bn: nn.BatchNorm2d) -> FastConvTranspose2d:
    """conv followed by eval-mode bn, as one layer (computed in float64, stored in float32)."""
    scale = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
    fast = FastConvTranspose2d.from_module(copy.deepcopy(conv))
    fast.weight = nn.Parameter((conv.weight.double() * scale[None, :, None, None]).float())
    bias = conv.bias.double() if conv.bias is not None else torch.zeros_like(scale)
    fast.bias = nn.Parameter(((bias - bn.running_mean.double()) * scale
                              + bn.bias.double()).float())
    return fast


def test_folded_batchnorm_is_compared_with_conv_plus_bn():
    original, _ = _pair()
    randomize_bn(original)
    patched = copy.deepcopy(original)
    patched.net[0] = _fold(original.net[0], original.net[1])
    del patched.net._modules["1"]  # folded away; the other names stay
    swap_conv_transpose2d(patched)
    report = validate(original, patched, _z())
    first = report.layers[0]
    assert first.name == "net.0" and first.fused_with == ["net.1"]
    assert first.original_type == "ConvTranspose2d+BatchNorm2d"
    c = first.comparisons[0]
    assert 0 < c.max_abs_diff < 1e-5 and c.patched_err_fp64 <= c.fp64_limit
    assert "inferred" in first.notes[0]
    assert [layer.fused_with for layer in report.layers[1:]] == [[], [], []]
    assert report.environment.fusion is True
    assert report.passed, report.failures
    # the same model with the BatchNorm dropped instead of folded: caught at net.0
    dropped = copy.deepcopy(original)
    del dropped.net._modules["1"]
    swap_conv_transpose2d(dropped)
    bad = validate(original, dropped, _z())
    assert bad.layers[0].fused_with == ["net.1"] and not bad.layers[0].passed
    assert bad.failures[0].startswith("layer net.0")


def test_optimize_with_validate_passes_on_demo_model():
    optimize = pytest.importorskip("deconv_patch.optimize").optimize
    summary = pytest.importorskip("deconv_patch.summary")
    original, _ = _pair()
    randomize_bn(original)
    z = _z()
    patched = optimize(original, z, validate=True)
    report = summary.get_summary(patched).validation
    assert report.passed, report.failures
    assert [layer.fused_with for layer in report.layers] == [["net.1", "net.2"], ["net.4", "net.5"],
                                                             ["net.7", "net.8"], ["net.10"]]
    assert report.outputs[0].comparisons[0].patched_err_fp64 is not None
