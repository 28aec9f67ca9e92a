"""The container test cluster (docker/slurm-cluster/dcluster) for tests: fixtures and faults.

Plain fixtures over the `dcluster` command rather than pytest-docker: pytest-docker drives
`docker compose up` and waits for published ports, while this cluster needs an image built
without a registry, node disks, an ordered start and the fault commands; all of that is in
`dcluster`, which people also run by hand, so the tests use exactly what they do.

The tests run Slurm's clients on this host (a login node outside the cluster's containers):
`using()` points SLURM_CONF at the container cluster while a test module runs, and the
clusterlib helpers (sbatch as the test user, sacct, log tails) then talk to it unchanged.

The Debian 13 cluster (Slurm 24.11, `SUITES["24.11"]`) is a second one beside it, and Debian
sid's (Slurm 26.05, `SUITES["26.05"]`) a third: this host's 22.05 clients cannot talk to them,
so root's clients are shims that run the cluster's own in its ctl container (`using()` puts
them first on PATH), and the test user's jobs are submitted there (`DockerCluster.sbatch`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterlib import (
    REPO,
    TEST_USER,
    ClusterError,
    ClusterFacts,
    cancel_quietly,
    cluster_lock,
    make_workdir,
    node_state,
    parse_facts,
    sbatch,
    using_conf,
    wait_final,
    wait_state,
    wait_until,
    write_user_file,
)

from gpualert_slurm.core import slurm

DCLUSTER = REPO / "docker" / "slurm-cluster" / "dcluster"
# Slurm version -> the environment that selects its container cluster (dcluster's header).
SUITES = {"22.05": {}, "24.11": {"GPUALERT_DCLUSTER_SUITE": "trixie"},
          "26.05": {"GPUALERT_DCLUSTER_SUITE": "sid"}}
# A cold start builds the images (debootstrap + apt): minutes on a 2-core machine.
UP_TIMEOUT = 1800


def dcluster(*args: str, timeout: float = 120,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `dcluster ARGS` (`env`: SUITES[version]); ClusterError (with its output) if it
    fails or hangs."""
    try:
        proc = subprocess.run([str(DCLUSTER), *args], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL,
                              env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"`dcluster {' '.join(args)}` did not finish within {timeout:g} s"
                           ) from e
    if proc.returncode != 0:
        raise ClusterError(f"`{DCLUSTER} {' '.join(args)}` failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}")
    return proc


@dataclass(frozen=True)
class DockerCluster:
    """The container cluster's facts plus its fault tools (each a `dcluster` command)."""

    facts: ClusterFacts
    env: dict[str, str] = field(default_factory=dict)   # SUITES[version]

    @property
    def prefix(self) -> str:
        """Its containers' names: <prefix>-ctl, <prefix>-n1, ..."""
        return self.facts.raw.get("containers", "gpadock")

    @property
    def client_bin(self) -> str | None:
        """Where root's Slurm clients for it are, when this host's own cannot talk to it."""
        return self.facts.raw.get("client_bin")

    def _dc(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return dcluster(*args, timeout=timeout, env=self.env)

    def sbatch(self, script: Path, *sbatch_args: str, user: str = TEST_USER,
               timeout: float = 30) -> int:
        """clusterlib.sbatch, with the cluster's own sbatch where this host's cannot talk to
        it: run as `user` in its ctl container, from the script's dir (a shared work dir)."""
        if not self.client_bin:
            return sbatch(script, *sbatch_args, user=user, timeout=timeout)
        proc = subprocess.run(["docker", "exec", "-u", user, "-w", str(script.parent),
                               f"{self.prefix}-ctl", "sbatch", "--parsable", *sbatch_args,
                               str(script)], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        m = re.match(r"^(\d+)", proc.stdout.strip())
        if proc.returncode != 0 or not m:
            raise ClusterError(f"sbatch {' '.join(sbatch_args)} {script} in {self.prefix}-ctl "
                               f"failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return int(m.group(1))

    def kill_node(self, node: str) -> None:
        """SIGKILL the node's container: slurmd, slurmstepd and the tasks end at once."""
        self._dc("kill-node", node)

    def start_node(self, node: str) -> None:
        """Start a killed node's container again (its slurmd registers; ReturnToService=2)."""
        self._dc("start-node", node, timeout=180)

    def restart_node(self, node: str, fuse_spool: bool = False) -> None:
        """The node's container afresh; fuse_spool: behind its own FUSE layer (stall_spool)."""
        self._dc("restart-node", node, *(["--fuse-spool"] if fuse_spool else []), timeout=300)
        wait_until(lambda: node_state(node) in ("idle", "mixed", "allocated"), 120,
                   f"container node {node} to be usable after its restart")

    def pause_node(self, node: str) -> None:
        self._dc("pause-node", node)

    def unpause_node(self, node: str) -> None:
        self._dc("unpause-node", node)

    def cut_net(self, node: str) -> None:
        self._dc("cut-net", node)

    def heal_net(self, node: str) -> None:
        self._dc("heal-net", node)

    def fill_disk(self, node: str) -> None:
        self._dc("fill-disk", node, timeout=300)

    def free_disk(self, node: str) -> None:
        self._dc("free-disk", node)

    def stall_spool(self, node: str) -> None:
        self._dc("stall-spool", node)

    def unstall_spool(self, node: str) -> None:
        self._dc("unstall-spool", node)

    def exec(self, node: str, cmd: str, timeout: float = 60,
             user: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a bash command line inside the node's container (as root, or `user`)."""
        argv = ["docker", "exec", *(["-u", user] if user else []), f"{self.prefix}-{node}",
                "bash", "-c", cmd]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def container_state(self, node: str) -> str:
        proc = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}}",
                               f"{self.prefix}-{node}"],
                              capture_output=True, text=True, timeout=30)
        return proc.stdout.strip() or "absent"

    def restore_node(self, node: str, timeout: float = 120) -> None:
        """Make a node usable again whatever a test did to it."""
        state = self.container_state(node)
        if state == "paused":
            self.unpause_node(node)
        elif state != "running":
            self.start_node(node)
        self.heal_net(node)
        self.unstall_spool(node)
        self.free_disk(node)
        wait_until(lambda: node_state(node) in ("idle", "mixed", "allocated"), timeout,
                   f"container node {node} to be usable again")


