#!/usr/bin/env python3
"""The tap's cost on the real cluster, measured against the same job without it, in one run.

1. Throughput: a job writes SIZE of short lines through srun into slurm's output file, with
   and without --gpualert, alternating; prints wall times of the srun, the ratio (target
   <= 1.05) and the copiers' CPU time (GPUALERT_TAP_STATS=1 makes them log their rusage).
2. Start overhead: `srun -n TASKS true` repeated, with vs without; prints the extra time per
   task (target <= 1 ms, issue 20). --compare-plugin OLD.so times a second build in the same
   run: the installed plugin file is swapped for OLD.so between jobs (plugstack.conf is read at
   every step launch) and put back at the end, the builds alternating round by round.
3. --harness: the plugin's own cost per task without Slurm: bench/tap_harness.c plays
   slurmstepd to spank/gpualert.so (and --compare-plugin's build) and to no plugin at all,
   alternating; prints the step's wall time, task_init's and task_exit's (as root).
Exits non-zero only on error. Needs the test cluster up (docker/slurm-cluster/cluster up), but
for --harness.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
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

# The timed steps begin once the job's three Prologs are done (their per-node records are in
# the job dir): a job no longer waits for its Prologs, and their CPU (per job, measured by
# bench_scale) would otherwise be counted as the tap's on the first steps. Bounded: a job
# without --gpualert has none to wait for.
STARTS = """#!/bin/bash
#SBATCH -N3 -n{tasks} -o out.%j
N={spool}/$SLURM_JOB_ID/nodes
for w in $(seq 100); do
  [ {wait_prologs} = 0 ] || [ "$(ls "$N" 2>/dev/null | grep -c prolog)" -ge 3 ] && break
  sleep 0.1
done
srun -n{tasks} true
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


@contextlib.contextmanager
def swappable(installed: Path) -> Iterator[dict[str, Path]]:
    """Lets the start benchmark put another build at the installed plugin's path; the installed
    file is kept aside and renamed back (running slurmstepds keep what they mapped)."""
    keep = installed.with_name(".gpualert.so.bench-keep")
    shutil.copy2(installed, keep)
    builds = {"installed": keep}
    try:
        yield builds
    finally:
        os.replace(keep, installed)


def put_build(src: Path, installed: Path) -> None:
    tmp = installed.with_name(".gpualert.so.bench-new")
    shutil.copy2(src, tmp)
    os.replace(tmp, installed)


def start_overhead(c: ClusterFacts, d: Path, a: argparse.Namespace) -> None:
    scripts = {tap: write_user_file(d / f"starts-{int(tap)}.sh", STARTS.format(
        tasks=a.tasks, reps=a.reps, spool=c.spool, wait_prologs=int(tap))) for tap in (0, 1)}
    print(f"tap start overhead: srun -n{a.tasks} true on 3 nodes, {a.reps} steps per job, "
          f"{a.start_rounds} rounds", flush=True)
    installed = Path(c.plugin or "")
    with contextlib.ExitStack() as stack:
        builds: dict[str, Path] = {}
        if a.compare_plugin:
            builds = stack.enter_context(swappable(installed))
            builds["old"] = Path(a.compare_plugin)
        names = ["without", *(builds or {"with": installed})]
        steps: dict[str, list[float]] = {n: [] for n in names}
        for r in range(a.start_rounds):
            # Alternate the order round by round: a load change hits every build alike.
            for name in names if r % 2 == 0 else names[::-1]:
                if name in builds:
                    put_build(builds[name], installed)
                walls = run_job(c, d, scripts[name != "without"], name != "without")[1]
                steps[name] += walls
                print(f"  round {r + 1} {name:9s}: median step "
                      f"{statistics.median(walls) * 1000:.0f} ms", flush=True)
    base = statistics.median(steps["without"])
    print(f"  baseline (without tap): median step {base * 1000:.0f} ms")
    for name in names[1:]:
        extra = statistics.median(steps[name]) - base
        print(f"  {name:9s}: median step {statistics.median(steps[name]) * 1000:.0f} ms, extra per "
              f"step {extra * 1000:.1f} ms, per task {extra / a.tasks * 1000:.2f} ms "
              f"(target <= 1 ms)")


def harness(a: argparse.Namespace) -> None:
    """The plugin's own cost per task, without Slurm (bench/tap_harness.c)."""
    here = Path(__file__).resolve().parent
    builds = {"built": here.parent / "spank" / "gpualert.so"}
    if a.compare_plugin:
        builds["old"] = Path(a.compare_plugin)
    with tempfile.TemporaryDirectory(prefix="tap-harness-") as tmp:
        t = Path(tmp)
        exe, spool, local = t / "tap_harness", t / "spool", t / "local"
        subprocess.run(["gcc", "-O2", "-rdynamic", "-o", str(exe), str(here / "tap_harness.c"),
                        "-ldl"], check=True)
        (spool / "4242").mkdir(parents=True)
        local.mkdir(mode=0o700)
        names = ["none", *builds]
        res: dict[str, list[tuple[float, float, float]]] = {n: [] for n in names}
        print(f"tap harness (no Slurm): {a.tasks} tasks a step, {a.reps} steps, "
              f"{a.start_rounds} rounds", flush=True)
        for r in range(a.start_rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                out = subprocess.run([str(exe), str(builds.get(name, "none")), str(a.tasks),
                                      str(a.reps + 1), str(spool), str(local)],
                                     capture_output=True, text=True, check=True).stdout
                # The first step of each run pays for loading the plugin: left out.
                res[name] += [(float(m[1]), float(m[2]), float(m[3])) for m in re.finditer(
                    r"step ([\d.]+) task_init ([\d.]+) task_exit ([\d.]+)", out)][1:]
    base = statistics.median(x[0] for x in res["none"])
    print(f"  baseline (no plugin): median step {base:.2f} ms")
    for name in builds:
        step = statistics.median(x[0] for x in res[name])
        print(f"  {name:5s}: median step {step:.2f} ms, extra per task "
              f"{(step - base) / a.tasks:.2f} ms; task_init median "
              f"{statistics.median(x[1] for x in res[name]):.2f} ms (the tasks wait at once), "
              f"task_exit median {statistics.median(x[2] for x in res[name]) / a.tasks:.2f} "
              f"ms a task (one after another)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="output per job (1024)")
    ap.add_argument("--rounds", type=int, default=5, help="with/without pairs (5)")
    ap.add_argument("--tasks", type=int, default=24, help="tasks per start-up step (24)")
    ap.add_argument("--reps", type=int, default=10, help="start-up steps per job (10)")
    ap.add_argument("--start-rounds", type=int, default=1,
                    help="start-up jobs per build, alternating (1)")
    ap.add_argument("--starts-only", action="store_true", help="skip the throughput part")
    ap.add_argument("--compare-plugin", metavar="OLD_SO",
                    help="time this build's start overhead too, in the same run (see above)")
    ap.add_argument("--harness", action="store_true",
                    help="the plugin's own per-task cost, without Slurm (see above)")
    a = ap.parse_args()
    if a.harness:
        harness(a)
        return 0
    try:
        c = require_plugin(cluster_status())
    except (RuntimeError, OSError) as e:
        print(f"bench_tap: error: {e}", file=sys.stderr)
        return 1
    d = make_workdir(c, "bench-tap")
    if not a.starts_only:
        throughput(c, d, a)
    start_overhead(c, d, a)
    shutil.rmtree(d, ignore_errors=True)
    return 0


def throughput(c: ClusterFacts, d: Path, a: argparse.Namespace) -> None:
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


if __name__ == "__main__":
    sys.exit(main())
