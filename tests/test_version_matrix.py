"""The cluster paths that matter, on each Slurm version gpualert is tested with: 22.05
(Debian 12), 24.11 (Debian 13) and 26.05 (Debian sid), each a container cluster built from that
release's own packages, the plugin compiled against that version's headers
(docker/slurm-cluster/dcluster, GPUALERT_DCLUSTER_SUITE). Test ids name the Slurm version and
the nodes' cgroup layout: `[22.05-v1]`, `[24.11-v1]`, `[26.05-v1]`.

Per version, two jobs and one command, kept few for CI's time (the 22.05 cluster is the one
tests/test_docker_cluster.py already brings up):
- a 3-node, 3-rank job through the tap: known bytes from each rank, a signal sent to the job
  (scancel -s USR1) that each rank traps, then three exit states (0, exit 3, SIGSEGV). It
  checks the bytes (Slurm's files and the tap's logs), the exit states (Slurm's and the exit
  records), the signals, the Prolog/Epilog/EpilogSlurmctld path to a report in the SMTP sink,
  and slurmctld's MailProg mail enriched with the verdict;
- a 2-node job whose second node is lost (docker kill): NODE_FAIL, the verdict names the node,
  and the recovery policy's decision (monitor mode) says what it would do; then the same in
  action mode: gpualert drains the node and requeues the job without it (its scontrol calls);
- `gpualert doctor` on the controller, with the cluster's own files; and the plugin it loads
  carries that version's number (built against its headers).
"""

from __future__ import annotations

import email
import email.policy
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import clusterlib
import pytest
from clusterlib import make_workdir, wait_final, wait_until, write_user_file
from dockerlib import (  # noqa: F401
    DockerCluster,
    docker_cluster_2411_session,
    docker_cluster_2605_session,
    docker_cluster_session,
    lose_a_node,
    using,
)
from spank_jobs import job_dir, require_plugin, task_files
from test_tap import GEN, expected, sha

from gpualert_slurm.core import slurm
from gpualert_slurm.core.slurm_records import ExitCode

pytestmark = [pytest.mark.docker, pytest.mark.cluster]

# "<Slurm version>-<cgroup layout>" (the test ids) -> the fixture of that container cluster
VERSIONS = {"22.05-v1": "docker_cluster_session", "24.11-v1": "docker_cluster_2411_session",
            "26.05-v1": "docker_cluster_2605_session"}


@pytest.fixture(scope="module", params=list(VERSIONS))
def vc(request: pytest.FixtureRequest) -> Iterator[DockerCluster]:
    """The container cluster of one Slurm version and cgroup layout, this process's clients
    pointed at it. Says which Slurm package it runs (sid's moves) in the test output."""
    dc: DockerCluster = request.getfixturevalue(VERSIONS[request.param])
    version, layout = request.param.split("-")
    assert dc.facts.slurm_version.startswith(version + "."), dc.facts.slurm_version
    assert dc.facts.cgroup == layout, (dc.facts.cgroup, request.param)
    # in the run's output itself (past pytest's capture), passed or not
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and capman is not None:
        raw = dc.facts.raw
        with capman.global_and_fixture_disabled():
            tr.write_line(f"[{request.param}] Slurm {dc.facts.slurm_version}, package "
                          f"{raw.get('slurm_package', '?')}, image {raw.get('image')}")
    require_plugin(dc.facts)
    with using(dc):
        yield dc


# ---------------------------------------------------------------------------------------------
# the tap, end to end

RANK_BYTES = 1000 * 1000 + 7   # per rank: many pipe fills; the classifier reads it all (CPU)
SEED = 9100

TAP_SCRIPT = f"""#!/bin/bash
#SBATCH -N3 -n3 --ntasks-per-node=1
echo start
srun -o 'rank-%t.out' bash -c '
  trap "echo rank $SLURM_PROCID got USR1; touch got-usr1-$SLURM_PROCID" USR1
  /usr/bin/python3 gen.py $(({SEED} + SLURM_PROCID)) {RANK_BYTES}
  touch wrote-$SLURM_PROCID
  for i in $(seq 1200); do [ -e got-usr1-$SLURM_PROCID ] && break; sleep 0.1; done
  case $SLURM_PROCID in
    1) sleep 2; echo "rank 1 fails" >&2; exit 3 ;;   # after rank 2: one root cause
    2) kill -SEGV $$ ;;
  esac'
rc=$?
echo "srun rc=$rc"
[ $rc -ne 0 ] && exit 7    # the job's own code (Slurm records an exit above 128 as a signal)
"""


