"""A bound on the job epilog's detached workers, so that a burst of ending jobs (a 500-task
array failing within a minute) never starves slurmctld on its own host: at most slots() workers
do their work at once (flock on slot files in a root-only local directory), each niced (on top
of the shim's nice: 19, the lowest), the others sleeping, which costs no CPU. A worker that
waits longer than WAIT_S goes on anyway: the gate trades report latency for the controller's,
never the report.

The worker that gets a slot forks a fresh child for the work (the slot's lock goes with its
file descriptor): the job epilog's own time bound then counts from when its work starts, not
from when it began to wait."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time

GATE_DIR = os.environ.get("GPUALERT_GATE_DIR", "/run/gpualert/gate")
WAIT_S = 900.0
NICE = 10
waited_s: float | None = None  # in the worker: how long it waited for its slot


def slots() -> int:
    """Twice the controller's CPUs, at least four (GPUALERT_GATE_SLOTS overrides): the workers
    are niced to the bottom, so slurmctld keeps its share of the CPUs whatever their number;
    a slot is also held while its worker waits for the nodes' verdicts, which costs no CPU
    (one slot on 2 CPUs: workers waiting 20 s each for a starved node's verdict)."""
    try:
        n = int(os.environ.get("GPUALERT_GATE_SLOTS", ""))
        if n > 0:
            return n
    except ValueError:
        pass
    return max(4, 2 * (os.cpu_count() or 2))


def _slot_fds(n: int) -> list[int]:
    os.makedirs(GATE_DIR, mode=0o700, exist_ok=True)
    st = os.lstat(GATE_DIR)
    if st.st_uid != os.geteuid() or not os.path.isdir(GATE_DIR) or os.path.islink(GATE_DIR):
        raise OSError(f"{GATE_DIR}: not this user's own directory")
    return [os.open(os.path.join(GATE_DIR, f"slot-{i}"),
                    os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            for i in range(n)]


def enter(wait_s: float = WAIT_S) -> float:
    """Wait for a slot (bounded), then continue in a fresh child that holds it; the caller's
    process exits. Returns the seconds waited (in the child). Any fault of the gate itself:
    go on at once, ungated."""
    t0 = time.monotonic()
    with_slot = None
    try:
        fds = _slot_fds(slots())
    except OSError:
        fds = []
    delay = 0.05
    while fds and with_slot is None and time.monotonic() - t0 < wait_s:
        for fd in fds:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                with_slot = fd
                break
            except BlockingIOError:
                continue
            except OSError:
                with_slot = -1  # flock not usable here: ungated
                break
        if with_slot is None:
            time.sleep(delay)
            delay = min(1.0, delay * 1.5)
    for fd in fds:
        if fd != with_slot:
            os.close(fd)
    waited = time.monotonic() - t0
    with contextlib.suppress(OSError):
        os.nice(NICE)  # slurmctld's threads first, even among the SLOTS at work
    if os.fork():
        os._exit(0)  # the slot's lock stays with the child's copy of the descriptor
    global waited_s
    waited_s = waited
    return waited
