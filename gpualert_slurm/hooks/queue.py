"""`gpualert hook queue`: the hooks' queue on this host and its one long-lived worker.

The shims (epilog.d/) start no interpreter per job: each writes the job's environment (what
Slurm gave it, NUL-separated, `env -0`) to QUEUE_DIR/<jobid>.<pid>.<kind> (.prolog, .node:
the node Epilog, .job: the job epilog) and starts this worker only when none holds
QUEUE_DIR/drainer.lock (flock(1) on its fd LOCK_FD, which the worker inherits; the file keeps
its old name so that shims and workers of the version before agree on it during an upgrade).
The Epilog shims return at once; the Prolog's waits (bounded, on a FIFO, without CPU) for the
worker's word for a few seconds, so that job.json comes before the tasks when the worker is
free; the job's spool dir does not depend on it (the plugin makes it, spank/records.c). A
burst of 500 jobs then costs one Python start, not 1500 (each ~1 s on a loaded host whose 2
cores slurmctld shares), and the hooks waiting their turn are files, which cost nothing.

The worker (QueueWorker) imports each kind's hook once, then forks one child per queued file
(warm: no import), at most gate.slots() at once: Prologs first, then node Epilogs (the job
epilogs wait for their verdicts), then job epilogs, each kind oldest first, users taking turns
among the job epilogs (fair_turns); each child niced (a Prolog less) and with its own time
bound counted from its start (its watchdog; the worker kills one past it). Nothing is
dropped: a file is renamed .run while a child works on it and removed when the child is gone;
an array task whose job epilog ended without recording it in the array's state (cut short at
its bound) is recorded as unclassified (hooks/array_settle.py), so the array's one summary
still goes out and says so. When the queue is empty the worker lets go of the lock, looks
once more (a job queued while it was letting go), and exits.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpualert_slurm.core.config import load_config
from gpualert_slurm.hooks import cost, gate
from gpualert_slurm.hooks import node_epilog as node_epilog_hook
from gpualert_slurm.hooks import prolog as prolog_hook
from gpualert_slurm.hooks.array_settle import EXIT_NOT_YET, finish_array_task, settle_array
from gpualert_slurm.hooks.common import DEFAULT_TIMEOUT_S, HookLog, Watchdog

QUEUE_DIR = os.environ.get("GPUALERT_QUEUE_DIR", "/run/gpualert/epilog-queue")
LOCK_NAME = "drainer.lock"  # the name the shims and older workers use (see above)
LOCK_FD = 9            # the shim's `flock -n 9`: the worker inherits the locked fd
SUFFIX, NODE_SUFFIX, PROLOG_SUFFIX, RUNNING = ".job", ".node", ".prolog", ".run"
DONE = ".done"  # a Prolog's shim waits on this FIFO for the worker's word
# what each kind of queued file is, its shim's default timeout, and its turn: the Prologs
# first (a job waits to start on each), then the node Epilogs (the job epilogs wait for
# their verdicts), then the job epilogs
KINDS = {PROLOG_SUFFIX: ("prolog", 25.0, 0), NODE_SUFFIX: ("epilog", 25.0, 1),
         SUFFIX: ("epilog-slurmctld", 55.0, 2)}
FINISH, SETTLE = "finish", "settle"  # the kinds of child that work on no queued file
PROLOG_URGENT_S = 2.0  # the Prolog shim's wait while a worker is at work (epilog.d/)
IDLE_S = 2.0           # an empty queue is looked at for this long before the worker exits
KILL_MARGIN_S = 15.0   # a child past its bound by this much is killed (its watchdog failed)
LOOK_EVERY_S = 0.2     # the queue dir is listed at most this often unless a child ended
MAX_ENV_BYTES = 1 << 20
EXIT_DONE, EXIT_CUT = 0, 75  # a child's status: job epilog returned / ended at its bound
SETTLE_GRACE_S = 60.0  # an array task ended this long ago without a record: none will come
SETTLE_POLL_S = 10.0   # how often an idle worker looks at an unsettled array
SETTLE_MAX_S = 600.0   # an array none of whose job epilogs came for this long: let go
Work = Callable[[dict[str, str], Any], None]    # (the job's env, seconds it waited in queue)
Finish = Callable[[dict[str, str], str], None]  # (the job's env, why its work did not finish)
Queued = tuple[float, str]                      # (mtime, name) of a queued file


def queue_dir() -> str:
    return os.environ.get("GPUALERT_QUEUE_DIR", QUEUE_DIR)


def _own_dir(path: str) -> None:
    st = os.lstat(path)
    if st.st_uid != os.geteuid() or not os.path.isdir(path) or os.path.islink(path) \
            or st.st_mode & 0o077:
        raise OSError(f"{path}: not this user's own 0700 directory")


def read_env(dfd: int, name: str) -> dict[str, str]:
    """A queued job's environment (NUL-separated NAME=value, as `env -0` writes it)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    try:
        data = os.read(fd, MAX_ENV_BYTES)
    finally:
        os.close(fd)
    env = {}
    for item in data.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep and k:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def queued(dfd: int, suffixes: tuple[str, ...] = (PROLOG_SUFFIX, NODE_SUFFIX, SUFFIX)
           ) -> list[Queued]:
    """(mtime, name) of the queued files of these kinds, in their turn (KINDS), each kind
    oldest first."""
    out = []
    for name in os.listdir(dfd):
        suffix = name[name.rfind("."):]
        if suffix not in suffixes or not name.split(".", 1)[0].isdigit():
            continue
        with contextlib.suppress(FileNotFoundError):
            mt = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mtime
            out.append((KINDS.get(suffix, ("", 0.0, 9))[2], mt, name))
    return [(mt, name) for _p, mt, name in sorted(out)]


