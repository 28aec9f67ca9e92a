#!/usr/bin/env python3
"""Turn a device run of reproduce.py into corpus cases marked really run (`source: device`).

    python3 bench/gpu/to_corpus.py RESULTS_DIR [--set corpus] [--prefix device-] [--write]

RESULTS_DIR is the $OUT a device call brought back (summary.json and one directory per case).
Only a case that ran on a GPU and failed as designed (its exit status nonzero, or zero for the
silent NaN) becomes a case; the NVML record and gpu_hardware are not log cases. A run without a
GPU gives none: nothing here is composed. Each case is `cases/<id>/run.0.log` (gpualert run's
output.log, byte for byte), `run.0.exit` (the tap's record, from exit.json) and versions.json;
its label names the GPU, the command and the versions in `how`, and its class is the failure
the program makes (the verdict is what `gpualert eval` then scores). Without --write the labels
are printed and nothing is written.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOT_LOG_CASES = ("nvml-epilog-snapshot", "gpu_hardware")


def _read(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def candidates(results: str) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """(the cases to write, why each other case is not one, the summary)."""
    summary = _read(os.path.join(results, "summary.json"))
    take, left = [], []
    if not summary.get("gpu_used"):
        return [], [f"no GPU in this run ({summary.get('no_gpu_reason')}): no case is written "
                    "without a real run"], summary
    for c in summary["cases"]:
        name = c["case"]
        if name in NOT_LOG_CASES:
            left.append(f"{name}: not a log case")
        elif c["status"] != "ran" or c.get("part") != "gpu":
            left.append(f"{name}: {c['status']} ({c.get('reason')})")
        elif not c.get("failed_as_designed"):
            left.append(f"{name}: exit status {c.get('exit_status')}, not the designed "
                        f"{c.get('expected_exit')} exit: look at its log first")
        elif not os.path.getsize(os.path.join(results, c["dir"], "output.log")):
            left.append(f"{name}: empty log")
        else:
            take.append(c)
    return take, left, summary


def label(c: dict[str, Any], cid: str, summary: dict[str, Any], ex: dict[str, Any]
          ) -> dict[str, Any]:
    v = summary["versions"]
    command = " ".join(x.replace(REPO + "/", "") for x in c["command"])
    env = "".join(f"{k}={val} " for k, val in (c.get("env") or {}).items())
    how = (f"really run on {v['gpu_name']} (driver {v['driver']}, CUDA {v['cuda_driver_api']} "
           f"driver API / {v['cuda_runtime_torch']} PyTorch runtime, nvcc {v['nvcc']}, PyTorch "
           f"{v['torch']}, NCCL {v['nccl']}, CuPy {v['cupy']}, JAX {v['jax']}) by "
           f"bench/gpu/reproduce.sh ({summary['started']}), case {c['case']} under gpualert run;"
           f" versions.json beside the log")
    task = {"log": f"cases/{cid}/run.0.log", "rank": 0, "node": None, "step": "run",
            "exit_code": ex.get("exit_code"), "signal": ex.get("signal"),
            "core_dumped": bool(ex.get("core_dumped")), "end_time": ex.get("end_time")}
    return {"id": cid, "class": c["expected"], "root_rank": None, "source": "device",
            "command": env + command, "how": how, "exit_code": ex.get("exit_code"),
            "signal": ex.get("signal"), "slurm_state": None, "slurm_reason": None,
            "hang_threshold_s": None, "silence_s": None, "tasks": [task], "kernel_log": None}


def write_case(results: str, set_dir: str, c: dict[str, Any], lab: dict[str, Any],
               ex: dict[str, Any]) -> None:
    d = os.path.join(set_dir, "cases", lab["id"])
    os.makedirs(d)
    src = os.path.join(results, c["dir"])
    shutil.copyfile(os.path.join(src, "output.log"), os.path.join(d, "run.0.log"))
    shutil.copyfile(os.path.join(src, "versions.json"), os.path.join(d, "versions.json"))
    rec = {"node": None, "step": "run", "rank": 0, "pid": ex.get("pid"),
           "exit_code": ex.get("exit_code"), "signal": ex.get("signal"),
           "core_dumped": bool(ex.get("core_dumped")), "end_time": ex.get("end_time"),
           "status": ex.get("status")}
    with open(os.path.join(d, "run.0.exit"), "w") as f:
        f.write(json.dumps(rec) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", help="the $OUT of a device run")
    p.add_argument("--set", default=os.path.join(REPO, "corpus"), help="the corpus set")
    p.add_argument("--prefix", default="device-", help="case id prefix")
    p.add_argument("--write", action="store_true", help="write the cases and labels")
    a = p.parse_args(argv)
    take, left, summary = candidates(a.results)
    for why in left:
        print(f"not a case: {why}", file=sys.stderr)
    if not take:
        print("to_corpus: no case to write", file=sys.stderr)
        return 1
    labels_path = os.path.join(a.set, "labels.jsonl")
    with open(labels_path) as f:
        lines = [x for x in f.read().splitlines() if x.strip()]
    have = {json.loads(x)["id"] for x in lines}
    new = []
    for c in take:
        cid = a.prefix + c["case"]
        if cid in have or os.path.exists(os.path.join(a.set, "cases", cid)):
            print(f"to_corpus: {cid} exists already; not written", file=sys.stderr)
            continue
        ex = _read(os.path.join(a.results, c["dir"], "exit.json"))
        lab = label(c, cid, summary, ex)
        print(json.dumps(lab))
        if a.write:
            write_case(a.results, a.set, c, lab, ex)
            new.append(json.dumps(lab))
    if a.write and new:
        out = sorted(lines + new, key=lambda x: json.loads(x)["id"])
        with open(labels_path, "w") as f:
            f.write("\n".join(out) + "\n")
        print(f"to_corpus: {len(new)} case(s) written to {a.set}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
