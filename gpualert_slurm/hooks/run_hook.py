"""The one runner every hook uses: its log, a watchdog at the time bound, the job-id check,
and no exception out of it. A Prolog or Epilog that fails drains the node, so whatever happens
in the hook's body, run_hook returns 0 and logs the fault.

Also what a hook needs of its own process: its age (the shim's `timeout` counts from the
process's start), and detaching a worker from Slurm."""

from __future__ import annotations

import os
from collections.abc import Callable

from gpualert_slurm.hooks import cost
from gpualert_slurm.hooks.common import DEFAULT_TIMEOUT_S, HookLog, Watchdog, shim_bound_s

# a hook's body: the job's environment (SLURM_JOB_ID checked), its log, its watchdog
HookBody = Callable[[dict[str, str], HookLog, Watchdog], None]


def run_hook(name: str, body: HookBody) -> int:
    """Run body under a watchdog; 0 whatever happens."""
    log = HookLog(name)
    try:
        watchdog = Watchdog(log, min(DEFAULT_TIMEOUT_S, shim_bound_s()))
        env = dict(os.environ)
        if not env.get("SLURM_JOB_ID", "").isdigit():
            log.error(f"SLURM_JOB_ID={env.get('SLURM_JOB_ID')!r}: not run by Slurm? nothing done")
            return 0
        body(env, log, watchdog)
        watchdog.stop()
    except Exception as e:  # a hook that fails drains the node: never
        log.error(f"job {os.environ.get('SLURM_JOB_ID', '?')}: unexpected error: {e!r}")
    return 0


def process_age() -> float:
    """Seconds since this process started: the shim's `timeout` counts from there, and on a
    loaded controller the interpreter's start-up alone can take seconds."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return max(0.0, up - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def shim_left_s() -> float:
    """What the shim's bound leaves this process now (the watchdog counts from its own start,
    the shim from the process's)."""
    return shim_bound_s() - process_age()


def detach() -> bool:
    """Fork a worker in its own session, reparented to init; True in the worker, False in the
    caller, which returns to Slurm at once. Slurm keeps a job COMPLETING (and, seen on 22.05,
    schedules nothing new on its nodes) while EpilogSlurmctld runs: the report's work must not
    hold the cluster. The worker keeps its own bound (watchdog) and writes the pending marker,
    so a report it cannot finish is finished later (job_epilog.pending)."""
    cost.before_fork()
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)  # the middle child exits at once
        return False
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        # Let go of whatever the caller reads (Slurm may wait for EOF on the hook's output).
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        return True
    except BaseException:
        os._exit(0)
