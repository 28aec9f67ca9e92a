"""Helpers for tests that run real jobs on the local Slurm test cluster.

The cluster is `docker/slurm-cluster/cluster`; `cluster_up()` brings it up (idempotent) and
returns its facts. Jobs run as the unprivileged test user, in work dirs that user owns.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from gpualert_slurm.core import slurm

REPO = Path(__file__).resolve().parents[1]
CLUSTER_SCRIPT = REPO / "docker" / "slurm-cluster" / "cluster"
SMTP_SINK = REPO / "docker" / "slurm-cluster" / "smtp_sink.py"
TEST_USER = "gpatest"

T = TypeVar("T")


class ClusterError(RuntimeError):
    """The test cluster could not be brought up or used."""


@dataclass(frozen=True)
class ClusterFacts:
    """What `cluster up` prints, typed."""

    root: Path
    conf: Path
    user: str
    nodes: tuple[str, ...]
    partitions: tuple[str, ...]
    spool: Path
    gpualert_config: Path
    smtp_host: str
    smtp_port: int
    maildir: Path
    workdir: Path
    logs: Path
    slurm_version: str
    cgroup: str                     # v1, v2, or "none (WARNING ...)"
    plugin: str | None              # path of the SPANK plugin if installed
    raw: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def memory_enforced(self) -> bool:
        return self.cgroup in ("v1", "v2")

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    def slurmd_pidfile(self, node: str) -> Path:
        return self.run_dir / f"slurmd-{node}.pid"


def parse_facts(text: str) -> ClusterFacts:
    raw: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[a-z_.0-9-]+", key):
            raw[key] = value
    missing = [k for k in ("root", "conf", "user", "nodes", "spool", "smtp", "maildir",
                           "slurm_version", "cgroup") if k not in raw]
    if missing:
        raise ClusterError(f"cluster facts lack {missing}; output was:\n{text}")
    host, _, port = raw["smtp"].rpartition(":")
    root = Path(raw["root"])
    return ClusterFacts(
        root=root,
        conf=Path(raw["conf"]),
        user=raw["user"],
        nodes=tuple(raw["nodes"].split(",")),
        partitions=tuple(raw.get("partitions", "debug").split(",")),
        spool=Path(raw["spool"]),
        gpualert_config=Path(raw.get("gpualert_config", root / "etc" / "gpualert.yaml")),
        smtp_host=host,
        smtp_port=int(port),
        maildir=Path(raw["maildir"]),
        workdir=Path(raw.get("workdir", root / "work")),
        logs=Path(raw.get("logs", root / "log")),
        slurm_version=raw["slurm_version"],
        cgroup=raw["cgroup"],
        plugin=None if raw.get("plugin", "none") == "none" else raw["plugin"],
        raw=raw,
    )


# A second native cluster beside the shared one, in another configuration: proctrack/pgid
# (no cgroups), its own root dir, name and ports (+100), /etc/slurm left to the first. Its
# clients need SLURM_CONF (`using_conf`).
PGID_CLUSTER_ENV = {
    "GPUALERT_CLUSTER_DIR": "/var/lib/gpualert-cluster-pgid",
    "GPUALERT_CLUSTER_NAME": "gpapgid",
    "GPUALERT_CLUSTER_PORT_OFFSET": "100",
    "GPUALERT_CLUSTER_PROCTRACK": "pgid",
}


# Another native cluster: Slurm's own memory kill (OverMemoryKill, no cgroup memory limit), its
# own root dir, name and ports (+400: +100 pgid, +200 recovery, +300 bench_scale, +600 chain).
OVERMEM_CLUSTER_ENV = {
    "GPUALERT_CLUSTER_DIR": "/var/lib/gpualert-cluster-overmem",
    "GPUALERT_CLUSTER_NAME": "gpaovermem",
    "GPUALERT_CLUSTER_PORT_OFFSET": "400",
    "GPUALERT_CLUSTER_PROCTRACK": "pgid",
    "GPUALERT_CLUSTER_OVERMEMORY": "1",
}


def cluster_cmd(action: str, timeout: float = 300,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the cluster script; `env` adds variables (another cluster: PGID_CLUSTER_ENV)."""
    try:
        return subprocess.run([str(CLUSTER_SCRIPT), action], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL,
                              env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"`cluster {action}` did not finish within {timeout:g} s") from e


