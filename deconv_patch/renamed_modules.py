"""Unpickling objects whose classes live in modules that have since moved.

A pickled model names each class by its module path; a patched model can carry objects of
deconv_patch's own (a validation report on its summary, for one). When a module moves, pickles
written before name its old path. This module, passed as torch.load's `pickle_module` (torch
uses its Unpickler and load), reads them under the new one.
"""

from __future__ import annotations

import pickle
from typing import Any, Dict

# Old module path -> where it lives now.
RENAMED: Dict[str, str] = {
    **{f"deconv_patch.{old}": f"deconv_patch.validation.{new}" for old, new in (
        ("report", "report"), ("report_records", "report_records"),
        ("report_text", "report_text"), ("report_html", "report_html"),
        ("validation_capture", "capture"), ("validation_compare", "compare"),
        ("validation_environment", "environment"), ("validation_layers", "layers"),
        ("validation_progress", "progress"), ("validation_runs", "runs"),
        ("validation_speed", "speed"), ("validation_values", "values"))},
    **{f"deconv_patch.{old}": f"deconv_patch.kernels.{old}"
       for old in ("planner", "autotune", "packed_weights", "extension")},
    "deconv_patch.demo": "deconv_patch.cli.demo",
    **{f"deconv_patch.cli_{old}": f"deconv_patch.cli.{old}" for old in (
        "bench", "build_demo", "info", "loading", "output", "parser", "patch", "validate")},
}


class Unpickler(pickle.Unpickler):
    """pickle's Unpickler, reading a class of a moved module from where it lives now."""

    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(RENAMED.get(module, module), name)


def load(file: Any, **kwargs: Any) -> Any:
    """pickle.load with the renaming Unpickler."""
    return Unpickler(file, **kwargs).load()
