"""The recovery tests' own native cluster: recovery drains nodes and requeues jobs, which the
shared cluster's other users must never see. Same script (docker/slurm-cluster/cluster) with
its own root, name and ports (+200) and proctrack/linuxproc (no cgroups: its node names are
the shared cluster's, its job ids are not). Its clients need SLURM_CONF, which the fixture sets
for the whole session; the fixture stops the cluster at the end."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import clusterlib
import pytest
import yaml

from gpualert_slurm.core import slurm
from gpualert_slurm.core.provenance import WINDOW_SLACK_S

RECOVERY_CLUSTER_ENV = {
    "GPUALERT_CLUSTER_DIR": "/var/lib/gpualert-cluster-recovery",
    "GPUALERT_CLUSTER_NAME": "gparecov",
    "GPUALERT_CLUSTER_PORT_OFFSET": "200",
    "GPUALERT_CLUSTER_PROCTRACK": "linuxproc",
}


SESSION_LOCK = Path(RECOVERY_CLUSTER_ENV["GPUALERT_CLUSTER_DIR"] + ".session.lock")
SESSION_WAIT_S = 1800.0


@contextlib.contextmanager
def exclusive_use(timeout: float = SESSION_WAIT_S) -> Iterator[None]:
    """One user of the recovery cluster at a time (a test session, the benchmark): each
    rewrites its gpualert.yaml and stops the cluster at the end, which another session running
    at the same moment would not survive. Waits for the other; ClusterError past `timeout`."""
    with clusterlib.held_lock(SESSION_LOCK, timeout, " by another test session or benchmark "
                              "using the recovery cluster", poll=1):
        yield


@contextlib.contextmanager
def recovery_cluster_session(keep: bool = False) -> Iterator[clusterlib.ClusterFacts]:
    """The recovery cluster, up, for this process alone; SLURM_CONF points at it meanwhile;
    stopped at the end unless `keep` (or GPUALERT_KEEP_RECOVERY_CLUSTER=1)."""
    with exclusive_use():
        facts = clusterlib.cluster_up(env=RECOVERY_CLUSTER_ENV)
        hooks_know_their_cluster(facts)
        # watch's alert caps (per job, per user and hour) live in the spool and outlast the
        # cluster: an earlier session's alerts must not cap this one's (job ids start again)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(facts.spool / ".gpualert" / "watch.json")
        try:
            with clusterlib.using_conf(facts):
                yield facts
        finally:
            if not keep and os.environ.get("GPUALERT_KEEP_RECOVERY_CLUSTER") != "1":
                clusterlib.cluster_cmd("down", env=RECOVERY_CLUSTER_ENV)


# Module scope, not session: SLURM_CONF points at this cluster while it is up, and every
# later module of the session must talk to the shared cluster again.
@pytest.fixture(scope="module")
def recovery_cluster() -> Iterator[clusterlib.ClusterFacts]:
    try:
        with recovery_cluster_session() as facts:
            yield facts
    except clusterlib.ClusterError as e:
        pytest.fail(f"the recovery test cluster is not available:\n{e}", pytrace=False)


def hooks_know_their_cluster(facts: clusterlib.ClusterFacts) -> None:
    """Slurm does not pass SLURM_CONF to EpilogSlurmctld (seen on 22.05: slurmctld has it, the
    hook's environment does not), so the hook's scontrol would ask the cluster of /etc/slurm,
    the shared one. The hook copies of this cluster export it (until `cluster up` does)."""
    for hook in (facts.root / "etc" / "hooks").iterdir():
        text = hook.read_text()
        line = f"export SLURM_CONF={facts.conf}\n"
        if line in text:
            continue
        first, _, rest = text.partition("\n")
        tmp = hook.with_suffix(".tmp")
        tmp.write_text(f"{first}\n{line}{rest}")
        tmp.chmod(0o755)
        os.replace(tmp, hook)


def write_config(facts: clusterlib.ClusterFacts, audit: Path, **recovery: Any) -> None:
    """This cluster's gpualert config with a recovery section (the hooks read it per job)."""
    doc = {"spool": str(facts.spool),
           "mail": {"relay": f"{facts.smtp_host}:{facts.smtp_port}", "from": "gpualert@localhost"},
           "recovery": {"audit_log": str(audit), **recovery}}
    tmp = facts.gpualert_config.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(doc))
    tmp.chmod(0o644)
    os.replace(tmp, facts.gpualert_config)


