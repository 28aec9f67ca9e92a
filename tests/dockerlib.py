"""The container test cluster (docker/slurm-cluster/dcluster) for tests: fixtures and faults.

Plain fixtures over the `dcluster` command rather than pytest-docker: pytest-docker drives
`docker compose up` and waits for published ports, while this cluster needs an image built
without a registry, node disks, an ordered start and the fault commands; all of that is in
`dcluster`, which people also run by hand, so the tests use exactly what they do.

The tests run Slurm's clients on this host (a login node outside the cluster's containers):
`using()` points SLURM_CONF at the container cluster while a test module runs, and the
clusterlib helpers (sbatch as the test user, sacct, log tails) then talk to it unchanged.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from clusterlib import (
    REPO,
    ClusterError,
    ClusterFacts,
    node_state,
    parse_facts,
    using_conf,
    wait_until,
)

DCLUSTER = REPO / "docker" / "slurm-cluster" / "dcluster"
# A cold start builds the images (debootstrap + apt): minutes on a 2-core machine.
UP_TIMEOUT = 1800


def dcluster(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `dcluster ARGS`; ClusterError (with its output) if it fails or hangs."""
    try:
        proc = subprocess.run([str(DCLUSTER), *args], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
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

    def kill_node(self, node: str) -> None:
        """SIGKILL the node's container: slurmd, slurmstepd and the tasks end at once."""
        dcluster("kill-node", node)

    def start_node(self, node: str) -> None:
        """Start a killed node's container again (its slurmd registers; ReturnToService=2)."""
        dcluster("start-node", node, timeout=180)

    def restart_node(self, node: str, fuse_spool: bool = False) -> None:
        """The node's container afresh; fuse_spool: behind its own FUSE layer (stall_spool)."""
        dcluster("restart-node", node, *(["--fuse-spool"] if fuse_spool else []), timeout=300)
        wait_until(lambda: node_state(node) in ("idle", "mixed", "allocated"), 120,
                   f"container node {node} to be usable after its restart")

    def pause_node(self, node: str) -> None:
        dcluster("pause-node", node)

    def unpause_node(self, node: str) -> None:
        dcluster("unpause-node", node)

    def cut_net(self, node: str) -> None:
        dcluster("cut-net", node)

    def heal_net(self, node: str) -> None:
        dcluster("heal-net", node)

    def fill_disk(self, node: str) -> None:
        dcluster("fill-disk", node, timeout=300)

    def free_disk(self, node: str) -> None:
        dcluster("free-disk", node)

    def stall_spool(self, node: str) -> None:
        dcluster("stall-spool", node)

    def unstall_spool(self, node: str) -> None:
        dcluster("unstall-spool", node)

    def exec(self, node: str, cmd: str, timeout: float = 60,
             user: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a bash command line inside the node's container (as root, or `user`)."""
        argv = ["docker", "exec", *(["-u", user] if user else []), f"gpadock-{node}",
                "bash", "-c", cmd]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def container_state(self, node: str) -> str:
        proc = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}}", f"gpadock-{node}"],
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


def docker_cluster_up() -> DockerCluster:
    """`dcluster up` (dockerd, images, containers; harmless when up) and its facts."""
    if os.geteuid() != 0:
        raise ClusterError("container cluster tests must run as root (they start dockerd)")
    proc = dcluster("up", timeout=UP_TIMEOUT)
    return DockerCluster(parse_facts(proc.stdout))


@contextlib.contextmanager
def using(dc: DockerCluster) -> Iterator[DockerCluster]:
    """This process's Slurm clients (and the test user's, via clusterlib) talk to `dc`."""
    with using_conf(dc.facts):
        yield dc


@pytest.fixture(scope="session")
def docker_cluster_session() -> DockerCluster:
    """Brought up once a session. Fails - never skips - when dockerd or the cluster cannot."""
    try:
        return docker_cluster_up()
    except ClusterError as e:
        pytest.fail(f"the container test cluster is not available:\n{e}", pytrace=False)


@pytest.fixture(scope="module")
def docker_cluster(docker_cluster_session: DockerCluster) -> Iterator[DockerCluster]:
    """The container cluster, with SLURM_CONF pointing at it for the module's tests."""
    with using(docker_cluster_session) as dc:
        yield dc
