"""Job helpers for the SPANK plugin tests (test_tap.py, test_spank_plugin.py, bench_tap.py).

Talks to the real test cluster brought up by docker/slurm-cluster/cluster: submits batch jobs
as the test user, waits for them with a bound, reads sacct and the job's spool dir.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "docker" / "slurm-cluster" / "cluster"
FINAL_STATES = {
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE",
}


@dataclass(frozen=True)
class Cluster:
    conf: str
    user: str
    spool: Path
    workdir: Path
    logs: Path
    plugin: str

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": self.conf}


def cluster_facts() -> Cluster:
    """The running cluster's facts (`cluster status` prints them as key=value)."""
    out = subprocess.run([str(CLUSTER), "status"], capture_output=True, text=True, timeout=60)
    facts = dict(
        line.split("=", 1) for line in out.stdout.splitlines() if "=" in line
    )
    if out.returncode != 0 or facts.get("plugin", "none") == "none":
        raise RuntimeError(f"test cluster not usable (cluster status):\n{out.stdout}{out.stderr}")
    return Cluster(
        conf=facts["conf"], user=facts["user"], spool=Path(facts["spool"]),
        workdir=Path(facts["workdir"]), logs=Path(facts["logs"]), plugin=facts["plugin"],
    )


def run(c: Cluster, args: list[str], *, user: bool = True, cwd: Path | None = None,
        timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Runs a Slurm command (as the test user unless user=False)."""
    cmd = (["runuser", "-u", c.user, "--"] if user else []) + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                       env=c.env)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def workdir(c: Cluster, name: str) -> Path:
    """A fresh directory owned by the test user under the cluster's work dir."""
    d = c.workdir / f"{name}-{uuid.uuid4().hex[:8]}"
    d.mkdir(mode=0o755)
    shutil.chown(d, c.user, c.user)
    return d


def write_user_file(c: Cluster, path: Path, text: str, mode: int = 0o755) -> Path:
    path.write_text(text)
    path.chmod(mode)
    shutil.chown(path, c.user, c.user)
    return path


def job_dir(c: Cluster, jobid: int) -> Path:
    return c.spool / str(jobid)


def submit(c: Cluster, script: Path, args: list[str] = (), *, spool_dir: str = "user") -> int:
    """Submits held, prepares the job's spool dir, releases; returns the job id.

    spool_dir: "user" makes <spool>/<jobid> owned by the user, 0700, as the Prolog does (kept
    if the Prolog made it first); "root-ro" makes it root-owned 0755 (unwritable by the job);
    "none" leaves it to the Prolog.
    """
    p = run(c, ["sbatch", "--parsable", "--hold", *args, str(script)], cwd=script.parent)
    jobid = int(p.stdout.strip().split(";")[0])
    d = job_dir(c, jobid)
    if spool_dir == "user" and not d.exists():
        d.mkdir(mode=0o700)
        shutil.chown(d, c.user, c.user)
    elif spool_dir == "root-ro":
        d.mkdir(mode=0o755)
    run(c, ["scontrol", "release", str(jobid)], user=False)
    return jobid


def wait(c: Cluster, jobid: int, timeout: float = 300) -> None:
    """Waits until the job has left the queue and sacct knows its final state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if state(c, jobid)[0].split()[0] in FINAL_STATES and not run(
            c, ["squeue", "-h", "-j", str(jobid)], check=False
        ).stdout.strip():
            return
        time.sleep(0.5)
    raise TimeoutError(f"job {jobid} not finished after {timeout} s")


def state(c: Cluster, jobid: int) -> tuple[str, str]:
    """(State, ExitCode) of the job allocation from sacct; ("", "") when not known yet."""
    p = run(c, ["sacct", "-X", "-n", "-P", "-j", str(jobid), "-o", "State,ExitCode"],
            check=False)
    line = p.stdout.strip().splitlines()[:1]
    return tuple(line[0].split("|")) if line else ("PENDING", "")  # type: ignore[return-value]


def steps(c: Cluster, jobid: int) -> list[tuple[str, str, str]]:
    """[(step suffix, State, ExitCode)] for the job and each of its steps, from sacct."""
    p = run(c, ["sacct", "-n", "-P", "-j", str(jobid), "-o", "JobID,State,ExitCode"])
    rows = []
    for line in p.stdout.strip().splitlines():
        jid, st, ec = line.split("|")
        rows.append((jid.removeprefix(str(jobid)), st.split()[0], ec))
    return rows


def task_files(c: Cluster, jobid: int) -> dict[str, bytes]:
    """Contents of <spool>/<jobid>/tasks/* by name ({} when there is no tasks dir)."""
    d = job_dir(c, jobid) / "tasks"
    if not d.is_dir():
        return {}
    return {f.name: f.read_bytes() for f in d.iterdir() if f.is_file()}
