"""Family `hang`: programs that print progress, then block silently, stopped by a watchdog.

The watchdog (this generator) stops each one some seconds after its last output, as a hang
detector or a time limit would. Labels carry hang_threshold_s (what the detector was asked for)
and silence_s, measured as the end time minus the log's mtime (the tap's heartbeat).
"""

from __future__ import annotations

import signal
from random import Random

from common import Running, case_dir, label, prog, run_parallel, shown, task_entry

PREFIXES = ("hang-",)
THRESHOLD = 5.0


def _case(i: int):
    case_id = f"hang-{i:02d}"

    def job() -> dict:
        r = Random(case_id)
        d = case_dir(case_id)
        cmd = prog("pyfail", "hang", i, case_id)
        run = Running(cmd, d / "run.0.log", cwd="/tmp")
        stop = r.choice([signal.SIGTERM, signal.SIGTERM, signal.SIGKILL])
        rec = run.wait(timeout=r.uniform(9.0, 16.0), kill_signal=stop, kill_after=3.0)
        silence = round(rec["end_time"] - (d / "run.0.log").stat().st_mtime, 3)
        return label(case_id, "hang", [task_entry(d, rec)],
                     command=shown(cmd) + f" (stopped with signal {int(stop)} by a watchdog)",
                     exit_code=rec["exit_code"], signal_=rec["signal"],
                     hang_threshold_s=THRESHOLD, silence_s=silence)
    job.case_id = case_id
    return job


def generate(workers: int = 2) -> list[dict]:
    # Sleep-bound: run them all at once, the CPU is idle while they hang.
    return [lab for lab in run_parallel([_case(i) for i in range(32)], workers=16) if lab]