@dataclass(frozen=True)
class TapRun:
    job: int
    state: slurm.JobState
    workdir: Path
    files: dict[str, bytes]          # <spool>/<job>/tasks/*
    signalled_after: float           # seconds from submit to the USR1


@pytest.fixture(scope="module")
def tap_run(vc: DockerCluster) -> TapRun:
    c = vc.facts
    d = make_workdir(c, f"matrix-tap-{c.slurm_version}")
    write_user_file(d / "gen.py", GEN, 0o644)
    script = write_user_file(d / "job.sh", TAP_SCRIPT)
    t0 = time.monotonic()
    job = vc.sbatch(script, "--gpualert", "--mail-type=FAIL", "-o", "slurm-%j.out")
    try:
        wait_until(lambda: all((d / f"wrote-{r}").exists() for r in range(3)), 120,
                   f"job {job}'s three ranks to write their bytes",
                   diagnose=lambda: clusterlib.diagnostics(job, c.root))
        signalled = time.monotonic() - t0
        slurm.cancel(job, signal="USR1")
        st = wait_final(job, timeout=120, root=c.root)
    finally:
        clusterlib.cancel_quietly(job)
    return TapRun(job, st, d, task_files(c, job), signalled)


def rank_output(rank: int) -> bytes:
    """What rank `rank` of TAP_SCRIPT writes to its stdout/stderr, in order."""
    tail = f"rank {rank} got USR1\n" + ("rank 1 fails\n" if rank == 1 else "")
    return expected(SEED + rank, RANK_BYTES) + tail.encode()


def test_tap_every_rank_byte_reaches_slurm_and_the_log(tap_run: TapRun) -> None:
    for rank in range(3):
        want = rank_output(rank)
        slurm_file = (tap_run.workdir / f"rank-{rank}.out").read_bytes()
        log = tap_run.files.get(f"0.{rank}.log")
        assert log is not None, f"no tap log for rank {rank}: {sorted(tap_run.files)}"
        assert sha(slurm_file) == sha(want), f"rank {rank}: Slurm's file is not what it wrote"
        assert len(log) == len(want) and sha(log) == sha(want), f"rank {rank}: the tap's log"
        rec = json.loads(tap_run.files[f"0.{rank}.exit"])
        assert rec["log_flushed"] is True and rec["log_bytes"] == len(want), rec
        assert rec["log_gaps"] == 0, rec
    out = (tap_run.workdir / f"slurm-{tap_run.job}.out").read_bytes()
    assert tap_run.files["batch.0.log"] == out


def test_tap_exit_states_are_the_jobs_own(tap_run: TapRun) -> None:
    # Each task's exit, as the plugin recorded it...
    recs = {r: json.loads(tap_run.files[f"0.{r}.exit"]) for r in range(3)}
    assert [(recs[r]["exit_code"], recs[r]["signal"]) for r in range(3)] == [
        (0, None), (3, None), (None, 11)], recs
    # ...and as Slurm did: srun's lines, the job's state and exit code (the script's own).
    out = (tap_run.workdir / f"slurm-{tap_run.job}.out").read_text(errors="replace")
    assert "task 1: Exited with exit code 3" in out, out[-2000:]
    assert "task 2: Segmentation fault" in out, out[-2000:]
    # srun: 128 + the signal that ended a task; the script then exits 7
    assert "srun rc=139\n" in out, out[-2000:]
    assert tap_run.state.state == "FAILED" and tap_run.state.exit_code == ExitCode(7, 0)
    assert tap_run.state.nodes == ("n1", "n2", "n3")


def test_tap_a_signal_to_the_job_reaches_every_rank_and_no_copier(tap_run: TapRun) -> None:
    # scancel -s USR1: every rank's trap ran (the files, and its line in both outputs, above),
    # and every copier lived on to drain its rank's output after the signal.
    for rank in range(3):
        assert (tap_run.workdir / f"got-usr1-{rank}").exists(), rank
        log = tap_run.files[f"0.{rank}.log"]
        assert log.endswith(rank_output(rank)[-40:]), (rank, log[-80:])
    assert json.loads(tap_run.files["batch.0.exit"])["log_flushed"] is True


