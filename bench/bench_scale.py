#!/usr/bin/env python3
"""Scale: what a failing many-rank job and a burst of failing array tasks cost, on a 48-node
native cluster of its own (docker/slurm-cluster/cluster with GPUALERT_CLUSTER_NODES, root
/var/lib/gpualert-cluster-scale, ports +300, proctrack/linuxproc; brought up here, used by
this process alone, stopped at the end). Prints figures, never pass/fail.

    bench_scale.py [--nodes 3,12,48] [--tpn 4] [--array 500] [--skip-array] [--skip-jobs]
                   [--keep] [--seed S] [--pin] [--slurmd-timeout S]

1. A failing job at each node count x --tpn tasks (12, 48, 192 ranks), three times: a rank
   raises an exception and srun kills the rest (srun -K); a rank is SIGKILLed and the rest end
   in a collective-timeout cascade (their watchdog's timeout, then exit 1); the rank's node is
   taken down mid-job (its step daemon, tasks and slurmd SIGKILLed: no exit record, no
   Epilog; Slurm ends the job NODE_FAIL after SlurmdTimeout). The failing rank is chosen at
   random per run (printed, with the seed); the job itself records where it ran.
   Per run: root failure -> batch end (Slurm ending the step), job end (batch end) -> Slurm
   final state (the baseline), -> verdict.json, -> mail in the sink; the node Epilog's wall
   and CPU per node and its peak RSS; the job epilog's CPU seconds and peak RSS (the hooks'
   own `cost` log lines, gpualert_slurm/hooks/cost.py); spool files and bytes of the job; and
   whether the verdict names the recorded rank and node. Then how each grows from the
   smallest to the largest size against the expected order.
2. A --array task array whose every task fails within a minute, with and without --gpualert:
   the job epilogs' CPU seconds (sum of their cost lines), slurmctld's own CPU, the machine's
   CPU, the time from the last task's end to the array's one summary mail, and squeue's
   latency sampled every second while it runs (largest, p50), with the ratio to the run
   without gpualert.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))
import clusterlib as cl  # noqa: E402

from gpualert_slurm.core import slurm  # noqa: E402

SCALE_ENV = {
    "GPUALERT_CLUSTER_DIR": "/var/lib/gpualert-cluster-scale",
    "GPUALERT_CLUSTER_NAME": "gpascale",
    "GPUALERT_CLUSTER_PORT_OFFSET": "300",
    "GPUALERT_CLUSTER_NODES": "48",
    # no cgroups: the slurm_n1.. cgroups of this host are the shared cluster's node names
    "GPUALERT_CLUSTER_PROCTRACK": "linuxproc",
}
SESSION_LOCK = Path(SCALE_ENV["GPUALERT_CLUSTER_DIR"] + ".session.lock")
POLL_S = 0.1

# One rank of a fake training job. ROOT fails (MODE=exc: a Python exception; kill: SIGKILL)
# after a few steps; the others either wait to be killed by srun -K (CASCADE=srun) or notice
# that the root rank's heartbeat stopped and end as NCCL's watchdog does (CASCADE=timeout).
# Waiting is fork-free (read -t on a pipe, builtins), so 192 ranks cost little CPU.
RANK_SH = r"""#!/bin/bash
R=$SLURM_PROCID; HB="$WORK/hb"
echo "$SLURMD_NODENAME $$ $PPID" > "$WORK/pid.$R"
exec 9<> <(:)
for i in 1 2 3 4; do
  echo "[rank $R] step $i loss=2.$i tokens/s=9812"
  [ "$R" = "$ROOT" ] && echo "$i" > "$HB"
  read -t 0.5 -u 9 || true
done
[ "$MODE" = lost ] && exec sleep 300   # the bench takes the root rank's node down
if [ "$R" = "$ROOT" ]; then
  printf '%s %(%s)T\n' "$SLURMD_NODENAME" -1 > "$WORK/root-node"
  date +%s.%N > "$WORK/root-time"
  if [ "$MODE" = exc ]; then
    exec python3 -c 'def forward(x): raise ValueError(f"shape mismatch in layer 7: {x}")
forward("(8, 512) vs (8, 768)")'
  fi
  echo "[rank $R] step 5 loss=2.5"; kill -9 $$
fi
[ "$CASCADE" = srun ] && exec sleep 300
last=""; same=0
while :; do
  read -r v < "$HB" || v=""
  if [ "$v" = "$last" ]; then same=$((same + 1)); else same=0; last=$v; fi
  if [ $same -ge 8 ]; then
    w="WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=4000)"
    echo "[rank $R] [E ProcessGroupNCCL.cpp:475] Watchdog caught collective operation" \
         "timeout: $w ran for 4012 milliseconds before timing out." >&2
    exit 1
  fi
  read -t 0.5 -u 9 || true
