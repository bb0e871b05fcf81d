"""Example models with transposed convolutions, written from their papers (random init).

Each module has `build_model(small=False)`, `example_inputs(batch, device, dtype, small=False)`
and `main()` (patch with `deconv_patch.optimize`, print the summary and the max difference).
`examples.registry.EXAMPLES` lists them all. Run one with `python -m examples.dcgan`.
"""

from .registry import EXAMPLES, Example, get

__all__ = ["EXAMPLES", "Example", "get"]