def item_bound_s(suffix: str, env: dict[str, str]) -> float:
    """A queued hook's time bound as the hook computes it (its shim's GPUALERT_HOOK_TIMEOUT,
    else the shim's default, less the hook's margin of 3 s)."""
    try:
        shim = float(env.get("GPUALERT_HOOK_TIMEOUT") or KINDS[suffix][1])
    except (ValueError, KeyError):
        shim = 25.0
    return max(1.0, shim - 3.0)


def _lock_fd(qdir: str) -> int | None:
    """The inherited LOCK_FD when it is this queue's lock (the shim locked it), else our own
    lock taken now (a worker started by hand); None when another worker holds it."""
    path = os.path.join(qdir, LOCK_NAME)
    with contextlib.suppress(OSError):
        a, b = os.fstat(LOCK_FD), os.stat(path, follow_symlinks=False)
        if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
            os.set_inheritable(LOCK_FD, False)
            return LOCK_FD
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _job_epilog() -> Any:
    """The job epilog's package (hooks/job_epilog/). Imported here, once a job epilog is
    queued, not at the top: it brings the classifier, the report and mail (most of a cold
    start), and a worker started for a Prolog, whose job waits on the worker's word, need not
    pay for it."""
    from gpualert_slurm.hooks import job_epilog

    return job_epilog


def _warm(suffix: str) -> None:
    """Import and compile once in the worker what every hook of this kind needs: the children
    inherit it (the cold start was most of a short job's hook). The Prolog and the node
    Epilog are imported at the top (light); the job epilog here (_job_epilog)."""
    if suffix != SUFFIX:
        return
    with contextlib.suppress(Exception):
        job_epilog = _job_epilog()
        job_epilog.delivery.warm_up()
    with contextlib.suppress(Exception):
        # as _job_epilog: the mail channels, only once a job epilog is queued
        from gpualert_slurm import notify  # noqa: F401


