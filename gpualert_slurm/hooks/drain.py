"""`gpualert hook drain`: the hooks' queue on this host and its one long-lived worker.

The shims (epilog.d/) start no interpreter per job: each writes the job's environment (what
Slurm gave it, NUL-separated, `env -0`) to QUEUE_DIR/<jobid>.<pid>.<kind> (.prolog, .node:
the node Epilog, .job: the job epilog) and starts this drainer only when none holds
QUEUE_DIR/drainer.lock (flock(1) on its fd LOCK_FD, which the drainer inherits). The Epilog
shims return at once; the Prolog's waits (bounded, on a FIFO, without CPU) for the drainer's
word for a few seconds, so that job.json comes before the tasks when the drainer is free; the
job's spool dir does not depend on it (the plugin makes it, spank/records.c). A burst of 500
jobs then costs one Python start, not 1500 (each ~1 s on a loaded host whose 2 cores slurmctld
shares), and the hooks waiting their turn are files, which cost nothing.

The drainer imports each kind's hook once, then forks one child per queued file (warm: no
import), at most gate.slots() at once: Prologs first, then node Epilogs (the job epilogs wait
for their verdicts), then job epilogs, each kind oldest first; each child niced (a Prolog
less) and with its own time bound counted from its start (its watchdog; the drainer kills one
past it). Nothing is dropped: a file is renamed .run while a child works on it and removed
when the child is gone; an array task whose job epilog ended without recording it in the
array's state (cut short at its bound) is recorded as unclassified, so the array's one
summary still goes out and says so. When the queue is empty the drainer lets go of the lock,
looks once more (a job queued while it was letting go), and exits.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from gpualert_slurm.hooks import gate
from gpualert_slurm.hooks.common import DEFAULT_TIMEOUT_S, HookLog, Watchdog

QUEUE_DIR = os.environ.get("GPUALERT_QUEUE_DIR", "/run/gpualert/epilog-queue")
LOCK_NAME = "drainer.lock"
LOCK_FD = 9            # the shim's `flock -n 9`: the drainer inherits the locked fd
SUFFIX, NODE_SUFFIX, PROLOG_SUFFIX, RUNNING = ".job", ".node", ".prolog", ".run"
DONE = ".done"  # a Prolog's shim waits on this FIFO for the drainer's word
# what each kind of queued file is, its shim's default timeout, and its turn: the Prologs
# first (a job waits to start on each), then the node Epilogs (the job epilogs wait for
# their verdicts), then the job epilogs
KINDS = {PROLOG_SUFFIX: ("prolog", 25.0, 0), NODE_SUFFIX: ("epilog", 25.0, 1),
         SUFFIX: ("epilog-slurmctld", 55.0, 2)}
PROLOG_URGENT_S = 2.0  # the Prolog shim's wait while a drainer is at work (epilog.d/)
IDLE_S = 2.0           # an empty queue is looked at for this long before the drainer exits
KILL_MARGIN_S = 15.0   # a child past its bound by this much is killed (its watchdog failed)
MAX_ENV_BYTES = 1 << 20
EXIT_DONE, EXIT_CUT = 0, 75  # a child's status: job epilog returned / ended at its bound
EXIT_NOT_YET = 76      # an array's settling: not yet
SETTLE_GRACE_S = 60.0  # an array task ended this long ago without a record: none will come
SETTLE_POLL_S = 10.0   # how often an idle drainer looks at an unsettled array
SETTLE_MAX_S = 600.0   # an array none of whose job epilogs came for this long: let go
Work = Callable[[dict[str, str], Any], None]    # (the job's env, seconds it waited in queue)
Finish = Callable[[dict[str, str], str], None]  # (the job's env, why its work did not finish)


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
           ) -> list[tuple[float, str]]:
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
    lock taken now (a drainer started by hand); None when another drainer holds it."""
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
    """The job epilog's package (hooks/job_epilog/)."""
    from gpualert_slurm.hooks import job_epilog

    return job_epilog


def _warm(suffix: str) -> None:
    """Import and compile once in the drainer what every hook of this kind needs: the children
    inherit it (the cold start was most of a short job's hook)."""
    if suffix == NODE_SUFFIX:
        with contextlib.suppress(Exception):
            _node_epilog()
        return
    if suffix == PROLOG_SUFFIX:
        with contextlib.suppress(Exception):
            from gpualert_slurm.hooks import prolog  # noqa: F401
        return
    with contextlib.suppress(Exception):
        from gpualert_slurm.hooks.job_epilog.delivery import warm_up

        _job_epilog()
        warm_up()
    with contextlib.suppress(Exception):
        from gpualert_slurm import notify  # noqa: F401


