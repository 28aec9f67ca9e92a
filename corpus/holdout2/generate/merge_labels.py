#!/usr/bin/env python3
"""Merge build/labels-*.jsonl into ../labels.jsonl (sorted by id) and check every path exists."""

import json
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def main() -> int:
    labels = {}
    for part in sorted((HERE / "build").glob("labels-*.jsonl")):
        for line in part.read_text().splitlines():
            if line.strip():
                lab = json.loads(line)
                labels[lab["id"]] = lab
    bad = [(i, t["log"]) for i, lab in labels.items() for t in lab["tasks"]
           if not (ROOT / t["log"]).is_file()]
    if bad:
        print(f"missing logs: {bad}", file=sys.stderr)
        return 1
    stray = sorted({p.name for p in (ROOT / "cases").iterdir()} - set(labels))
    if stray:
        print(f"case dirs without a label (delete them): {stray}", file=sys.stderr)
        return 1
    with open(ROOT / "labels.jsonl", "w") as f:
        for i in sorted(labels):
            f.write(json.dumps(labels[i], sort_keys=False) + "\n")
    counts = Counter(lab["class"] for lab in labels.values())
    print(f"{len(labels)} cases, {len(counts)} classes:")
    for cls, n in sorted(counts.items()):
        print(f"  {cls:<20} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
