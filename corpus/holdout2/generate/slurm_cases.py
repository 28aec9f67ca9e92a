#!/usr/bin/env python3
"""Run the Slurm-side holdout2 cases on the real test cluster (root; cluster must be up).

time_limit (--time=1), cancelled (scancel), preempted (debug jobs on n3 pushed out by an
exclusive urgent job) and cgroup OOM (--mem) jobs are submitted as gpatest with --gpualert; the
tap's task logs and .exit records are copied from the spool, the end state from sacct. A case
whose job did not end in the intended state is dropped and reported, never relabelled by hand.
Usage: slurm_cases.py [case-id-prefix ...]; writes build/labels-slurm.jsonl.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent                       # corpus/holdout2
CLUSTER = Path("/var/lib/gpualert-cluster")
ENV = dict(os.environ, SLURM_CONF=str(CLUSTER / "etc/slurm.conf"))

# id -> (class, sbatch args, expected sacct end state); scripts are slurm/<id>.sbatch
CASES = {
    "tl-torch-epochs": ("time_limit", ["-p", "urgent", "-w", "n1", "--time=1"], "TIMEOUT"),
    "tl-bash-shards": ("time_limit", ["-p", "urgent", "-w", "n2", "--time=1"], "TIMEOUT"),
    "tl-srun-ranks": ("time_limit", ["-p", "urgent", "-w", "n1", "--time=1"], "TIMEOUT"),
    "tl-numpy-eval": ("time_limit", ["-p", "urgent", "-w", "n2", "--time=1"], "TIMEOUT"),
    "tl-sleepy-sync": ("time_limit", ["-p", "urgent", "-w", "n1", "--time=1"], "TIMEOUT"),
    "cx-torch-pretrain": ("cancelled", ["-p", "urgent", "-w", "n2"], "CANCELLED"),
    "cx-bash-sweep": ("cancelled", ["-p", "urgent", "-w", "n1"], "CANCELLED"),
    "cx-srun-steps": ("cancelled", ["-p", "urgent", "-w", "n2"], "CANCELLED"),
    "cx-numpy-kmeans": ("cancelled", ["-p", "urgent", "-w", "n1"], "CANCELLED"),
    "cx-c-sim": ("cancelled", ["-p", "urgent", "-w", "n2"], "CANCELLED"),
    "oom-cgroup-pandas": ("host_oom", ["-p", "urgent", "-w", "n1", "--mem=150M"],
                          "OUT_OF_MEMORY"),
    "oom-cgroup-numpy": ("host_oom", ["-p", "urgent", "-w", "n2", "--mem=200M"],
                         "OUT_OF_MEMORY"),
    "mr-srun-pyexc-rank1": ("python_exception", ["-p", "urgent", "-w", "n1"], "FAILED"),
    "mr-srun-fnf-rank2": ("file_not_found", ["-p", "urgent", "-w", "n1,n2,n3"], "FAILED"),
    "mr-srun-segv-rank0": ("segfault", ["-p", "urgent", "-w", "n2"], "FAILED"),
    "mr-srun-gloo-stuck1": ("collective_timeout", ["-p", "urgent", "-w", "n1"], "FAILED"),
    "ok-slurm-srun-noisy": ("success", ["-p", "urgent", "-w", "n2"], "COMPLETED"),
    "un-slurm-silent-exit": ("unknown", ["-p", "urgent", "-w", "n1"], "FAILED"),
    **{f"pre-job{i}": ("preempted", ["-p", "debug", "-w", "n3"], "PREEMPTED")
       for i in range(1, 6)},
}
ROOT_RANK = {"mr-srun-pyexc-rank1": 1, "mr-srun-fnf-rank2": 2, "mr-srun-segv-rank0": 0,
             "mr-srun-gloo-stuck1": 1}
CANCEL_AFTER = {"cx-torch-pretrain": 12, "cx-bash-sweep": 20, "cx-srun-steps": 9,
                "cx-numpy-kmeans": 15, "cx-c-sim": 25}


def sh(*cmd: str, check: bool = True) -> str:
    return subprocess.run(cmd, env=ENV, check=check, capture_output=True, text=True).stdout


def submit(case: str, args: list[str]) -> int:
    wd = CLUSTER / "work" / f"holdout2-{case}"
    shutil.rmtree(wd, ignore_errors=True)
    wd.mkdir(parents=True)
    shutil.copy(HERE / "slurm" / f"{case}.sbatch", wd / "job.sbatch")
    for prog in ("trainlog.py", "dist.py"):
        shutil.copy(HERE / "progs" / prog, wd / prog)
    shutil.chown(wd, "gpatest", "gpatest")
    for f in wd.iterdir():
        shutil.chown(f, "gpatest", "gpatest")
    out = subprocess.run(["runuser", "-u", "gpatest", "--", "sbatch", "--parsable", "--gpualert",
                          "--no-requeue", "-J", case, "-o", "slurm-%j.out", *args, "job.sbatch"],
                         cwd=wd, env=ENV, check=True, capture_output=True, text=True).stdout
    return int(out.strip().split(";")[0])


def state(jid: int) -> tuple[str, str, str]:
    line = sh("sacct", "-X", "-P", "-n", "-o", "State,ExitCode,Reason", "-j", str(jid)).strip()
    if not line:
        return "", "", ""
    s, ec, reason = (line.splitlines()[0].split("|") + ["", "", ""])[:3]
    return s, ec, reason


def wait_done(jids: dict[str, int], bound: float) -> None:
    t0 = time.time()
    while time.time() - t0 < bound:
        if all(state(j)[0] not in ("", "PENDING", "RUNNING", "COMPLETING", "REQUEUED")
               for j in jids.values()):
            return
        time.sleep(3)


def wait_running(jids: list[int], bound: float) -> None:
    t0 = time.time()
    while time.time() - t0 < bound and any(state(j)[0] != "RUNNING" for j in jids):
        time.sleep(1)


def collect(case: str, jid: int, cls: str, args: list[str], want: str) -> dict | None:
    time.sleep(2)  # let the epilog finish writing
    st, ec, reason = state(jid)
    if st.split(" ")[0] != want:
        print(f"DROP {case}: job {jid} ended {st} {ec} {reason}, wanted {want}", file=sys.stderr)
        return None
    spool = CLUSTER / "spool" / str(jid) / "tasks"
    dest = ROOT / "cases" / case
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    tasks = []
    for log in sorted(spool.glob("*.log")):
        shutil.copy(log, dest / log.name)
        step, rank = log.name[:-4].rsplit(".", 1)
        rec: dict = {}
        ex = log.with_suffix(".exit")
        if ex.exists():
            shutil.copy(ex, dest / ex.name)
            rec = json.loads(ex.read_text())
        tasks.append({"log": f"cases/{case}/{log.name}", "rank": int(rank),
                      "node": rec.get("node"), "step": step, "exit_code": rec.get("exit_code"),
                      "signal": rec.get("signal"), "core_dumped": bool(rec.get("core_dumped")),
                      "end_time": rec.get("end_time")})
    if not tasks:
        print(f"DROP {case}: no task logs in {spool}", file=sys.stderr)
        return None
    if cls == "success" and any(t["exit_code"] != 0 for t in tasks):
        print(f"DROP {case}: meant to succeed, a task exited non-zero", file=sys.stderr)
        return None
    code, sig = (int(x) for x in ec.split(":"))
    return {"id": case, "class": cls, "root_rank": ROOT_RANK.get(case), "source": "reproduced",
            "command": f"sbatch --gpualert {' '.join(args)} generate/slurm/{case}.sbatch"
                       + (f"; scancel after {CANCEL_AFTER[case]}s" if case in CANCEL_AFTER else "")
                       + ("; preempted by an exclusive urgent job on n3" if cls == "preempted"
                          else ""),
            "how": None, "exit_code": code, "signal": sig or None,
            "slurm_state": st.split(" ")[0],
            "slurm_reason": None if reason in ("", "None") else reason,
            "hang_threshold_s": None, "silence_s": None, "tasks": tasks, "kernel_log": None}


def main() -> int:
    jids: dict[str, int] = {}
    if sys.argv[1:]:  # rerun only the cases whose ids start with one of the arguments
        for c in [c for c in CASES if not any(c.startswith(a) for a in sys.argv[1:])]:
            del CASES[c]
            CANCEL_AFTER.pop(c, None)
    pre = [c for c in CASES if c.startswith("pre-")]
    for c in pre:
        jids[c] = submit(c, CASES[c][1])
    wait_running([jids[c] for c in pre], 60)
    if pre:
        time.sleep(8)  # let the victims write some output first
    wd = CLUSTER / "work" / "holdout2-preemptor"
    wd.mkdir(parents=True, exist_ok=True)
    shutil.chown(wd, "gpatest", "gpatest")
    if pre:
        subprocess.run(["runuser", "-u", "gpatest", "--", "sbatch", "--parsable", "-p", "urgent",
                        "-w", "n3", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 5"],
                       cwd=wd, env=ENV, check=True, capture_output=True)
    others = [c for c in CASES if not c.startswith("pre-")]
    for c in others:
        jids[c] = submit(c, CASES[c][1])
    wait_running([jids[c] for c in CANCEL_AFTER], 60)  # no-op when none are cancelled
    t0 = time.time()
    for c, after in sorted(CANCEL_AFTER.items(), key=lambda kv: kv[1]):
        time.sleep(max(0, t0 + after - time.time()))
        subprocess.run(["runuser", "-u", "gpatest", "--", "scancel", str(jids[c])], env=ENV,
                       check=True)
    wait_done(jids, 300)
    labels = [lab for c in CASES if (lab := collect(c, jids[c], CASES[c][0], CASES[c][1],
                                                    CASES[c][2]))]
    out = HERE / "build" / "labels-slurm.jsonl"
    out.parent.mkdir(exist_ok=True)
    old = {}
    if sys.argv[1:] and out.exists():
        old = {json.loads(x)["id"]: x for x in out.read_text().splitlines() if x.strip()}
    for c in CASES:
        old.pop(c, None)
    old.update({lab["id"]: json.dumps(lab) for lab in labels})
    out.write_text("".join(v + "\n" for _, v in sorted(old.items())))
    print(f"{len(labels)}/{len(CASES)} slurm cases kept; jobs {jids}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