done
"""

JOB_SH = """#!/bin/bash
#SBATCH --gpualert
#SBATCH -o slurm-%j.out
#SBATCH -N {nodes} --ntasks-per-node={tpn} --no-requeue -t 10
export WORK={work} ROOT={root} MODE={mode} CASCADE={cascade}
srun {k} bash ./rank.sh
"""

ARRAY_SH = """#!/bin/bash
{opt}
#SBATCH -o slurm-%A_%a.out
#SBATCH --array=0-{last} -n1 --no-requeue -t 5
echo "task $SLURM_ARRAY_TASK_ID: epoch 1 loss=2.31"
sleep 1
cat >&2 <<EOF
Traceback (most recent call last):
  File "train.py", line 88, in <module>
    shard = open(f"/data/shard-{{task}}.bin", "rb")
FileNotFoundError: [Errno 2] No such file or directory: '/data/shard-$SLURM_ARRAY_TASK_ID.bin'
EOF
exit 1
"""

COST_RE = re.compile(r"job (\d+): (epilog on (\S+)|epilog-slurmctld) cost cpu ([\d.]+) s "
                     r"\(children ([\d.]+) s\), peak rss ([\d.]+) MiB \(largest child ([\d.]+)"
                     r" MiB\)(?:, waited ([\d.]+) s for a slot)?")
# the queue worker's last line (hooks/queue.py); before it was renamed, the drainer's
WORKER_RE = re.compile(r"^(\S+) \S+ INFO (?:queue: worked through|drain: drained) (\d+) job "
                       r"epilog\(s\) \((\d+) cut short\)[^;\n]*; (?:worker|drainer) cost cpu "
                       r"([\d.]+) s", re.M)
NODE_RE = re.compile(r"job (\d+): node verdict \S+ for \d+ task\(s\) on (\S+) in ([\d.]+) s")


def hooks_log(f: cl.ClusterFacts) -> Path:
    return f.spool / "gpualert-hooks.log"


def read_costs(f: cl.ClusterFacts, jobs: set[str]) -> dict[str, Any]:
    """The hooks' cost and node-time lines for `jobs`."""
    out: dict[str, Any] = {"node": {}, "ctld": {}, "node_wall": {}}
    for p in (hooks_log(f).with_name(hooks_log(f).name + ".1"), hooks_log(f)):
        try:
            text = p.read_text(errors="replace")
        except OSError:
            continue
        for m in COST_RE.finditer(text):
            if m.group(1) not in jobs:
                continue
            rec = {"cpu": float(m.group(4)), "rss": float(m.group(6)),
                   "child_rss": float(m.group(7)),
                   "wait": float(m.group(8)) if m.group(8) else None}
            if m.group(3):
                out["node"][(m.group(1), m.group(3))] = rec
            else:
                out["ctld"][m.group(1)] = rec
        for m in NODE_RE.finditer(text):
            if m.group(1) in jobs:
                out["node_wall"][(m.group(1), m.group(2))] = float(m.group(3))
    return out


def spool_size(d: Path) -> tuple[int, int]:
    files = size = 0
    for root, _dirs, names in os.walk(d):
        for n in names:
            files += 1
            size += os.lstat(os.path.join(root, n)).st_size
    return files, size


class MailWatch:
    """Messages arriving in the sink, by the job id their subject names."""

    def __init__(self, maildir: Path) -> None:
        self.maildir = maildir
        self.seen = {p.name for p in maildir.glob("*.eml")}
        self.subjects: dict[str, tuple[str, float]] = {}

    def poll(self) -> None:
        for p in self.maildir.glob("*.eml"):
            if p.name in self.seen:
                continue
            self.seen.add(p.name)
            try:
                head = p.read_bytes()[:4096].decode(errors="replace")
                mtime = p.stat().st_mtime
            except OSError:
                continue
            m = re.search(r"^Subject: (.*)$", head, re.M)
            self.subjects[p.name] = (m.group(1) if m else "", mtime)

    def for_job(self, jid: int | str) -> float | None:
        pat = re.compile(rf"\b(job|array) {jid}\b")
        hits = [t for s, t in self.subjects.values() if pat.search(s)]
        return min(hits) if hits else None


def final_state(jid: int) -> str | None:
    try:
        st = slurm.show_job(jid, timeout=10)
    except slurm.JobNotFound:
        return "PURGED"
    except slurm.SlurmError:
        return None
    return st.state if st.final else None


