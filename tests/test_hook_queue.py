"""The job epilogs' queue (epilog.d/gpualert-epilog-slurmctld + hooks/queue.py): the real shim,
run by /bin/sh as slurmctld runs it, queues the job and returns at once; one worker (started
by the shim under a real flock) takes every queued job exactly once, oldest first, at most
gate.slots() at once, each in a forked child; a job queued while the worker lets go of its
lock is still taken; a job whose work did not finish gets its finish step. Real processes,
real flocks; the worker's per-job work is a recording workload (as in test_hook_gate)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHIMS = REPO / "epilog.d"
SHIM = SHIMS / "gpualert-epilog-slurmctld"

# GPUALERT_BIN for the shim: `gpualert hook queue`, with a recording work function. A job whose
# SLURM_JOB_NAME is "cut" raises (its work did not finish); "hang" sleeps past the bound.
FAKE_BIN = """#!{py}
import json, os, sys, time
sys.path.insert(0, {repo!r})
from gpualert_slurm.hooks import queue
out = os.environ["T_OUT"]
with open(os.path.join(out, "workers"), "a") as f:
    f.write(f"{{os.getpid()}} {{' '.join(sys.argv[1:])}}\\n")

def work(env, waited):
    t0 = time.time()
    if env.get("SLURM_JOB_NAME") == "hang":
        time.sleep(60)
    if env.get("SLURM_JOB_NAME") == "wait":  # a job epilog waiting out its node wait
        time.sleep(float(os.environ.get("T_WAIT", "2")))
    end = time.process_time() + float(os.environ.get("T_BUSY", "0.1"))
    while time.process_time() < end:
        pass
    if env.get("SLURM_JOB_NAME") == "cut":
        raise RuntimeError("cut short")
    rec = {{"job": env["SLURM_JOB_ID"], "start": t0, "end": time.time(), "waited": waited,
           "uid": env.get("SLURM_JOB_UID"),
           "nice": os.nice(0), "worker": os.getppid(), "env_ok": env.get("T_MARK") == "m",
           "kind": env.get("T_KIND")}}
    with open(os.path.join(out, "job." + env["SLURM_JOB_ID"]), "a") as f:
        f.write(json.dumps(rec) + "\\n")

def finish(env, why):
    with open(os.path.join(out, "finish." + env["SLURM_JOB_ID"]), "a") as f:
        f.write(why + "\\n")

queue.run_worker(work=work, finish=finish, idle_s=float(os.environ.get("T_IDLE", "0.5")),
            bound_s=float(os.environ.get("T_BOUND", "30")))
