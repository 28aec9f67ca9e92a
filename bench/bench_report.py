"""Job end -> report in the SMTP sink, on the real test cluster (it must be up: this starts
nothing), and a burst of failing jobs that all end together.

    bench_report.py [--jobs N] [--wave W] [--burst M]     (defaults: 50 jobs, waves of 5, 100)

Latency: a failing one-node job's end (the tap's exit record of its batch step) to the mail's
arrival (the sink's file), p50/p95 over N jobs run W at a time; the target is p50 <= 5 s. The
baseline, measured on the same jobs in the same run, is how long Slurm itself takes to show
the job as ended in accounting (sacct polled every 0.25 s): the ratio says what the report
costs beyond what a user polling sacct would wait anyway. Burst: M failing jobs submitted at
once: how many were reported (mail, or the outbox), none lost, time to the last mail.
Exits non-zero only when something fails (a job, or a report missing at the deadline).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))
import clusterlib as cl  # noqa: E402

from gpualert_slurm.core import slurm  # noqa: E402

SCRIPT = """#!/bin/bash
#SBATCH --gpualert=mail=bench@localhost
echo 'step 1 loss 2.3'
echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2
exit 1
"""
POLL_S = 0.25


def p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20)[-1] if len(xs) >= 2 else xs[0]


class Mailbox:
    """Which job's report arrived when (file mtime), scanning only new files."""

    def __init__(self, maildir: Path) -> None:
        self.maildir = maildir
        self.seen: set[str] = {p.name for p in cl.mail_files(maildir)}
        self.arrived: dict[int, float] = {}

    def scan(self) -> None:
        for p in cl.mail_files(self.maildir):
            if p.name in self.seen:
                continue
            self.seen.add(p.name)
            m = re.search(rb"^X-Gpualert-Job: (\d+)\r?$", p.read_bytes(), re.M)
            if m:
                self.arrived.setdefault(int(m.group(1)), p.stat().st_mtime)


def end_time(f: cl.ClusterFacts, job: int) -> float | None:
    try:
        rec = json.loads((f.spool / str(job) / "tasks" / "batch.0.exit").read_text())
        return float(rec["end_time"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def sacct_final(job: int) -> bool:
    try:
        return slurm.accounting(job, timeout=10).final
    except slurm.SlurmError:
        return False


def latency(f: cl.ClusterFacts, work: Path, jobs: int, wave: int) -> bool:
    box = Mailbox(f.maildir)
    script = cl.write_user_file(work / "fail.sh", SCRIPT)
    mail_lat: list[float] = []
    acct_lat: list[float] = []
    ok = True
    done = 0
    while done < jobs:
        n = min(wave, jobs - done)
        ids = [cl.sbatch(script, "-J", "bench-report") for _ in range(n)]
        final_at: dict[int, float] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            now = time.time()
            for j in ids:
                if j not in final_at and end_time(f, j) is not None and sacct_final(j):
                    final_at[j] = now
            box.scan()
            if all(j in box.arrived and j in final_at for j in ids):
                break
            time.sleep(POLL_S)
        for j in ids:
            end = end_time(f, j)
            if end is None or j not in box.arrived or j not in final_at:
                print(f"  job {j}: end {end}, mail {box.arrived.get(j)}, sacct final "
                      f"{final_at.get(j)}: MISSING within 120 s", file=sys.stderr)
                ok = False
                continue
            mail_lat.append(box.arrived[j] - end)
            acct_lat.append(final_at[j] - end)
        done += n
    if not mail_lat:
        return False
    mp, ap = statistics.median(mail_lat), statistics.median(acct_lat)
    print(f"job end -> report in the SMTP sink, {len(mail_lat)} failing jobs, {wave} at a time:")
    print(f"  report mail              p50 {mp:6.2f} s   p95 {p95(mail_lat):6.2f} s   "
          f"max {max(mail_lat):6.2f} s   (target p50 <= 5 s: {'met' if mp <= 5 else 'MISSED'})")
    print(f"  baseline: sacct final    p50 {ap:6.2f} s   p95 {p95(acct_lat):6.2f} s   "
          f"(polled every {POLL_S} s)")
    print(f"  ratio report/baseline    {mp / ap:.2f}x (p50)" if ap > 0 else "  ratio: n/a")
    return ok


def burst(f: cl.ClusterFacts, work: Path, count: int) -> bool:
    box = Mailbox(f.maildir)
    script = cl.write_user_file(work / "burst.sh", SCRIPT)
    t0 = time.time()
    ids = [cl.sbatch(script, "-J", "bench-burst") for _ in range(count)]
    submitted = time.time() - t0
    deadline = time.monotonic() + max(300, count * 3)
    while time.monotonic() < deadline:
        box.scan()
        if all(j in box.arrived for j in ids):
            break
        time.sleep(0.5)
    got = [j for j in ids if j in box.arrived]
    missing = [j for j in ids if j not in box.arrived]
    queued = []
    for j in missing:  # not in the sink: then it must wait in the outbox (nothing lost)
        v = f.spool / str(j) / "verdict.json"
        if v.exists() and json.loads(v.read_text()).get("report", {}).get("outbox"):
            queued.append(j)
    ends = [e for e in (end_time(f, j) for j in ids) if e is not None]
    last_mail = max(box.arrived[j] for j in got) if got else float("nan")
    print(f"burst of {count} failing jobs submitted together (sbatch took {submitted:.1f} s):")
    print(f"  reported by mail {len(got)}/{count}, waiting in the outbox {len(queued)}, "
          f"lost {count - len(got) - len(queued)}")
    if got and ends:
        print(f"  first submit -> last mail {last_mail - t0:6.1f} s; last job end -> last mail "
              f"{last_mail - max(ends):6.1f} s")
        lat = [box.arrived[j] - e for j in got if (e := end_time(f, j)) is not None]
        print(f"  per job end -> mail      p50 {statistics.median(lat):6.2f} s   "
              f"p95 {p95(lat):6.2f} s")
    return len(got) + len(queued) == count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--wave", type=int, default=5)
    ap.add_argument("--burst", type=int, default=100)
    a, _ = ap.parse_known_args()
    try:
        f = cl.cluster_status()
    except cl.ClusterError as e:
        print(f"bench_report: {e}", file=sys.stderr)
        return 1
    work = cl.make_workdir(f, "bench-report")
    ok = latency(f, work, a.jobs, a.wave) if a.jobs > 0 else True
    if a.burst > 0:
        ok = burst(f, work, a.burst) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