def docker_cluster_up(version: str = "22.05") -> DockerCluster:
    """`dcluster up` (dockerd, images, containers; harmless when up) and its facts, for the
    cluster of that Slurm version (SUITES)."""
    if os.geteuid() != 0:
        raise ClusterError("container cluster tests must run as root (they start dockerd)")
    env = SUITES[version]
    proc = dcluster("up", timeout=UP_TIMEOUT, env=env)
    return DockerCluster(parse_facts(proc.stdout), dict(env))


@contextlib.contextmanager
def using(dc: DockerCluster) -> Iterator[DockerCluster]:
    """This process's Slurm clients (and the test user's, via clusterlib) talk to `dc`; where
    they cannot (24.11), root's are the cluster's own (its shims first on PATH)."""
    old_path = os.environ.get("PATH", "")
    if dc.client_bin:
        os.environ["PATH"] = f"{dc.client_bin}:{old_path}"
    try:
        with using_conf(dc.facts):
            yield dc
    finally:
        os.environ["PATH"] = old_path


@pytest.fixture(scope="session")
def docker_cluster_session() -> DockerCluster:
    """Brought up once a session. Fails - never skips - when dockerd or the cluster cannot."""
    try:
        return docker_cluster_up()
    except ClusterError as e:
        pytest.fail(f"the container test cluster is not available:\n{e}", pytrace=False)


@pytest.fixture(scope="session")
def docker_cluster_2411_session() -> DockerCluster:
    """The Debian 13 / Slurm 24.11 container cluster, brought up once a session (a cold start
    builds its images and gpualert for it). Fails - never skips - when it cannot start."""
    try:
        return docker_cluster_up("24.11")
    except ClusterError as e:
        pytest.fail(f"the 24.11 container test cluster is not available:\n{e}", pytrace=False)


@pytest.fixture(scope="session")
def docker_cluster_2605_session() -> DockerCluster:
    """The Debian sid / Slurm 26.05 container cluster (its image tag and `slurm_package=`
    name the exact package: sid moves), brought up once a session. Fails - never skips."""
    try:
        return docker_cluster_up("26.05")
    except ClusterError as e:
        pytest.fail(f"the 26.05 container test cluster is not available:\n{e}", pytrace=False)


@pytest.fixture(scope="module")
def docker_cluster(docker_cluster_session: DockerCluster) -> Iterator[DockerCluster]:
    """The container cluster, with SLURM_CONF pointing at it for the module's tests."""
    with using(docker_cluster_session) as dc:
        yield dc


# ---------------------------------------------------------------------------------------------
# a node lost under a running job (tests/test_recovery_docker.py on 22.05, and
# tests/test_version_matrix.py on each version): one sequence of steps, each test its asserts

LOSS_SCRIPT = """#!/bin/bash
srun -N2 -n2 bash -c 'touch "running-$SLURM_PROCID"; exec sleep 300'
"""
# what action mode is given to do on a lost node
ACTION_MODE = {"mode": "action", "actions": ["requeue", "exclude_node", "drain_node"]}