def batch_end(f: cl.ClusterFacts, jid: int) -> float | None:
    try:
        return float(json.loads((f.spool / str(jid) / "tasks" / "batch.0.exit")
                                .read_text())["end_time"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# ---- 1. one failing job per size and failure kind --------------------------------------------

def take_node_down(f: cl.ClusterFacts, work: Path, ranks: int, root: int) -> tuple[str, float]:
    """The root rank's node dies as a powered-off one does: its step daemon, its tasks and its
    slurmd SIGKILLed at once (no exit record, no Epilog); Slurm then finds it DOWN
    (SlurmdTimeout) and ends the job NODE_FAIL. Returns the node and the time of the kill."""
    cl.wait_until(lambda: all((work / f"pid.{r}").exists() for r in range(ranks)), 120,
                  "every rank running")
    recs = {r: (work / f"pid.{r}").read_text().split() for r in range(ranks)}
    node = recs[root][0]
    mine = [rec for rec in recs.values() if rec[0] == node]
    pids = {int(p) for _n, _pid, p in mine} | {int(pid) for _n, pid, _p in mine}
    pids.add(int(f.slurmd_pidfile(node).read_text().strip()))
    t = time.time()
    for pid in sorted(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    (work / "root-node").write_text(f"{node} {int(t)}\n")
    (work / "root-time").write_text(f"{t}\n")
    return node, t


def resume_drained(f: cl.ClusterFacts) -> list[str]:
    """Nodes Slurm drained during the run ('Kill task failed' was seen after a node loss and
    in the array burst), resumed so that the next run gets all nodes; returned as 'node:
    reason' for the table."""
    out = subprocess.run(["sinfo", "-h", "-N", "-t", "drain,drained,draining", "-o", "%N|%E"],
                         capture_output=True, text=True, timeout=30).stdout
    got = sorted({ln for ln in out.splitlines() if "|" in ln})
    for ln in got:
        with contextlib.suppress(slurm.SlurmError):
            slurm.update_node(ln.split("|")[0], "resume")
    return [ln.replace("|", ": ") for ln in got]


def run_job(f: cl.ClusterFacts, mail: MailWatch, nodes: int, tpn: int, mode: str,
            rng: random.Random) -> dict[str, Any]:
    ranks = nodes * tpn
    # a lost node is never the batch host (the first): that is another case (batch host lost)
    root = rng.randrange(tpn, ranks) if mode == "lost" else rng.randrange(ranks)
    cascade = {"exc": "srun", "kill": "timeout", "lost": "node_fail"}[mode]
    work = cl.make_workdir(f, f"bench-scale-{ranks}-{mode}")
    cl.write_user_file(work / "rank.sh", RANK_SH)
    jid = cl.submit(JOB_SH.format(nodes=nodes, tpn=tpn, work=work, root=root, mode=mode,
                                  cascade=cascade, k="-K" if cascade == "srun" else ""),
                    workdir=work)
    lost = take_node_down(f, work, ranks, root)[0] if mode == "lost" else None
    r: dict[str, Any] = {"ranks": ranks, "nodes": nodes, "mode": f"{mode}+{cascade}",
                         "job": jid, "root": root}
    t_final = t_mail = None
    vpath = f.spool / str(jid) / "verdict.json"
    deadline = time.time() + 240
    while time.time() < deadline:
        mail.poll()
        now = time.time()
        if t_final is None and final_state(jid):
            t_final = now
        if t_mail is None:
            t_mail = mail.for_job(jid)
        if t_final is not None and t_mail is not None and vpath.exists():
            break
        time.sleep(POLL_S)
    # the job epilog's cost line comes after the mail
    costs: dict[str, Any] = {}
    for _ in range(100):
        costs = read_costs(f, {str(jid)})
        if str(jid) in costs["ctld"] and len(costs["node"]) >= nodes - (lost is not None):
            break
        time.sleep(0.2)
    if lost is not None:
        cl.restore_node(f, lost)
    r["drained"] = resume_drained(f)
    try:
        root_node, _ = (work / "root-node").read_text().split()
        t_fail = float((work / "root-time").read_text())
    except (OSError, ValueError):
        root_node, t_fail = None, None
    # the job's end: its batch step's (a lost node's job: Slurm ends it after the node loss)
    t_end = batch_end(f, jid)
    try:
        v = json.loads(vpath.read_text())
        t_verdict = vpath.stat().st_mtime
        verdict = v.get("verdict") or {}
    except (OSError, ValueError):
        v, verdict, t_verdict = {}, {}, None
    files, size = spool_size(f.spool / str(jid))
    nw = [w for (j, _n), w in costs["node_wall"].items() if j == str(jid)]
    nc = [c for (j, _n), c in costs["node"].items() if j == str(jid)]
    ctld = costs["ctld"].get(str(jid), {})

    def since(t: float | None, t0: float | None) -> float | None:
        return t - t0 if t is not None and t0 is not None else None

    # A lost node's ranks all die at the same instant: any of them is the root (the classifier
    # names the node's first rank without an exit record); otherwise the very rank that failed.
    if lost is not None:
        node_ranks = {int(r) for r in range(ranks) if (work / f"pid.{r}").exists()
                      and (work / f"pid.{r}").read_text().split()[0] == lost}
        rank_ok = verdict.get("root_rank") in node_ranks
    else:
        rank_ok = verdict.get("root_rank") == root
    r.update({
        "root_node": root_node, "class": verdict.get("class"),
        "v_rank": verdict.get("root_rank"), "v_node": verdict.get("root_node"),
        "named": rank_ok and root_node is not None and verdict.get("root_node") == root_node,
        "fail_to_end": since(t_end, t_fail), "end_to_slurm": since(t_final, t_end),
        "end_to_verdict": since(t_verdict, t_end), "end_to_mail": since(t_mail, t_end),
        "node_wall_mean": statistics.mean(nw) if nw else None,
        "node_wall_max": max(nw) if nw else None,
        "node_cpu_mean": statistics.mean(x["cpu"] for x in nc) if nc else None,
        "node_cpu_sum": sum(x["cpu"] for x in nc) if nc else None,
        "node_rss_max": max(max(x["rss"], x["child_rss"]) for x in nc) if nc else None,
        "ctld_cpu": ctld.get("cpu"), "ctld_rss": ctld.get("rss"),
        "ctld_child_rss": ctld.get("child_rss"),
        "spool_files": files, "spool_bytes": size, "node_records": len(nc),
    })
    return r


def fmt(x: Any, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def print_jobs(rows: list[dict[str, Any]]) -> None:
    print("\nper run (times in s; end = the batch step's end, as its exit record says):")
    print(f"{'ranks':>5} {'kind':<12} {'job':>5} {'root':>9} {'verdict':>14} {'named':>5} "
          f"{'fail>end':>8} {'end>slurm':>9} {'end>verd':>8} {'end>mail':>8} "
          f"{'ep wall':>7} {'ep cpu':>6} {'ep rss':>6} {'jep cpu':>7} {'jep rss':>7} "
          f"{'files':>5} {'KiB':>6}")
    for r in rows:
        root = f"{r['root']}@{r['root_node']}"
        got = f"{r['v_rank']}@{r['v_node']}"
        print(f"{r['ranks']:>5} {r['mode']:<12} {r['job']:>5} {root:>9} {got:>14} "
              f"{'yes' if r['named'] else 'NO':>5} {fmt(r['fail_to_end']):>8} "
              f"{fmt(r['end_to_slurm']):>9} {fmt(r['end_to_verdict']):>8} "
              f"{fmt(r['end_to_mail']):>8} {fmt(r['node_wall_mean']):>7} "
              f"{fmt(r['node_cpu_mean']):>6} {fmt(r['node_rss_max'], '.0f'):>6} "
              f"{fmt(r['ctld_cpu']):>7} "
              f"{fmt(max(r['ctld_rss'] or 0, r['ctld_child_rss'] or 0) or None, '.0f'):>7} "
              f"{r['spool_files']:>5} {r['spool_bytes'] / 1024:>6.0f}")
    print("  ep = node Epilog (mean per node: wall from its start, CPU incl. its classifier "
          "child); rss = peak MiB, largest process; jep = job epilog (EpilogSlurmctld and its "
          "detached worker)")
    print(f"  verdict named the recorded rank and node: {sum(r['named'] for r in rows)}"
          f"/{len(rows)} runs (a lost node: its node and one of its ranks, which all died at "
          f"once)")
    for r in rows:
        if r.get("drained"):
            print(f"  after job {r['job']} Slurm had drained {', '.join(r['drained'])} "
                  f"(resumed for the next run)")
    sizes = sorted({r["ranks"] for r in rows})
    if len(sizes) < 2:
        return
    lo, hi = sizes[0], sizes[-1]
    # expected order in ranks n: what each figure has to do per job
    expect = [("end_to_slurm", "O(1): Slurm's own end, the node Epilogs run in parallel"),
              ("end_to_verdict", "O(n): the job epilog reads n logs and records"),
              ("end_to_mail", "O(n): as the verdict, plus n attachments"),
              ("node_wall_mean", "O(1) on real nodes (each has its own 4 tasks); here all "
               "nodes' Epilogs share 2 cores: O(nodes)"),
              ("node_cpu_sum", "O(nodes): one Epilog per node"),
              ("ctld_cpu", "O(n): n logs, records and attachments"),
              ("ctld_rss", "O(n), small: n task records in memory"),
              ("spool_files", "O(n): 3 files per rank, 2 per node"),
              ("spool_bytes", "O(n): n logs")]
    print(f"\ngrowth {lo} -> {hi} ranks (x{hi / lo:g}), mean over the runs of each size:")
    for key, why in expect:
        a = [r[key] for r in rows if r["ranks"] == lo and r[key] is not None]
        b = [r[key] for r in rows if r["ranks"] == hi and r[key] is not None]
        if not a or not b or statistics.mean(a) <= 0:
            print(f"  {key:<15} -")
            continue
        ma, mb = statistics.mean(a), statistics.mean(b)
        print(f"  {key:<15} {ma:10.2f} -> {mb:10.2f}  x{mb / ma:6.2f}   expected {why}")


# ---- 2. the array burst ----------------------------------------------------------------------

def proc_cpu(pidfile: Path) -> float:
    try:
        pid = int(pidfile.read_text().strip())
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def machine_cpu() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(x) for i, x in enumerate(fields) if i not in (3, 4))  # not idle, iowait
    return busy / os.sysconf("SC_CLK_TCK")


class SqueueSampler(threading.Thread):
    """squeue's latency, once a second (what a user or a dashboard sees). nice: the client's
    niceness. Here the client shares 2 cores with the controller, 48 slurmd, the jobs and the
    hooks; on a real cluster it runs on a login node. At nice -10 it is not starved itself,
    so what it sees is slurmctld's answer time; both are measured, in the same run."""

    def __init__(self, nice: int = 0) -> None:
        super().__init__(daemon=True)
        self.nice = nice
        self.samples: list[float] = []
        self.at: list[float] = []    # when each sample began (time.time())
        self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        cmd = ["squeue", "-h", "-o", "%i %T"]
        if self.nice:
            cmd = ["nice", "-n", str(self.nice), *cmd]
        while not self.stop.is_set():
            t0 = time.monotonic()
            self.at.append(time.time())
            try:
                rc = subprocess.run(cmd, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, timeout=120).returncode
            except subprocess.TimeoutExpired:
                rc = -1
            self.failed += rc != 0  # "Socket timed out": slurmctld did not answer in time
            dt = time.monotonic() - t0
            self.samples.append(dt)
            self.stop.wait(max(0.0, 1.0 - dt))

    def worst(self, t0: float, n: int = 3) -> str:
        """The n largest samples and when they began, in s after t0."""
        top = sorted(zip(self.samples, self.at, strict=True), reverse=True)[:n]
        return ", ".join(f"{dt:.2f} s at +{at - t0:.0f} s" for dt, at in top)


SDIAG_RPC = re.compile(r"^\s+([A-Z_]+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)", re.M)


def sdiag_reset() -> None:
    """slurmctld's RPC counters back to zero (root), so that one burst's calls are counted."""
    subprocess.run(["sdiag", "--reset"], capture_output=True, timeout=30, check=False)


def sdiag_rpcs() -> dict[str, tuple[int, int]]:
    """RPC type -> (count, mean time in us) since the last reset, as slurmctld counts them."""
    out = subprocess.run(["sdiag"], capture_output=True, text=True, timeout=30).stdout
    part = out.split("by message type", 1)[-1].split("by user", 1)[0]
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in SDIAG_RPC.finditer(part)}


def array_ids(array: int) -> list[str]:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", str(array), "-o", "JobIDRaw,End,State"],
                         capture_output=True, text=True, timeout=60).stdout
    return [ln for ln in out.splitlines() if ln.strip()]


def run_array(f: cl.ClusterFacts, mail: MailWatch, n: int, gpualert: bool) -> dict[str, Any]:
    work = cl.make_workdir(f, f"bench-scale-array-{'on' if gpualert else 'off'}")
    sampler, prio = SqueueSampler(), SqueueSampler(nice=-10)
    ctld0, mach0 = proc_cpu(f.run_dir / "slurmctld.pid"), machine_cpu()
    sdiag_reset()
    t0 = time.time()
    sampler.start()
    prio.start()
    jid = cl.submit(ARRAY_SH.format(opt="#SBATCH --gpualert" if gpualert else "", last=n - 1),
                    workdir=work)
    done_at = summary_at = None
    deadline = t0 + 900
    polls = 0  # this loop's own squeue calls (sdiag counts them with gpualert's)
    while time.time() < deadline:
        mail.poll()
        if done_at is None:
            polls += 1
            q = subprocess.run(["squeue", "-h", "-r", "-j", str(jid), "-o", "%T"],
                               capture_output=True, text=True, timeout=60).stdout.split()
            if not any(s in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING") for s in q):
                done_at = time.time()
        if gpualert and summary_at is None:
            summary_at = mail.for_job(jid)
        if done_at is not None and (summary_at is not None or not gpualert
                                    or time.time() - done_at > 300):
            break
        time.sleep(0.5)
    # the hooks' work goes on after Slurm is done: wait for every job epilog's cost line
    ids: set[str] = set()
    for _ in range(30):
        rows = array_ids(jid)
        ids = {ln.split("|")[0] for ln in rows}
        if not gpualert or len(read_costs(f, ids)["ctld"]) >= n:
            break
        time.sleep(2)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0))
    try:
        log_text = hooks_log(f).read_text(errors="replace")
    except FileNotFoundError:  # a fresh cluster whose hooks have not run yet (no gpualert job)
        log_text = ""
    gave_up = sum(1 for ln in log_text.splitlines() if "gave up after" in ln and ln[:19] >= since)
    # the hook queue's worker (hooks/queue.py): its own start and loop, once per burst
    workers = [m for m in WORKER_RE.finditer(log_text) if m.group(1)[:19] >= since]
    settled = time.time()
    time.sleep(1)
    sampler.stop.set()
    prio.stop.set()
    sampler.join(10)
    prio.join(10)
    ctld1, mach1 = proc_cpu(f.run_dir / "slurmctld.pid"), machine_cpu()
    rpcs = sdiag_rpcs()
    rows = array_ids(jid)
    ends = [ln.split("|")[1] for ln in rows if "|" in ln]
    last_end = max((time.mktime(time.strptime(e, "%Y-%m-%dT%H:%M:%S")) for e in ends
                    if e and e[0].isdigit()), default=None)
    states = sorted({ln.split("|")[2] for ln in rows if ln.count("|") >= 2})
    costs = read_costs(f, ids)
    logs_kept, prolog_late, no_job_json = spool_outcomes(f, ids) if gpualert else (0, 0, 0)
    ctld_cpu = [c["cpu"] for c in costs["ctld"].values()]
    waits = [c["wait"] for c in costs["ctld"].values() if c.get("wait") is not None]
    node_cpu = [c["cpu"] for c in costs["node"].values()]
    s = sampler.samples
    return {
        "gpualert": gpualert, "array": jid, "tasks": len(rows), "states": states,
        "first_to_done": (done_at - t0) if done_at else None,
        "last_end_to_summary": (summary_at - last_end) if summary_at and last_end else None,
        "summary_mails": sum(1 for sub, _t in mail.subjects.values()
                             if re.search(rf"\b{jid}\b", sub)),
        "ctld_epilog_cpu": sum(ctld_cpu) + sum(float(m.group(4)) for m in workers)
        if ctld_cpu else None, "ctld_epilogs": len(ctld_cpu),
        "workers": len(workers), "jobs_worked": sum(int(m.group(2)) for m in workers),
        "worker_cut": sum(int(m.group(3)) for m in workers),
        "node_epilog_cpu": sum(node_cpu) if node_cpu else None, "node_epilogs": len(node_cpu),
        "slurmctld_cpu": ctld1 - ctld0, "machine_cpu": mach1 - mach0,
        "wall": settled - t0,
        "squeue_max": max(s) if s else None,
        "squeue_p50": statistics.median(s) if s else None,
        "squeue_n": len(s), "squeue_failed": sampler.failed, "hooks_gave_up": gave_up,
        "squeue_worst": sampler.worst(t0),
        "squeue_prio_max": max(prio.samples) if prio.samples else None,
        "squeue_prio_p50": statistics.median(prio.samples) if prio.samples else None,
        "squeue_prio_worst": prio.worst(t0),
        "last_end_after_submit": (last_end - t0) if last_end else None,
        "drained": resume_drained(f),
        "logs_kept": logs_kept, "prolog_late": prolog_late, "no_job_json": no_job_json,
        "state_counts": dict(sorted(collections.Counter(
            ln.split("|")[2] for ln in rows if ln.count("|") >= 2).items())),
        "gate_wait_max": max(waits) if waits else None,
        "gate_wait_p50": statistics.median(waits) if waits else None,
        "rpcs": rpcs,
        # the bench's own squeue calls (each one REQUEST_JOB_INFO + REQUEST_PARTITION_INFO):
        # the two samplers, once a second for the whole run, and the loop above
        "bench_squeues": polls + len(sampler.samples) + len(prio.samples),
    }