"""


def _setup(tmp: Path, slots: int = 2, **extra: str) -> dict[str, str]:
    fake = tmp / "gpualert"
    fake.write_text(FAKE_BIN.format(py=sys.executable, repo=str(REPO)))
    fake.chmod(0o755)
    out = tmp / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SPANK_GPUALERT"}
    env.update(GPUALERT_BIN=str(fake), GPUALERT_QUEUE_DIR=str(tmp / "q"), T_OUT=str(out),
               GPUALERT_GATE_SLOTS=str(slots), T_MARK="m", **extra)
    return env


class _Shim:
    """The shim as slurmctld runs it: in a process group of its own, which is killed once the
    shim exits (so the worker must have left it by then)."""

    def __init__(self, env: dict[str, str], job: int, name: str,
                 shim: str = "gpualert-epilog-slurmctld", uid: int | None = None) -> None:
        extra = {"SLURM_JOB_UID": str(uid)} if uid is not None else {}
        self.p = subprocess.Popen(["/bin/sh", str(SHIMS / shim)], start_new_session=True,
                                  env=dict(env, SLURM_JOB_ID=str(job), SLURM_JOB_NAME=name,
                                           T_KIND=shim, **extra))

    def wait(self, timeout: float) -> int:
        rc = self.p.wait(timeout)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.p.pid, signal.SIGKILL)
        return rc


def _shim(env: dict[str, str], job: int, name: str = "train",
          shim: str = "gpualert-epilog-slurmctld", uid: int | None = None) -> _Shim:
    return _Shim(env, job, name, shim, uid)


def _records(tmp: Path, n: int, prefix: str = "job.", timeout: float = 90) -> dict[str, list]:
    out = tmp / "out"
    deadline = time.time() + timeout
    while time.time() < deadline:
        # a file the child has opened but not yet written its line to is not a record yet
        # (seen under load: finish.<job> read empty)
        texts = {p.name[len(prefix):]: p.read_text() for p in out.glob(prefix + "*")}
        recs = {k: [json.loads(ln) if prefix == "job." else ln for ln in t.splitlines()]
                for k, t in texts.items() if t.endswith("\n")}
        if len(recs) >= n and len(recs) == len(texts):
            return recs
        time.sleep(0.1)
    return recs


def _settled(tmp: Path, timeout: float = 30) -> bool:
    """The queue is empty and no worker holds its lock."""
    import fcntl

    deadline = time.time() + timeout
    while time.time() < deadline:
        if not [p for p in (tmp / "q").iterdir() if p.name != "drainer.lock"]:
            with open(tmp / "q" / "drainer.lock", "a") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    pass
        time.sleep(0.1)
    return False


def test_a_burst_is_queued_and_taken_once_each_within_the_slots(tmp_path: Path) -> None:
    env = _setup(tmp_path, slots=2)
    t0 = time.monotonic()
    shims = [_shim(env, 1000 + i) for i in range(40)]
    rcs = [p.wait(30) for p in shims]
    shims_s = time.monotonic() - t0
    assert rcs == [0] * 40
    assert shims_s < 20, shims_s  # the shims only queue: no job's work runs in them
    recs = _records(tmp_path, 40)
    assert sorted(recs) == [str(1000 + i) for i in range(40)]
    assert all(len(r) == 1 for r in recs.values()), "a job was worked on twice"
    flat = sorted((r[0] for r in recs.values()), key=lambda r: r["start"])
    # never more than 2 at work at once
    for r in flat:
        at_once = sum(1 for o in flat if o["start"] <= r["start"] < o["end"])
        assert at_once <= 2, flat
    assert all(r["env_ok"] and r["nice"] >= 10 for r in flat)  # the job's env, niced
    workers = (tmp_path / "out" / "workers").read_text().split("\n")
    started = [d for d in workers if d.strip()]
    assert all(d.split()[1:] == ["hook", "queue"] for d in started)
    # one worker for the burst (the next shim finds the lock held); a few at most
    assert len({r["worker"] for r in flat}) <= 3, started
    assert _settled(tmp_path)
    assert (tmp_path / "q").stat().st_mode & 0o777 == 0o700


def test_one_slot_takes_the_oldest_first(tmp_path: Path) -> None:
    env = _setup(tmp_path, slots=1, T_BUSY="0.2")
    for i in range(6):
        assert _shim(env, 2000 + i).wait(30) == 0
        time.sleep(0.05)
    recs = _records(tmp_path, 6)
    order = [r[0]["job"] for r in sorted(recs.values(), key=lambda r: r[0]["start"])]
    assert order == [str(2000 + i) for i in range(6)]
    assert max(r[0]["waited"] for r in recs.values()) > 0.3  # the later ones queued
    assert _settled(tmp_path)


def test_jobs_queued_while_the_worker_lets_go_are_taken(tmp_path: Path) -> None:
    """The worker gives up its lock after a short idle time; jobs arriving around then find
    the lock held (and queue only) or free (and start a new worker): none is left."""
    env = _setup(tmp_path, slots=2, T_IDLE="0.05", T_BUSY="0.0")
    n = 60
    for i in range(n):
        assert _shim(env, 3000 + i).wait(30) == 0
        time.sleep(0.8 if i % 10 == 9 else (i % 7) * 0.04)  # some past the idle time
    recs = _records(tmp_path, n)
    assert len(recs) == n, sorted(set(map(str, range(3000, 3000 + n))) - set(recs))
    assert all(len(r) == 1 for r in recs.values())
    assert _settled(tmp_path)
    starts = [d for d in (tmp_path / "out" / "workers").read_text().splitlines() if d]
    assert len(starts) > 1  # the worker did exit and was started again meanwhile


def test_one_users_slow_jobs_leave_another_users_job_its_turn(tmp_path: Path) -> None:
    """Issue 28: twelve job epilogs of one user, each waiting its whole node wait (a nodes/
    that never fills), queued before another user's: that one starts at the next free slot,
    not behind all twelve (FIFO: 12 / 2 slots x 2 s), and the first user never holds more
    than their share of the slots."""
    env = _setup(tmp_path, slots=2, T_WAIT="2", T_BUSY="0.0",
                 GPUALERT_EPILOG_SLOTS_PER_USER="1")
    for i in range(12):
        assert _shim(env, 7000 + i, "wait", uid=2001).wait(30) == 0
    assert _shim(env, 7100, "train", uid=2002).wait(30) == 0
    recs = _records(tmp_path, 13, timeout=120)
    assert len(recs) == 13
    other = recs["7100"][0]
    assert other["waited"] < 5.0, other  # FIFO: ~12 s
    hostile = [r[0] for k, r in recs.items() if k != "7100"]
    for r in hostile:
        at_once = sum(1 for o in hostile if o["start"] <= r["start"] < o["end"] - 0.05)
        assert at_once <= 1, hostile  # the share: one slot of the two
    order = [r[0]["job"] for r in sorted(recs.values(), key=lambda r: r[0]["start"])
             if r[0]["uid"] == "2001"]
    assert order == sorted(order)  # each user's own jobs still oldest first
    assert _settled(tmp_path)


def test_fair_turns_alternate_users_and_keep_each_users_order() -> None:
    from gpualert_slurm.hooks.queue import fair_turns

    jobs = [(float(i), f"{i}.1.job") for i in range(10)]
    user = {f"{i}.1.job": ("a" if i < 8 else "b") for i in range(10)}.__getitem__
    got = fair_turns(jobs, user, {}, cap=10, room=4)
    assert [n for _m, n in got] == ["0.1.job", "8.1.job", "1.1.job", "9.1.job"]
    # a user at the cap waits; the others go on; room bounds the picks
    got = fair_turns(jobs, user, {"a": 2}, cap=2, room=4)
    assert [n for _m, n in got] == ["8.1.job", "9.1.job"]
    assert fair_turns(jobs, user, {}, cap=1, room=0) == []
    # the one with the fewest at work goes first
    got = fair_turns(jobs, user, {"b": 1}, cap=5, room=2)
    assert [n for _m, n in got] == ["0.1.job", "1.1.job"]


def test_work_that_does_not_finish_gets_its_finish_step(tmp_path: Path) -> None:
    env = _setup(tmp_path, slots=2, T_BOUND="1")
    assert _shim(env, 4001, "cut").wait(30) == 0
    assert _shim(env, 4002, "train").wait(30) == 0
    fin = _records(tmp_path, 1, prefix="finish.")
    assert list(fin) == ["4001"]
    assert "cut short" in fin["4001"][0]
    assert list(_records(tmp_path, 1)) == ["4002"]
    assert _settled(tmp_path)


def test_work_past_its_bound_is_killed_and_finished(tmp_path: Path) -> None:
    from gpualert_slurm.hooks import queue

    env = _setup(tmp_path, slots=1, T_BOUND="0.5")
    t0 = time.monotonic()
    assert _shim(env, 5001, "hang").wait(30) == 0
    assert _shim(env, 5002, "train").wait(30) == 0
    fin = _records(tmp_path, 1, prefix="finish.", timeout=queue.KILL_MARGIN_S + 30)
    assert list(fin) == ["5001"]
    assert list(_records(tmp_path, 1)) == ["5002"]
    assert time.monotonic() - t0 < 0.5 + queue.KILL_MARGIN_S + 20  # killed, not its 60 s
    assert _settled(tmp_path)


def test_off_and_bad_job_ids_queue_nothing(tmp_path: Path) -> None:
    env = _setup(tmp_path)
    assert subprocess.run(["/bin/sh", str(SHIM)], env=dict(env, SLURM_JOB_ID="7",
                                                           SPANK_GPUALERT="off")).returncode == 0
    assert not (tmp_path / "q").exists()
    # no usable job id: not queued; the shim falls back to the hook itself (which logs it)
    assert subprocess.run(["/bin/sh", str(SHIM)], env=dict(env, SLURM_JOB_ID="1;x"),
                          timeout=60).returncode == 0
    assert not (tmp_path / "q").exists() or not list((tmp_path / "q").glob("*.job"))


def test_a_queue_not_the_workers_own_is_refused(tmp_path: Path) -> None:
    from gpualert_slurm.hooks import queue

    q = tmp_path / "q"
    q.mkdir(mode=0o755)
    q.chmod(0o755)  # readable by others: a queue of job environments must not be
    (q / "1.1.job").write_bytes(b"SLURM_JOB_ID=1\0")
    env = dict(os.environ, GPUALERT_QUEUE_DIR=str(q))
    code = ("import sys; from gpualert_slurm.hooks import queue; "
            "sys.exit(queue.run_worker(work=lambda e, w: open(sys.argv[1], 'w').write('ran')))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ran")], env=env, timeout=60,
                       cwd=REPO)
    assert r.returncode == 0
    assert not (tmp_path / "ran").exists()
    assert (q / "1.1.job").exists()  # kept for a worker of a sound queue
    assert queue.read_env(os.open(q, os.O_RDONLY), "1.1.job") == {"SLURM_JOB_ID": "1"}


@pytest.mark.parametrize("name", ["queue", "drain"])
def test_the_worker_starts_by_its_name_and_by_its_old_one(tmp_path: Path, name: str) -> None:
    """`gpualert hook queue` starts the worker; so does `hook drain`, the name a shim kept from
    an older version (a conffile an admin edited) still calls. On an empty queue it lets go
    of the lock and says what it did."""
    q = tmp_path / "q"
    q.mkdir(mode=0o700)
    env = dict(os.environ, GPUALERT_QUEUE_DIR=str(q), PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "gpualert_slurm.cli", "hook", name], env=env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "queue: worked through 0 job epilog(s) (0 cut short)" in r.stderr, r.stderr
    with open(q / "drainer.lock") as f:  # let go: a new worker may take the queue
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_node_epilogs_and_prologs_go_through_the_same_worker(tmp_path: Path) -> None:
    """The node Epilog's shim queues as the job epilog's does; the Prolog's waits for the
    worker's word, so its job's work is done when it returns; Prologs go first."""
    env = _setup(tmp_path, slots=1, T_BUSY="0.3")
    jobs = [_shim(env, 6000 + i, shim="gpualert-epilog-slurmctld") for i in range(3)]
    nodes = [_shim(env, 6100 + i, shim="gpualert-epilog") for i in range(3)]
    assert [p.wait(30) for p in jobs + nodes] == [0] * 6
    t0 = time.time()
    assert _shim(env, 6200, shim="gpualert-prolog").wait(60) == 0
    returned = time.time()
    prolog_rec = json.loads((tmp_path / "out" / "job.6200").read_text())
    assert prolog_rec["end"] <= returned  # the Prolog's work was done before its shim returned
    assert prolog_rec["kind"] == "gpualert-prolog" and prolog_rec["nice"] - os.nice(0) < 19
    assert returned - t0 < 15
    assert not list((tmp_path / "q").glob("*.done"))  # its FIFO is gone
    recs = {k: v[0] for k, v in _records(tmp_path, 7).items()}
    # one slot for the Epilogs: the first job epilog may already run; after it, the node
    # Epilogs, then the other job epilogs; the Prolog has a pool of its own
    nodes_start = [r["start"] for r in recs.values() if r["kind"] == "gpualert-epilog"]
    jobs_start = sorted(r["start"] for r in recs.values()
                        if r["kind"] == "gpualert-epilog-slurmctld")
    assert len(nodes_start) == 3 and len(jobs_start) == 3
    assert max(nodes_start) < jobs_start[1], recs
    assert prolog_rec["waited"] < 5, prolog_rec  # not behind the Epilogs' 1.8 s of work
    assert _settled(tmp_path)


def test_a_node_epilog_waits_for_its_jobs_prolog(tmp_path: Path) -> None:
    """In a burst a job's Prolog may still be queued or at work (its own pool) when the job
    has ended and its node Epilog is queued: the Epilog starts only after it (the Prolog's
    start record and NVML snapshot are the Epilog's window and counters' start); another
    job's Epilog does not wait."""
    env = _setup(tmp_path, slots=1, T_BUSY="1.0")
    prolog = _shim(env, 6300, shim="gpualert-prolog")
    q = tmp_path / "q"
    deadline = time.time() + 20
    while time.time() < deadline and not (list(q.glob("6300.*.prolog"))
                                          or list(q.glob("6300.*.prolog.run"))):
        time.sleep(0.02)
    node = _shim(env, 6300, shim="gpualert-epilog")
    other = _shim(env, 6301, shim="gpualert-epilog")
    assert [s.wait(30) for s in (prolog, node, other)] == [0, 0, 0]
    recs = _records(tmp_path, 2)
    deadline = time.time() + 30
    while time.time() < deadline and len(recs.get("6300", [])) < 2:
        time.sleep(0.1)
        recs = _records(tmp_path, 2)
    by_kind = {r["kind"]: r for r in recs["6300"]}
    assert by_kind["gpualert-epilog"]["start"] >= by_kind["gpualert-prolog"]["end"], recs
    assert recs["6301"][0]["start"] < by_kind["gpualert-prolog"]["end"], recs  # no wait
    assert _settled(tmp_path)


