"""Family `dist`: multi-rank torch.distributed (gloo, CPU) runs, launched locally like torchrun.

Each rank is a real process with its own log `run.<rank>.log`; when one rank fails, the others
hit what really follows (gloo timeout, closed connection), and like torchrun the launcher stops
the ranks still running after a grace period. Ground truth: the class and rank of the cause.
Also rendezvous timeouts (a world size larger than the ranks started).
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import time

from common import Running, case_dir, label, prog, run_parallel, shown, task_entry

PREFIXES = ("dist-",)
# (mode, class of the root cause)
ROOTS = [("stuck", "collective_timeout")] * 26 + [
    ("raise-value", "python_exception"), ("raise-key", "python_exception"),
    ("raise-shape", "python_exception"), ("raise-assert", "python_exception"),
    ("raise-type", "python_exception"), ("fnf", "file_not_found"), ("fnf", "file_not_found"),
    ("oom", "host_oom"), ("oom", "host_oom"), ("segv", "segfault"), ("segv", "segfault"),
    ("nan", "nan_divergence"), ("nan", "nan_divergence"), ("ckpt", "checkpoint_corrupt"),
    ("ckpt", "checkpoint_corrupt"), ("ok", "success"), ("ok", "success")]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _limit_as() -> None:
    n = 3 << 30  # enough to import torch, not enough for the rank's runaway buffer
    resource.setrlimit(resource.RLIMIT_AS, (n, n))


def _launch(case_id: str, cls: str, mode: str, world: int, root: int | None,
            started: int, grace: float) -> dict:
    d = case_dir(case_id)
    port = _port()
    ranks = []
    for rank in range(started):
        env = {"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        cmd = prog("distfail", mode, root if root is not None else -1, case_id)
        pre = _limit_as if mode == "oom" and rank == root else None
        ranks.append(Running(cmd, d / f"run.{rank}.log", rank=rank, env=env, preexec=pre,
                             node="localhost"))
    t0, first_fail = time.time(), None
    while not all(r.poll() for r in ranks):
        for r in ranks:
            if r.poll() and r.status != 0 and first_fail is None:
                first_fail = time.time()
        late = first_fail is not None and time.time() > first_fail + grace
        if late or time.time() > t0 + 240:  # like torchrun: stop the survivors
            for r in ranks:
                if not r.poll():
                    r.signal_group(signal.SIGTERM)
            time.sleep(3)
            for r in ranks:
                if not r.poll():
                    r.signal_group(signal.SIGKILL)
        time.sleep(0.1)
    recs = [r.wait() for r in ranks]
    failed = [x for x in recs if x["exit_code"] != 0]
    first = min(failed, key=lambda x: x["end_time"]) if failed else recs[0]
    worst = max((x["exit_code"] or 0 for x in recs), default=0)
    cmd_text = (f"{started} local ranks (world size {world}, gloo, torchrun-like launcher): "
                + shown(prog("distfail", mode, root, case_id)))
    return label(case_id, cls, [task_entry(d, x) for x in recs], command=cmd_text,
                 root_rank=root, exit_code=worst if failed else 0,
                 signal_=None if worst else first["signal"])


def _case(i: int, mode: str, cls: str):
    world = 2 + i % 3
    root = (i * 7 + 1) % world if mode != "ok" else None
    case_id = f"dist-{mode}-{i:02d}"

    def job() -> dict:
        # The stuck rank never fails by itself; the launcher stops it after the others time out.
        return _launch(case_id, cls, mode, world, root, world, grace=6.0)
    job.case_id = case_id
    return job


def _rendezvous(i: int):
    world = 3 + i % 2
    case_id = f"dist-rendezvous-{i:02d}"

    def job() -> dict:
        # One rank never starts: the others wait at the TCPStore until init's timeout.
        return _launch(case_id, "collective_timeout", "ok", world, None, world - 1, grace=2.0)
    job.case_id = case_id
    return job


def cases() -> list:
    jobs = [_case(i, mode, cls) for i, (mode, cls) in enumerate(ROOTS)]
    jobs += [_rendezvous(i) for i in range(6)]
    return jobs


def plausible(lab: dict) -> bool:
    """The run went the way its label says (a busy machine can make an extra rank time out)."""
    tasks = {t["rank"]: t for t in lab["tasks"] if t["step"] != "batch"}
    root = lab["root_rank"]
    if lab["class"] == "success":
        return all(t["exit_code"] == 0 for t in tasks.values())
    if root is None:  # rendezvous: every started rank failed
        return all(t["exit_code"] != 0 for t in tasks.values())
    if root not in tasks:
        return False
    others = [t for r, t in tasks.items() if r != root]
    if lab["id"].startswith("dist-stuck-") or lab["id"].startswith("slurm-dist-stuck-"):
        return tasks[root]["signal"] is not None and all(t["exit_code"] == 1 for t in others)
    failed = [t for t in tasks.values() if t["exit_code"] != 0 and t["end_time"] is not None]
    return tasks[root]["exit_code"] != 0 and min(failed, key=lambda t: t["end_time"]) is \
        tasks[root]


def generate(workers: int = 2) -> list[dict]:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    labs = [lab for lab in run_parallel(cases(), workers=workers) if lab]
    for lab in labs:
        if not plausible(lab):
            print(f"corpus: {lab['id']}: did not go as labelled; dropped")
    return [lab for lab in labs if plausible(lab)]