def spool_outcomes(f: cl.ClusterFacts, ids: set[str]) -> tuple[int, int, int]:
    """(tasks whose log holds their traceback, tasks whose Prolog ran more than 1 s after its
    shim, tasks with no job.json) from the spool: what a report of each task can show."""
    kept = late = missing = 0
    for jid in ids:
        d = f.spool / jid
        with contextlib.suppress(OSError):
            kept += "FileNotFoundError" in (d / "tasks" / "batch.0.log").read_text(
                errors="replace")
        try:
            rec = json.loads((d / "job.json").read_text())
            late += (rec.get("prolog_delay_s") or 0) > 1.0
        except (OSError, ValueError):
            missing += 1
    return kept, late, missing


def print_arrays(rows: list[dict[str, Any]]) -> None:
    print("\narray burst (times in s, CPU in CPU-seconds):")
    for r in rows:
        print(f"  {'with' if r['gpualert'] else 'without'} --gpualert: array {r['array']}, "
              f"{r['tasks']} tasks {','.join(r['states'])}; submit -> all ended "
              f"{fmt(r['first_to_done'], '.1f')}; last end -> summary mail "
              f"{fmt(r['last_end_to_summary'], '.1f')} ({r['summary_mails']} mail(s)); "
              f"wall until the hooks settled {r['wall']:.1f}")
        print(f"    job epilogs' CPU {fmt(r['ctld_epilog_cpu'], '.1f')} over "
              f"{r['ctld_epilogs']} cost lines and {r['workers']} queue worker(s) "
              f"({r['jobs_worked']} worked through, {r['worker_cut']} cut short); node "
              f"Epilogs' CPU "
              f"{fmt(r['node_epilog_cpu'], '.1f')} over {r['node_epilogs']}; slurmctld's own "
              f"CPU {r['slurmctld_cpu']:.1f}; the machine's CPU {r['machine_cpu']:.1f}")
        print(f"    squeue latency over {r['squeue_n']} samples: max "
              f"{fmt(r['squeue_max'], '.3f')}, p50 {fmt(r['squeue_p50'], '.3f')}; "
              f"{r['squeue_failed']} failed (timed out); hooks that gave up at their bound: "
              f"{r['hooks_gave_up']}; job epilogs' wait for a slot: max "
              f"{fmt(r['gate_wait_max'], '.1f')}, p50 {fmt(r['gate_wait_p50'], '.1f')}")
        print(f"    squeue's worst: {r['squeue_worst']}; with the client at nice -10: max "
              f"{fmt(r['squeue_prio_max'], '.3f')}, p50 {fmt(r['squeue_prio_p50'], '.3f')} "
              f"({r['squeue_prio_worst']}); the last task ended at "
              f"+{fmt(r['last_end_after_submit'], '.0f')} s")
        print(f"    task states {r['state_counts']}" + (
            f"; {r['logs_kept']} of {r['tasks']} tasks' logs kept in the spool (their "
            f"traceback there); {r['prolog_late']} Prologs ran > 1 s after their shim; "
            f"{r['no_job_json']} tasks without job.json" if r["gpualert"] else ""))
        if r["drained"]:
            print(f"    Slurm drained {', '.join(r['drained'])} during the burst (resumed)")
        if r["rpcs"]:
            top = sorted(r["rpcs"].items(), key=lambda kv: -kv[1][0])[:6]
            print(f"    slurmctld's RPCs (sdiag, this burst and the samplers'): "
                  f"{sum(c for c, _t in r['rpcs'].values())}; "
                  + ", ".join(f"{k} {c} ({t} us)" for k, (c, t) in top))
    on = next((r for r in rows if r["gpualert"]), None)
    off = next((r for r in rows if not r["gpualert"]), None)
    if on and off and on["squeue_max"] and off["squeue_max"]:
        print(f"  squeue max latency with/without gpualert: "
              f"x{on['squeue_max'] / off['squeue_max']:.2f} "
              f"(p50 x{on['squeue_p50'] / off['squeue_p50']:.2f}); target <= 2x")
    if on and off and on["rpcs"] and off["rpcs"]:
        extra = {k: on["rpcs"][k][0] - off["rpcs"].get(k, (0, 0))[0] for k in on["rpcs"]}
        # the run with gpualert lasts longer, and so do the bench's own squeue samples
        more = on["bench_squeues"] - off["bench_squeues"]
        for k in ("REQUEST_JOB_INFO", "REQUEST_PARTITION_INFO"):
            extra[k] = extra.get(k, 0) - more
        extra = {k: v for k, v in extra.items() if v > 0}
        print(f"  slurmctld RPCs gpualert added (less the bench's own {more} more squeue "
              f"samples): {sum(extra.values())} ({sum(extra.values()) / max(1, on['tasks']):.2f}"
              f" a task): " + ", ".join(f"{k} +{v}" for k, v in sorted(
                  extra.items(), key=lambda kv: -kv[1])[:7]))
    if on and off and on["squeue_prio_max"] and off["squeue_prio_max"]:
        print(f"  the same with the squeue client at nice -10 (slurmctld's answer, the client "
              f"not starved): x{on['squeue_prio_max'] / off['squeue_prio_max']:.2f} "
              f"(p50 x{on['squeue_prio_p50'] / off['squeue_prio_p50']:.2f})")