def verdict_of(c: clusterlib.ClusterFacts, job: int) -> dict:
    """The job's verdict.json once the job epilog has recorded its report there too."""
    vf = job_dir(c, job) / "verdict.json"
    return wait_until(lambda: vf.exists() and (v := json.loads(vf.read_text())).get("report")
                      and v, 120, f"{vf} with its report")


def test_prolog_epilog_and_job_epilog_end_in_a_report_mail(vc: DockerCluster,
                                                          tap_run: TapRun) -> None:
    c, job = vc.facts, tap_run.job
    jd = job_dir(c, job)
    nodes = {"n1", "n2", "n3"}
    # Prolog on every node, before the tasks; the node Epilog's verdict from every node.
    assert json.loads((jd / "job.json").read_text())["nodes"] == sorted(nodes)
    assert {p.name.split(".")[0] for p in (jd / "nodes").glob("*.prolog.json")} == nodes
    wait_until(lambda: len(list((jd / "nodes").glob("*.verdict.json"))) == 3, 60,
               "three node verdicts")
    v = verdict_of(c, job)
    verdict = v["verdict"]
    assert (verdict["class"], verdict["root_rank"]) == ("segfault", 2), verdict
    ran_on = {t["rank"]: t["node"] for t in v["tasks"] if t["step"] == "0"}
    assert verdict["root_node"] == ran_on[2]
    assert v["report"]["status"] == "sent", v["report"]
    subject = v["report"]["subject"]
    path = clusterlib.wait_for_mail(c.maildir, subject, timeout=60)
    m = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
    assert m["Subject"] == subject and f"job {job}" in subject
    body = m.get_body(preferencelist=("plain",)).get_content()
    assert "segfault" in body, body[:1000]


def test_mailprog_gets_slurms_mail_and_enriches_it(vc: DockerCluster, tap_run: TapRun) -> None:
    c, job = vc.facts, tap_run.job
    path = clusterlib.wait_for_mail(c.maildir, f"Slurm Job_id={job} ", timeout=90)
    m = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
    assert m["Subject"].startswith(f"Slurm Job_id={job} ") and "Failed" in m["Subject"]
    assert m["Subject"].endswith("[gpualert: segfault]"), m["Subject"]
    assert m["X-Sink-Rcpt-To"] == f"{c.user}@cluster.test"


# ---------------------------------------------------------------------------------------------
# recovery on a node loss (the steps: dockerlib.lose_a_node, as tests/test_recovery_docker.py)


def test_node_loss_is_named_and_recovery_decides(vc: DockerCluster) -> None:
    c = vc.facts
    assert "recovery" not in c.gpualert_config.read_text(), "this test expects monitor mode"
    loss = lose_a_node(vc, f"matrix-loss-{c.slurm_version}")
    dec, victim, job, st = loss.decision, loss.victim, loss.job, loss.final
    assert st is not None and st.state == "NODE_FAIL", st
    v = verdict_of(c, job)
    assert v["verdict"]["class"] == "node_failure" and v["verdict"]["root_node"] == victim, v
    assert dec["class"] == "node_failure" and dec["suspects"] == [victim], dec
    assert dec["mode"] == "monitor" and dec["planned"] == []
    assert {(w["action"], w["target"]) for w in dec["would"]} == {("drain_node", victim),
                                                                  ("requeue", str(job))}
    assert v["recovery"]["mode"] == "monitor" and v["recovery"]["would"], v.get("recovery")
    assert not slurm.node_info(victim).reason.startswith("gpualert:")


def test_node_loss_in_action_mode_drains_it_and_requeues_the_job_without_it(
        vc: DockerCluster) -> None:
    """Action mode on a real node loss: gpualert's own Slurm commands on this version
    (scontrol update nodename=... state=DRAIN reason=..., update jobid=... ExcNodeList=...,
    requeue). The cluster's config is switched under the cluster lock and put back, and the
    node resumed, whatever happens (dockerlib.lose_a_node, as tests/test_recovery_docker.py
    does on 22.05)."""
    c = vc.facts
    loss = lose_a_node(vc, f"matrix-action-{c.slurm_version}", action=True)
    dec, victim, node, st = loss.decision, loss.victim, loss.node, loss.requeued
    assert node is not None and st is not None
    assert dec["class"] == "node_failure" and dec["suspects"] == [victim], dec
    assert dec["mode"] == "action", dec
    assert "DRAIN" in node.flags and node.reason.startswith("gpualert: node_failure"), node
    assert st.restarts >= 1 and victim in str(st.raw.get("ExcNodeList")), st.raw


