"""How far issue 4's targets can be reached on the machine a layer table ran on.

Reads the JSON of `benchmarks/layers.py` and prints, per mode and layout, the measured event-time
geomean speedup and median % of the roofline floor next to the best a kernel could do on that
host. A call's event time cannot drop below the fastest event time any of our calls reached in
that mode and layout (host work, one launch and the event records themselves), so the bound
takes each layer at max(that minimum, its floor):

  * geomean bound  = geomean over layers of cuDNN's event time / max(min event, floor)
  * median bound   = median over layers of floor / max(min event, floor)

    python benchmarks/target_bounds.py layers.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

from layers import geomean  # (run as a script: benchmarks/ is on sys.path)


def bounds(rows: List[dict]) -> List[Tuple[str, str, float, float, float, float, float]]:
    """(mode, layout, min event us, geomean, geomean bound, median %, median % bound)."""
    groups: Dict[Tuple[str, str], List[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["mode"], r["layout"])].append(r)
    out = []
    for (mode, layout), rs in sorted(groups.items()):
        least = min(r["ours_ms"] for r in rs)
        best = [max(least, r["floor_ms"]) for r in rs]
        out.append((mode, layout, least * 1e3,
                    geomean([r["speedup"] for r in rs]),
                    geomean([r["cudnn_ms"] / b for r, b in zip(rs, best)]),
                    statistics.median(r["ours_pct_of_floor"] for r in rs),
                    statistics.median(100.0 * r["floor_ms"] / b for r, b in zip(rs, best))))
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", help="benchmarks/layers.py --json output")
    args = p.parse_args(argv)
    with open(args.json) as f:
        rows = json.load(f)["rows"]
    print(f"{'mode':5s} {'layout':6s} {'min event us':>12s} {'geomean':>8s} {'bound':>6s} "
          f"{'median %floor':>13s} {'bound':>6s}")
    for mode, layout, least, gm, gm_bound, med, med_bound in bounds(rows):
        print(f"{mode:5s} {layout:6s} {least:12.1f} {gm:7.2f}x {gm_bound:5.2f}x "
              f"{med:12.1f}% {med_bound:5.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
