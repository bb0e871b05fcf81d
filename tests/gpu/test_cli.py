"""`deconv-patch patch` on the GPU through the console script: a U-Net state_dict and an
exported U-Net program, each with a report, the patched program matching the original."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import run_cli as run

pytestmark = pytest.mark.cuda


def test_gpu_patch_unet_state_dict_and_export(tmp_path):
    from examples import unet

    model = unet.build_model(small=True).eval()
    torch.save(model.state_dict(), tmp_path / "unet.pt")
    res = run("patch", str(tmp_path / "unet.pt"), "-o", str(tmp_path / "u.pt"), "--model",
              "examples.unet:build_model", "--model-kwargs", '{"small": true}',
              "--input-shape", "1,1,188,188", "--device", "cuda:0", "--report",
              str(tmp_path / "r.html"))
    assert res.returncode == 0 and "PASS" in res.stdout, res.stderr
    assert (tmp_path / "r.html").exists() and "speedup" in res.stdout
    x = torch.randn(1, 1, 188, 188)
    torch.export.save(torch.export.export(model, (x,)), str(tmp_path / "unet.pt2"))
    res = run("patch", str(tmp_path / "unet.pt2"), "-o", str(tmp_path / "u.pt2"),
              "--input-shape", "1,1,188,188", "--device", "cuda:0", "--report",
              str(tmp_path / "r.json"))
    assert res.returncode == 0 and "PASS" in res.stdout, res.stderr
    program = torch.export.load(str(tmp_path / "u.pt2"))
    with torch.no_grad():
        assert torch.allclose(program.module()(x), model(x), atol=1e-4, rtol=1e-3)
