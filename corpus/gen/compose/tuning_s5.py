"""Composed cases for the tuning corpus (templates `s5_*`) of the kinds held-out set 4 showed
weak: a submitit driver whose job ended in a Slurm state, and a node lost with every record of
its tasks. Neither can be caused on the shared test cluster (no node may be failed there; the
submitit driver needs a real Slurm state). The submitit message follows submitit 1.5.4's
`Job.results()` (submitit/core/core.py: "Job {id} (task: {t}) with path {pickle}" / "has not
produced any output (state: {state})" / "Error stream produced:" / 40 dashes / the stderr);
srun's lines follow Slurm 23's src/srun (`Node failure on %s`, `%s: task %s: Terminated`).
The surroundings reuse kit.py's preamble and traceback helpers and vary with the case id.
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus.gen.compose.kit import SITE, T0, _lost_task, _node_failure, _task, _tb, _write, compose

STDERR_TAIL = {  # the remote job's stderr that submitit puts in its message, per state
    "TIMEOUT": "slurmstepd: error: *** JOB {jid} ON {node} CANCELLED AT {stamp} DUE TO TIME "
               "LIMIT ***",
    "PREEMPTED": "slurmstepd: error: *** JOB {jid} ON {node} CANCELLED AT {stamp} DUE TO "
                 "PREEMPTION ***",
    "OUT_OF_MEMORY": "slurmstepd: error: Detected 1 oom_kill event in StepId={jid}.0. Some of "
                     "the step tasks have been OOM Killed.",
}


def submitit(rng: random.Random, p: dict, d: Path, root: Path, cid: str, tr: str | None):
    """A sweep driver's `job.result()` for a job that ended in `state` without a result."""
    state, jid = p["state"], rng.randrange(100000, 999999)
    node = rng.choice(["gpu-q12", "a40-07", "cn0415"])
    stamp = (f"2026-0{rng.randrange(1, 9)}-1{rng.randrange(0, 9)}T0{rng.randrange(0, 9)}:41:0"
             f"{rng.randrange(0, 9)}")
    proj = rng.choice(["/home/mk/hpsearch", "/scratch/team/ablate", "/work/u77/grid"])
    lines = [f"Job {jid}_{rng.randrange(0, 16)} (task: 0) with path {proj}/logs/{jid}_0_result.pkl",
             f"has not produced any output (state: {state})"]
    if p.get("stderr", True) and state in STDERR_TAIL:
        lines += ["Error stream produced:", "-" * 40,
                  f"[{stamp}] epoch {rng.randrange(3, 40)} step {rng.randrange(100, 9000)}",
                  STDERR_TAIL[state].format(jid=jid, node=node, stamp=stamp)]
    else:
        lines += [f"No output/error stream produced ! Check: {proj}/logs/{jid}_0_log.out"]
    frames = [(f"{proj}/{rng.choice(['sweep.py', 'launch_grid.py'])}", "<module>",
               "outs = [j.result() for j in jobs]"),
              (f"{SITE}/submitit/core/core.py", "result", "r = self.results()"),
              (f"{SITE}/submitit/core/core.py", "results",
               "outcome, result = self._get_outcome_and_result()"),
              (f"{SITE}/submitit/core/core.py", "_get_outcome_and_result",
               'raise utils.UncompletedJobError("\\n".join(message))')]
    text = (f"submitted {rng.randrange(4, 40)} jobs to partition gpu, waiting for results\n"
            + "".join(f"job {jid}_{i} done: val_acc {0.7 + rng.random() / 5:.4f}\n"
                      for i in range(rng.randrange(1, 4)))
            + _tb(rng, frames, "submitit.core.utils.UncompletedJobError: " + "\n".join(lines)))
    _write(d, "run.0.log", text, tr, cid)
    return [_task(root, d, "run.0.log", 0, 1, None, T0 + rng.randrange(0, 10**6))], None, None


def node_lost_unplaced(rng: random.Random, p: dict, d: Path, root: Path, cid: str,
                       tr: str | None):
    """N nodes, one task each; the last node dies and takes its task's start and exit records
    with it (the tap wrote them on that node's spool). srun names the node, not the task."""
    n, jid = p.get("nodes", 3), rng.randrange(100000, 999999)
    lost = n - 1
    end = T0 + rng.randrange(0, 10**6)
    stamp = (f"2026-04-0{rng.randrange(1, 9)}T2{rng.randrange(0, 3)}:1{rng.randrange(0, 9)}:3"
             f"{rng.randrange(0, 9)}")
    batch = [f"+ srun --kill-on-bad-exit=1 python -u pretrain.py --nodes {n}"]
    batch += _node_failure(f"n{lost + 1}", f"STEP {jid}.0", stamp).splitlines()
    batch += [f"srun: error: n{r + 1}: task {r}: Terminated" for r in range(lost)]
    batch += [f"srun: Force Terminated StepId={jid}.0"]
    _write(d, "batch.0.log", "\n".join(batch) + "\n", tr, cid)
    tasks = [_task(root, d, "batch.0.log", 0, None, 9, round(end + 30, 3), node="n1",
                   step="batch")]
    for r in range(n):
        text = "".join(f"[{r}] it {it:5d} | tokens/s {rng.randrange(9000, 12000)} | loss "
                       f"{4.1 - it / 900:.3f}\n" for it in range(0, 1500, 100))
        _write(d, f"0.{r}.log", text, tr, cid)
        if r < lost:
            tasks.append(_task(root, d, f"0.{r}.log", r, None, 15, round(end + 2 + r, 3),
                               node=f"n{r + 1}", step="0"))
        else:
            tasks.append(_lost_task(root, d, f"0.{r}.log", r))
    return tasks, lost, "NODE_FAIL"


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `s5_*` case into `d`; return its label."""
    return compose(root, d, c, multi={"s5_submitit": submitit,
                                      "s5_node_lost_unplaced": node_lost_unplaced}, end_last=True)
