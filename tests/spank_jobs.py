"""SPANK-specific job helpers for test_tap.py, test_spank_plugin.py and bench_tap.py.

Everything general (cluster facts, running as the test user, sbatch, waiting with log tails
on timeout) is in clusterlib; this adds what only the plugin's tests need: the job's spool
dir prepared before the job may start, and what the tap left there.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clusterlib import ClusterError, ClusterFacts, cancel_quietly, chown_to_user, sbatch

from gpualert_slurm.core import slurm


def require_plugin(c: ClusterFacts) -> ClusterFacts:
    """`c`, if the SPANK plugin is installed on the cluster; ClusterError (say why) if not."""
    if c.plugin is None:
        raise ClusterError("the test cluster runs without the gpualert SPANK plugin "
                           "(`cluster status` says plugin=none): build and install it with "
                           "`make -C spank install PREFIX=/opt/gpualert`, then `cluster up`")
    return c


def job_dir(c: ClusterFacts, job_id: int) -> Path:
    return c.spool / str(job_id)


def make_job_dir(c: ClusterFacts, job_id: int, writable: bool = True) -> Path:
    """Create the job's spool dir as the Prolog does (the user's, 0700), or, writable=False,
    as one the job cannot write (root's, 0755)."""
    d = job_dir(c, job_id)
    d.mkdir()
    if writable:
        chown_to_user(d, c.user)
        d.chmod(0o700)
    else:
        d.chmod(0o755)
    return d


def submit_held(c: ClusterFacts, script: Path, args: Sequence[str] = (), *,
                spool_dir: str = "user") -> int:
    """Submit held, prepare the job's spool dir, release; return the job id.

    The hold makes the spool dir's state certain when the tasks start, whatever the Prolog
    does. spool_dir: "user" makes it as the Prolog does (kept if the Prolog made it first);
    "root-ro" makes it unwritable by the job; "none" leaves it to the Prolog.
    """
    if spool_dir not in ("user", "root-ro", "none"):
        raise ValueError(f"spool_dir={spool_dir!r}: expected 'user', 'root-ro' or 'none'")
    job_id = sbatch(script, "--hold", *args, user=c.user)
    try:
        if spool_dir == "user" and not job_dir(c, job_id).exists():
            make_job_dir(c, job_id)
        elif spool_dir == "root-ro":
            make_job_dir(c, job_id, writable=False)
        slurm.release(job_id)
    except BaseException:
        cancel_quietly(job_id)  # never leave a held job in the shared queue
        raise
    return job_id


def steps(job_id: int) -> list[tuple[str, str, str]]:
    """[(step suffix, State, ExitCode)] for the job ("") and each of its steps (".batch",
    ".0", ...) from sacct: comparable between two jobs, unlike their node lists."""
    st = slurm.accounting(job_id)
    return [("", st.state, str(st.exit_code)),
            *((f".{s.step}", s.state, str(s.exit_code)) for s in st.steps)]


def task_files(c: ClusterFacts, job_id: int) -> dict[str, bytes]:
    """Contents of <spool>/<jobid>/tasks/* by name ({} when there is no tasks dir)."""
    d = job_dir(c, job_id) / "tasks"
    if not d.is_dir():
        return {}
    return {f.name: f.read_bytes() for f in d.iterdir() if f.is_file()}


# ---------------------------------------------------------------------------------------------
# tap hardening (issue 11): the same job with and without the tap, bounded waits, node health


def submit_pair(c: ClusterFacts, script: Path, args: Sequence[str] = ()) -> tuple[int, int]:
    """The same script submitted twice (held, spool dir prepared, released): with
    `--gpualert` and with `--gpualert=off`. Returns (tapped, plain)."""
    tapped = submit_held(c, script, ["--gpualert", *args])
    try:
        plain = submit_held(c, script, ["--gpualert=off", *args])
    except BaseException:
        cancel_quietly(tapped)
        raise
    return tapped, plain


def wait_final_or_cancel(c: ClusterFacts, job_ids: Sequence[int],
                         timeout: float) -> list[slurm.JobState]:
    """wait_final for each job; whichever has not ended within `timeout` is cancelled (so a
    stuck job never stays in the shared queue) before the AssertionError goes up."""
    from clusterlib import wait_final_many

    try:
        return wait_final_many(job_ids, timeout, c.root)
    except BaseException:
        cancel_quietly(*job_ids)
        raise


def comparable_steps(job_id: int, settle: float = 20) -> list[tuple[str, str, str]]:
    """steps(job_id) once two reads agree (a step's exit code may lag the job's in sacct)."""
    deadline = time.monotonic() + settle
    last = steps(job_id)
    while time.monotonic() < deadline:
        time.sleep(1)
        now = steps(job_id)
        if now == last:
            return now
        last = now
    return last


def assert_same_outcome(tapped: int, plain: int) -> None:
    """sacct: the job and each of its steps end in the same state with the same exit code."""
    a, b = comparable_steps(tapped), comparable_steps(plain)
    assert a[0][1:] == b[0][1:], f"job state with tap {a[0][1:]} vs without {b[0][1:]}"
    assert a == b, f"steps with tap {a} vs without {b}"


def node_health(nodes: Sequence[str] | None = None) -> dict[str, tuple[str, str]]:
    """node -> (state, reason) from sinfo, for `nodes` (all when None)."""
    out = slurm.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"])
    found: dict[str, tuple[str, str]] = {}
    for line in out.splitlines():
        name, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        if nodes is None or name in nodes:
            found[name] = (state, reason)
    return found


def assert_nodes_not_drained(nodes: Sequence[str]) -> None:
    """No node the job ran on is draining/drained (Slurm drains a node whose step it could
    not kill: "Kill task failed"), nor failed because of it."""
    bad = {n: sr for n, sr in node_health(nodes).items()
           if "drain" in sr[0] or "fail" in sr[0] or "Kill task" in sr[1]}
    assert not bad, f"nodes drained or failed after the job: {bad}"


def spool_bytes(c: ClusterFacts, job_id: int, name: str, attempt: int = 0) -> bytes | None:
    """One file of the job's tasks/ dir (of `attempt`), or None when it is not there."""
    base = job_dir(c, job_id) if attempt == 0 else job_dir(c, job_id) / f"attempt-{attempt}"
    f = base / "tasks" / name
    return f.read_bytes() if f.is_file() and not f.is_symlink() else None


def submit_pairs(c: ClusterFacts, scripts: dict[str, tuple[Path, Sequence[str]]],
                 workers: int = 4) -> dict[str, tuple[int, int]]:
    """submit_pair for many (name -> (script, extra sbatch args)) at once; all or none (a
    failure cancels what was submitted). Returns name -> (tapped, plain)."""
    from concurrent.futures import ThreadPoolExecutor

    out: dict[str, tuple[int, int]] = {}

    def one(item: tuple[str, tuple[Path, Sequence[str]]]) -> None:
        name, (script, args) = item
        out[name] = submit_pair(c, script, args)

    try:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(one, scripts.items()))
    except BaseException:
        cancel_quietly(*(j for pair in out.values() for j in pair))
        raise
    return out


