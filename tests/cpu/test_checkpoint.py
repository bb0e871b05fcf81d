"""deconv_patch.checkpoint in-process: format detection, safe loading, atomic writes, load()."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch

from deconv_patch.kernels.autotune import AutotuneCache
from deconv_patch.atomic_files import atomic_write
from deconv_patch.checkpoint import (
    EXPORT, PATCHED, PICKLE, TORCHSCRIPT, CheckpointError, detect_format, find_state_dict, load,
    load_checkpoint, load_state_dict_into, patched_payload, save_patched,
)
from deconv_patch.exit_codes import ExitCode
from deconv_patch.export_patch import find_layers, patch_program
from deconv_patch.optimize import optimize
from examples import dcgan


@pytest.fixture
def model():
    return dcgan.build_model(small=True).eval()


def test_detect_formats(tmp_path, model):
    x = dcgan.example_inputs(2, small=True)
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    torch.export.save(torch.export.export(model, x), str(tmp_path / "m.pt2"))
    torch.jit.save(torch.jit.trace(model, x), str(tmp_path / "m.ts"))
    assert detect_format(tmp_path / "sd.pt") == PICKLE
    assert detect_format(tmp_path / "m.pt2") == EXPORT
    assert detect_format(tmp_path / "m.ts") == TORCHSCRIPT
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(tmp_path / "m.ts")
    assert err.value.code == ExitCode.UNSUPPORTED_FORMAT and "torch.export" in str(err.value)


def test_state_dict_found_inside_dict(model):
    sd = model.state_dict()
    assert find_state_dict({"state_dict": sd, "epoch": 1}).keys() == sd.keys()
    assert find_state_dict({"epoch": 1}) is None


def test_untrusted_pickle_refused_trusted_loads(tmp_path, model):
    torch.save(model, tmp_path / "whole.pt")
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(tmp_path / "whole.pt")
    assert err.value.code == ExitCode.UNTRUSTED_PICKLE
    loaded = load_checkpoint(tmp_path / "whole.pt", trust=True)
    assert loaded.kind == PICKLE
    x = torch.randn(3, 100, 1, 1)
    assert torch.equal(loaded.module(x), model(x))


def test_state_dict_mismatch_names_keys(model):
    other = dcgan.build_model(small=False)
    with pytest.raises(CheckpointError) as err:
        load_state_dict_into(other, model.state_dict())
    assert err.value.code == ExitCode.STATE_DICT_MISMATCH and "shape mismatch" in str(err.value)
    prefixed = {f"module.{k}": v for k, v in model.state_dict().items()}
    fresh = dcgan.build_model(small=True).eval()
    load_state_dict_into(fresh, prefixed)
    x = torch.randn(2, 100, 1, 1)
    assert torch.equal(fresh(x), model(x))


def test_save_and_load_patched(tmp_path, model, monkeypatch):
    import deconv_patch.kernels.autotune as autotune

    monkeypatch.setattr(autotune, "_CACHE", AutotuneCache(None))
    x = dcgan.example_inputs(2, small=True)
    fast = optimize(model, x)
    payload = patched_payload(fast, autotune={"version": 1, "choices": {"k": "aten"}},
                              summary={"path": "fx"}, report={"passed": True})
    save_patched(tmp_path / "p.pt", payload)
    loaded = load(tmp_path / "p.pt")
    assert autotune.cache().choices == {"k": "aten"}
    assert loaded.deconv_patch_info["summary"] == {"path": "fx"}
    fresh = torch.randn(4, 100, 1, 1)
    with torch.no_grad():
        assert torch.allclose(loaded(fresh), model(fresh), atol=1e-5, rtol=1e-4)
    assert load_checkpoint(tmp_path / "p.pt", trust=True).kind == PATCHED


def test_load_refuses_foreign_files(tmp_path, model):
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    with pytest.raises(CheckpointError, match="not a deconv_patch checkpoint"):
        load(tmp_path / "sd.pt")
    with pytest.raises(CheckpointError) as err:
        load(tmp_path / "missing.pt")
    assert err.value.code == ExitCode.FILE_UNREADABLE


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    target = tmp_path / "out.pt"
    target.write_bytes(b"old")

    def broken(tmp: Path) -> None:
        tmp.write_bytes(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, broken)
    assert target.read_bytes() == b"old" and list(tmp_path.iterdir()) == [target]
    atomic_write(target, lambda tmp: tmp.write_bytes(b"new"))
    assert target.read_bytes() == b"new"


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_saved_files_get_the_mode_of_a_plain_write(tmp_path, model):
    """Not mkstemp's 0o600: 0o666 less the umask, as open(path, "w") gives."""
    old = os.umask(0o027)
    try:
        save_patched(tmp_path / "p.pt", patched_payload(model, autotune={}))
        atomic_write(tmp_path / "a.bin", lambda tmp: tmp.write_bytes(os.urandom(64)))
    finally:
        os.umask(old)
    for name in ("p.pt", "a.bin"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o640, name
    fresh = torch.randn(2, 100, 1, 1)
    with torch.no_grad():
        assert torch.equal(load(tmp_path / "p.pt")(fresh), model(fresh))


@pytest.mark.parametrize("decompose", [False, True])
def test_export_patch_rewrites_every_transposed_conv(model, decompose):
    x = dcgan.example_inputs(2, small=True)
    program = torch.export.export(model, x)
    if decompose:
        program = program.run_decompositions()
    assert len(find_layers(program)) == 5
    assert patch_program(program) == []  # k4 s2 p1 layers run cuDNN: left as they are
    assert len(patch_program(program, all_layers=True)) == 5 and find_layers(program) == []
    fresh = torch.randn(2, 100, 1, 1)
    with torch.no_grad():
        assert torch.allclose(program.module()(fresh), model(fresh), atol=1e-6)


def test_export_patch_retargets_only_layers_a_kernel_may_run():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.ConvTranspose2d(4, 6, 2, stride=2),   # gemm_kxs
                                torch.nn.ConvTranspose2d(6, 3, 4, 2, 1),       # cuDNN
                                torch.nn.ConvTranspose2d(3, 3, 3, 1, 1, 1, dilation=2)).eval()
    x = torch.randn(2, 4, 5, 5)
    program = torch.export.export(model, (x,))
    patched = patch_program(program)
    assert [layer.weight_shape for layer in patched] == [(4, 6, 2, 2), (3, 3, 3, 3)]
    assert len(find_layers(program)) == 1  # the k4 s2 p1 layer stays an aten convolution
    with torch.no_grad():
        assert torch.allclose(program.module()(x), model(x), atol=1e-6)


