"""`deconv-patch patch/validate/info/bench` end to end through the console script's entry point
(CPU), in this process (tests/cpu/test_cli.py runs the installed script itself).

Each round trip compares the saved model with the original on fresh random inputs, so a wrong
rewrite fails here. Models are the small examples (fast on CPU).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from deconv_patch import summary
from deconv_patch.checkpoint import load
from deconv_patch.exit_codes import ExitCode
from examples import dcgan
from tests.helpers import bound_check, run_cli, run_cli_in_process as run

SHAPE = "2,100,1,1"
DCGAN = ["--model", "examples.dcgan:build_model", "--model-kwargs", '{"small": true}']


class NoDeconv(nn.Module):
    """A model with nothing to patch."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class OutOfMemory(nn.Module):
    """Raises what CUDA raises when memory runs out (the OOM path, testable on CPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 3, 2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")


def no_deconv() -> nn.Module:
    return NoDeconv()


def out_of_memory() -> nn.Module:
    return OutOfMemory()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("ckpt")
    model = dcgan.build_model(small=True).eval()
    torch.save({"state_dict": model.state_dict(), "epoch": 3}, d / "sd.pt")
    torch.save(model, d / "whole.pt")
    x = dcgan.example_inputs(2, small=True)
    torch.export.save(torch.export.export(model, x), str(d / "model.pt2"))
    torch.jit.save(torch.jit.trace(model, x), str(d / "model.ts"))
    return d, model


def fresh_input(batch: int = 3) -> torch.Tensor:
    return torch.randn(batch, 100, 1, 1)


def assert_same(model: nn.Module, other, atol: float = 1e-5, batch: int = 3) -> None:
    x = fresh_input(batch)
    with torch.no_grad():
        assert torch.allclose(other(x), model(x), atol=atol, rtol=1e-4)


def test_help_for_every_subcommand():
    cmds = ("patch", "validate", "info", "bench", "build", "demo")
    for cmd in cmds:
        out = run(cmd, "--help")
        assert out.returncode == 0 and "usage: deconv-patch " + cmd in out.stdout, cmd


def test_state_dict_round_trip(files, tmp_path):
    d, model = files
    out = tmp_path / "patched.pt"
    res = run("patch", str(d / "sd.pt"), "-o", str(out), "--input-shape", SHAPE, *DCGAN,
              "--report", str(tmp_path / "r.json"))
    assert res.returncode == 0, res.stderr
    assert "PASS" in res.stdout and "speed not measured" in res.stdout
    patched = load(out)
    assert any(type(m).__name__ == "FastConvTranspose2d" for m in patched.modules())
    assert patched.deconv_patch_info["report"]["passed"] is True
    assert_same(model, patched)
    assert_same(model, torch.load(out, weights_only=False)["model"])
    plain = torch.load(tmp_path / "patched.state_dict.pt", weights_only=True)
    rebuilt = dcgan.build_model(small=True).eval()
    rebuilt.load_state_dict(plain)
    assert_same(model, rebuilt, atol=0)
    assert json.loads((tmp_path / "r.json").read_text())["passed"] is True


def test_pickled_module_refused_unless_trusted(files, tmp_path):
    d, model = files
    out = tmp_path / "p.pt"
    res = run("patch", str(d / "whole.pt"), "-o", str(out), "--input-shape", SHAPE)
    assert res.returncode == ExitCode.UNTRUSTED_PICKLE and not out.exists()
    assert "--trust-checkpoint" in res.stderr and "arbitrary code" in res.stderr
    assert "Traceback" not in res.stderr
    res = run("patch", str(d / "whole.pt"), "-o", str(out), "--input-shape", SHAPE,
              "--trust-checkpoint", "--no-fuse")
    assert res.returncode == 0, res.stderr
    assert_same(model, load(out))
    res = run("validate", str(d / "whole.pt"), str(out), "--input-shape", "4,100,1,1",
              "--trust-checkpoint")
    assert res.returncode == 0 and "PASS" in res.stdout, res.stderr


def test_export_round_trip(files, tmp_path):
    d, model = files
    out = tmp_path / "patched.pt2"
    res = run("patch", str(d / "model.pt2"), "-o", str(out), "--input-shape", SHAPE)
    assert res.returncode == 0 and "nothing to patch" in res.stdout, res.stderr
    assert "--all-layers" in res.stdout and not out.exists()  # DCGAN's layers run cuDNN
    res = run("patch", str(d / "model.pt2"), "-o", str(out), "--input-shape", SHAPE,
              "--all-layers")
    assert res.returncode == 0, res.stderr
    program = torch.export.load(str(out))
    target = torch.ops.deconv_patch.conv_transpose2d.default
    assert sum(n.target is target for n in program.graph.nodes) == 5
    assert_same(model, program.module(), batch=2)  # exported with a static batch
    info = run("info", str(out))
    assert info.returncode == 0 and "5 node(s) already call" in info.stdout


def test_info_lists_layers_with_variant(files):
    d, _ = files
    res = run("info", str(d / "sd.pt"), *DCGAN)
    assert res.returncode == 0, res.stderr
    assert "5 ConvTranspose2d layer(s)" in res.stdout and "main.12" in res.stdout
    assert "aten" in res.stdout


def test_bench_times_both(files):
    """On CUDA bench prints a speedup. Off CUDA both sides run PyTorch's kernels, so a ratio
    would be timing noise dressed as a result: bench still prints the two times (they show the
    wrapper's overhead, and scripts keep their exit 0) but no speedup number, and says that it
    compares PyTorch with PyTorch."""
    d, _ = files
    res = run("bench", str(d / "model.pt2"), "--input-shape", SHAPE, "--reps", "3")
    assert res.returncode == 0, res.stderr
    if torch.cuda.is_available():
        assert re.search(r"speedup \d+\.\d+x", res.stdout), res.stdout
        return
    assert re.search(r"original \d+\.\d+ ms, patched \d+\.\d+ ms", res.stdout), res.stdout
    assert "speedup" not in res.stdout and not re.search(r"\d\.\d+x", res.stdout), res.stdout
    assert "compares PyTorch with PyTorch" in res.stdout and "nothing is faster" in res.stdout


BAD_INPUTS = ["missing", "directory", "truncated", "garbage", "not_model", "torchscript",
              "mismatch", "bad_shape", "no_model_flag", "bad_model_spec", "cuda", "oom"]


@pytest.fixture(scope="module")
def bad_input_runs(files, tmp_path_factory):
    """`deconv-patch patch` on each bad input of BAD_INPUTS (each with an output path of its
    own): {case: (result, expected exit code, expected text, output path)}.
    The "cuda" case runs only where CUDA is not available."""
    d, _ = files
    tmp_path = tmp_path_factory.mktemp("bad_inputs")
    blob = (d / "whole.pt").read_bytes()
    (tmp_path / "trunc.pt").write_bytes(blob[: len(blob) // 2])
    (tmp_path / "garbage.pt").write_bytes(b"this is not a checkpoint at all")
    torch.save({"epoch": 3, "lr": 0.1}, tmp_path / "meta.pt")
    torch.save({"w": torch.zeros(2)}, tmp_path / "tiny.pt")
    torch.save(OutOfMemory().state_dict(), tmp_path / "oom.pt")  # fits the OOM model
    shape = ["--input-shape", SHAPE]
    cases = {
        "missing": ([str(tmp_path / "nope.pt")], ExitCode.FILE_UNREADABLE, "no such file"),
        "directory": ([str(tmp_path)], ExitCode.FILE_UNREADABLE, "not a regular file"),
        "truncated": ([str(tmp_path / "trunc.pt")], ExitCode.CORRUPT_FILE, "corrupt"),
        "garbage": ([str(tmp_path / "garbage.pt")], ExitCode.CORRUPT_FILE,
                    "not a PyTorch checkpoint"),
        "not_model": ([str(tmp_path / "meta.pt")], ExitCode.NOT_A_MODEL, "neither a model"),
        "torchscript": ([str(d / "model.ts")], ExitCode.UNSUPPORTED_FORMAT, "TorchScript"),
        "mismatch": ([str(tmp_path / "tiny.pt"), *DCGAN], ExitCode.STATE_DICT_MISMATCH,
                     "does not match"),
        "no_model_flag": ([str(d / "sd.pt")], ExitCode.BAD_MODEL_SPEC, "--model"),
        "bad_model_spec": ([str(d / "sd.pt"), "--model", "examples.nope:x"],
                           ExitCode.BAD_MODEL_SPEC, "examples.nope"),
        "bad_shape": ([str(d / "sd.pt"), *DCGAN, "--input-shape", "2,7,1,1"],
                      ExitCode.BAD_INPUT_SHAPE, "rejected --input-shape 2,7,1,1"),
        "cuda": ([str(d / "sd.pt"), *DCGAN, "--device", "cuda:0"], ExitCode.CUDA_UNAVAILABLE,
                 "CUDA is not available"),
        "oom": ([str(tmp_path / "oom.pt"), "--model",
                 "tests.cpu.test_cli_checkpoints:out_of_memory", "--input-shape", "1,3,4,4"],
                ExitCode.OUT_OF_MEMORY, "smaller batch"),
    }
    assert sorted(cases) == sorted(BAD_INPUTS)
    todo = [c for c in BAD_INPUTS if not (c == "cuda" and torch.cuda.is_available())]
    outs = {case: str(tmp_path / f"out_{case}.pt") for case in todo}
    argvs = []
    for case in todo:
        argv = cases[case][0]
        extra = [] if "--input-shape" in argv else shape
        argvs.append(["patch", *argv, "-o", outs[case], *extra])
    results = [run(*argv) for argv in argvs]
    return {case: (res, *cases[case][1:], outs[case]) for case, res in zip(todo, results)}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_one_line_and_distinct_code(bad_input_runs, case):
    if case == "cuda" and torch.cuda.is_available():
        pytest.skip("checks the no-GPU path")
    res, code, text, out = bad_input_runs[case]
    assert res.returncode == code, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], res.stderr
    assert not Path(out).exists()


def test_codes_are_distinct():
    values = [c.value for c in ExitCode]
    assert len(values) == len(set(values))


def test_nothing_to_patch_exits_zero(tmp_path):
    torch.save(NoDeconv().state_dict(), tmp_path / "sd.pt")
    res = run("patch", str(tmp_path / "sd.pt"), "-o", str(tmp_path / "o.pt"), "--model",
              "tests.cpu.test_cli_checkpoints:no_deconv", "--input-shape", "1,3,8,8")
    assert res.returncode == 0 and "nothing to patch" in res.stdout, res.stderr
    assert not (tmp_path / "o.pt").exists()


def test_never_overwrites_input_or_existing_output(files, tmp_path):
    d, _ = files
    src = tmp_path / "sd.pt"
    shutil.copy(d / "sd.pt", src)
    before = src.read_bytes()
    res = run("patch", str(src), "-o", str(src), "--input-shape", SHAPE, *DCGAN, "--force")
    assert res.returncode == ExitCode.OUTPUT_EXISTS and src.read_bytes() == before
    out = tmp_path / "out.pt"
    out.write_bytes(b"keep me")
    res = run("patch", str(src), "-o", str(out), "--input-shape", SHAPE, *DCGAN)
    assert res.returncode == ExitCode.OUTPUT_EXISTS and "--force" in res.stderr
    assert out.read_bytes() == b"keep me"
    res = run("patch", str(src), "-o", str(out), "--input-shape", "2,7,1,1", *DCGAN, "--force")
    assert res.returncode == ExitCode.BAD_INPUT_SHAPE and out.read_bytes() == b"keep me"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    res = run("patch", str(src), "-o", str(out), "--input-shape", SHAPE, *DCGAN, "--force")
    assert res.returncode == 0, res.stderr
    assert_same(files[1], load(out))


def test_debug_shows_traceback(tmp_path):
    """--debug lets the exception reach the interpreter, which prints its traceback: a run of
    the installed script."""
    res = run_cli("patch", str(tmp_path / "nope.pt"), "-o", str(tmp_path / "o.pt"),
              "--input-shape", SHAPE, "--debug")
    assert res.returncode != 0 and "Traceback" in res.stderr


def spectral_generator() -> nn.Module:
    """A GAN-style generator with both spectral_norm APIs on its transposed convolutions."""
    from torch.nn.utils import parametrizations

    return nn.Sequential(parametrizations.spectral_norm(nn.ConvTranspose2d(4, 6, 4, 2, 1)),
                         nn.BatchNorm2d(6), nn.ReLU(),
                         nn.utils.spectral_norm(nn.ConvTranspose2d(6, 3, 4, 2, 1)), nn.Tanh())


def test_spectral_norm_generator_round_trip(tmp_path):
    """PyTorch cannot pickle parametrized modules: the checkpoint rebuilds the patched model from
    the factory and state_dict, with its spectral norms, on load."""
    from torch.nn.utils import parametrize

    torch.manual_seed(0)
    original = spectral_generator().eval()
    with torch.no_grad():
        original[1].running_mean.normal_()
        original[1].running_var.uniform_(0.5, 2)
    torch.save(original.state_dict(), tmp_path / "g.pt")
    spec = ["--model", "tests.cpu.test_cli_checkpoints:spectral_generator"]
    done = run("patch", str(tmp_path / "g.pt"), "-o", str(tmp_path / "fast.pt"), *spec,
               "--input-shape", "2,4,6,6")
    assert done.returncode == 0, done.stderr
    loaded = load(tmp_path / "fast.pt")
    assert parametrize.is_parametrized(loaded[0], "weight")
    assert loaded.deconv_patch_info["summary"]["layers"][0]["name"] == "0"
    x = torch.randn(3, 4, 5, 7)
    with torch.no_grad():
        reference = copy.deepcopy(original).double()(x.double())
        # (BatchNorm folded into the weight rounds differently: held to the precision bound)
        bound_check(reference, original(x), loaded(x), torch.float32, "first call")
        bound_check(reference, original(x), loaded(x), torch.float32, "fused")
    assert sum(layer.fused != "-" for layer in summary(loaded, quiet=True).layers) == 2
