"""A node whose cgroup layout the plugin does not know (issue 33, "Bad input and faults"): a
cgroup v1 hierarchy mounted inside the cgroup2 root (mixed). The plugin says so once in
slurmd's log (not once a job), starts no copier host (each task starts its copier: the safe
path) and the job runs as without gpualert; `gpualert doctor` says the layout and that the
tap's stall guarantee does not hold there, and on the plain v2 node that it does.

Needs a unified-only node (cgroup2 at /sys/fs/cgroup): it runs in the cgroup v2 guest
(docker/slurm-cluster/v2vm, tests/test_tap_cgroup_v2.py, under `make test-matrix`); on a v1 or
hybrid machine, where a mixed layout cannot be made without remounting the machine's cgroups,
it is not collected (tests/conftest.py).
Slurm's own cgroup/v2 refuses a node whose processes list a v1 hierarchy ("Hybrid mode is not
supported"), so the jobs run on the proctrack/pgid cluster (no Slurm cgroup plugin loaded);
the hierarchy is a named one (`name=gpatest`: the guest boots with cgroup_no_v1=all, which
leaves no v1 controller to mount) at /sys/fs/cgroup/freezer, where the plugin looks.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterlib import (
    PGID_CLUSTER_ENV,
    ClusterError,
    ClusterFacts,
    cluster_up,
    make_workdir,
    using_conf,
    write_user_file,
)
from spank_jobs import (
    assert_same_outcome,
    require_plugin,
    submit_pair,
    task_files,
    wait_final_or_cancel,
)

pytestmark = pytest.mark.cluster

UNIFIED_ONLY = Path("/sys/fs/cgroup/cgroup.controllers").exists()
GPUALERT = "/opt/gpualert/venv/bin/gpualert"
MOUNT = Path("/sys/fs/cgroup/freezer")
MARKER = Path("/run/gpualert/cgroup-layout.logged")
LINE = "gpualert: unknown cgroup layout (mixed"
SCRIPT = """#!/bin/bash
echo start
srun -n2 -o 'rank-%j-%t.out' bash -c 'echo rank $SLURM_PROCID
  head -c 300000 /dev/zero | tr "\\0" m; echo'
echo done
"""

# slurmstepd's own line when a Prolog is slow (seen under the guest's TCG, in tapped jobs):
# the Prolog's, not the tap's; only this line is set aside. 26.05 prefixes it with the time
# ("[2026-12-06T08:49:14.779] error: Prolog hung on node n2") instead of "slurmstepd: ".
PROLOG_HUNG = re.compile(rb"^(?:slurmstepd(?:-[\w.-]+)?:|\[[0-9T:.-]+\]) error: Prolog hung on "
                         rb"node \S+\n", re.M)


def job_out(path: Path) -> bytes:
    return PROLOG_HUNG.sub(b"", path.read_bytes())


# a unified-only node's test: run in the v2 guest, not collected elsewhere (tests/conftest.py)
needs_v2 = pytest.mark.v2guest


def doctor(c: ClusterFacts) -> str:
    return subprocess.run([GPUALERT, "doctor", "--slurm-conf", str(c.conf)], capture_output=True,
                          text=True, timeout=120,
                          env={"GPUALERT_CONFIG": str(c.gpualert_config), "PATH": "/usr/bin:/bin"}
                          ).stdout


@pytest.fixture(scope="module")
def pgid() -> Iterator[ClusterFacts]:
    try:
        facts = cluster_up(env=PGID_CLUSTER_ENV)
    except ClusterError as e:
        pytest.fail(f"the proctrack/pgid test cluster is not available:\n{e}", pytrace=False)
    with using_conf(facts):
        yield require_plugin(facts)


@pytest.fixture
def mixed() -> Iterator[None]:
    MARKER.unlink(missing_ok=True)
    MOUNT.mkdir(exist_ok=True)     # a child cgroup of the cgroup2 root, then a v1 mount on it
    subprocess.run(["mount", "-t", "cgroup", "-o", "none,name=gpatest", "gpatest", str(MOUNT)],
                   check=True, capture_output=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run(["umount", str(MOUNT)], capture_output=True, timeout=30)
        MOUNT.rmdir()
        MARKER.unlink(missing_ok=True)


@needs_v2
def test_doctor_says_the_v2_guarantee_holds(cluster: ClusterFacts) -> None:
    out = doctor(cluster)
    assert ("info cgroup layout v2: the tap's stall guarantee holds (the copier host moves "
            "into gpualert_copiers") in out, out


@needs_v2
def test_mixed_layout_is_said_once_and_jobs_run_as_without(pgid: ClusterFacts,
                                                          mixed: None) -> None:
    c = pgid
    d = make_workdir(c, "cglayout")
    script = write_user_file(d / "job.sh", SCRIPT)
    logs = sorted((c.root / "log").glob("slurmd-*.log"))
    before = sum(p.read_text(errors="replace").count(LINE) for p in logs)
    pairs = [submit_pair(c, script, ["-N2", "-o", "slurm-%j.out"]) for _ in range(2)]
    wait_final_or_cancel(c, [j for p in pairs for j in p], 120)
    for tapped, plain in pairs:
        assert_same_outcome(tapped, plain)
        assert job_out(d / f"slurm-{tapped}.out") == job_out(d / f"slurm-{plain}.out")
        files = task_files(c, tapped)
        for r in (0, 1):
            assert files[f"0.{r}.log"] == (d / f"rank-{tapped}-{r}.out").read_bytes()
            assert (d / f"rank-{tapped}-{r}.out").read_bytes() == \
                (d / f"rank-{plain}-{r}.out").read_bytes()
    said = sum(p.read_text(errors="replace").count(LINE) for p in logs) - before
    assert said == 1, f"slurmd's logs say the mixed layout {said} times for four tapped steps"
    out = doctor(c)
    assert "warn cgroup layout mixed: the tap's stall guarantee does not hold" in out, out
