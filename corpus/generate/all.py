"""Regenerate the corpus: run every family's generator, write labels.jsonl sorted by id.

usage: all.py [--only FAMILY ...] [--no-slurm] [--workers N]

Each family owns the case ids that start with its prefixes: running it deletes those cases and
builds them again. Cases of families not run this time keep their labels, so one family can be
redone alone. Slurm cases are built only when the test cluster answers (`cluster status`),
unless --no-slurm. The other families are cases of corpus/gen/sets/corpus.yaml now.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib
import json
import shutil
import sys
import time
from collections import Counter

from common import CASES, LABELS

# Order matters only for speed: the slow Slurm waits come last.
# local, torchcases, storage, hang, dist and the synthetic GPU cases are data now
# (corpus/gen/sets/corpus.yaml, built by corpus/gen/build.py after this script); the Slurm
# family (it stops a node's daemons for node failures) is still code.
FAMILIES = ["slurm"]


def load_labels() -> list[dict]:
    if not LABELS.exists():
        return []
    return [json.loads(line) for line in LABELS.read_text().splitlines() if line.strip()]


def write_labels(labels: list[dict]) -> None:
    labels = sorted(labels, key=lambda lab: lab["id"])
    tmp = LABELS.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(lab, sort_keys=False) + "\n" for lab in labels))
    tmp.replace(LABELS)


def count_table(labels: list[dict]) -> str:
    by = Counter((lab["class"], lab["source"]) for lab in labels)
    classes = sorted({c for c, _ in by})
    sources = ["reproduced", "device", "synthetic"]
    rows = [f"{'class':<20}" + "".join(f"{s:>12}" for s in sources) + f"{'total':>8}"]
    for c in classes:
        n = [by[(c, s)] for s in sources]
        rows.append(f"{c:<20}" + "".join(f"{x:>12}" for x in n) + f"{sum(n):>8}")
    tot = [sum(by[(c, s)] for c in classes) for s in sources]
    rows.append(f"{'all':<20}" + "".join(f"{x:>12}" for x in tot) + f"{sum(tot):>8}")
    return "\n".join(rows)


FIELDS = ["id", "class", "root_rank", "source", "command", "how", "exit_code", "signal",
          "slurm_state", "slurm_reason", "hang_threshold_s", "silence_s", "tasks", "kernel_log"]
TASK_FIELDS = ["log", "rank", "node", "step", "exit_code", "signal", "core_dumped", "end_time"]


def check(labels: list[dict]) -> list[str]:
    """Problems with the labels: missing fields or files, duplicate ids, empty cases."""
    problems, seen = [], set()
    for lab in labels:
        cid = lab.get("id")
        if cid in seen:
            problems.append(f"{cid}: duplicate id")
        seen.add(cid)
        if [k for k in lab if k != "transform"] != FIELDS:  # transform: the log's shape, optional
            problems.append(f"{cid}: fields {list(lab)}")
        if not lab.get("tasks") and not lab.get("slurm_state"):
            # (a job Slurm ended before its first task wrote anything has no task log)
            problems.append(f"{cid}: no tasks")
        for t in lab.get("tasks", []):
            if list(t) != TASK_FIELDS or not (CASES.parent / t["log"]).is_file():
                problems.append(f"{cid}: bad task entry {t}")
        if lab.get("kernel_log") and not (CASES.parent / lab["kernel_log"]).is_file():
            problems.append(f"{cid}: kernel_log missing")
    for d in CASES.glob("*"):
        if d.name not in seen:
            problems.append(f"{d.name}: directory without a label")
    return problems


def update_readme(table: str) -> None:
    """Keep the README's count table equal to the labels."""
    readme = CASES.parent / "README.md"
    text = readme.read_text()
    start, end = "<!-- counts -->\n", "<!-- /counts -->"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        readme.write_text(head + start + "```\n" + table + "\n```\n" + end
                          + rest.split(end, 1)[1])


def owned(module, case_id: str) -> bool:
    return case_id.startswith(tuple(module.PREFIXES))


def run_family(name: str, labels: list[dict], workers: int) -> list[dict]:
    module = importlib.import_module(name)
    if hasattr(module, "available") and not module.available():
        print(f"corpus: {name}: skipped ({module.available.__doc__.strip()})")
        return labels
    for d in CASES.glob("*"):
        if owned(module, d.name):
            shutil.rmtree(d)
    t0 = time.time()
    new = [lab for lab in module.generate(workers=workers) if lab]
    print(f"corpus: {name}: {len(new)} cases in {time.time() - t0:.0f}s", flush=True)
    ids = {lab["id"] for lab in new}
    for d in CASES.glob("*"):  # a case that did not reproduce leaves no directory behind
        if owned(module, d.name) and d.name not in ids:
            shutil.rmtree(d)
    # Reread under a lock: another family may have written its labels meanwhile.
    with open("/tmp/gpualert-corpus-labels.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = [lab for lab in load_labels() if not owned(module, lab["id"])]
        write_labels(kept + new)
    return kept + new


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=FAMILIES, help="families to rebuild")
    ap.add_argument("--no-slurm", action="store_true", help="do not run the Slurm family")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    families = args.only or [f for f in FAMILIES if not (f == "slurm" and args.no_slurm)]
    CASES.mkdir(parents=True, exist_ok=True)
    labels = load_labels()
    for name in families:
        labels = run_family(name, labels, args.workers)  # written after each family
    labels = load_labels()
    print(count_table(labels))
    update_readme(count_table(labels))
    problems = check(labels)
    for p in problems:
        print(f"corpus: problem: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
