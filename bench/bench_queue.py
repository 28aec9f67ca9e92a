"""The job epilogs' queue under one user's flood (issue 28): how long another user's job waits
for its job epilog with N hostile jobs of one user queued before it, against the same job
alone (the baseline, measured in the same run).

Real parts: the shim (epilog.d/gpualert-epilog-slurmctld, run by /bin/sh as slurmctld runs it),
the real queue worker (hooks/queue.py) with its real flock, fork per job and slots. The per-job work
is a stand-in, as in tests/test_hook_queue.py: a hostile job's job epilog sleeps its whole node
wait (--hostile-wait, the 22.5 s a job whose nodes/ was a file cost before the fix; now such a
job fails its wait at once, so this is the worst a job epilog can hold a slot), the other
user's burns --work CPU-seconds (a job epilog's classify and report, measured ~0.1-0.3 s).
The bench stops the worker once the other user's job is done: the flood is not worked through.

    python bench/bench_queue.py [--hostile 1000] [--hostile-wait 22.5] [--slots 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHIM = REPO / "epilog.d" / "gpualert-epilog-slurmctld"

FAKE_BIN = """#!{py}
import json, os, sys, time
sys.path.insert(0, {repo!r})
from gpualert_slurm.hooks import queue
out = os.environ["B_OUT"]

def work(env, waited):
    t0 = time.time()
    if env.get("SLURM_JOB_NAME") == "hostile":
        time.sleep(float(os.environ["B_HOSTILE_WAIT"]))
    else:
        end = time.process_time() + float(os.environ["B_WORK"])
        while time.process_time() < end:
            pass
        with open(os.path.join(out, env["SLURM_JOB_ID"]), "w") as f:
            f.write(json.dumps({{"start": t0, "end": time.time(), "waited": waited}}))

queue.run_worker(work=work, idle_s=0.5, bound_s=3600)
"""


def _queue_one(env: dict[str, str], job: int, name: str, uid: int) -> None:
    p = subprocess.Popen(["/bin/sh", str(SHIM)], start_new_session=True,
                         env=dict(env, SLURM_JOB_ID=str(job), SLURM_JOB_NAME=name,
                                  SLURM_JOB_UID=str(uid)))
    p.wait(60)


def measure(tmp: Path, hostile: int, args: argparse.Namespace) -> float:
    """Seconds from the other user's job's queueing to its job epilog's end."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    fake = tmp / "gpualert"
    fake.write_text(FAKE_BIN.format(py=sys.executable, repo=str(REPO)))
    fake.chmod(0o755)
    out = tmp / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SPANK_GPUALERT"}
    env.update(GPUALERT_BIN=str(fake), GPUALERT_QUEUE_DIR=str(tmp / "q"), B_OUT=str(out),
               GPUALERT_GATE_SLOTS=str(args.slots), B_HOSTILE_WAIT=str(args.hostile_wait),
               B_WORK=str(args.work))
    for i in range(hostile):
        _queue_one(env, 100000 + i, "hostile", 2001)
    t0 = time.time()
    _queue_one(env, 900000, "train", 2002)
    done = out / "900000"
    deadline = time.time() + args.timeout
    try:
        while not done.exists() and time.time() < deadline:
            time.sleep(0.02)
        if not done.exists():
            return float("inf")
        return json.loads(done.read_text())["end"] - t0
    finally:  # the worker and its children: their command line names the stand-in
        subprocess.run(["pkill", "-KILL", "-f", str(fake)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hostile", type=int, default=1000)
    p.add_argument("--hostile-wait", type=float, default=22.5)
    p.add_argument("--work", type=float, default=0.2)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0)
    args, _ = p.parse_known_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpualert-bench-queue-"))
    alone = sorted(measure(tmp, 0, args) for _ in range(args.repeat))[args.repeat // 2]
    flood = sorted(measure(tmp, args.hostile, args) for _ in range(args.repeat))
    mid = flood[args.repeat // 2]
    fifo = args.hostile * args.hostile_wait / args.slots
    print(f"queue fairness: another user's job epilog, {args.slots} slots, "
          f"{args.hostile} hostile jobs of one user queued first, each holding its slot "
          f"{args.hostile_wait:g} s")
    print(f"  alone: {alone:.2f} s; behind the flood: {mid:.2f} s (median of {args.repeat}; "
          f"all {', '.join(f'{x:.2f}' for x in flood)}); ratio x{mid / alone:.2f} "
          f"(target <= x2)")
    print(f"  a FIFO queue would have made it wait ~{fifo:.0f} s")
    return 0 if mid <= 2 * alone + 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
