"""validate()'s progress bar: tqdm when the run is long and stderr a terminal (or when asked
for), silent otherwise."""

from __future__ import annotations

import sys
from typing import Optional


class _Progress:
    """tqdm when worth showing (enough steps, or asked for); silent otherwise."""

    def __init__(self, total: int, enabled: Optional[bool]) -> None:
        self.bar = None
        if enabled is False or (enabled is None and (total < 12 or not sys.stderr.isatty())):
            return
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc="deconv_patch validate", unit="step", leave=False)

    def step(self, what: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