def _prolog_no_answer(tmp_path: Path, worker: str,
                      prolog_s: int = 0) -> tuple[subprocess.Popen, float, Path]:
    fake = tmp_path / "gpualert"
    out = tmp_path / "ran"
    fake.write_text(f"#!/bin/sh\n[ \"$2\" = queue ] && {{ {worker}; }}\nsleep {prolog_s}\n"
                    f"echo \"$@\" >> {out}\n")
    fake.chmod(0o755)
    env = dict(os.environ, GPUALERT_BIN=str(fake), GPUALERT_QUEUE_DIR=str(tmp_path / "q"),
               GPUALERT_PROLOG_WAIT="1", SLURM_JOB_ID="7001")
    env.pop("SPANK_GPUALERT", None)
    t0 = time.time()
    p = subprocess.Popen(["/bin/sh", str(SHIMS / "gpualert-prolog")], env=env,
                         start_new_session=True)
    assert p.wait(30) == 0
    return p, time.time() - t0, out


def test_a_prolog_no_worker_answers_runs_in_its_shim(tmp_path: Path) -> None:
    """No worker (here: one that exits at once, letting go of the lock): after
    GPUALERT_PROLOG_WAIT the shim takes its job back and runs the Prolog itself, detached, so
    that the job is not held past BatchStartTimeout (10 s) for it."""
    _p, took, out = _prolog_no_answer(tmp_path, "exit 0", prolog_s=12)
    assert took < 10  # the Prolog itself takes 12 s here
    deadline = time.time() + 30
    while time.time() < deadline and not (out.exists() and out.read_text().strip()):
        time.sleep(0.05)
    assert out.read_text().split() == ["hook", "prolog"]
    assert [x.name for x in (tmp_path / "q").iterdir()] == ["drainer.lock"]


