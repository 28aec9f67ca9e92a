#!/usr/bin/env python3
"""The tap's cost on the real cluster, measured against the same job without it, in one run.

1. Throughput: a job writes SIZE of short lines through srun into slurm's output file, with
   and without --gpualert, alternating; prints wall times of the srun, the ratio (target
   <= 1.05) and the copiers' CPU time (GPUALERT_TAP_STATS=1 makes them log their rusage).
2. Start overhead: `srun -n TASKS true` repeated, with vs without; prints the extra time per
   task (target <= 5 ms).
Exits non-zero only on error. Needs the test cluster up (docker/slurm-cluster/cluster up).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from clusterlib import (  # noqa: E402 - after the path set-up
    ClusterFacts,
    cluster_status,
    make_workdir,
    wait_final,
    write_user_file,
)
from spank_jobs import job_dir, require_plugin, submit_held  # noqa: E402

THROUGHPUT = """#!/bin/bash
#SBATCH -N1 -n1 -o out.%j --export=ALL,GPUALERT_TAP_STATS=1
t0=$(date +%s.%N)
srun bash -c 'yes "step 123456 loss=0.123456 lr=3e-4 tokens/s=98765" | head -c {size}'
t1=$(date +%s.%N)
echo "$t0 $t1" > times.$SLURM_JOB_ID
"""

STARTS = """#!/bin/bash
#SBATCH -N3 -n{tasks} -o out.%j
for i in $(seq {reps}); do
  t0=$(date +%s.%N); srun -n{tasks} true; t1=$(date +%s.%N)
  echo "$t0 $t1" >> times.$SLURM_JOB_ID
done
"""

STATS = re.compile(r"stats: bytes_out=(\d+) bytes_err=(\d+) user_s=([\d.]+) sys_s=([\d.]+)")


def run_job(c: ClusterFacts, d: Path, script: Path, tap: bool) -> tuple[int, list[float]]:
    # --no-requeue: a re-run after a node failure would mix its timings into the file.
    jobid = submit_held(c, script, ["--no-requeue", "--gpualert" if tap else "--gpualert=off"])
    st = wait_final(jobid, 1800, c.root)
    if st.state != "COMPLETED":
        raise RuntimeError(f"benchmark job {jobid} ended {st.state} {st.exit_code} "
                           f"(steps: {[(s.step, s.state, str(s.exit_code)) for s in st.steps]})")
    walls = [float(b) - float(a) for a, b in
             (line.split() for line in (d / f"times.{jobid}").read_text().splitlines())]
    return jobid, walls


def copier_cpu(c: ClusterFacts, jobid: int) -> tuple[int, float]:
    """(bytes copied, CPU seconds) summed over the job's copiers, from tap.log."""
    text = (job_dir(c, jobid) / "tap.log").read_text()
    total_bytes, cpu = 0, 0.0
    for m in STATS.finditer(text):
        total_bytes += int(m[1]) + int(m[2])
        cpu += float(m[3]) + float(m[4])
    return total_bytes, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="output per job (1024)")
    ap.add_argument("--rounds", type=int, default=5, help="with/without pairs (5)")
    ap.add_argument("--tasks", type=int, default=24, help="tasks per start-up step (24)")
    ap.add_argument("--reps", type=int, default=10, help="start-up steps per job (10)")
    a = ap.parse_args()
    try:
        c = require_plugin(cluster_status())
    except (RuntimeError, OSError) as e:
        print(f"bench_tap: error: {e}", file=sys.stderr)
        return 1
    d = make_workdir(c, "bench-tap")
    size = a.size_mib * 1024 * 1024
    script = write_user_file(d / "throughput.sh", THROUGHPUT.format(size=size))
    walls: dict[bool, list[float]] = {True: [], False: []}
    ratios: list[float] = []
    print(f"tap throughput: {a.size_mib} MiB of short lines through srun, {a.rounds} rounds")
    for r in range(a.rounds):
        for tap in ((True, False) if r % 2 == 0 else (False, True)):
            jobid, (wall,) = run_job(c, d, script, tap)
            walls[tap].append(wall)
            line = f"  round {r + 1} {'with   ' if tap else 'without'} tap: {wall:7.2f} s"
            if tap:
                nbytes, cpu = copier_cpu(c, jobid)
                logged = sum(p.stat().st_size for p in (job_dir(c, jobid) / "tasks").glob("*.log"))
                line += (f"  copiers: {nbytes / 2**20:.0f} MiB copied, CPU {cpu:.2f} s "
                         f"({cpu / wall * 100:.1f} % of wall), spool {logged / 2**20:.0f} MiB")
            print(line, flush=True)
            (d / f"out.{jobid}").unlink()
        # Each round's pair ran back to back: its ratio is the least disturbed by a load
        # change on the machine between rounds.
        ratios.append(walls[True][-1] / walls[False][-1])
    with_s, without_s = statistics.median(walls[True]), statistics.median(walls[False])
    print(f"  median wall: with {with_s:.2f} s, without {without_s:.2f} s, "
          f"ratio {with_s / without_s:.3f} (target <= 1.05), "
          f"{size / 2**20 / without_s:.0f} MiB/s baseline")
    print(f"  per-round ratios {', '.join(f'{r:.3f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.3f} (target <= 1.05)")

    script = write_user_file(d / "starts.sh", STARTS.format(tasks=a.tasks, reps=a.reps))
    print(f"tap start overhead: srun -n{a.tasks} true on 3 nodes, {a.reps} steps per job")
    starts: dict[bool, list[float]] = {}
    for tap in (False, True):
        starts[tap] = run_job(c, d, script, tap)[1]
        print(f"  {'with   ' if tap else 'without'} tap: median step "
              f"{statistics.median(starts[tap]) * 1000:.0f} ms", flush=True)
    extra = statistics.median(starts[True]) - statistics.median(starts[False])
    print(f"  extra per step {extra * 1000:.1f} ms, per task {extra / a.tasks * 1000:.2f} ms "
          f"(target <= 5 ms)")
    shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