def _node_epilog() -> Any:
    """The node Epilog's function (hooks/node_epilog.py)."""
    from gpualert_slurm.hooks.node_epilog import node_epilog

    return node_epilog


class _ChildLog(HookLog):
    """The child's log: its watchdog's last line ("gave up after ...") also ends it with
    EXIT_CUT, so that the drainer knows the job epilog did not finish."""

    def error(self, msg: str) -> None:
        super().error(msg)
        if msg.startswith("gave up after"):
            os._exit(EXIT_CUT)


def prolog(env: dict[str, str], waited: float) -> None:
    """The work of one queued Prolog (its shim may still wait for the drainer's word, or its
    job may have started: the plugin made the dir, this joins it)."""
    from gpualert_slurm.hooks import prolog as p

    log = HookLog("prolog")
    p.prolog(env, log, Watchdog(log, DEFAULT_TIMEOUT_S), queued_at=time.time() - waited)


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
    _node_epilog()(env, log, Watchdog(log, DEFAULT_TIMEOUT_S))


def job_epilog(env: dict[str, str], waited: float) -> None:
    """The work of one queued job (the drainer's default): the job epilog, in the forked
    child, in the job's own environment; its watchdog's end says EXIT_CUT."""
    gate.waited_s = waited  # in the job epilog's cost line
    log = _ChildLog("epilog-slurmctld")
    _job_epilog().job_epilog(env, log, Watchdog(log, DEFAULT_TIMEOUT_S))


