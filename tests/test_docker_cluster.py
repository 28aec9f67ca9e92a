"""The container test cluster (one container per node): real node loss, a frozen node, the
tap's byte-for-byte test, and the fault tools the recovery work uses.

Selected with `-m docker`; they fail (never skip) when dockerd or the cluster cannot start.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import clusterlib
import pytest
from clusterlib import make_workdir, wait_final, wait_state, wait_until
from dockerlib import DCLUSTER, DockerCluster, docker_cluster, docker_cluster_session  # noqa: F401
from spank_jobs import job_dir, require_plugin, submit_held, task_files
from test_tap import BATCH_LOG_MAX, GEN, capped_batch_log, expected, sha

from gpualert_slurm.core import slurm

pytestmark = [pytest.mark.docker, pytest.mark.cluster]


@pytest.fixture
def dwork(docker_cluster: DockerCluster, request: pytest.FixtureRequest) -> Path:  # noqa: F811
    """A fresh work dir (owned by the test user) in the container cluster's shared work dir."""
    return make_workdir(docker_cluster.facts, request.node.name)


def lines_of(data: bytes) -> list[str]:
    return data.decode(errors="replace").splitlines()


def numbered(lines: list[str], rank: int) -> list[int]:
    """The line numbers of `rank <r> ... line <i>` lines, in order."""
    return [int(m.group(1)) for ln in lines
            if (m := re.fullmatch(rf"rank {rank} node \S+ line (\d+)", ln))]


def epilog_slurmctld_wired() -> bool:
    conf = slurm.run(["scontrol", "show", "config"], timeout=30)
    return bool(re.search(r"^EpilogSlurmctld\s*=\s*/\S+", conf, re.M))


# Three ranks, one a node, each printing a numbered line every 50 ms for up to 150 s.
RANKS_SCRIPT = """#!/bin/bash
srun -N3 -n3 -o 'rank-%t.out' bash -c 'for i in $(seq 3000); do
  echo "rank $SLURM_PROCID node $SLURMD_NODENAME line $i"; sleep 0.05; done'
"""


@dataclass(frozen=True)
class NodeLoss:
    job: int
    lost: str
    state: slurm.JobState
    files: dict[str, bytes]   # <spool>/<job>/tasks/*
    workdir: Path


@pytest.fixture(scope="module")
def node_loss(docker_cluster: DockerCluster) -> NodeLoss:  # noqa: F811
    """A 3-node, 3-rank job (--gpualert, --no-requeue) whose middle node is killed (docker
    kill: slurmd, slurmstepd and the rank go at once) while every rank is printing."""
    dc, c = docker_cluster, docker_cluster.facts
    require_plugin(c)
    dwork = make_workdir(c, "node_loss")
    job = clusterlib.submit(RANKS_SCRIPT, "-N3", "--no-requeue", "--gpualert", "-o", "slurm-%j.out",
                            workdir=dwork)
    lost = "n2"
    with clusterlib.cluster_lock(c):  # no concurrent `dcluster up` restarts the node meanwhile
        try:
            wait_state(job, "RUNNING", timeout=90, root=c.root)
            # Every rank has written a few lines, in Slurm's file and in the tap's log.
            wait_until(lambda: all(len(numbered(lines_of(f.read_bytes()), r)) >= 20
                                   for r in range(3) if (f := dwork / f"rank-{r}.out").exists())
                       and len(list(dwork.glob("rank-*.out"))) == 3, 60,
                       "all three ranks to print 20 lines")
            t0 = time.monotonic()
            dc.kill_node(lost)
            st = wait_final(job, timeout=150, root=c.root)
            print(f"job {job}: {st.state} {time.monotonic() - t0:.1f} s after {lost} was killed")
        finally:
            clusterlib.cancel_quietly(job)
            dc.restore_node(lost)
    return NodeLoss(job, lost, st, task_files(c, job), dwork)


def test_killed_node_ends_the_job_node_fail(node_loss: NodeLoss) -> None:
    assert node_loss.state.state == "NODE_FAIL", node_loss.state
    assert node_loss.state.nodes == ("n1", "n2", "n3")
    step0 = next(s for s in slurm.accounting(node_loss.job).steps if s.step == "0")
    assert step0.state in ("NODE_FAIL", "CANCELLED", "FAILED"), step0


def test_surviving_ranks_logs_are_complete_after_node_loss(node_loss: NodeLoss) -> None:
    # The ranks on n1 and n3: the tap's log holds exactly what the rank wrote to Slurm's own
    # output file (less slurmstepd's "CANCELLED ... NODE FAILURE" line, which is not the
    # rank's), numbered lines without a gap, and their exit was recorded as flushed.
    files = node_loss.files
    for rank in (0, 2):
        log = files.get(f"0.{rank}.log")
        assert log is not None, f"no tap log for rank {rank}: {sorted(files)}"
        slurm_out = (node_loss.workdir / f"rank-{rank}.out").read_bytes()
        own = b"".join(ln for ln in slurm_out.splitlines(keepends=True)
                       if not ln.startswith(b"slurmstepd"))
        assert log == own, f"rank {rank}: the tap's log differs from the rank's output"
        nums = numbered(lines_of(log), rank)
        assert len(nums) >= 20 and nums == list(range(1, len(nums) + 1)), nums[-5:]
        rec = json.loads(files[f"0.{rank}.exit"])
        assert rec["log_flushed"] is True and rec["log_bytes"] == len(log), rec
    # The lost rank: what reached the shared spool before its node died, in order; no exit
    # record (its slurmstepd died with the node).
    lost_nums = numbered(lines_of(files.get("0.1.log", b"")), 1)
    assert len(lost_nums) >= 20 and lost_nums == list(range(1, len(lost_nums) + 1))
    assert "0.1.exit" not in files