def test_pickles_naming_moved_modules_still_load(tmp_path, monkeypatch):
    """A patched model carrying an object of a module that has since moved (a validation report
    on its summary, pickled as deconv_patch.report_records) loads through deconv_patch.load and
    load_checkpoint, and the object is the class that lives at the new path."""
    import sys

    import deconv_patch
    from deconv_patch.checkpoint import load_checkpoint, patched_payload, save_patched
    from deconv_patch.validation import report_records

    torch.manual_seed(0)
    model = optimize(torch.nn.Sequential(torch.nn.ConvTranspose2d(4, 3, 2, 2)))
    tolerances = report_records.Tolerances(rtol=0.25)
    model._deconv_patch_extra = tolerances  # any attribute pickles with the module
    # Written as before the move: the class under its old module path.
    monkeypatch.setitem(sys.modules, "deconv_patch.report_records", report_records)
    monkeypatch.setattr(report_records.Tolerances, "__module__", "deconv_patch.report_records")
    path = tmp_path / "old.pt"
    save_patched(path, patched_payload(model, autotune={}))
    monkeypatch.undo()
    assert "deconv_patch.report_records" not in sys.modules
    x = torch.randn(2, 4, 5, 5)
    for loaded in (deconv_patch.load(path), load_checkpoint(path, trust=True).module):
        assert type(loaded._deconv_patch_extra) is report_records.Tolerances
        assert loaded._deconv_patch_extra == tolerances
        with torch.no_grad():
            assert torch.equal(loaded(x), model(x))