@dataclass(frozen=True)
class Canary:
    """A root-owned file and directory the job can name but must never see changed (one
    pair per attack, so a change is traced to its attack)."""

    file: Path
    dir: Path
    content: bytes

    @classmethod
    def make(cls, base: Path) -> Canary:
        base.mkdir(mode=0o755)  # root's, 0755: jobs can name what is inside, not change it
        (base / "dir").mkdir(mode=0o755)
        content = f"root's canary {uuid.uuid4()}\n".encode()
        (base / "file").write_bytes(content)
        (base / "file").chmod(0o644)
        (base / "dir" / "keep").write_bytes(b"keep\n")
        old = time.time() - 86400  # a day ago: any write moves it
        for p in (base / "file", base / "dir" / "keep", base / "dir"):
            os.utime(p, (old, old))
        return cls(base / "file", base / "dir", content)

    def snapshot(self) -> tuple[object, ...]:
        st, dst = self.file.lstat(), self.dir.lstat()
        return (self.file.read_bytes(), st.st_size, st.st_mtime_ns, st.st_uid, st.st_mode,
                sorted(os.listdir(self.dir)), dst.st_mtime_ns, dst.st_uid, dst.st_mode)


# Slurm's cgroup/v2 at the step's end: slurmstepd waits (a bounded time) for the step's own
# leaf, step_X/slurm, where slurmstepd itself runs, to empty, and writes this into the job's
# output when it did not in time. Seen in the cgroup v2 guest (TCG, slow) in jobs *without*
# gpualert too (24.11: kill0-HUP; 26.05: one of three), so it is Slurm's timing there, not a
# difference the tap makes; the tap's copier host is never in that leaf (it is in
# gpualert_copiers: test_tap_host). Set aside wherever a tapped job's output is compared.
STEP_LEAF_SLOW = re.compile(rb"^(?:\[[\dT:.-]+\] |slurmstepd(?:-[\w.-]+)?: )error: Timeout "
                            rb"waiting for /\S+/step_\w+/slurm/cgroup\.events to become "
                            rb"empty\.\n", re.M)


def job_output_bytes(path: Path) -> bytes:
    """A job's slurm-%j.out as compared with and without the tap: less STEP_LEAF_SLOW."""
    return STEP_LEAF_SLOW.sub(b"", path.read_bytes())