@contextlib.contextmanager
def using_conf(facts: ClusterFacts) -> Iterator[ClusterFacts]:
    """This process's Slurm clients (and the test user's: run_as_user passes SLURM_CONF on)
    talk to the cluster of `facts` while the block runs."""
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(facts.conf)
    try:
        yield facts
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def cluster_up(timeout: float = 300, env: dict[str, str] | None = None) -> ClusterFacts:
    """Bring the cluster up (harmless when it is) and return its facts; ClusterError if not."""
    if os.geteuid() != 0:
        raise ClusterError("cluster tests must run as root (they start daemons and switch user)")
    proc = cluster_cmd("up", timeout, env)
    if proc.returncode != 0:
        raise ClusterError(f"`{CLUSTER_SCRIPT} up` failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}")
    return parse_facts(proc.stdout)


def cluster_status(timeout: float = 60) -> ClusterFacts:
    """The facts of the cluster as it runs now, starting nothing (for benchmarks, which must
    not bring daemons up behind the user's back); ClusterError if a daemon is down."""
    proc = cluster_cmd("status", timeout)
    if proc.returncode != 0:
        raise ClusterError(f"the test cluster is not fully up (`{CLUSTER_SCRIPT} status` "
                           f"exit {proc.returncode}; run `{CLUSTER_SCRIPT} up`):\n"
                           f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return parse_facts(proc.stdout)


# ---------------------------------------------------------------------------------------------
# running things as the test user


def make_workdir(facts: ClusterFacts, name: str, user: str = TEST_USER) -> Path:
    """A fresh directory under the cluster's work dir, owned by `user` (jobs write there)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60]
    path = facts.workdir / f"{safe}-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    chown_to_user(path, user)
    path.chmod(0o755)
    return path


def chown_to_user(path: Path, user: str = TEST_USER) -> None:
    """Give `path` to `user` and that user's primary group."""
    import pwd

    pw = pwd.getpwnam(user)
    os.chown(path, pw.pw_uid, pw.pw_gid)


def run_as_user(cmd: Sequence[str] | str, cwd: Path | str | None = None, timeout: float = 60,
                user: str = TEST_USER, check: bool = False,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command (argv, or a bash command line) as `user`, in a clean login-like
    environment (not root's, which sbatch would otherwise pass on to the job)."""
    import pwd

    pw = pwd.getpwnam(user)
    argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    base = {"HOME": pw.pw_dir, "USER": user, "LOGNAME": user, "SHELL": pw.pw_shell or "/bin/sh",
            "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
            # the container cluster's tests point this process's clients at it (dockerlib)
            **({"SLURM_CONF": os.environ["SLURM_CONF"]} if "SLURM_CONF" in os.environ else {}),
            **(env or {})}
    prefix = ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in base.items())]
    proc = subprocess.run(prefix + argv, cwd=str(cwd) if cwd else pw.pw_dir,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise ClusterError(f"as {user}: {shlex.join(argv)} exited {proc.returncode}:\n"
                           f"{proc.stderr}{proc.stdout}")
    return proc


def write_user_file(path: Path, text: str, mode: int = 0o755, user: str = TEST_USER) -> Path:
    path.write_text(text)
    path.chmod(mode)
    chown_to_user(path, user)
    return path


def submit(script_text: str, *sbatch_args: str, workdir: Path, name: str = "job.sh",
           user: str = TEST_USER, timeout: float = 30) -> int:
    """Write `script_text` as `workdir/name` and sbatch it as `user`; return the job id."""
    return sbatch(write_user_file(workdir / name, script_text, user=user), *sbatch_args,
                  user=user, timeout=timeout)


def sbatch(script: Path, *sbatch_args: str, user: str = TEST_USER, timeout: float = 30) -> int:
    """sbatch an existing script as `user`, from the script's directory (where Slurm then
    writes slurm-%j.out); return the job id. The script is not rewritten, so one script can
    be submitted several times at once."""
    proc = run_as_user(["sbatch", "--parsable", *sbatch_args, str(script)], cwd=script.parent,
                       timeout=timeout, user=user)
    if proc.returncode != 0:
        raise ClusterError(f"sbatch {shlex.join(sbatch_args)} {script} failed "
                           f"(exit {proc.returncode}): {proc.stderr.strip()}")
    m = re.match(r"^(\d+)", proc.stdout.strip())
    if not m:
        raise ClusterError(f"sbatch printed no job id: {proc.stdout!r} {proc.stderr!r}")
    return int(m.group(1))


# ---------------------------------------------------------------------------------------------
# waiting


def wait_until(predicate: Callable[[], T], timeout: float, what: str,
               interval: float = 0.5, diagnose: Callable[[], str] | None = None) -> T:
    """Poll `predicate` until it returns something truthy; AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except slurm.SlurmError as e:  # a transient Slurm hiccup is not the answer
            last_error = e
        if time.monotonic() >= deadline:
            extra = f"\nlast error: {last_error}" if last_error else ""
            extra += f"\n{diagnose()}" if diagnose else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{extra}")
        time.sleep(interval)


def start_now_after_requeue(job_id: int) -> None:
    """`scontrol update StartTime=now` for a requeued job that is PENDING again. slurmd revoked
    the old run's credential at the requeue, and a credential made in that same second counts
    as revoked too (whole seconds, ctime <= revoked): "Killing non-startable batch JobId=J: Job
    credential revoked", the job FAILED with exit 1 (seen once requeues got quick). So the new
    run is not allowed to start before the next second."""
    time.sleep(1.05 - time.time() % 1)
    slurm.update_job(job_id, StartTime="now")


def wait_final(job_id: int, timeout: float = 120, root: Path | None = None) -> slurm.JobState:
    """The job's final state as sacct records it, once that record has settled."""
    st = slurm.settled_final(job_id, timeout=timeout)
    if st is None:
        raise AssertionError(f"timed out after {timeout:g} s waiting for job {job_id} to end "
                             f"(in sacct)\n{diagnostics(job_id, root)}")
    return st


def wait_final_many(job_ids: Sequence[int], timeout: float = 120,
                    root: Path | None = None) -> list[slurm.JobState]:
    """wait_final for many jobs at once (a few at a time in threads), in the given order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=6) as pool:
        return list(pool.map(lambda j: wait_final(j, timeout, root), job_ids))


def wait_state(job_id: int, states: set[str] | str, timeout: float = 60,
               root: Path | None = None) -> slurm.JobState:
    """Wait until the controller reports one of `states` (e.g. RUNNING) for the job."""
    wanted = {states} if isinstance(states, str) else set(states)

    def check() -> slurm.JobState | None:
        st = slurm.job_state(job_id, timeout=20)
        return st if st.state in wanted else None

    return wait_until(check, timeout, f"job {job_id} to be {'/'.join(sorted(wanted))}",
                      diagnose=lambda: diagnostics(job_id, root))


def default_root() -> Path:
    return Path(os.environ.get("GPUALERT_CLUSTER_DIR", "/var/lib/gpualert-cluster"))


def log_tails(root: Path | None = None, lines: int = 25) -> str:
    """The last lines of slurmctld's and every slurmd's log, for failure messages."""
    log = (root or default_root()) / "log"
    out = []
    for f in [log / "slurmctld.log", *sorted(log.glob("slurmd-n*.log"))]:
        if f.name.endswith(".start.log") or not f.exists():
            continue
        with open(f, errors="replace") as fh:
            tail = fh.readlines()[-lines:]
        out.append(f"----- {f} (last {len(tail)} lines) -----\n{''.join(tail)}")
    return "\n".join(out)


def diagnostics(job_id: int | None = None, root: Path | None = None) -> str:
    parts = []
    for argv in ([["scontrol", "show", "job", str(job_id)]] if job_id else []) + [
            ["sinfo", "-N", "-o", "%N %T %E"], ["squeue"]]:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=15)
            parts.append(f"$ {shlex.join(argv)}\n{proc.stdout}{proc.stderr}")
        except (OSError, subprocess.TimeoutExpired) as e:
            parts.append(f"$ {shlex.join(argv)}: {e}")
    if job_id:
        parts.append(gpualert_records(job_id, root))
    parts.append(log_tails(root))
    return "\n".join(parts)


def gpualert_records(job_id: int, root: Path | None = None) -> str:
    """What gpualert decided about the job (the audit logs under <root>/audit) and each
    attempt's verdict (class, attempt, failed): why a recovery did what it did."""
    base = root or default_root()
    out = []
    for f in sorted((base / "audit").glob("*.jsonl")):
        with open(f, errors="replace") as fh:
            for line in fh:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if str(r.get("job", "")) == str(job_id) or \
                        str(r.get("id", "")).startswith(f"{job_id}."):
                    keep = ("time", "event", "id", "class", "attempt", "planned", "action",
                            "target", "outcome", "why", "before")
                    out.append(f"{f.name}: " + json.dumps({k: r[k] for k in keep if k in r}))
    for v in sorted(base.glob(f"spool/{job_id}/**/verdict.json")):
        try:
            d = json.loads(v.read_text(errors="replace"))
            cause = d.get("verdict") or {}
            out.append(f"{v}: attempt {d.get('attempt')} class {cause.get('class')} "
                       f"({cause.get('detail')}) failed {d.get('failed')} "
                       f"silent {d.get('silent_failure')}")
        except (OSError, ValueError) as e:
            out.append(f"{v}: {e}")
    return "----- gpualert's records of the job -----\n" + ("\n".join(out) or "(none)")


# ---------------------------------------------------------------------------------------------
# nodes


def cancel_quietly(*job_ids: int) -> None:
    """Cancel jobs a test started, whatever state they are in (cleanup)."""
    for job_id in job_ids:
        with contextlib.suppress(slurm.SlurmError):
            slurm.cancel(job_id)


@contextlib.contextmanager
def held_lock(path: Path, timeout: float, holder: str = "", poll: float = 0.5) -> Iterator[None]:
    """Hold an exclusive flock on `path` (made if missing) while the block runs, waiting for
    its holder up to `timeout` s; then ClusterError (`holder`: who that would be)."""
    import fcntl

    with open(path, "a") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as e:
                if time.monotonic() > deadline:
                    raise ClusterError(f"{path} held for more than {timeout:g} s{holder}") from e
                time.sleep(poll)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def cluster_lock(facts: ClusterFacts, timeout: float = 200) -> Iterator[None]:
    """Hold the lock `cluster up` takes, so that no concurrent `up` (another test session)
    "repairs" a node this test broke on purpose while it is still checking the breakage."""
    with held_lock(facts.root / ".lock", timeout):
        yield


def node_state(node: str) -> str:
    return slurm.node_states([node]).get(node, "unknown")


def restore_node(facts: ClusterFacts, node: str, timeout: float = 60) -> None:
    """Make `node` usable again after a test broke it: slurmd running, state resumed, idle."""
    pidfile = facts.slurmd_pidfile(node)
    alive = False
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text().strip()), 0)
            alive = True
        except (ValueError, ProcessLookupError):
            pass
    if not alive:
        env = dict(os.environ, SLURM_CONF=str(facts.conf))
        subprocess.run(["slurmd", "-N", node], env=env, check=True, timeout=30,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    # ReturnToService=2 may have resumed it already, then scontrol refuses: fine.
    with contextlib.suppress(slurm.SlurmError):
        slurm.update_node(node, "resume")
    wait_until(lambda: node_state(node) in ("idle", "mixed", "allocated"), timeout,
               f"node {node} to be usable again", diagnose=lambda: diagnostics(None, facts.root))


# ---------------------------------------------------------------------------------------------
# mail


def mail_files(maildir: Path) -> list[Path]:
    return sorted(maildir.glob("*.eml"))


def wait_for_mail(maildir: Path, contains: str, timeout: float = 30) -> Path:
    """The first stored message whose bytes contain `contains`."""

    def find() -> Path | None:
        for f in mail_files(maildir):
            if contains in f.read_text(errors="replace"):
                return f
        return None

    return wait_until(find, timeout, f"a message containing {contains!r} in {maildir}")
