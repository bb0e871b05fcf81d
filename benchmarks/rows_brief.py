"""Prints the rows of benchmarks/layers.py JSON files one short line each (layer, mode, layout,
variant, GPU time ours / cuDNN in us and their ratio, event ratio), for a device call's last
lines where only the output's tail comes back.

    python3 benchmarks/rows_brief.py out/forced_*.json
"""

from __future__ import annotations

import json
import sys


def main(paths: list[str]) -> None:
    for path in paths:
        try:
            with open(path) as fh:
                rows = json.load(fh)["rows"]
        except (OSError, ValueError, KeyError) as exc:
            print(f"{path}: {exc}")
            continue
        for r in rows:
            print(f"{r['layer'].split()[0]:11s} {r['mode']:4s} {r['layout']:4s} "
                  f"{r['variant'][:22]:22s} {1e3 * r['ours_gpu_ms']:7.1f}/"
                  f"{1e3 * r['cudnn_gpu_ms']:<7.1f} {r['gpu_speedup']:5.2f}x "
                  f"ev {r['speedup']:5.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