def test_a_prolog_behind_a_busy_worker_is_left_to_it(tmp_path: Path) -> None:
    """A worker that holds the lock but has not answered in time (a burst): the shim returns
    within its bound and leaves the job queued for it, rather than add a cold start to the
    burst."""
    pid = tmp_path / "worker.pid"
    p, took, out = _prolog_no_answer(tmp_path, f"echo $$ > {pid}; exec sleep 30")
    try:
        assert took < 10
        assert not out.exists()  # not run in the shim
        assert [x.name for x in (tmp_path / "q").glob("7001.*.prolog")]  # still queued
    finally:
        with contextlib.suppress(ProcessLookupError, ValueError, OSError):
            os.kill(int(pid.read_text()), signal.SIGKILL)  # the worker that never answered


# A worker whose job epilog is cut short (ends as its watchdog ends it: EXIT_CUT) and whose
# finish step is the real one: the array's state and its summary mail.
CUT_BIN = """#!{py}
import os, sys
sys.path.insert(0, {repo!r})
from gpualert_slurm.hooks import array_settle, queue
queue.run_worker(work=lambda env, waited: os._exit(queue.EXIT_CUT),
                 finish=array_settle.finish_array_task, idle_s=0.5)
"""


def test_an_array_task_cut_short_is_summarised_as_unclassified(tmp_path: Path,
                                                               smtp_server) -> None:
    """The array's other task was recorded by its job epilog; the last one's epilog is cut
    short at its bound: the worker records it unclassified (failed, by Slurm's exit code), and
    as the array's last task it sends the one summary, which says so."""
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o755)
    spool.chmod(0o755)
    conf = tmp_path / "gpualert.yaml"
    conf.write_text(f"spool: {spool}\nmail:\n  relay: 127.0.0.1:{smtp_server.port}\n"
                    "  from: gpualert@cluster.test\n  domain: cluster.test\n")
    arrays = spool / ".gpualert" / "arrays"
    arrays.mkdir(parents=True, mode=0o700)
    (spool / ".gpualert").chmod(0o755)
    array = "999990001"
    (arrays / f"{array}.json").write_text(json.dumps({"tasks": {
        "0": {"job_id": "999990002", "task_id": "0", "class": "cuda_oom", "failed": True,
              "hint": "reduce the batch size", "ran": True, "name": "sweep", "user": "alice",
              "evidence": []},
        "1": {"task_id": "1", "job_id": "999990003", "in_flight": True, "since": time.time()}}}))
    (arrays / f"{array}.json").chmod(0o600)
    fake = tmp_path / "gpualert"
    fake.write_text(CUT_BIN.format(py=sys.executable, repo=str(REPO)))
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "SPANK_GPUALERT"}
    env.update(GPUALERT_BIN=str(fake), GPUALERT_QUEUE_DIR=str(tmp_path / "q"),
               GPUALERT_CONFIG=str(conf), SLURM_CONF=str(tmp_path / "no-slurm.conf"),
               SLURM_ARRAY_JOB_ID=array, SLURM_ARRAY_TASK_ID="1", SLURM_JOB_USER="alice",
               SLURM_JOB_EXIT_CODE2="1:0", SLURM_JOB_UID="0")
    assert _Shim(env, 999990003, "sweep").wait(30) == 0
    deadline = time.time() + 60
    mails: list[Path] = []
    while time.time() < deadline and not mails:
        mails = list((tmp_path / "mail").glob("*.eml"))
        time.sleep(0.2)
    assert len(mails) == 1
    text = mails[0].read_text(errors="replace")
    assert f"array {array} (sweep): 2 of 2 tasks FAILED" in text
    assert "not classified: its job epilog was cut short" in text.replace("=\n", "")
    state = json.loads((arrays / f"{array}.json").read_text())
    assert state["tasks"]["1"]["class"] == "unknown" and state["tasks"]["1"]["failed"]
    assert state.get("sent")
    assert _settled(tmp_path)