class _ChildLog(HookLog):
    """The child's log: its watchdog's last line ("gave up after ...") also ends it with
    EXIT_CUT, so that the worker knows the job epilog did not finish."""

    def error(self, msg: str) -> None:
        super().error(msg)
        if msg.startswith("gave up after"):
            os._exit(EXIT_CUT)


def prolog(env: dict[str, str], waited: float) -> None:
    """The work of one queued Prolog (its shim may still wait for the worker's word, or its
    job may have started: the plugin made the dir, this joins it)."""
    log = HookLog("prolog")
    prolog_hook.prolog(env, log, Watchdog(log, DEFAULT_TIMEOUT_S),
                       queued_at=time.time() - waited)


def tell_done(dfd: int, base: str) -> None:
    """A Prolog's shim waits on <base>.done (a FIFO it made): one line releases it. Not
    waiting any more (it gave up: ENXIO, or it is gone): nothing to tell."""
    try:
        fd = os.open(base + DONE, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=dfd)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.write(fd, b"done\n")
    finally:
        os.close(fd)


def node_epilog(env: dict[str, str], waited: float) -> None:
    """The work of one queued node Epilog: in the forked child, in the job's environment."""
    log = _ChildLog("epilog")
    node_epilog_hook.node_epilog(env, log, Watchdog(log, DEFAULT_TIMEOUT_S))


def job_epilog(env: dict[str, str], waited: float) -> None:
    """The work of one queued job (the worker's default): the job epilog, in the forked
    child, in the job's own environment; its watchdog's end says EXIT_CUT."""
    gate.waited_s = waited  # in the job epilog's cost line
    log = _ChildLog("epilog-slurmctld")
    _job_epilog().job_epilog(env, log, Watchdog(log, DEFAULT_TIMEOUT_S))


WORKS: dict[str, Work] = {PROLOG_SUFFIX: prolog, NODE_SUFFIX: node_epilog, SUFFIX: job_epilog}


def _child(work: Work, env: dict[str, str], waited: Any, close: tuple[int, ...],
           nice: int = 19) -> None:
    """In the forked child: niced, the worker's fds closed, the job's environment. Never
    returns: EXIT_DONE once work returned, EXIT_CUT when it raised (or its watchdog ended
    it)."""
    code = EXIT_CUT
    try:
        for fd in close:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):  # absolute: root may raise a Prolog's priority
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        os.environ.clear()
        os.environ.update(env)
        rules = sys.modules.get("gpualert_slurm.classify.rules")
        if rules is not None:  # warmed up in the worker: this job's rule files decide
            rules.drop_if_stale()
        work(env, waited)
        code = EXIT_DONE
    except BaseException as e:
        with contextlib.suppress(BaseException):
            HookLog("epilog-slurmctld").error(
                f"job {env.get('SLURM_JOB_ID', '?')}: unexpected error: {e!r}")
    os._exit(code)


