#!/usr/bin/env python3
"""Counts of a corpus set, independent of the classifier: `stats.py [SET_DIR] [--check]`.

Prints per class the cases, the really-run ones (`source: reproduced` or `device`) and the
synthetic ones, and per log shape (the `transform` a label records, issue 10 point 4) the
classes it appears in. `--check` asserts the tuning corpus's targets (TARGETS below) and that
every label's fields and files are right, and exits 1 with what is missing; `--readme` rewrites
the counts table in the set's README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

CORPUS = Path(__file__).resolve().parent
sys.path.insert(0, str(CORPUS.parent))
from corpus.gen.transforms import SHAPES  # noqa: E402

CLASSES = ("cuda_oom", "host_oom", "gpu_hardware", "cuda_error", "cuda_device_assert",
           "cuda_setup", "nccl_error", "collective_timeout", "nan_divergence", "import_error",
           "file_not_found", "permission_denied", "disk_full", "storage_io",
           "checkpoint_corrupt", "segfault", "dataloader_worker", "device_mismatch",
           "python_exception", "time_limit", "preempted", "cancelled", "node_failure", "hang",
           "killed", "success", "unknown")
# Classes that need a GPU to really happen: no machine that builds the corpus has one, so their
# really-run target applies only to `device` cases once a GPU machine captures them.
GPU_ONLY = ("cuda_oom", "gpu_hardware", "cuda_error", "cuda_device_assert", "nccl_error")
TARGETS = {"per_class": 40, "really_run": 25, "classes_per_shape": 8}


def load(set_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (set_dir / "labels.jsonl").read_text().splitlines()
            if x.strip()]


def stats(labels: list[dict]) -> dict:
    total, real, synth = Counter(), Counter(), Counter()
    shapes: dict[str, set[str]] = defaultdict(set)
    for lab in labels:
        c = lab["class"]
        total[c] += 1
        if lab["source"] in ("reproduced", "device"):
            real[c] += 1
        else:
            synth[c] += 1
        for t in (lab.get("transform") or "").split("+"):
            if t:
                shapes[t].add(c)
    return {"total": total, "real": real, "synth": synth, "shapes": shapes}


def problems(s: dict) -> list[str]:
    out = []
    for c in CLASSES:
        if s["total"][c] < TARGETS["per_class"]:
            out.append(f"{c}: {s['total'][c]} cases < {TARGETS['per_class']}")
        if c not in GPU_ONLY and s["real"][c] < TARGETS["really_run"]:
            out.append(f"{c}: {s['real'][c]} really run < {TARGETS['really_run']}")
    for sh in SHAPES:
        n = len(s["shapes"].get(sh, ()))
        if n < TARGETS["classes_per_shape"]:
            out.append(f"shape {sh}: in {n} classes < {TARGETS['classes_per_shape']}")
    return out


FIELDS = ["id", "class", "root_rank", "source", "command", "how", "exit_code", "signal",
          "slurm_state", "slurm_reason", "hang_threshold_s", "silence_s", "tasks", "kernel_log"]
TASK_FIELDS = ["log", "rank", "node", "step", "exit_code", "signal", "core_dumped", "end_time"]


def check_files(set_dir: Path, labels: list[dict]) -> list[str]:
    """Problems with the labels: fields, missing files, duplicate ids, case dirs without label."""
    problems, seen = [], set()
    for lab in labels:
        cid = lab.get("id")
        if cid in seen:
            problems.append(f"{cid}: duplicate id")
        seen.add(cid)
        if [k for k in lab if k != "transform"] != FIELDS:  # transform: the log's shape
            problems.append(f"{cid}: fields {list(lab)}")
        if not lab.get("tasks") and not lab.get("slurm_state"):
            # (a job Slurm ended before its first task wrote anything has no task log)
            problems.append(f"{cid}: no tasks")
        for t in lab.get("tasks", []):
            if list(t) != TASK_FIELDS or not (set_dir / t["log"]).is_file():
                problems.append(f"{cid}: bad task entry {t}")
        if lab.get("kernel_log") and not (set_dir / lab["kernel_log"]).is_file():
            problems.append(f"{cid}: kernel_log missing")
    problems += [f"{d.name}: directory without a label"
                 for d in (set_dir / "cases").glob("*") if d.name not in seen]
    return problems


def source_table(labels: list[dict]) -> str:
    """Per class and source, the table corpus/README.md keeps between its counts markers."""
    by = Counter((lab["class"], lab["source"]) for lab in labels)
    classes = sorted({c for c, _ in by})
    sources = ["reproduced", "device", "synthetic"]
    rows = [f"{'class':<20}" + "".join(f"{x:>12}" for x in sources) + f"{'total':>8}"]
    for c in classes:
        n = [by[(c, x)] for x in sources]
        rows.append(f"{c:<20}" + "".join(f"{x:>12}" for x in n) + f"{sum(n):>8}")
    tot = [sum(by[(c, x)] for c in classes) for x in sources]
    rows.append(f"{'all':<20}" + "".join(f"{x:>12}" for x in tot) + f"{sum(tot):>8}")
    return "\n".join(rows)


def update_readme(set_dir: Path, table: str) -> None:
    readme = set_dir / "README.md"
    text = readme.read_text()
    start, end = "<!-- counts -->\n", "<!-- /counts -->"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        readme.write_text(head + start + "```\n" + table + "\n```\n" + end
                          + rest.split(end, 1)[1])


def report(s: dict) -> str:
    lines = [f"{'class':22s}{'total':>7s}{'real':>7s}{'synth':>7s}  shapes"]
    for c in CLASSES:
        sh = sorted(k for k, v in s["shapes"].items() if c in v)
        lines.append(f"{c:22s}{s['total'][c]:7d}{s['real'][c]:7d}{s['synth'][c]:7d}  "
                     f"{len(sh)}/{len(SHAPES)}")
    lines.append(f"{'all':22s}{sum(s['total'].values()):7d}{sum(s['real'].values()):7d}"
                 f"{sum(s['synth'].values()):7d}")
    lines.append("")
    lines.append(f"{'shape':18s}classes")
    for sh in SHAPES:
        lines.append(f"{sh:18s}{len(s['shapes'].get(sh, ())):3d}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("set_dir", nargs="?", default=str(CORPUS))
    ap.add_argument("--check", action="store_true",
                    help="assert the tuning corpus targets and the labels' files")
    ap.add_argument("--readme", action="store_true",
                    help="rewrite the counts table of SET_DIR/README.md")
    a = ap.parse_args()
    labels = load(Path(a.set_dir))
    s = stats(labels)
    print(report(s))
    if a.readme:
        update_readme(Path(a.set_dir), source_table(labels))
    if a.check:
        bad = problems(s) + check_files(Path(a.set_dir), labels)
        for p in bad:
            print(f"MISSING {p}")
        print("targets met" if not bad else f"{len(bad)} targets not met "
              f"(GPU-only classes {', '.join(GPU_ONLY)} are exempt from the really-run target)")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
