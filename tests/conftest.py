"""Shared fixtures: the real Slurm test cluster, per-test work dirs, a private SMTP sink."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/clusterlib.py

import clusterlib  # noqa: E402

# A shell without job control starts background commands with SIGINT ignored, and children
# inherit that: `gpualert run` then (rightly) does not forward SIGINT, and a child Python never
# raises KeyboardInterrupt. The tests that send SIGINT must not depend on how pytest was started.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test that uses the cluster is a cluster test, marked or not: `-m "not cluster"` must
    # never start daemons.
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
    # Tests of a unified-only (cgroup v2) node run inside the v2 guest
    # (tests/test_tap_cgroup_v2.py); on any other node they are not collected at all, rather
    # than reported skipped.
    if not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        guest = [i for i in items if i.get_closest_marker("v2guest")]
        if guest:
            config.hook.pytest_deselected(items=guest)
            items[:] = [i for i in items if not i.get_closest_marker("v2guest")]


@pytest.fixture(scope="session")
def cluster() -> clusterlib.ClusterFacts:
    """The local 3-node cluster, brought up once a session. Fails - never skips - if it cannot."""
    try:
        return clusterlib.cluster_up()
    except clusterlib.ClusterError as e:
        pytest.fail(f"the Slurm test cluster is not available:\n{e}", pytrace=False)


@pytest.fixture
def workdir(cluster: clusterlib.ClusterFacts, request: pytest.FixtureRequest) -> Path:
    """A fresh directory owned by the test user, for job scripts and their output."""
    return clusterlib.make_workdir(cluster, request.node.name)


def _load_smtp_sink() -> Any:
    spec = importlib.util.spec_from_file_location("gpualert_smtp_sink", clusterlib.SMTP_SINK)
    assert spec and spec.loader, f"cannot load {clusterlib.SMTP_SINK}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def smtp_server(tmp_path: Path) -> Iterator[Any]:
    """A private real SMTP server on a free port: `.host`, `.port`, `.maildir`, `.messages()`."""
    sink = _load_smtp_sink().SmtpSink(tmp_path / "mail", host="127.0.0.1", port=0)
    sink.start()
    try:
        yield sink
    finally:
        sink.stop()


# ---- the recovery cluster's tests (tests/recoverylib.py) -----------------------------------

@pytest.fixture
def rc(recovery_cluster: clusterlib.ClusterFacts) -> clusterlib.ClusterFacts:
    """The recovery cluster (a module using it imports recoverylib.recovery_cluster), all
    nodes usable: a test before may have drained one."""
    from recoverylib import resume_node, wait_kernel_log_quiet, wait_node_usable

    for n in recovery_cluster.nodes:
        resume_node(n)
        wait_node_usable(n)
    wait_kernel_log_quiet()
    return recovery_cluster


@pytest.fixture
def audit(rc: clusterlib.ClusterFacts, request: pytest.FixtureRequest) -> Path:
    """A fresh audit log of this test's own."""
    d = rc.root / "audit"
    d.mkdir(exist_ok=True)
    mod = request.module.__name__.removeprefix("test_")
    p = d / f"{mod}-{request.node.name[:70]}-{os.getpid()}.jsonl"
    p.unlink(missing_ok=True)
    return p