def per_user_slots(slots: int) -> int:
    """How many job epilogs of one user may be at work at once: the config's
    epilog_slots_per_user (GPUALERT_EPILOG_SLOTS_PER_USER overrides), else half the slots."""
    with contextlib.suppress(ValueError):
        n = int(os.environ.get("GPUALERT_EPILOG_SLOTS_PER_USER", ""))
        if n > 0:
            return n
    with contextlib.suppress(Exception):
        n = load_config().epilog_slots_per_user
        if n:
            return n
    return max(1, slots // 2)


def fair_turns(jobs: list[Queued], user_of: Callable[[str], str],
               busy: dict[str, int], cap: int, room: int) -> list[Queued]:
    """Which queued job epilogs start now, at most `room`: users take turns (the one with the
    fewest at work first, then the one whose oldest is oldest), each oldest first, and none
    past `cap` at work at once. One user's thousand jobs, each waiting its whole node wait
    (a nodes/ that never fills), then hold at most `cap` slots: another user's job starts at
    the next free one (issue 28), instead of behind all of them (FIFO)."""
    per: dict[str, list[Queued]] = {}
    for item in jobs:  # oldest first already
        per.setdefault(user_of(item[1]), []).append(item)
    count = dict(busy)
    heads = dict.fromkeys(per, 0)
    out: list[Queued] = []
    while len(out) < room:
        ready = [u for u in per if heads[u] < len(per[u]) and count.get(u, 0) < cap]
        if not ready:
            break
        u = min(ready, key=lambda u: (count.get(u, 0), per[u][heads[u]][0]))
        out.append(per[u][heads[u]])
        heads[u] += 1
        count[u] = count.get(u, 0) + 1
    return out


def job_user(env: dict[str, str]) -> str:
    """Whose job a queued hook is: slurmctld's SLURM_JOB_UID (a number it sets), else the
    user's name."""
    return env.get("SLURM_JOB_UID") or env.get("SLURM_JOB_USER") or ""


def _kind(name: str) -> str:
    return name[name.rfind("."):]


def _job_id(name: str) -> str:
    return name.split(".", 1)[0]


@dataclass
class Child:
    """A forked child at work."""

    name: str               # its queued file, renamed .run (settle:<array id> for SETTLE)
    started: float          # time.monotonic() at its fork
    env: dict[str, str]     # its job's environment
    kind: str               # a KINDS suffix, FINISH or SETTLE
    bound: float            # seconds; past bound + KILL_MARGIN_S it is killed


@dataclass
class Unsettled:
    """An array whose summary this worker looks after once the queue is empty."""

    env: dict[str, str]     # one of its tasks' environment
    seen: float             # time.monotonic() when one of its job epilogs was last started


class QueueWorker:
    """The one worker of a host's queue (see the module's doc), holding its lock. run() is
    its loop: reap the children that ended, kill those past their bound, start the queued
    hooks that have room, settle the arrays once the queue is empty, and exit once it has
    been empty for idle_s."""

    def __init__(self, qdir: str, dfd: int, lock: int, log: HookLog,
                 work: Work | None = None, finish: Finish | None = None,
                 idle_s: float = IDLE_S, bound_s: float | None = None) -> None:
        self.qdir, self.dfd, self.lock, self.log = qdir, dfd, lock, log
        # a given work function (tests, bench) replaces every kind's hook, and then no
        # array is finished or settled unless a finish is given too
        self.stand_in = work is not None
        self.works = dict(WORKS) if work is None else dict.fromkeys(KINDS, work)
        self.finish = finish_array_task if finish is None and work is None else finish
        self.idle_s, self.bound_s = idle_s, bound_s
        self.slots = gate.slots()
        self.cap = per_user_slots(self.slots)
        self.warmed: set[str] = set()
        self.envs: dict[str, dict[str, str]] = {}  # queued file -> its environment, read once
        self.running: dict[int, Child] = {}        # pid -> the child
        self.counts = dict.fromkeys(KINDS, 0)      # hooks started, by kind
        self.cut = 0                               # job epilogs that did not finish
        self.unsettled: dict[str, Unsettled] = {}  # array id -> its watch (settle_array)
        self.settling: set[str] = set()            # array ids with a SETTLE child at work
        self.next_settle = 0.0
        self.idle_since: float | None = None
        self.listed = 0.0                          # when the queue was last listed

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        self.recover()
        while True:
            reaped = self.reap()
            now = time.monotonic()
            self.kill_overdue(now)
            room = self.room()
            looked = any(n > 0 for n in room.values()) and (
                reaped or now - self.listed >= LOOK_EVERY_S)
            todo = queued(self.dfd) if looked else []  # a look costs a stat per queued file
            if looked:
                self.listed = now
            self.start_turns(todo, room)
            self.settle(looked, todo)
            if self.done_idling(looked, todo):
                return
            time.sleep(0.05 if self.running else 0.2)

    def recover(self) -> None:
        """Files a dead worker left .run: their child is gone once past any bound (queued
        again); FIFOs of Prolog shims that are gone (killed at Slurm's PrologEpilogTimeout)."""
        for mt, name in queued(self.dfd, (RUNNING, DONE)):
            if time.time() - mt > 60.0 + KILL_MARGIN_S:
                with contextlib.suppress(OSError):
                    if name.endswith(DONE):
                        os.unlink(name, dir_fd=self.dfd)
                    else:
                        os.rename(name, name[:-len(RUNNING)], src_dir_fd=self.dfd,
                                  dst_dir_fd=self.dfd)

    def reap(self) -> bool:
        """Reaps the children that ended; whether any did."""
        reaped = False
        while self.running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.running.clear()
                break
            if pid == 0:
                break
            reaped = True
            child = self.running.pop(pid, None)
            if child is not None:
                self.ended(child, status)
        return reaped

    def ended(self, child: Child, status: int) -> None:
        """One child ended with this wait status: its file removed, its Prolog's shim told,
        a job epilog that did not finish handed to finish (which inherits its file)."""
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        done = exit_code == EXIT_DONE
        if child.kind == SETTLE:
            aid = child.env.get("SLURM_ARRAY_JOB_ID", "")
            self.settling.discard(aid)
            if exit_code != EXIT_NOT_YET:
                self.unsettled.pop(aid, None)  # settled (or broken: not retried for ever)
            return
        if child.kind == SUFFIX and not done:
            self.cut += 1
            if self.finish is not None:
                why = "its job epilog was cut short at its time bound"
                pid = self.fork(self.finish, child.env, why)
                self.running[pid] = Child(child.name, time.monotonic(), child.env, FINISH,
                                          child.bound)
                return
        if child.kind == PROLOG_SUFFIX:
            base = child.name[:-len(PROLOG_SUFFIX + RUNNING)]
            tell_done(self.dfd, base)
            with contextlib.suppress(OSError):  # a shim still waiting keeps its open end
                os.unlink(base + DONE, dir_fd=self.dfd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(child.name, dir_fd=self.dfd)

    def kill_overdue(self, now: float) -> None:
        for pid, child in list(self.running.items()):
            if now - child.started > child.bound + KILL_MARGIN_S:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def room(self) -> dict[str, int]:
        """How many hooks of each kind may start now. The Prologs have their own pool (a job
        waits to start on each: never behind a job epilog's wait on slurmctld), the Epilogs a
        shared one, at most half of it job epilogs (their Slurm calls load slurmctld). In a
        500-task burst 2 job epilogs at once took 300 s to work through (Slurm calls ~1 s a
        job)."""
        busy = {k: sum(1 for c in self.running.values() if c.kind == k) for k in KINDS}
        shared = 2 * self.slots - busy[NODE_SUFFIX] - busy[SUFFIX]  # nice 19, mostly waiting
        return {PROLOG_SUFFIX: 2 * self.slots - busy[PROLOG_SUFFIX],  # mostly waiting on fsync
                NODE_SUFFIX: shared, SUFFIX: min(shared, self.slots - busy[SUFFIX])}

    def start_turns(self, todo: list[Queued], room: dict[str, int]) -> None:
        """Starts the queued hooks whose turn it is while their pools have room. A node
        Epilog comes after its job's Prolog on this host (which may still be queued or at
        work in its own pool in a burst): the Prolog's start record and NVML snapshot are
        what the Epilog's kernel window and counters start from."""
        prologs = {c.env.get("SLURM_JOB_ID") for c in self.running.values()
                   if c.kind == PROLOG_SUFFIX}
        prologs |= {_job_id(n) for _m, n in todo if n.endswith(PROLOG_SUFFIX)}
        for mt, name in self.turns(todo, room[SUFFIX]):
            kind = _kind(name)
            if room.get(kind, 0) <= 0:
                continue
            if kind == NODE_SUFFIX and _job_id(name) in prologs:
                continue
            room[kind] -= 1
            if kind != PROLOG_SUFFIX:  # the two share one pool
                room[NODE_SUFFIX if kind == SUFFIX else SUFFIX] -= 1
            self.start(mt, name, kind)

    def turns(self, todo: list[Queued], job_room: int) -> list[Queued]:
        """The queued files in the order they may start: the Prologs and node Epilogs in
        queue order, then the job epilogs whose user's turn it is (fair_turns)."""
        jobs = [q for q in todo if q[1].endswith(SUFFIX)]
        if not jobs:
            return todo
        busy_by_user: dict[str, int] = {}
        for c in self.running.values():
            if c.kind == SUFFIX:
                u = job_user(c.env)
                busy_by_user[u] = busy_by_user.get(u, 0) + 1
        others = [q for q in todo if not q[1].endswith(SUFFIX)]
        return others + fair_turns(jobs, lambda n: job_user(self.env_of(n)), busy_by_user,
                                   self.cap, max(0, job_room))

    def env_of(self, name: str) -> dict[str, str]:
        """A queued file's environment, read once ({} when it cannot be read)."""
        if name not in self.envs:
            try:
                self.envs[name] = read_env(self.dfd, name)
            except OSError:
                return {}
        return self.envs[name]

    def start(self, mt: float, name: str, kind: str) -> None:
        """Renames the queued file .run and forks its hook (or drops a file that names no
        job, telling its Prolog's shim)."""
        run_name = name + RUNNING
        try:
            env = self.envs.pop(name, None) or read_env(self.dfd, name)
            os.rename(name, run_name, src_dir_fd=self.dfd, dst_dir_fd=self.dfd)
        except OSError as e:
            if e.errno != errno.ENOENT:
                _bounded(self.log.error, f"queue {self.qdir}/{name}: {e}")
            return
        if not env.get("SLURM_JOB_ID", "").isdigit():
            _bounded(self.log.error, f"queue {self.qdir}/{name}: no SLURM_JOB_ID; dropped")
            with contextlib.suppress(OSError):
                os.unlink(run_name, dir_fd=self.dfd)
            if kind == PROLOG_SUFFIX:
                tell_done(self.dfd, name[:-len(PROLOG_SUFFIX)])
            return
        if kind not in self.warmed and not self.stand_in:
            _warm(kind)
            self.warmed.add(kind)
        bound = self.bound_s if self.bound_s is not None else item_bound_s(kind, env)
        pid = self.fork(self.works[kind], env, max(0.0, time.time() - mt), kind)
        self.running[pid] = Child(run_name, time.monotonic(), env, kind, bound)
        self.counts[kind] += 1
        aid = env.get("SLURM_ARRAY_JOB_ID", "")
        if not self.stand_in and kind == SUFFIX and aid.isdigit() \
                and env.get("SLURM_ARRAY_TASK_ID", "").isdigit():
            self.unsettled[aid] = Unsettled(env, time.monotonic())

    def fork(self, fn: Work, env: dict[str, str], arg: Any, kind: str = "") -> int:
        """Forks a child that runs fn(env, arg) (_child). A Prolog whose shim may still wait
        for it (queued less than PROLOG_URGENT_S ago) is on its job's way to start: not
        niced. The rest at 19, and so are the Prologs of a burst, which no job waits for any
        more (the plugin made their dirs): at nice 0, 500 of them took a quarter of a core
        from slurmctld while the array's tasks launched."""
        urgent = kind == PROLOG_SUFFIX and isinstance(arg, float) and arg < PROLOG_URGENT_S
        pid = os.fork()
        if pid == 0:
            _child(fn, env, arg, (self.lock, self.dfd), 0 if urgent else 19)
        return pid

    def settle(self, looked: bool, todo: list[Queued]) -> None:
        """Once the queue is empty and only SETTLE children are at work, at most every
        SETTLE_POLL_S: a SETTLE child for each array whose summary no last task sent
        (settle_array). An array not seen for SETTLE_MAX_S is let go."""
        now = time.monotonic()
        for aid, u in list(self.unsettled.items()):
            if now - u.seen > SETTLE_MAX_S and aid not in self.settling:
                del self.unsettled[aid]
        pending = [a for a in self.unsettled if a not in self.settling]
        if not (pending and looked and not todo and now >= self.next_settle
                and all(c.kind == SETTLE for c in self.running.values())):
            return
        for aid in pending:
            env = self.unsettled[aid].env
            self.settling.add(aid)
            pid = self.fork(settle_array, env, SETTLE_GRACE_S)
            self.running[pid] = Child(f"settle:{aid}", now, env, SETTLE, 3 * DEFAULT_TIMEOUT_S)
        self.next_settle = now + SETTLE_POLL_S

    def done_idling(self, looked: bool, todo: list[Queued]) -> bool:
        """Whether the worker is done: nothing at work, queued or unsettled for idle_s. It
        lets go of the lock, then looks once more: a shim that found the lock held queued
        its job before it tried the lock, so this look sees it."""
        if self.running or todo or self.unsettled:
            self.idle_since = None
            return False
        if not looked:
            return False
        if self.idle_since is None:
            self.idle_since = time.monotonic()
            return False
        if time.monotonic() - self.idle_since < self.idle_s:
            return False
        fcntl.flock(self.lock, fcntl.LOCK_UN)
        if not queued(self.dfd):
            return True
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True  # a new worker has the queue now
        self.idle_since = None
        return False


def run_worker(work: Work | None = None, finish: Finish | None = None,
               idle_s: float = IDLE_S, bound_s: float | None = None) -> int:
    """The worker of this host's queue, if no other has it (see the module's doc):
    work(env, waited_s) runs in a forked child per queued file (default: the hook of its
    kind); finish(env, why) in another when a job epilog's work did not end with EXIT_DONE
    (default: an array task's unclassified record). Returns 0 whatever happens."""
    log = HookLog("queue")
    t0 = time.monotonic()
    qdir = queue_dir()
    try:
        _own_dir(qdir)
        lock = _lock_fd(qdir)
    except OSError as e:
        log.error(f"queue {qdir}: {e}; queued hooks wait for the next worker")
        return 0
    if lock is None:
        return 0  # another worker has the queue
    dfd = os.open(qdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with contextlib.suppress(Exception):  # the hooks' log of the cluster that started us
        log.set_spool(load_config().spool)
    worker = QueueWorker(qdir, dfd, lock, log, work, finish, idle_s, bound_s)
    worker.run()
    os.close(dfd)
    u = cost.usage()
    c = worker.counts
    _bounded(log.info, f"worked through {c[SUFFIX]} job epilog(s) ({worker.cut} cut short), "
             f"{c[NODE_SUFFIX]} node Epilog(s) and {c[PROLOG_SUFFIX]} Prolog(s) in "
             f"{time.monotonic() - t0:.1f} s; "
             f"worker cost cpu {u['cpu_s'] - u['child_cpu_s']:.3f} s, peak rss "
             f"{u['rss_mib']:.1f} MiB")
    return 0


def _bounded(emit: Callable[[str], None], msg: str, timeout_s: float = 3.0) -> None:
    """A log line of the worker's own: the hooks' log is in the spool, which may hang (a
    stalled network mount); the worker does not wait on it for long."""
    t = threading.Thread(target=emit, args=(msg,), daemon=True)
    t.start()
    t.join(timeout_s)


def main() -> int:
    try:
        return run_worker()
    except Exception as e:  # a bug of ours: the queue stays for the next worker
        with contextlib.suppress(Exception):
            HookLog("queue").error(f"unexpected error: {e!r}")
        return 0