def _child(work: Work, env: dict[str, str], waited: Any, close: tuple[int, ...],
           nice: int = 19) -> None:
    """In the forked child: niced, the drainer's fds closed, the job's environment. Never
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
        if rules is not None:  # warmed up in the drainer: this job's rule files decide
            rules.drop_if_stale()
        work(env, waited)
        code = EXIT_DONE
    except BaseException as e:
        with contextlib.suppress(BaseException):
            HookLog("epilog-slurmctld").error(
                f"job {env.get('SLURM_JOB_ID', '?')}: unexpected error: {e!r}")
    os._exit(code)


def task_recorded(env: dict[str, str]) -> bool | None:
    """Whether the array's state holds this task's record (not just its in-flight mark);
    None when the job is no array task or its state cannot be read."""
    from gpualert_slurm.core.config import ConfigError, load_config
    from gpualert_slurm.core.spool import SpoolError, read_json_nofollow

    array_id, task_id = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    if not (array_id.isdigit() and task_id.isdigit()):
        return None
    try:
        spool = load_config(env.get("GPUALERT_CONFIG") or None).spool
        d = os.path.join(spool, ".gpualert", "arrays")
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = read_json_nofollow(f"{array_id}.json", dfd, owners=(0, os.geteuid()))
        finally:
            os.close(dfd)
    except FileNotFoundError:
        return False
    except (OSError, SpoolError, ConfigError, ValueError):
        return None
    rec = (st.get("tasks") or {}).get(task_id) if isinstance(st, dict) else None
    return isinstance(rec, dict) and not rec.get("in_flight")


def record_unclassified(env: dict[str, str], why: str) -> None:
    """An array task whose job epilog was cut short: recorded in the array's state as failed
    (by its exit code) and unclassified, and the array's summary sent if it was the last one.
    In a forked child (the job's environment, its own bound)."""
    log = HookLog("epilog-slurmctld")
    Watchdog(log, DEFAULT_TIMEOUT_S)
    from gpualert_slurm.hooks.common import load_config_logged

    cfg = load_config_logged(log)
    if cfg is None:
        return
    log.set_spool(cfg.spool)
    _record(cfg, env, unclassified_verdict(env, why), log, why)


def _record(cfg: Any, env: dict[str, str], v: dict[str, Any], log: HookLog, why: str) -> None:
    """One task's record in its array's state (the job epilog's own array_step: exactly one
    task sends the summary), and the summary when it is the last."""
    jobid, array_id, task_id = (env.get("SLURM_JOB_ID", "?"), env["SLURM_ARRAY_JOB_ID"],
                                env["SLURM_ARRAY_TASK_ID"])
    from gpualert_slurm.hooks.job_epilog.arrays import array_step
    from gpualert_slurm.hooks.job_epilog.context import Budget, JobEpilog
    from gpualert_slurm.hooks.job_epilog.delivery import send_array
    from gpualert_slurm.hooks.jobspool import job_options

    ctx = JobEpilog(cfg=cfg, opts=job_options(env, cfg, log), env=env, log=log,
                    budget=Budget(DEFAULT_TIMEOUT_S))
    s = array_step(ctx, v)
    log.info(f"job {jobid}: array {array_id} task {task_id} recorded unclassified ({why})")
    if s is not None:
        send_array(ctx, s)


def array_state(env: dict[str, str]) -> dict[str, Any] | None:
    """The array's state (root's, <spool>/.gpualert/arrays/<id>.json) read without its lock;
    {} when there is none yet, None when it cannot be read."""
    from gpualert_slurm.core.config import ConfigError, load_config
    from gpualert_slurm.core.spool import SpoolError, read_json_nofollow

    array_id = env.get("SLURM_ARRAY_JOB_ID", "")
    try:
        spool = load_config(env.get("GPUALERT_CONFIG") or None).spool
        dfd = os.open(os.path.join(spool, ".gpualert", "arrays"),
                      os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = read_json_nofollow(f"{array_id}.json", dfd, owners=(0, os.geteuid()))
        finally:
            os.close(dfd)
    except FileNotFoundError:
        return {}
    except (OSError, SpoolError, ConfigError, ValueError):
        return None
    return st if isinstance(st, dict) else None


def settle_array(env: dict[str, str], grace_s: float) -> None:
    """In a forked child, once the queue is empty: an array whose summary has not gone out
    although no task of it is still active in Slurm, in the queue, or ended less than grace_s
    ago, waits on tasks whose job epilog never recorded them (seen: 84 of 500 in a burst on
    an overloaded controller, with no trace of their EpilogSlurmctld). Each is recorded
    unclassified (failed unless accounting says COMPLETED), so the last one sends the summary.
    Ends EXIT_NOT_YET while that cannot be said yet."""
    from gpualert_slurm.hooks import array_acct
    from gpualert_slurm.hooks.common import load_config_logged

    log = HookLog("epilog-slurmctld")
    Watchdog(log, 3 * DEFAULT_TIMEOUT_S)
    array_id = env["SLURM_ARRAY_JOB_ID"]
    st = array_state(env)
    if st is None:
        return
    if st.get("sent"):
        return
    active = array_acct.active_tasks(array_id)
    acct = array_acct.accounted(array_id)
    if active is None or acct is None:
        os._exit(EXIT_NOT_YET)
    now = time.time()
    tasks = st.get("tasks") or {}
    done = {t for t, r in tasks.items() if isinstance(r, dict) and not r.get("in_flight")}
    missing = {t: a for t, a in acct.items() if t not in done}
    if active - done:
        os._exit(EXIT_NOT_YET)  # pending, running or completing: its own epilog may come
    if not missing:
        return  # nothing to wait for: the last record sends it (or the array had no failure)
    if any(not end or now - end < grace_s for _j, end, _s in missing.values()):
        os._exit(EXIT_NOT_YET)
    cfg = load_config_logged(log)
    if cfg is None:
        return
    log.set_spool(cfg.spool)
    for t, (jobid, _end, state) in sorted(missing.items(), key=lambda kv: int(kv[0])):
        e = dict(env, SLURM_JOB_ID=jobid, SLURM_ARRAY_TASK_ID=t,
                 SLURM_JOB_EXIT_CODE2="0:0" if state == "COMPLETED" else "1:0")
        why = ("its job epilog did not finish" if t in tasks
               else "no job epilog ran for it (slurmctld started none, or it was lost)")
        _record(cfg, e, unclassified_verdict(e, why), log, why)


def unclassified_verdict(env: dict[str, str], why: str) -> dict[str, Any]:
    """What the array's summary records of a task gpualert could not classify: failed by its
    exit code (SLURM_JOB_EXIT_CODE2, from slurmctld), class unknown, and why."""
    jobid = env.get("SLURM_JOB_ID", "?")
    failed = True
    code = env.get("SLURM_JOB_EXIT_CODE2", "")
    if ":" in code:
        failed = code != "0:0"
    return {"job_id": jobid,
            "array": {"job_id": env.get("SLURM_ARRAY_JOB_ID"),
                      "task_id": env.get("SLURM_ARRAY_TASK_ID")},
            "failed": failed,
            "verdict": {"class": "unknown", "evidence": [],
                        "hint": f"not classified: {why}; its logs are in the spool "
                                f"(gpualert show {jobid})"},
            "job": {"name": env.get("SLURM_JOB_NAME"), "user": env.get("SLURM_JOB_USER")}}


def per_user_slots(slots: int) -> int:
    """How many job epilogs of one user may be at work at once: the config's
    epilog_slots_per_user (GPUALERT_EPILOG_SLOTS_PER_USER overrides), else half the slots."""
    with contextlib.suppress(ValueError):
        n = int(os.environ.get("GPUALERT_EPILOG_SLOTS_PER_USER", ""))
        if n > 0:
            return n
    with contextlib.suppress(Exception):
        from gpualert_slurm.core.config import load_config

        n = load_config().epilog_slots_per_user
        if n:
            return n
    return max(1, slots // 2)


def fair_turns(jobs: list[tuple[float, str]], user_of: Callable[[str], str],
               busy: dict[str, int], cap: int, room: int) -> list[tuple[float, str]]:
    """Which queued job epilogs start now, at most `room`: users take turns (the one with the
    fewest at work first, then the one whose oldest is oldest), each oldest first, and none
    past `cap` at work at once. One user's thousand jobs, each waiting its whole node wait
    (a nodes/ that never fills), then hold at most `cap` slots: another user's job starts at
    the next free one (issue 28), instead of behind all of them (FIFO)."""
    per: dict[str, list[tuple[float, str]]] = {}
    for item in jobs:  # oldest first already
        per.setdefault(user_of(item[1]), []).append(item)
    count = dict(busy)
    heads = dict.fromkeys(per, 0)
    out: list[tuple[float, str]] = []
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


def drain(work: Work | None = None, finish: Finish | None = None, idle_s: float = IDLE_S,
          bound_s: float | None = None) -> int:
    """The drainer's loop (see the module's doc): work(env, waited_s) runs in a forked child
    per queued file (default: the node Epilog or the job epilog, by its kind); finish(env,
    why) in another when a job epilog's work did not end with EXIT_DONE (default: an array
    task's unclassified record). Returns 0 whatever happens."""
    log = HookLog("drain")
    t0 = time.monotonic()
    qdir = queue_dir()
    try:
        _own_dir(qdir)
        lock = _lock_fd(qdir)
    except OSError as e:
        log.error(f"queue {qdir}: {e}; queued hooks wait for the next drainer")
        return 0
    if lock is None:
        return 0  # another drainer has the queue
    dfd = os.open(qdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with contextlib.suppress(Exception):  # the hooks' log of the cluster that started us
        from gpualert_slurm.core.config import load_config

        log.set_spool(load_config().spool)
    works: dict[str, Work] = {PROLOG_SUFFIX: prolog, NODE_SUFFIX: node_epilog,
                              SUFFIX: job_epilog} if work is None else dict.fromkeys(KINDS, work)
    if finish is None and work is None:
        finish = _finish_array_task
    warmed: set[str] = set()
    slots = gate.slots()
    cap = per_user_slots(slots)
    envs: dict[str, dict[str, str]] = {}  # queued file -> its environment, read once

    def env_of(name: str) -> dict[str, str]:
        if name not in envs:
            try:
                envs[name] = read_env(dfd, name)
            except OSError:
                return {}
        return envs[name]
    running: dict[int, tuple[str, float, dict[str, str], str, float]] = {}
    counts = dict.fromkeys(KINDS, 0)
    cut = 0
    # arrays whose summary this drainer looks after once the queue is empty (settle_array):
    # array id -> (a task's environment, when one of its job epilogs was last seen)
    unsettled: dict[str, tuple[dict[str, str], float]] = {}
    settling: set[str] = set()
    next_settle = 0.0
    # files a dead drainer left .run: their child is gone once past any bound; FIFOs of
    # Prolog shims that are gone (killed at Slurm's PrologEpilogTimeout)
    for mt, name in queued(dfd, (RUNNING, DONE)):
        if time.time() - mt > 60.0 + KILL_MARGIN_S:
            with contextlib.suppress(OSError):
                if name.endswith(DONE):
                    os.unlink(name, dir_fd=dfd)
                else:
                    os.rename(name, name[:-len(RUNNING)], src_dir_fd=dfd, dst_dir_fd=dfd)

    def fork(fn: Work, env: dict[str, str], arg: Any, kind: str = "") -> int:
        # A Prolog whose shim may still wait for it (queued less than PROLOG_URGENT_S ago) is
        # on its job's way to start: not niced. The rest at 19, and so are the Prologs of a
        # burst, which no job waits for any more (the plugin made their dirs): at nice 0, 500
        # of them took a quarter of a core from slurmctld while the array's tasks launched.
        urgent = kind == PROLOG_SUFFIX and isinstance(arg, float) and arg < PROLOG_URGENT_S
        pid = os.fork()
        if pid == 0:
            _child(fn, env, arg, (lock, dfd), 0 if urgent else 19)
        return pid

    idle_since: float | None = None
    listed = 0.0
    while True:
        # reap the children that ended; kill those past their bound
        reaped = False
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                running.clear()
                break
            if pid == 0:
                break
            name, _t, env, kind, bound = running.pop(pid, ("", 0.0, {}, "", 0.0))
            reaped = True
            if not name:
                continue
            done = os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_DONE
            if kind == "settle":
                aid = env.get("SLURM_ARRAY_JOB_ID", "")
                settling.discard(aid)
                if done or not (os.WIFEXITED(status)
                                and os.WEXITSTATUS(status) == EXIT_NOT_YET):
                    unsettled.pop(aid, None)  # settled (or broken: not retried for ever)
                continue
            if kind == SUFFIX and not done:
                cut += 1
                if finish is not None:
                    why = "its job epilog was cut short at its time bound"
                    running[fork(finish, env, why)] = (name, time.monotonic(), env, "finish",
                                                       bound)
                    continue
            if kind == PROLOG_SUFFIX:
                base = name[:-len(PROLOG_SUFFIX + RUNNING)]
                tell_done(dfd, base)
                with contextlib.suppress(OSError):  # a shim still waiting keeps its open end
                    os.unlink(base + DONE, dir_fd=dfd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dfd)
        now = time.monotonic()
        for pid, (_n, started, _e, _k, bound) in list(running.items()):
            if now - started > bound + KILL_MARGIN_S:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        # start the queued hooks while their pools have room: the Prologs' own (a job waits
        # to start on each: never behind a job epilog's wait on slurmctld), the Epilogs'
        # shared, at most half of it job epilogs (their Slurm calls load slurmctld). In a
        # 500-task burst 2 job epilogs at once took 300 s to drain (Slurm calls ~1 s a job).
        busy = {k: sum(1 for r in running.values() if r[3] == k) for k in KINDS}
        shared = 2 * slots - busy[NODE_SUFFIX] - busy[SUFFIX]  # at nice 19, mostly waiting
        room = {PROLOG_SUFFIX: 2 * slots - busy[PROLOG_SUFFIX],  # mostly waiting on fsync
                NODE_SUFFIX: shared, SUFFIX: min(shared, slots - busy[SUFFIX])}
        looked = any(n > 0 for n in room.values()) and (reaped or now - listed >= 0.2)
        todo = queued(dfd) if looked else []  # a look costs a stat per queued file
        if looked:
            listed = now
        # a node Epilog comes after its job's Prolog on this host (which may still be queued
        # or at work in its own pool in a burst): the Prolog's start record and NVML snapshot
        # are what the Epilog's kernel window and counters start from
        prologs = {r[2].get("SLURM_JOB_ID") for r in running.values() if r[3] == PROLOG_SUFFIX}
        prologs |= {n.split(".", 1)[0] for _m, n in todo if n.endswith(PROLOG_SUFFIX)}
        busy_by_user: dict[str, int] = {}
        for r in running.values():
            if r[3] == SUFFIX:
                busy_by_user[job_user(r[2])] = busy_by_user.get(job_user(r[2]), 0) + 1
        jobs = [t for t in todo if t[1].endswith(SUFFIX)]
        turns = [t for t in todo if not t[1].endswith(SUFFIX)] + fair_turns(
            jobs, lambda n: job_user(env_of(n)), busy_by_user, cap,
            max(0, room[SUFFIX])) if jobs else todo
        for mt, name in turns:
            kind = name[name.rfind("."):]
            if room.get(kind, 0) <= 0:
                continue
            if kind == NODE_SUFFIX and name.split(".", 1)[0] in prologs:
                continue
            room[kind] -= 1
            if kind != PROLOG_SUFFIX:  # the two share one pool
                room[NODE_SUFFIX if kind == SUFFIX else SUFFIX] -= 1
            run_name = name + RUNNING
            try:
                env = envs.pop(name, None) or read_env(dfd, name)
                os.rename(name, run_name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except OSError as e:
                if e.errno != errno.ENOENT:
                    _bounded(log.error, f"queue {qdir}/{name}: {e}")
                continue
            if not env.get("SLURM_JOB_ID", "").isdigit():
                _bounded(log.error, f"queue {qdir}/{name}: no SLURM_JOB_ID; dropped")
                with contextlib.suppress(OSError):
                    os.unlink(run_name, dir_fd=dfd)
                if kind == PROLOG_SUFFIX:
                    tell_done(dfd, name[:-len(PROLOG_SUFFIX)])
                continue
            if kind not in warmed and work is None:
                _warm(kind)
                warmed.add(kind)
            bound = bound_s if bound_s is not None else item_bound_s(kind, env)
            running[fork(works[kind], env, max(0.0, time.time() - mt), kind)] = (
                run_name, time.monotonic(), env, kind, bound)
            counts[kind] += 1
            aid = env.get("SLURM_ARRAY_JOB_ID", "")
            if work is None and kind == SUFFIX and aid.isdigit() \
                    and env.get("SLURM_ARRAY_TASK_ID", "").isdigit():
                unsettled[aid] = (env, time.monotonic())
        # the queue is empty: the arrays' summaries that no last task sent (settle_array)
        now = time.monotonic()
        for aid, (_e, seen) in list(unsettled.items()):
            if now - seen > SETTLE_MAX_S and aid not in settling:
                del unsettled[aid]
        pending = [a for a in unsettled if a not in settling]
        if pending and looked and not todo and now >= next_settle \
                and all(k == "settle" for _n, _t, _e, k, _b in running.values()):
            for aid in pending:
                e = unsettled[aid][0]
                settling.add(aid)
                running[fork(settle_array, e, SETTLE_GRACE_S)] = (
                    f"settle:{aid}", now, e, "settle", 3 * DEFAULT_TIMEOUT_S)
            next_settle = now + SETTLE_POLL_S
        if running or todo or unsettled or not looked:
            idle_since = None if (running or todo or unsettled) else idle_since
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= idle_s:
            # let go, then look once more: a shim that found the lock held queued its job
            # before it tried the lock, so this look sees it
            fcntl.flock(lock, fcntl.LOCK_UN)
            if not queued(dfd):
                break
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                break  # a new drainer has the queue now
            idle_since = None
        time.sleep(0.05 if running else 0.2)
    os.close(dfd)
    from gpualert_slurm.hooks import cost

    u = cost.usage()
    _bounded(log.info, f"drained {counts[SUFFIX]} job epilog(s) ({cut} cut short), "
             f"{counts[NODE_SUFFIX]} node Epilog(s) and {counts[PROLOG_SUFFIX]} Prolog(s) in "
             f"{time.monotonic() - t0:.1f} s; "
             f"drainer cost cpu {u['cpu_s'] - u['child_cpu_s']:.3f} s, peak rss "
             f"{u['rss_mib']:.1f} MiB")
    return 0


def _bounded(emit: Callable[[str], None], msg: str, timeout_s: float = 3.0) -> None:
    """A log line of the drainer's own: the hooks' log is in the spool, which may hang (a
    stalled network mount); the drainer does not wait on it for long."""
    import threading

    t = threading.Thread(target=emit, args=(msg,), daemon=True)
    t.start()
    t.join(timeout_s)


def _finish_array_task(env: dict[str, str], why: str) -> None:
    """After a cut-short job epilog: an array task it did not record is recorded now."""
    if task_recorded(env) is False:
        record_unclassified(env, why)


def main() -> int:
    try:
        return drain()
    except Exception as e:  # a bug of ours: the queue stays for the next drainer
        with contextlib.suppress(Exception):
            HookLog("drain").error(f"unexpected error: {e!r}")
        return 0
