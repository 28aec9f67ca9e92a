"""Composed tuning-corpus cases (ids `f7m-*`). Template `f7m_straggler`: an NCCL collective
timeout under srun in which one rank never reaches the collective (a GPU-only wording: the
NCCL watchdog needs GPUs, so it follows torch's documented format instead of a run). Template
`f7m_batch_lost`: Slurm's NODE_FAIL of the node that ran the batch step (a lost node cannot be
caused here; the records follow the plugin's exit-record format).

The ranks that reached the all-reduce report torch's NCCL watchdog (ProcessGroupNCCL.cpp,
torch >= 2.5: `[PG ID 0 PG GUID 0(default_pg) Rank R] Watchdog caught collective operation
timeout: WorkNCCL(SeqNum=S, OpType=ALLREDUCE, NumelIn=N, NumelOut=N, Timeout(ms)=T) ran for
T' milliseconds before timing out.`, then `Timeout at NCCL work: S, last enqueued NCCL work: S,
last completed NCCL work: S-1.` and std::terminate's `terminate called after throwing an
instance of 'c10::DistBackendError'`), each ends in SIGABRT; the straggler (params `root`)
prints nothing of it and is killed by srun when the step is torn down. params: `ranks` (2 per
node), `root`, `batch` (false: no batch log, only the ranks' own logs and exit records),
`all` (true: the straggler reports the timeout too, at the same time - no rank is quiet).
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus.gen.compose.kit import T0, _pre, _rank_task, _task, _write, compose


def _watchdog(rng: random.Random, r: int, seq: int, tmo: int, stamp: str) -> str:
    pre = f"[rank{r}]:[E{stamp}.{rng.randrange(100000, 999999)} {rng.randrange(1000, 99999)} "
    cpp = "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
    n = rng.choice([1, 4096, 25165824])
    msg = (f"{pg} Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
           f"OpType=ALLREDUCE, NumelIn={n}, NumelOut={n}, Timeout(ms)={tmo}) ran for "
           f"{tmo + rng.randrange(5, 90)} milliseconds before timing out.")
    return (f"{pre}{cpp}:{rng.choice([616, 632, 645])}] {msg}\n"
            f"{pre}{cpp}:{rng.choice([1664, 1785])}] {pg} Exception (either an error or timeout) "
            f"detected by watchdog at work: {seq}, last enqueued NCCL work: {seq}, last completed "
            f"NCCL work: {seq - 1}.\n"
            f"{pre}{cpp}:{rng.choice([1709, 1834])}] {pg} Timeout at NCCL work: {seq}, last "
            f"enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.\n"
            f"{pre}{cpp}:{rng.choice([630, 681])}] [Rank {r}] Some NCCL operations have failed or "
            "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations "
            "might run on corrupted/incomplete data.\n"
            "terminate called after throwing an instance of 'c10::DistBackendError'\n"
            f"  what():  {pg} Process group watchdog thread terminated with exception: {msg}\n")


def straggler(rng: random.Random, p: dict, d: Path, root: Path, cid: str,
              tr: str | None) -> tuple[list[dict], int | None]:
    n, bad = int(p.get("ranks", 4)), int(p["root"])
    every = bool(p.get("all", False))
    seq, tmo = rng.randrange(4000, 90000), rng.choice([600000, 1800000])
    end = T0 + rng.randrange(0, 10**6)
    stamp = f"1130 0{rng.randrange(1, 9)}:{rng.randrange(10, 59)}:{rng.randrange(10, 59)}"
    last = rng.randrange(20, 60) * 50
    tasks = []
    for r in range(n):
        body = _pre(rng, "pretrain", rng.randrange(3, 7), dist=True, rank=r)
        for s in range(0, last + 1, 50):
            body += (f"[rank {r}] it {s:6d} | loss {6.0 / (1 + s / 400):.4f} | "
                     f"{rng.uniform(180, 320):.1f} tok/s/gpu\n")
        node = f"n{r // 2 + 1}"
        if r == bad and not every:
            # the straggler: stuck before the collective (a host-side read), then killed
            body += f"[rank {r}] fetching next shard from /lustre/u/tok/shard-{last // 50:05d}\n"
            tasks.append(_rank_task(root, d, r, body, tr, cid, None, 9, end + 6, node))
        else:
            body += _watchdog(rng, r, seq, tmo, stamp)
            tasks.append(_rank_task(root, d, r, body, tr, cid, None, 6,
                                    end + r * 0.2, node))
    if p.get("batch", True):
        jid = rng.randrange(1000000, 9999999)
        lines = [f"job {jid}: {n} ranks on " + ", ".join(f"n{k + 1}" for k in range((n + 1) // 2))]
        lines += [f"srun: error: n{r // 2 + 1}: task {r}: Aborted (core dumped)"
                  for r in range(n) if r != bad or every]
        lines += [f"srun: Terminating StepId={jid}.0",
                  f"slurmstepd: error: *** STEP {jid}.0 ON n1 CANCELLED AT 2026-11-30T0"
                  f"{rng.randrange(1, 9)}:{rng.randrange(10, 59)}:{rng.randrange(10, 59)} ***"]
        if not every:
            lines.append(f"srun: error: n{bad // 2 + 1}: task {bad}: Killed")
        _write(d, "batch.0.log", "\n".join(lines) + "\n", None, cid)
        tasks.append(_task(root, d, "batch.0.log", 0, 1, None, end + 7, node="n1",
                           step="batch"))
    return tasks, (0 if every else bad)


def batch_lost(rng: random.Random, p: dict, d: Path, root: Path, cid: str,
               tr: str | None) -> tuple[list[dict], int | None, str]:
    """A job whose script runs its work in the batch step itself (no srun), NODE_FAIL: the
    batch host stops answering mid-epoch, so its log just stops and no exit record is written
    (params `node`: the task's start record names its node; `survived`: the batch host lived,
    its step was cancelled with an exit record - another node of the job was the lost one, and
    nothing says which: no root rank)."""
    node = rng.choice(["gpu-a07", "dgx-113", "hpc-g2-14"])
    end = T0 + rng.randrange(0, 10**6)
    body = _pre(rng, "finetune", rng.randrange(4, 9))
    for e in range(1, rng.randrange(3, 6)):
        body += f"epoch {e}: train loss {2.4 / e:.4f} | val acc {0.5 + e * 0.06:.3f}\n"
    body += f"epoch {e + 1}: {rng.randrange(20, 80)}% {rng.randrange(100, 900)}/1024\n"
    if p.get("survived"):
        body += (f"slurmstepd: error: *** JOB {rng.randrange(10**6, 10**7)} ON {node} CANCELLED "
                 "AT 2026-11-30T04:12:09 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n")
        _write(d, "batch.0.log", body, tr, cid)
        return [_task(root, d, "batch.0.log", 0, None, 9, end, node=node, step="batch")], \
            None, "NODE_FAIL"
    _write(d, "batch.0.log", body, tr, cid)
    return [{"log": str((d / "batch.0.log").relative_to(root)), "rank": 0,
             "node": node if p.get("node") else None, "step": "batch", "exit_code": None,
             "signal": None, "core_dumped": False, "end_time": None}], 0, "NODE_FAIL"


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `f7m_*` case into `d`; return its label."""
    return compose(root, d, c, multi={"f7m_straggler": straggler, "f7m_batch_lost": batch_lost})