# ---------------------------------------------------------------------------------------------
# the plugin and doctor


def test_plugin_is_compiled_against_this_slurms_headers(vc: DockerCluster) -> None:
    """The plugin the cluster loads carries the Slurm version of the headers it was built
    with (SPANK_PLUGIN's plugin_version = SLURM_VERSION_NUMBER); slurmd refuses another."""
    c = vc.facts
    so = Path(c.raw.get("opt", "/opt/gpualert")) / "lib" / "gpualert.so"
    nm = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True,
                        check=True).stdout
    addr = int(next(ln.split()[0] for ln in nm.splitlines()
                    if ln.endswith(" plugin_version")), 16)
    dump = subprocess.run(["objdump", "-s", f"--start-address={addr:#x}",
                           f"--stop-address={addr + 4:#x}", str(so)], capture_output=True,
                          text=True, check=True).stdout.splitlines()[-1].split()
    number = int.from_bytes(bytes.fromhex(dump[1]), "little")
    built = f"{number >> 16}.{(number >> 8) & 0xff:02d}.{number & 0xff}"
    assert built == c.slurm_version, (so, built)




def test_doctor_passes_on_the_controller(vc: DockerCluster) -> None:
    """`gpualert doctor` where an admin runs it: on the controller, with that Slurm's files
    (its slurm.conf and the plugstack.conf it names), the gpualert built for it, its sink."""
    c = vc.facts
    # under the cluster lock: not while another test has the config switched or a node broken
    with clusterlib.cluster_lock(c):
        proc = subprocess.run(["docker", "exec", f"{vc.prefix}-ctl",
                               "/opt/gpualert/venv/bin/gpualert", "doctor", "--config",
                               str(c.gpualert_config), "--slurm-conf", str(c.conf)],
                              capture_output=True, text=True, timeout=120)
    out = proc.stdout
    assert "Traceback" not in out + proc.stderr, proc.stderr
    assert proc.returncode == 0, out
    assert not [ln for ln in out.splitlines() if ln.startswith("FAIL")], out
    assert f"ok   plugin file {c.plugin}" in out
    for key, hook in (("Prolog", "prolog"), ("Epilog", "epilog"),
                      ("EpilogSlurmctld", "epilog-slurmctld")):
        assert f"ok   {key}= in slurm.conf runs gpualert-{hook}" in out, out
    assert f"ok   spool {c.spool}" in out
    assert f"ok   mail relay {c.smtp_host}:{c.smtp_port}" in out


# ---------------------------------------------------------------------------------------------
# trust (issue 28): a job's name and comment never speak for Slurm, on each version

HOSTILE_NAME = ("x UserId=root(0) Account=root Partition=urgent StartTime=2001-01-01T00:00:00 "
                "EndTime=2001-01-01T00:00:01 JobState=NODE_FAIL Reason=NodeDown NodeList=n9 "
                "Restarts=7 ExitCode=0:9 FailedNode=n9")
HOSTILE_JOB = """#!/bin/bash
echo "ValueError: a plain failure of the job's own"
exit 3
"""


def test_a_hostile_name_does_not_speak_for_slurm(vc: DockerCluster) -> None:
    c = vc.facts
    d = make_workdir(c, f"matrix-hostile-{c.slurm_version}")
    script = write_user_file(d / "job.sh", HOSTILE_JOB)
    job = vc.sbatch(script, "--gpualert", "-J", HOSTILE_NAME, "--comment",
                    "UserId=root(0) JobState=NODE_FAIL Reason=NodeDown", "-o", "slurm-%j.out")
    st = wait_final(job, timeout=120, root=c.root)
    wait_until(lambda: (job_dir(c, job) / "verdict.json").exists(), 90, "the verdict")
    v = verdict_of(c, job)
    trusted = v["trusted"]["slurm"]
    # sacct's settled record (wait_final) and Slurm's JSON agree; the name's claims do not
    assert (trusted["user"], trusted["partition"], trusted["state"]) == (
        c.user, "debug", st.state) == (c.user, "debug", "FAILED"), trusted
    assert trusted["nodes"] == list(st.nodes) and "n9" not in trusted["nodes"]
    assert trusted["start"] and trusted["start"] > time.time() - 3600  # not 2001
    assert v["verdict"]["class"] == "python_exception", v["verdict"]
    assert st.exit_code.code == 3