SETTLE = """import json, os, sys
sys.path.insert(0, {repo!r})
from gpualert_slurm.hooks import array_settle
array_settle.settle_array(json.loads(sys.argv[1]), float(sys.argv[2]))
"""


def test_an_array_whose_tasks_never_recorded_is_summarised(cluster, workdir, tmp_path: Path,
                                                           smtp_server) -> None:
    """A real array on the test cluster whose tasks 1 and 2 no job epilog ever recorded (here:
    not monitored, so none ran; in the burst: no EpilogSlurmctld trace at all for 84 of 500):
    while a task may still end or record, settle_array says 'not yet'; past the grace it
    records them unclassified from accounting and the one summary goes out, once."""
    import clusterlib as cl

    arr = cl.submit("#!/bin/bash\n#SBATCH --gpualert=off\necho 'bad shard' >&2\nexit 1\n",
                    "--array=0-2", "-J", "settle", workdir=workdir)
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o755)
    spool.chmod(0o755)
    conf = tmp_path / "gpualert.yaml"
    conf.write_text(f"spool: {spool}\nmail:\n  relay: 127.0.0.1:{smtp_server.port}\n"
                    "  from: gpualert@cluster.test\n  domain: cluster.test\n")
    arrays = spool / ".gpualert" / "arrays"
    arrays.mkdir(parents=True, mode=0o700)
    (spool / ".gpualert").chmod(0o755)
    (arrays / f"{arr}.json").write_text(json.dumps({"tasks": {"0": {
        "job_id": str(arr), "task_id": "0", "class": "file_not_found", "failed": True,
        "hint": "check the path", "ran": True, "name": "settle", "user": "alice",
        "evidence": []}}}))
    (arrays / f"{arr}.json").chmod(0o600)
    env = {k: v for k, v in os.environ.items() if k.startswith(("PATH", "SLURM_CONF"))}
    job_env = dict(env, GPUALERT_CONFIG=str(conf), SLURM_CONF=str(cluster.conf),
                   SLURM_ARRAY_JOB_ID=str(arr), SLURM_ARRAY_TASK_ID="0", SLURM_JOB_ID=str(arr),
                   SLURM_JOB_USER="alice")

    def settle(grace: float) -> int:
        return subprocess.run([sys.executable, "-c", SETTLE.format(repo=str(REPO)),
                               json.dumps(job_env), str(grace)], env=dict(env, **job_env),
                              timeout=120).returncode

    from gpualert_slurm.hooks import array_settle

    assert settle(3600) == array_settle.EXIT_NOT_YET  # the tasks may still run, or just ended
    deadline = time.time() + 120
    while time.time() < deadline:
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", str(arr), "-o", "State,End"],
                             env=dict(os.environ, SLURM_CONF=str(cluster.conf)),
                             capture_output=True, text=True).stdout.split()
        if len(out) == 3 and all(s.startswith("FAILED|2") for s in out):
            break
        time.sleep(1)
    assert settle(3600) == array_settle.EXIT_NOT_YET  # ended, but within the grace
    assert not list((tmp_path / "mail").glob("*.eml"))
    assert settle(0) == 0
    mails = list((tmp_path / "mail").glob("*.eml"))
    assert len(mails) == 1
    text = mails[0].read_text(errors="replace").replace("=\n", "")
    assert f"array {arr} (settle): 3 of 3 tasks FAILED" in text
    assert "no job epilog ran for it" in text
    state = json.loads((arrays / f"{arr}.json").read_text())
    assert state.get("sent") and {t["class"] for t in state["tasks"].values()} \
        == {"file_not_found", "unknown"}
    assert settle(0) == 0  # sent: settled, no second mail
    assert len(list((tmp_path / "mail").glob("*.eml"))) == 1


