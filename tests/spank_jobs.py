"""SPANK-specific job helpers for test_tap.py, test_spank_plugin.py and bench_tap.py.

Everything general (cluster facts, running as the test user, sbatch, waiting with log tails
on timeout) is in clusterlib; this adds what only the plugin's tests need: the job's spool
dir prepared before the job may start, and what the tap left there.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clusterlib import ClusterError, ClusterFacts, cancel_quietly, chown_to_user, sbatch

from gpualert_slurm import slurm


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