def recovery_audit(facts: ClusterFacts) -> Path:
    return facts.spool / ".gpualert" / "recovery" / "audit.jsonl"


def recovery_decision(audit: Path, job: int) -> dict[str, Any] | None:
    """The recovery policy's decision record for the job's step 0 in the audit log, if any."""
    if not audit.exists():
        return None
    for line in audit.read_text().splitlines():
        r = json.loads(line)
        if r.get("event") == "decision" and r.get("id") == f"{job}.0":
            return r
    return None


def put_gpualert_config(facts: ClusterFacts, text: str) -> None:
    """Replace the cluster's gpualert.yaml at once (the hooks read it at each job's end)."""
    tmp = facts.gpualert_config.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    os.replace(tmp, facts.gpualert_config)


@dataclass(frozen=True)
class LossDecision:
    """What lose_a_node saw. Monitor mode: `final`; action mode: `node` and `requeued`."""

    job: int
    victim: str                                 # the job's node that was not its batch host
    decision: dict[str, Any]                    # the audit log's decision record
    after_s: float                              # from the kill to that record
    final: slurm.JobState | None = None         # the job's end as sacct has it (monitor)
    node: slurm.NodeInfo | None = None          # the victim once gpualert drained it (action)
    requeued: slurm.JobState | None = None      # the job once it excludes the victim (action)


def lose_a_node(dc: DockerCluster, workdir_name: str, action: bool = False) -> LossDecision:
    """A 2-node job (LOSS_SCRIPT) whose non-batch node's container is killed once both ranks
    run; returns when gpualert's recovery decision for it is in the audit log, after the job
    ended (monitor mode, --no-requeue) or once Slurm shows gpualert's actions (action mode,
    --requeue: the victim drained with gpualert's reason, the job excluding it). All under the
    cluster lock. Action mode switches the cluster's gpualert config to ACTION_MODE and puts
    it back; the victim is made usable again, whatever happens."""
    c = dc.facts
    audit = recovery_audit(c)
    d = make_workdir(c, workdir_name)
    script = write_user_file(d / "job.sh", LOSS_SCRIPT)
    saved = c.gpualert_config.read_text()
    job = victim = None
    final = node = requeued = None
    with cluster_lock(c):
        try:
            if action:
                doc = yaml.safe_load(saved) or {}
                doc["recovery"] = dict(ACTION_MODE)
                put_gpualert_config(c, yaml.safe_dump(doc))
                mode_args: tuple[str, ...] = ("--requeue", "--open-mode=append")
            else:
                mode_args = ("--no-requeue",)
            job = dc.sbatch(script, "-N2", "--gpualert", "-o", "slurm-%j.out", *mode_args)
            wait_state(job, "RUNNING", timeout=90, root=c.root)
            wait_until(lambda: all((d / f"running-{r}").exists() for r in (0, 1)), 60,
                       "both ranks running")
            info = slurm.show_job(job)
            victim = next(n for n in info.nodes if n != info.raw.get("BatchHost"))
            t0 = time.monotonic()
            dc.kill_node(victim)
            if not action:
                final = wait_final(job, timeout=150, root=c.root)
            dec = wait_until(lambda: recovery_decision(audit, job), 150,
                             f"the recovery decision for job {job} in {audit}")
            after = time.monotonic() - t0
            if action:
                # The actions follow the decision record (fsynced first): wait for Slurm to
                # show them.
                wait_until(lambda: slurm.node_info(victim).reason.startswith("gpualert:"), 60,
                           f"{victim} drained by gpualert")
                wait_until(lambda: victim in str(slurm.show_job(job).raw.get("ExcNodeList",
                                                                              "")),
                           60, f"job {job} to exclude {victim}")
                node = slurm.node_info(victim)
                requeued = slurm.show_job(job)
            print(f"Slurm {c.slurm_version}: job {job}"
                  f"{f' {final.state}' if final else ''}, decision {after:.1f} s after "
                  f"{victim} was killed ({'action' if action else 'monitor'} mode)")
        finally:
            if action:
                put_gpualert_config(c, saved)
            if job:
                cancel_quietly(job)
            if victim:
                if action:
                    # gpualert's drain outlives the container's restart: resume it (refused
                    # while the node is still down), bring the container back, resume again.
                    with contextlib.suppress(slurm.SlurmError):
                        slurm.update_node(victim, "resume")
                    with contextlib.suppress(AssertionError):
                        dc.restore_node(victim)
                    with contextlib.suppress(slurm.SlurmError):
                        slurm.update_node(victim, "resume")
                dc.restore_node(victim)
    return LossDecision(job, victim, dec, after, final, node, requeued)
