"""hooks/gate.py: at most SLOTS job epilog workers at work at once, the others waiting without
CPU; one that waits past its bound goes on ungated; the work runs in a fresh process (its own
time bound counts from there). Real processes contending for real flocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

WORKER = """
import json, os, sys, time
from gpualert_slurm.hooks import gate
t_start = time.monotonic()
waited = gate.enter(float(sys.argv[2]))
t0 = time.time()
busy_end = time.process_time() + 0.3
while time.process_time() < busy_end:
    pass
json.dump({"start": t0, "end": time.time(), "waited": waited, "pid": os.getpid(),
           "nice": os.nice(0)}, open(sys.argv[1], "w"))
"""


def _run(tmp: Path, n: int, slots: int, wait_s: float = 60) -> list[dict]:
    env = dict(os.environ, GPUALERT_GATE_DIR=str(tmp / "gate"), GPUALERT_GATE_SLOTS=str(slots))
    outs = [tmp / f"w{i}.json" for i in range(n)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(o), str(wait_s)], env=env)
             for o in outs]
    for p in procs:
        p.wait(60)  # each exits once its child holds a slot (or gave up waiting)
    deadline = time.time() + 60
    while not all(o.exists() and o.stat().st_size for o in outs) and time.time() < deadline:
        time.sleep(0.1)
    return [json.loads(o.read_text()) for o in outs]


def test_one_slot_runs_the_workers_one_at_a_time(tmp_path: Path) -> None:
    recs = sorted(_run(tmp_path, 3, 1), key=lambda r: r["start"])
    for a, b in zip(recs, recs[1:], strict=False):
        assert b["start"] >= a["end"] - 0.01, recs
    assert max(r["waited"] for r in recs) > 0.2
    assert all(r["nice"] >= 10 for r in recs)
    assert (tmp_path / "gate").stat().st_mode & 0o777 == 0o700


def test_two_slots_let_two_work_together(tmp_path: Path) -> None:
    recs = sorted(_run(tmp_path, 2, 2), key=lambda r: r["start"])
    assert recs[1]["start"] < recs[0]["end"], recs
    assert all(r["waited"] < 0.5 for r in recs)


def test_a_worker_past_its_wait_goes_on(tmp_path: Path) -> None:
    recs = sorted(_run(tmp_path, 2, 1, wait_s=0.05), key=lambda r: r["start"])
    assert recs[1]["start"] < recs[0]["end"], recs  # the second did not wait for the first
