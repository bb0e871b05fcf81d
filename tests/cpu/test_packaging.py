"""What a (non-editable) install ships: every Python package of the source tree is listed in
pyproject.toml, so `pip install .` installs all of them."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "deconv_patch").rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert "deconv_patch.validation" in found  # (the walk finds subpackages)
    assert found <= listed, sorted(found - listed)
    assert config["package-dir"]["deconv_patch._cuda"] == "cuda"