def pin_hosts(f: cl.ClusterFacts) -> str:
    """--pin: the controller's host and the nodes' on one CPU each, as on a real cluster where
    slurmctld's host runs no job: slurmctld (with slurmscriptd, which runs EpilogSlurmctld),
    slurmdbd and MariaDB on CPU 0; the slurmd (their slurmstepd, jobs, Prologs and Epilogs
    inherit it) on CPU 1. The controller's job epilogs get a queue of their own (so their
    worker is the controller's, on its CPU); the node hooks keep theirs. Both runs of the
    array, with and without --gpualert, are pinned alike, and so is the bench with its squeue
    clients (on CPU 0, as a client on the controller's host)."""
    def pin(pidfile: Path, cpu: int) -> list[int]:
        try:
            pid = int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                              text=True).stdout.split()
        pids = [pid, *map(int, kids)]
        for p in pids:
            subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), str(p)],
                           capture_output=True, check=False)
        return pids
    ctld = [p for name in ("slurmctld", "slurmdbd", "mariadb")
            for p in pin(f.run_dir / f"{name}.pid", 0)]
    nodes = [p for pf in sorted(f.run_dir.glob("slurmd-*.pid")) for p in pin(pf, 1)]
    hook = f.root / "etc" / "hooks" / "gpualert-epilog-slurmctld"
    text = hook.read_text()
    qdir = f"/run/gpualert/epilog-queue-{SCALE_ENV['GPUALERT_CLUSTER_NAME']}-ctld"
    if "GPUALERT_QUEUE_DIR" not in text:
        first, rest = text.split("\n", 1)
        hook.write_text(f"{first}\nexport GPUALERT_QUEUE_DIR={qdir}\n{rest}")
    return (f"pinned: {len(ctld)} controller processes on CPU 0, {len(nodes)} slurmd on CPU 1; "
            f"the job epilogs' queue {qdir}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="3,12,48", help="node counts (comma-separated)")
    ap.add_argument("--tpn", type=int, default=4, help="tasks per node")
    ap.add_argument("--modes", default="exc,kill,lost", help="exc (exception + srun -K), "
                    "kill (SIGKILL + collective-timeout cascade), lost (the root rank's node "
                    "taken down mid-job: NODE_FAIL)")
    ap.add_argument("--array", type=int, default=500, help="array tasks (0: no array part)")
    ap.add_argument("--array-modes", default="off,on", help="the array without (off) and "
                    "with (on) --gpualert")
    ap.add_argument("--skip-array", action="store_true")
    ap.add_argument("--skip-jobs", action="store_true")
    ap.add_argument("--keep", action="store_true", help="leave the scale cluster up")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--pin", action="store_true", help="the controller on CPU 0, the nodes "
                    "on CPU 1 (a controller host that runs no job; see pin_hosts)")
    ap.add_argument("--slurmd-timeout", type=int, default=10, help="the cluster's "
                    "SlurmdTimeout (10, as the test cluster's: the lost-node runs wait for it; "
                    "Slurm's default is 300, which a --pin array run needs: 48 nodes' work on "
                    "one core holds their slurmd past 10 s)")
    args, _ = ap.parse_known_args()
    sizes = [int(x) for x in args.nodes.split(",") if x]
    need = max(sizes + [3])
    env = dict(SCALE_ENV, GPUALERT_CLUSTER_NODES=str(max(need, 3)),
               GPUALERT_CLUSTER_SLURMD_TIMEOUT=str(args.slurmd_timeout))
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    print(f"scale bench: seed {seed}; load {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"SlurmdTimeout {args.slurmd_timeout} s")
    with cl.held_lock(SESSION_LOCK, 1800, " by another scale benchmark"):
        t0 = time.monotonic()
        facts = cl.cluster_up(env=env)
        print(f"cluster {env['GPUALERT_CLUSTER_NAME']}: {len(facts.nodes)} nodes up in "
              f"{time.monotonic() - t0:.1f} s; {slurmd_memory(facts)}")
        if args.pin:
            print(f"  {pin_hosts(facts)}", flush=True)
            # the bench and its squeue clients on the controller's CPU, not the nodes' (where
            # 48 nodes' launches left a client, even at nice -10, 8% of a core: it measured
            # its own wait for a CPU, not slurmctld's answer)
            os.sched_setaffinity(0, {0})
        try:
            with cl.using_conf(facts):
                mail = MailWatch(facts.maildir)
                if not args.skip_jobs:
                    rows = []
                    for n in sizes:
                        for mode in args.modes.split(","):
                            r = run_job(facts, mail, n, args.tpn, mode, rng)
                            print(f"  {r['ranks']} ranks {r['mode']}: job {r['job']} rank "
                                  f"{r['root']} on {r['root_node']} -> verdict {r['class']} "
                                  f"rank {r['v_rank']} on {r['v_node']}", flush=True)
                            rows.append(r)
                    print_jobs(rows)
                if not args.skip_array and args.array > 0:
                    arr = []
                    for on in [m == "on" for m in args.array_modes.split(",")]:
                        print(f"  array of {args.array}, {'with' if on else 'without'} "
                              f"--gpualert (load {os.getloadavg()[0]:.2f})...", flush=True)
                        arr.append(run_array(facts, mail, args.array, on))
                        print_arrays(arr[-1:])
                    print_arrays(arr)
        finally:
            if not args.keep:
                cl.cluster_cmd("down", env=env)
    return 0


def slurmd_memory(f: cl.ClusterFacts) -> str:
    rss = []
    for p in f.run_dir.glob("slurmd-*.pid"):
        try:
            pid = int(p.read_text().strip())
            for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
                if ln.startswith("VmRSS:"):
                    rss.append(int(ln.split()[1]) / 1024)
        except (OSError, ValueError):
            pass
    if not rss:
        return "slurmd RSS unknown"
    return (f"{len(rss)} slurmd: RSS {sum(rss):.0f} MiB in all ({statistics.mean(rss):.1f} "
            f"MiB each, most of it shared libraries)")


if __name__ == "__main__":
    sys.exit(main())