def test_spool_dir_is_intact_after_node_loss(docker_cluster: DockerCluster,  # noqa: F811
                                             node_loss: NodeLoss) -> None:
    jd = job_dir(docker_cluster.facts, node_loss.job)
    assert json.loads((jd / "job.json").read_text())["nodes"] == ["n1", "n2", "n3"]
    assert {p.name for p in (jd / "nodes").glob("*.prolog.json")} == {
        f"{n}.prolog.json" for n in ("n1", "n2", "n3")}
    assert {f"0.{r}.log" for r in range(3)} | {"batch.0.log"} <= set(node_loss.files)


def test_verdict_names_the_lost_node_and_its_rank(docker_cluster: DockerCluster,  # noqa: F811
                                                  node_loss: NodeLoss) -> None:
    assert epilog_slurmctld_wired(), "the container cluster runs no EpilogSlurmctld"
    vf = job_dir(docker_cluster.facts, node_loss.job) / "verdict.json"
    wait_until(vf.exists, 120, f"{vf}")
    verdict = json.loads(vf.read_text())
    v = verdict.get("verdict") or {}
    shown = json.dumps({k: verdict.get(k) for k in ("verdict", "tasks", "notes")}, indent=1)
    assert v.get("class") == "node_failure" and v.get("root_node") == node_loss.lost, shown
    # The lost rank is attributed to the lost node (root_rank, or the task list).
    ranks_on_lost = {t.get("rank") for t in verdict.get("tasks") or []
                     if t.get("node") == node_loss.lost and t.get("step") == "0"}
    assert v.get("root_rank") == 1 or ranks_on_lost == {1}, shown


def test_frozen_node_ends_its_job_by_slurmd_timeout(
        docker_cluster: DockerCluster, dwork: Path) -> None:  # noqa: F811
    dc, c = docker_cluster, docker_cluster.facts
    node = "n3"
    job = clusterlib.submit("#!/bin/bash\nfor i in $(seq 600); do echo tick $i; sleep 0.5; done\n",
                            "-w", node, "--no-requeue", "-o", "out-%j.txt", workdir=dwork)
    with clusterlib.cluster_lock(c):
        try:
            wait_state(job, "RUNNING", timeout=90, root=c.root)
            t0 = time.monotonic()
            dc.pause_node(node)
            # SlurmdTimeout=10: slurmctld gives up on the silent node and the job with it.
            st = wait_final(job, timeout=120, root=c.root)
            took = time.monotonic() - t0
            node_now = clusterlib.node_state(node)
            print(f"job {job}: {st.state} {took:.1f} s after {node} froze; node {node_now}")
            assert dc.container_state(node) == "paused"  # it ended while the node was frozen
        finally:
            clusterlib.cancel_quietly(job)
            dc.restore_node(node)
    assert st.state == "NODE_FAIL", st
    assert node_now.startswith("down"), node_now
    # Thawed, the node returns to service by itself (ReturnToService=2) and runs jobs again.
    again = clusterlib.submit("#!/bin/bash\necho back\n", "-w", node, "-o", "again-%j.txt",
                              workdir=dwork, name="again.sh")
    assert wait_final(again, timeout=90, root=c.root).state == "COMPLETED"


