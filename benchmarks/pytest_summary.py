"""Summarise a `pytest -v` log per test function: passed / failed / skipped counts and the first
few failures with their one-line reason. Works on logs cut short by a time limit, which is why it
reads the per-test status lines rather than pytest's own final summary."""

from __future__ import annotations

import argparse
import collections
import re
import sys

STATUS = re.compile(r"^(?P<id>\S+::(?P<fn>[A-Za-z0-9_]+)\S*)\s+(?P<st>PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)")
REASON = re.compile(r"^(?P<path>\S+):(?P<line>\d+): (?P<msg>.+)$")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("log")
    ap.add_argument("--failures", type=int, default=8, help="failure ids to list per function")
    args = ap.parse_args()
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failed: dict[str, list[str]] = collections.defaultdict(list)
    reasons: list[str] = []
    with open(args.log, errors="replace") as f:
        for line in f:
            m = STATUS.match(line)
            if m:
                counts[m["fn"]][m["st"]] += 1
                if m["st"] in ("FAILED", "ERROR"):
                    failed[m["fn"]].append(m["id"].split("::", 1)[1])
            elif REASON.match(line) and len(reasons) < 40:
                reasons.append(line.rstrip()[:240])
    for fn, c in counts.items():
        print(f"{fn:58s} " + " ".join(f"{k.lower()}={v}" for k, v in sorted(c.items())))
        for fid in failed[fn][: args.failures]:
            print(f"    {fid}")
    if reasons:
        print("first failure reasons:")
        for r in dict.fromkeys(reasons):
            print("   ", r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
