"""The container test cluster (docker/slurm-cluster/dcluster) for tests: fixtures and faults.

Plain fixtures over the `dcluster` command rather than pytest-docker: pytest-docker drives
`docker compose up` and waits for published ports, while this cluster needs an image built
without a registry, node disks, an ordered start and the fault commands; all of that is in
`dcluster`, which people also run by hand, so the tests use exactly what they do.

The tests run Slurm's clients on this host (a login node outside the cluster's containers):
`using()` points SLURM_CONF at the container cluster while a test module runs, and the
clusterlib helpers (sbatch as the test user, sacct, log tails) then talk to it unchanged.

The Debian 13 cluster (Slurm 24.11, `SUITES["24.11"]`) is a second one beside it: this host's
22.05 clients cannot talk to 24.11, so root's clients are shims that run the cluster's own in
its ctl container (`using()` puts them first on PATH), and the test user's jobs are submitted
there (`DockerCluster.sbatch`).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from clusterlib import (
    REPO,
    TEST_USER,
    ClusterError,
    ClusterFacts,
    node_state,
    parse_facts,
    sbatch,
    using_conf,
    wait_until,
)

DCLUSTER = REPO / "docker" / "slurm-cluster" / "dcluster"
# Slurm version -> the environment that selects its container cluster (dcluster's header).
SUITES = {"22.05": {}, "24.11": {"GPUALERT_DCLUSTER_SUITE": "trixie"}}
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


@pytest.fixture(scope="module")
def docker_cluster(docker_cluster_session: DockerCluster) -> Iterator[DockerCluster]:
    """The container cluster, with SLURM_CONF pointing at it for the module's tests."""
    with using(docker_cluster_session) as dc:
        yield dc