def audit_records(audit: Path) -> list[dict[str, Any]]:
    if not audit.exists():
        return []
    return [json.loads(line) for line in audit.read_text().splitlines() if line.strip()]


def wait_decision(audit: Path, job: int, attempt: int = 0, timeout: float = 90,
                  outcome: bool = True) -> dict[str, Any]:
    """The decision record for job.attempt, once its outcome line is written too."""
    did = f"{job}.{attempt}"

    def find() -> dict[str, Any] | None:
        recs = audit_records(audit)
        dec = next((r for r in recs if r.get("event") == "decision" and r.get("id") == did),
                   None)
        if dec is None:
            return None
        if outcome and not any(r.get("event") == "outcome" and r.get("id") == did
                               for r in recs):
            return None
        return dec

    return clusterlib.wait_until(find, timeout, f"recovery decision {did} in {audit}",
                                 diagnose=lambda: clusterlib.diagnostics(job, None)
                                 + "\n" + (audit.read_text()[-3000:] if audit.exists() else
                                           "(no audit log)"))


def start_now_when_pending(job: int, restarts: int, timeout: float = 60) -> None:
    """A requeued job waits cred_expire + 1 s (121 s) on 22.05; once it is PENDING (no longer
    COMPLETING) an admin's `scontrol update StartTime=now` lets it start at once."""
    def pending() -> bool:
        st = slurm.show_job(job)
        return st.state == "PENDING" and st.restarts >= restarts and \
            st.raw.get("Reason") != "JobHeldUser" and "COMPLETING" not in \
            st.raw.get("JobState", "")
    clusterlib.wait_until(pending, timeout, f"job {job} pending after requeue {restarts}")
    clusterlib.start_now_after_requeue(job)


def node_reason(node: str) -> tuple[str, str]:
    info = slurm.node_info(node)
    return info.state, info.reason


def resume_node(node: str) -> None:
    try:
        if slurm.node_info(node).drained:
            slurm.update_node(node, "resume")
    except slurm.SlurmError:
        pass


def wait_node_usable(node: str, timeout: float = 60) -> None:
    clusterlib.wait_until(lambda: clusterlib.node_state(node) in ("idle", "mixed", "allocated"),
                          timeout, f"node {node} usable")




XID_LINE = "NVRM: Xid (PCI:0000:3b:00): {xid}, pid=4242, GPU has fallen off the bus."


def kernel_xid(xid: int = 79) -> str:
    """A driver Xid line in the kernel log, as root writes one to /dev/kmsg (the line carries
    the user facility; only root can write there). Every "node" of a native cluster shares
    this kernel: a job's node Epilog takes it by Slurm's window, so write it while the job
    runs. Returns the line."""
    line = XID_LINE.format(xid=xid)
    write_kmsg(f"<3>{line}")
    return line


_last_kmsg_write = 0.0


def write_kmsg(text: str) -> None:
    """One line into the kernel log, as root (the one kernel all nodes and tests share)."""
    global _last_kmsg_write
    with open("/dev/kmsg", "w") as f:
        f.write(f"{text}\n")
    _last_kmsg_write = time.time()


def wait_kernel_log_quiet() -> None:
    """A line a test wrote to the kernel log falls in the window (Slurm's whole seconds, 2 s
    of slack each side) of a job started within a few seconds of it: the next test's job
    took an earlier test's Xid as its own (seen: a Python error classed gpu_hardware)."""
    left = _last_kmsg_write + 2 * WINDOW_SLACK_S + 1.5 - time.time()
    if left > 0:
        time.sleep(left)


# ---- what the recovery cluster's tests share ------------------------------------------------

GPUALERT = "/opt/gpualert/venv/bin/gpualert"


def job_script(body: str, opts: str = "mail=gpatest@localhost") -> str:
    return f"#!/bin/bash\n#SBATCH --gpualert={opts}\n#SBATCH -o slurm-%j.out\n{body}\n"


def cancel(*jobs: int) -> None:
    for j in jobs:
        with contextlib.suppress(slurm.SlurmError):
            if not slurm.job_state(j).final:
                slurm.cancel(j)


def gpualert(*args: str, cfg: clusterlib.ClusterFacts) -> subprocess.CompletedProcess[str]:
    """`gpualert ARGS` as root with the recovery cluster's config."""
    return subprocess.run([GPUALERT, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GPUALERT_CONFIG": str(cfg.gpualert_config)},
                          stdin=subprocess.DEVNULL)