# settle_array's decision alone, Slurm's and accounting's answers given (its reads of squeue and
# sacct are tested on the real cluster above and in test_array_acct.py); in a child, since it
# ends itself with EXIT_NOT_YET
SETTLE_GIVEN = """import json, sys
sys.path.insert(0, {repo!r})
from gpualert_slurm.hooks import array_acct, array_settle
states, acct = json.loads(sys.argv[1]), json.loads(sys.argv[2])
array_acct.task_states = lambda array_id, timeout=0: states
array_acct.accounted = lambda array_id, timeout=0: {{t: tuple(a) for t, a in acct.items()}}
array_settle.array_state = lambda env: {{"tasks": {{"0": {{"class": "unknown"}}}}}}
array_settle.settle_array({{"SLURM_ARRAY_JOB_ID": "7"}}, 3600.0)
"""


@pytest.mark.parametrize(("states", "acct", "settled"), [
    # all ended in slurmctld, tasks 1 and 2 not yet in accounting (slurmdbd behind a quick
    # array, as seen in CI): not "nothing to wait for"
    ({"0": "FAILED", "1": "FAILED", "2": "FAILED"}, {"0": ["8", 1.0, "FAILED"]}, False),
    # slurmctld forgot the array and accounting has only the recorded task: nothing to wait for
    ({}, {"0": ["8", 1.0, "FAILED"]}, True),
    # a task still running: its own job epilog may come
    ({"0": "FAILED", "1": "RUNNING"}, {"0": ["8", 1.0, "FAILED"]}, False),
])
def test_settle_waits_for_tasks_accounting_has_not_caught_up_with(
        states: dict, acct: dict, settled: bool) -> None:
    from gpualert_slurm.hooks import array_settle

    rc = subprocess.run([sys.executable, "-c", SETTLE_GIVEN.format(repo=str(REPO)),
                         json.dumps(states), json.dumps(acct)], timeout=60).returncode
    assert rc == (0 if settled else array_settle.EXIT_NOT_YET)
