#!/usr/bin/env python3
"""Compare a rebuild (`build.py SET --out DIR`) with the set's kept cases: `compare.py SET DIR`.

Real failures do not repeat byte for byte (pids, addresses, timings), so a case counts as
reproduced when its class, exit code, signal and task count match and its logs' first lines are
the same once numbers, temp dirs and program paths are masked. Prints one row per rebuilt
case; exits 1 if any differs.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(CORPUS.parent))
from corpus.gen.build import load_set  # noqa: E402

NUM = re.compile(r"0x[0-9a-f]+|\d+(\.\d+)?")
# what moves between runs or layouts: temp dirs, where the program lives (generate/progs/ before
# the fold, gen/progs/ now), which venv runs it, timestamps and pids (numbers)
PATHS = [(re.compile(r"/tmp/[^\s'\":]*"), "/tmp/T"), (re.compile(r"/\S*?/progs/"), "progs/"),
         (re.compile(r"/opt/gpualert[-/]corpus-venv"), "VENV")]


def labels(root: Path) -> dict[str, dict]:
    return {(x := json.loads(line))["id"]: x
            for line in (root / "labels.jsonl").read_text().splitlines() if line.strip()}


def head(root: Path, log: str, n: int = 3) -> list[str]:
    text = (root / log).read_text(errors="replace").splitlines()
    out = []
    for ln in text[:n]:
        for pat, rep in PATHS:
            ln = pat.sub(rep, ln)
        out.append(NUM.sub("N", ln))
    return out


def main() -> int:
    spec = load_set(sys.argv[1])
    kept_root, new_root = CORPUS / spec["dir"], Path(sys.argv[2])
    kept, new = labels(kept_root), labels(new_root)
    bad = 0
    for cid, b in sorted(new.items()):
        a = kept[cid]
        same = {k: a[k] == b[k] for k in ("class", "exit_code", "signal")}
        same["tasks"] = len(a["tasks"]) == len(b["tasks"])
        same["first lines"] = all(head(kept_root, ta["log"]) == head(new_root, tb["log"])
                                  for ta, tb in zip(a["tasks"], b["tasks"], strict=False))
        ok = all(same.values())
        bad += not ok
        print(f"{cid:32s} {a['class']:18s} exit {a['exit_code']}/{b['exit_code']} "
              f"signal {a['signal']}/{b['signal']}  "
              + ("same" if ok else "DIFFERS: " + ", ".join(k for k, v in same.items() if not v)))
    print(f"{len(new) - bad}/{len(new)} rebuilt cases match the kept ones")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
