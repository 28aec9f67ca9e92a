"""Recovery latency over a fault-injection campaign on the recovery test cluster (its own
native cluster, tests/recoverylib.py: it drains nodes and requeues jobs, never on the shared
cluster; brought up here, used by this process alone (a lock shared with the tests), and
stopped at the end).

    bench_recovery.py [--jobs N] [--wave W] [--node-loss K]    (defaults: 30 jobs, 5, 3)

Faults, in turn: an NCCL error (rule: requeue), an Xid GPU fault, a Python exception (rule:
record only), and K node losses (a node's slurmd killed mid-job: drain and requeue excluding
it). The Xid faults are the driver's lines root writes into the kernel log while the job runs
(recoverylib.write_kmsg; a line the job prints drains nothing, docs/SECURITY.md), one case per
resolution bucket of the GPU fault catalogue in turn: IGNORE (Xid 92: nothing), RESTART_APP
(94: requeue only), RESET_GPU (48: drain), RESTART_BM (79: drain), CONTACT_SUPPORT (54: drain).
Every "node" shares one kernel, so each Xid job runs alone. Per job:
- detection latency: the failure (the tap's exit record of the batch step; for a node loss,
  the kill) -> the decision line in the audit log;
- action latency: the failure -> Slurm's state changed (restart count up, node drained), seen
  by polling squeue/sinfo every 0.25 s.
p50/p95 of each (target p50 <= 10 s). Baseline, same jobs, same run: the failure -> Slurm
itself showing the job ended or requeued (what a user polling squeue would see anyway); the
ratio says what deciding costs beyond that. Then the hang watcher's CPU per pass over running
jobs (target: at most 1 % of a core). Exits non-zero only when something fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))
import clusterlib as cl  # noqa: E402
import recoverylib as rl  # noqa: E402

from gpualert_slurm.core import slurm  # noqa: E402

NCCL = ("n1:123:456 [0] NCCL WARN NET/IB : Got completion from peer with error 12\n"
        "RuntimeError: NCCL communicator was aborted on rank 0. ncclRemoteError: network")
BODIES = {
    "nccl": f"cat <<'EOF'\n{NCCL}\nEOF\nexit 1",
    # gated: the kernel line is written while it runs, then it exits 1
    "xid": "while [ ! -e go ]; do sleep 0.2; done\nexit 1",
    "pyexc": "python3 -c 'raise ValueError(\"bad input\")'",
    "nodeloss": "srun -N2 -n2 bash -c 'touch \"running-$SLURM_PROCID\"; exec sleep 300'",
}
POLL_S = 0.25
# one Xid per resolution bucket (data/xid-catalogue.yaml), the cause hardware (gpu_hardware)
XID_CASES = (("IGNORE", 92), ("RESTART_APP", 94), ("RESET_GPU", 48), ("RESTART_BM", 79),
             ("CONTACT_SUPPORT", 54))
XID_LINE = "NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, name=bench, Ch 00000010"


def pct(xs: list[float], q: float) -> float:
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1]


def exit_time(f: cl.ClusterFacts, job: int) -> float | None:
    p = f.spool / str(job) / "tasks" / "batch.0.exit"
    try:
        return float(json.loads(p.read_text())["end_time"])
    except (OSError, ValueError, KeyError):
        return None


class Job:
    def __init__(self, job: int, kind: str, work: Path) -> None:
        self.job, self.kind, self.work = job, kind, work
        self.failed_at: float | None = None
        self.decided_at: float | None = None
        self.acted_at: float | None = None
        self.slurm_at: float | None = None  # baseline: Slurm shows it ended or requeued
        self.victim: str | None = None
        self.expect_action = kind in ("nccl", "xid", "nodeloss")
        self.drain_node: str | None = None
        self.bucket: str | None = None  # an Xid case: its bucket and code
        self.code: int | None = None
        self.reason = ""  # the drain's Reason= as Slurm shows it

    @property
    def drains(self) -> bool:
        return self.kind == "nodeloss" or (self.kind == "xid" and self.bucket not in (
            "IGNORE", "RESTART_APP"))

    @property
    def done(self) -> bool:
        return (self.decided_at is not None and self.slurm_at is not None
                and (self.acted_at is not None or not self.expect_action))


def submit(f: cl.ClusterFacts, kind: str, i: int) -> Job:
    work = cl.make_workdir(f, f"bench-recovery-{kind}-{i}")
    args = ["-N2", "--exclusive"] if kind == "nodeloss" else []
    if kind == "xid":
        args = ["-w", f.nodes[i % len(f.nodes)]]
    job = cl.submit(rl_script(BODIES[kind]), *args, workdir=work)
    return Job(job, kind, work)


def fault_xid(f: cl.ClusterFacts, j: Job, case: tuple[str, int]) -> None:
    """The driver's Xid line in the kernel log, as root writes it, while the job runs; then
    the job goes on and exits 1."""
    j.bucket, j.code = case
    j.expect_action = case[0] != "IGNORE"
    cl.wait_state(j.job, "RUNNING", 60, f.root)
    rl.write_kmsg(f"<3>{XID_LINE.format(code=j.code)}")
    cl.write_user_file(j.work / "go", "")


def rl_script(body: str) -> str:
    return f"#!/bin/bash\n#SBATCH --gpualert=notify=never\n#SBATCH -o slurm-%j.out\n{body}\n"


def poll(f: cl.ClusterFacts, audit: Path, jobs: list[Job]) -> None:
    now = time.time()
    recs = rl.audit_records(audit)
    decided = {r["id"]: r for r in recs if r.get("event") == "decision"}
    try:
        queue = {j.job_id: j for j in slurm.queue()}
    except slurm.SlurmError:
        queue = {}
    drained: dict[str, str] = {}
    for n in f.nodes:
        try:
            info = slurm.node_info(n)
            if info.drained:
                drained[n] = info.reason
        except slurm.SlurmError:
            pass
    for j in jobs:
        if j.kind != "nodeloss" and j.failed_at is None:
            j.failed_at = exit_time(f, j.job)
        d = decided.get(f"{j.job}.0")
        if d is not None and j.decided_at is None:
            j.decided_at = float(d["time"])
            j.drain_node = next((p["target"] for p in d.get("planned") or []
                                 if p["action"] == "drain_node"), None)
        q = queue.get(j.job)
        if j.slurm_at is None and j.failed_at is not None and (
                q is None or q.final or q.state == "COMPLETING" or q.restarts > 0):
            j.slurm_at = now
        if j.acted_at is None and j.expect_action and d is not None:
            if j.drains:  # gpualert's drain (Slurm requeues a lost job)
                if j.drain_node and drained.get(j.drain_node, "").startswith("gpualert:"):
                    j.acted_at = now
                    j.reason = drained[j.drain_node]
            elif q is not None and q.restarts > 0:
                j.acted_at = now


def cleanup(j: Job) -> None:
    cl.cancel_quietly(j.job)
    for n in {j.drain_node, j.victim} - {None}:
        rl.resume_node(str(n))


def lose_a_node(f: cl.ClusterFacts, j: Job) -> None:
    cl.wait_until(lambda: all((j.work / f"running-{r}").exists() for r in (0, 1)), 120,
                  f"job {j.job} running on two nodes")
    info = slurm.show_job(j.job)
    j.victim = next(n for n in info.nodes if n != info.raw.get("BatchHost"))
    j.failed_at = time.time()
    os.kill(int(f.slurmd_pidfile(j.victim).read_text().strip()), signal.SIGKILL)


def campaign(f: cl.ClusterFacts, audit: Path, n: int, wave: int, node_loss: int) -> list[Job]:
    kinds = ["nodeloss"] * node_loss + [("nccl", "xid", "pyexc")[i % 3]
                                         for i in range(max(0, n - node_loss))]
    # a node loss and an Xid job run alone (one kernel: an Xid line is in the window of every
    # job running then); the others in waves
    alone = [[k] for k in kinds if k in ("nodeloss", "xid")]
    rest = [k for k in kinds if k not in ("nodeloss", "xid")]
    batches = alone + [rest[x:x + wave] for x in range(0, len(rest), wave)]
    out: list[Job] = []
    i = xids = 0
    for batch in batches:
        rl.wait_kernel_log_quiet()  # an earlier Xid line is in no later job's window
        jobs = [submit(f, k, i + x) for x, k in enumerate(batch)]
        i += len(batch)
        for j in jobs:
            if j.kind == "nodeloss":
                lose_a_node(f, j)
            elif j.kind == "xid":
                fault_xid(f, j, XID_CASES[xids % len(XID_CASES)])
                xids += 1
        deadline = time.monotonic() + 180
        while not all(j.done for j in jobs) and time.monotonic() < deadline:
            poll(f, audit, jobs)
            time.sleep(POLL_S)
        for j in jobs:
            cleanup(j)
            if j.victim:
                cl.restore_node(f, j.victim)
        for n in f.nodes:
            rl.resume_node(n)
        out.extend(jobs)
    return out


def watch_cost(f: cl.ClusterFacts, njobs: int = 9, passes: int = 20,
               interval_s: float = 15.0) -> None:
    """CPU of one `gpualert watch` pass over njobs running monitored jobs (its own and its
    squeue's), as a share of one core at the default interval; baseline: `squeue --json`
    alone, which any watcher of running jobs pays."""
    import resource

    from gpualert_slurm.core.config import load_config
    from gpualert_slurm.recovery import watch

    def cpu() -> float:
        a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
            resource.RUSAGE_CHILDREN)
        return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

    work = cl.make_workdir(f, "bench-recovery-watch")
    body = "srun -n2 bash -c 'while :; do echo tick; sleep 1; done'"
    jobs = [cl.submit(f"#!/bin/bash\n#SBATCH --gpualert=notify=never,hang=1h\n{body}\n",
                      "-n2", workdir=work, name=f"w{i}.sh") for i in range(njobs)]
    try:
        for j in jobs:
            cl.wait_state(j, "RUNNING", 60)
        time.sleep(3)  # every rank has written
        cfg = load_config(str(f.gpualert_config))
        c0 = cpu()
        for _ in range(passes):
            alerts = watch.scan(cfg)
            assert not alerts, alerts
        per_pass = (cpu() - c0) / passes
        c0 = cpu()
        for _ in range(passes):
            slurm.queue()
        base = (cpu() - c0) / passes
    finally:
        cl.cancel_quietly(*jobs)
    print(f"  watch pass over {njobs} running jobs: {per_pass * 1000:.1f} ms CPU "
          f"= {per_pass / interval_s * 100:.2f} % of one core on the controller at "
          f"--interval {interval_s:g}; 0 on compute nodes")
    print(f"  baseline squeue --json alone: {base * 1000:.1f} ms CPU; ratio "
          f"{per_pass / max(base, 1e-6):.2f}x")


def report(jobs: list[Job]) -> bool:
    ok = True
    det = [j.decided_at - j.failed_at for j in jobs if j.decided_at and j.failed_at]
    act = [j.acted_at - j.failed_at for j in jobs if j.acted_at and j.failed_at]
    base = [j.slurm_at - j.failed_at for j in jobs if j.slurm_at and j.failed_at]
    missing = [j.job for j in jobs if not j.done]
    kinds = ", ".join(f"{k} {sum(j.kind == k for j in jobs)}" for k in BODIES)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"  jobs {len(jobs)} ({kinds}); load average now {load} on {os.cpu_count()} CPUs "
          "(the epilogs' classification is CPU-bound: latency grows with the load)")
    for name, xs in (("detection (failure -> decision)", det),
                     ("action (failure -> Slurm changed)", act),
                     ("baseline (failure -> Slurm shows it)", base)):
        if xs:
            print(f"  {name:<38} p50 {pct(xs, 50):6.2f} s  p95 {pct(xs, 95):6.2f} s  "
                  f"(n={len(xs)})")
    for kind in BODIES:
        d = [j.decided_at - j.failed_at for j in jobs if j.kind == kind and j.decided_at
             and j.failed_at]
        if d:
            print(f"    {kind:<9} detection p50 {pct(d, 50):6.2f} s")
    for bucket, code in XID_CASES:
        xs = [j for j in jobs if j.kind == "xid" and j.bucket == bucket]
        if not xs:
            continue
        d = [j.decided_at - j.failed_at for j in xs if j.decided_at and j.failed_at]
        a = [j.acted_at - j.failed_at for j in xs if j.acted_at and j.failed_at]
        what = "drain" if xs[0].drains else ("requeue" if xs[0].expect_action else "nothing")
        det = f"{pct(d, 50):6.2f} s" if d else "     -  "
        act = f"{pct(a, 50):6.2f} s" if a else "-"
        print(f"    xid {code:<3} {bucket:<15} n={len(xs)} detection p50 {det}, action "
              f"({what}) p50 {act}" + (f"; Reason={xs[0].reason!r}" if xs[0].reason else ""))
    if det and base:
        print(f"  ratio detection/baseline   {pct(det, 50) / max(pct(base, 50), 1e-3):.2f}x "
              "(p50)")
    if det:
        print(f"  target p50 <= 10 s: detection {'met' if pct(det, 50) <= 10 else 'MISSED'}"
              + (f", action {'met' if pct(act, 50) <= 10 else 'MISSED'}" if act else ""))
    if missing:
        print(f"  FAILED: no decision/action seen for jobs {missing}", file=sys.stderr)
        ok = False
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--wave", type=int, default=5)
    ap.add_argument("--node-loss", type=int, default=3)
    a, _ = ap.parse_known_args()
    try:
        with rl.recovery_cluster_session() as f:
            audit = f.root / "audit" / f"bench-{int(time.time())}.jsonl"
            audit.parent.mkdir(exist_ok=True)
            # action mode; drains allowed in a burst (the bench resumes each node at once)
            rl.write_config(f, audit, mode="action", breaker={"share": 1.0, "window": "1s"},
                            blast_nodes=100000, escalate_after=100)
            for n in f.nodes:
                rl.resume_node(n)
            t0 = time.monotonic()
            jobs = campaign(f, audit, a.jobs, a.wave, min(a.node_loss, a.jobs))
            print(f"  campaign took {time.monotonic() - t0:.0f} s; audit log {audit}")
            ok = report(jobs)
            watch_cost(f)
            return 0 if ok else 1
    except cl.ClusterError as e:
        print(f"bench_recovery: the recovery cluster cannot be used: {e}", file=sys.stderr)
        return 1

if __name__ == "__main__":
    sys.exit(main())