@pytest.mark.parametrize("run", [1, 2])
def test_every_rank_log_holds_exactly_its_bytes_on_container_nodes(
        docker_cluster: DockerCluster, run: int) -> None:  # noqa: F811
    """test_tap's 100 MB byte-for-byte test, each node its own container, the spool a
    directory every node mounts. Run 1: Slurm writes each rank's output file too
    (compared byte for byte); run 2: all of it through srun into slurm-%j.out."""
    c = require_plugin(docker_cluster.facts)
    d = make_workdir(c, f"dtapbytes{run}")
    clusterlib.write_user_file(d / "gen.py", GEN, 0o644)
    tasks, size = 6, 100 * 1000 * 1000 // 6
    seed0 = 5000 + 1000 * run
    gen = f"bash -c 'exec /usr/bin/python3 gen.py $(({seed0} + SLURM_PROCID)) {size}'"
    step = f"srun -o 'rank-%t.out' {gen}" if run == 1 else f"srun {gen}"
    script = clusterlib.write_user_file(d / "job.sh", f"""#!/bin/bash
#SBATCH -N3 -n{tasks} --ntasks-per-node=2 --gpualert
echo start
{step}
echo end
""")
    jobid = submit_held(c, script)
    st = wait_final(jobid, 600, c.root)
    assert st.state == "COMPLETED", st
    files = task_files(c, jobid)
    for rank in range(tasks):
        want = sha(expected(seed0 + rank, size))
        log = files.get(f"0.{rank}.log")
        assert log is not None, f"no log for rank {rank}: {sorted(files)}"
        assert len(log) == size, f"rank {rank}: log has {len(log)} bytes, wrote {size}"
        assert sha(log) == want, f"rank {rank}: log differs from what the rank wrote"
        if run == 1:
            assert sha((d / f"rank-{rank}.out").read_bytes()) == want, f"rank {rank}: output"
    out = (d / f"slurm-{jobid}.out").read_bytes()
    if run == 1:
        assert out == b"start\nend\n"
    else:
        assert len(out) == size * tasks + 10
        assert out.startswith(b"start\n") and out.endswith(b"end\n")
    tap_log = job_dir(c, jobid) / "tap.log"
    if len(out) <= BATCH_LOG_MAX:
        assert files["batch.0.log"] == out
        assert not tap_log.exists(), tap_log.read_text()
    else:  # as in test_tap: the batch log keeps its head, a note, its tail
        assert files["batch.0.log"] == capped_batch_log(out)
        lines = tap_log.read_text().splitlines()
        assert len(lines) == 1 and "batch log capped" in lines[0], lines
    assert {n for n in st.nodes} == {"n1", "n2", "n3"}


# ---------------------------------------------------------------------------------------------
# the fault tools themselves


def test_each_node_is_its_own_machine(docker_cluster: DockerCluster) -> None:  # noqa: F811
    dc = docker_cluster
    seen = {}
    for node in dc.facts.nodes:
        p = dc.exec(node, "hostname; touch /tmp/mine-$(hostname); ls /tmp; "
                          "ls /var/log/slurm; readlink /proc/1/ns/pid")
        assert p.returncode == 0, p.stderr
        host, *rest = p.stdout.split()
        seen[node] = (host, rest)
        assert host == node
        assert f"mine-{node}" in rest and not any(f"mine-{o}" in rest for o in dc.facts.nodes
                                                    if o != node)
        assert f"slurmd-{node}.log" in rest
    assert len({r[-1] for _, r in seen.values()}) == len(seen), "PID namespaces are shared"


def test_fill_disk_leaves_the_node_no_byte_and_free_disk_gives_them_back(
        docker_cluster: DockerCluster) -> None:  # noqa: F811
    dc, node = docker_cluster, "n1"
    try:
        dc.fill_disk(node)
        p = dc.exec(node, "df -B1 --output=avail /tmp | tail -1; "
                          "head -c 65536 /dev/zero > /var/log/x 2>&1; echo rc=$?")
        avail, rc = p.stdout.split()
        assert int(avail) == 0 and rc != "rc=0", p.stdout + p.stderr
    finally:
        dc.free_disk(node)
    p = dc.exec(node, "head -c 65536 /dev/zero > /tmp/x && rm /tmp/x /var/log/x -f && echo ok")
    assert p.stdout.strip() == "ok", p.stderr


def test_stalled_spool_hangs_one_node_only(docker_cluster: DockerCluster) -> None:  # noqa: F811
    dc = docker_cluster
    spool = dc.facts.spool
    stalled, other = "n2", "n3"
    dc.restart_node(stalled, fuse_spool=True)
    try:
        dc.stall_spool(stalled)
        try:
            with pytest.raises(subprocess.TimeoutExpired):
                dc.exec(stalled, f"ls {spool} >/dev/null", timeout=4)
            ok = dc.exec(other, f"ls {spool} >/dev/null && echo ok", timeout=10)
            assert ok.stdout.strip() == "ok", ok.stderr
        finally:
            dc.unstall_spool(stalled)
        p = dc.exec(stalled, f"ls {spool} >/dev/null && echo ok", timeout=20)
        assert p.stdout.strip() == "ok", p.stderr
    finally:
        dc.restart_node(stalled)  # back to the plain shared spool


def test_cut_net_makes_the_node_unreachable_until_healed(
        docker_cluster: DockerCluster) -> None:  # noqa: F811
    dc, c, node = docker_cluster, docker_cluster.facts, "n1"
    with clusterlib.cluster_lock(c):
        try:
            dc.cut_net(node)
            state = wait_until(lambda: (s := clusterlib.node_state(node)).startswith("down") and s,
                               90, f"{node} to be marked down once its network was cut")
            print(f"{node}: {state}")
            p = dc.exec(node, "timeout 5 bash -c '</dev/tcp/ctl/6817' && echo reached")
            assert "reached" not in p.stdout
        finally:
            dc.restore_node(node)
    assert clusterlib.node_state(node) in ("idle", "mixed", "allocated")


def test_status_lists_every_container(docker_cluster: DockerCluster) -> None:  # noqa: F811
    proc = subprocess.run([str(DCLUSTER), "status"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    states = dict(ln.split("=", 1) for ln in proc.stdout.splitlines()
                  if ln.startswith("container."))
    assert states == {f"container.{n}": "running" for n in ("db", "ctl", "smtp", "n1", "n2", "n3")}
