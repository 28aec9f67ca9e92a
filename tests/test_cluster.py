"""The test cluster itself: real jobs, real node failure, real OOM kill, preemption, real SMTP."""

from __future__ import annotations

import os
import signal
import smtplib
import subprocess
import time
import uuid
from email.message import EmailMessage
from pathlib import Path

import clusterlib
import pytest
from clusterlib import ClusterFacts, run_as_user, submit, wait_final, wait_state

from gpualert_slurm.core import slurm

pytestmark = pytest.mark.cluster


def test_three_node_job_runs_a_task_on_each_node_as_the_test_user(
        cluster: ClusterFacts, workdir: Path) -> None:
    job = submit(
        "#!/bin/bash\n"
        "srun -N3 -n3 bash -c 'echo \"task=$SLURM_PROCID node=$SLURMD_NODENAME user=$(id -un)\"'\n",
        "-N3", "-o", "out-%j.txt", workdir=workdir)
    st = wait_final(job, timeout=90)
    assert (st.state, str(st.exit_code)) == ("COMPLETED", "0:0")
    assert st.nodes == ("n1", "n2", "n3")
    out = (workdir / f"out-{job}.txt").read_text()
    lines = [ln for ln in out.splitlines() if ln.startswith("task=")]
    reported = {ln.split()[1].removeprefix("node=") for ln in lines}
    assert reported == {"n1", "n2", "n3"}, lines
    assert {ln.split()[2] for ln in lines} == {f"user={cluster.user}"}, lines
    assert st.user == cluster.user


def test_sacct_records_failed_job_with_its_exit_code(cluster: ClusterFacts, workdir: Path) -> None:
    job = submit("#!/bin/bash\necho about to fail\nexit 3\n", "-o", "out-%j.txt", workdir=workdir)
    st = wait_final(job)
    assert st.source == "sacct"
    assert st.state == "FAILED"
    assert (st.exit_code.code, st.exit_code.signal) == (3, 0)
    # A plain `sacct -X` table agrees with what the client parsed.
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", str(job), "-o", "State,ExitCode"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.strip() == "FAILED|3:0"
    assert "about to fail" in (workdir / f"out-{job}.txt").read_text()


def test_host_oom_ends_out_of_memory(cluster: ClusterFacts, workdir: Path) -> None:
    if not cluster.memory_enforced:
        pytest.fail(f"memory is not enforced on this cluster (cgroup={cluster.cgroup}): "
                    "a host OOM cannot end OUT_OF_MEMORY here")
    job = submit(
        "#!/bin/bash\n"
        "python3 -c 'b = bytearray(600 * 1024 * 1024)\n"
        "for i in range(0, len(b), 4096): b[i] = 1\n"
        "print(\"survived\")'\n",
        "--mem=100M", "-o", "out-%j.txt", workdir=workdir)
    st = wait_final(job, timeout=90)
    out = (workdir / f"out-{job}.txt").read_text()
    assert st.state == "OUT_OF_MEMORY", out
    assert "survived" not in out.splitlines()  # (bash echoes the command text itself)
    assert "oom-kill" in out


def test_killed_slurmd_marks_node_down_and_its_job_node_fail(
        cluster: ClusterFacts, workdir: Path) -> None:
    # An idle node if there is one: other sessions' jobs on the node would die with it.
    states = slurm.node_states(cluster.nodes)
    node = next((n for n in reversed(cluster.nodes) if states.get(n) == "idle"), "n3")
    job = submit("#!/bin/bash\nsleep 300\n", "-w", node, "--no-requeue", "-o", "out-%j.txt",
                 workdir=workdir)
    wait_state(job, "RUNNING", timeout=60)
    # Under the cluster lock: a concurrent `cluster up` would restart this slurmd at once.
    with clusterlib.cluster_lock(cluster):
        try:
            pid = int(cluster.slurmd_pidfile(node).read_text().strip())
            t0 = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            state = clusterlib.wait_until(
                # SlurmdTimeout=10: usually 20-30 s; slower while RPCs to the dead node retry.
                lambda: (s := clusterlib.node_state(node)).startswith("down") and s, 90,
                f"{node} to be marked down after its slurmd was killed",
                diagnose=lambda: clusterlib.diagnostics(job, cluster.root))
            print(f"{node} seen as {state} {time.monotonic() - t0:.1f} s after its slurmd died")
            assert wait_final(job, timeout=60).state == "NODE_FAIL"
        finally:
            clusterlib.cancel_quietly(job)
            clusterlib.restore_node(cluster, node)
    assert clusterlib.node_state(node) in ("idle", "mixed", "allocated")


def test_urgent_partition_preempts_debug_job(cluster: ClusterFacts, workdir: Path) -> None:
    node = "n2"
    low = submit("#!/bin/bash\nsleep 300\n", "-p", "debug", "-w", node, "--exclusive",
                 "-o", "low-%j.txt", workdir=workdir, name="low.sh")
    try:
        wait_state(low, "RUNNING", timeout=90)
        high = submit("#!/bin/bash\necho urgent done\n", "-p", "urgent", "-w", node, "--exclusive",
                      "-o", "high-%j.txt", workdir=workdir, name="high.sh")
        assert wait_final(low, timeout=60).state == "PREEMPTED"
        st = wait_final(high, timeout=60)
        assert (st.state, st.partition) == ("COMPLETED", "urgent")
    finally:
        clusterlib.cancel_quietly(low)


def test_two_dozen_small_jobs_run_at_once(cluster: ClusterFacts, workdir: Path) -> None:
    marker = workdir / "go"
    script = ("#!/bin/bash\n"
              f"touch {workdir}/started.$SLURM_JOB_ID\n"
              f"for i in $(seq 600); do [ -e {marker} ] && exit 0; sleep 0.1; done\nexit 1\n")
    jobs = [submit(script, "-n1", "-o", "/dev/null", workdir=workdir, name=f"s{i}.sh")
            for i in range(24)]
    try:
        # All 24 running together: each one waits for the marker, so none ends before the last
        # one started.
        clusterlib.wait_until(lambda: len(list(workdir.glob("started.*"))) == 24, 50,
                              "24 jobs to be running at the same time",
                              diagnose=lambda: clusterlib.diagnostics(None, cluster.root))
        clusterlib.write_user_file(marker, "", 0o644)
        states = clusterlib.wait_final_many(jobs, timeout=60)
        assert {s.state for s in states} == {"COMPLETED"}
        # 24 one-CPU jobs cannot fit on one 16-CPU node: they were spread over nodes.
        assert len({n for s in states for n in s.nodes}) >= 2
    finally:
        clusterlib.cancel_quietly(*jobs)


def test_smtp_sink_stores_each_message_as_a_file(cluster: ClusterFacts) -> None:
    subject = f"gpualert cluster test {uuid.uuid4()}"
    msg = EmailMessage()
    msg["From"] = "gpualert@localhost"
    msg["To"] = f"{cluster.user}@localhost"
    msg["Subject"] = subject
    msg.set_content("body line\n")
    with smtplib.SMTP(cluster.smtp_host, cluster.smtp_port, timeout=10) as s:
        s.send_message(msg)
    f = clusterlib.wait_for_mail(cluster.maildir, subject, timeout=10)
    text = f.read_text()
    assert "body line" in text
    assert f"X-Sink-Rcpt-To: {cluster.user}@localhost" in text
    assert not list(cluster.maildir.glob(".tmp-*"))


def test_private_smtp_server_fixture_receives_mail(smtp_server) -> None:  # type: ignore[no-untyped-def]
    with smtplib.SMTP(smtp_server.host, smtp_server.port, timeout=10) as s:
        s.sendmail("a@localhost", ["b@localhost", "c@localhost"], b"Subject: hi\r\n\r\nhello\r\n")
    msgs = smtp_server.messages()
    assert len(msgs) == 1
    text = msgs[0].read_text()
    assert "X-Sink-Rcpt-To: b@localhost, c@localhost" in text and "hello" in text


def test_second_up_is_fast_and_reports_the_same_facts(cluster: ClusterFacts) -> None:
    t0 = time.monotonic()
    again = clusterlib.cluster_up()
    took = time.monotonic() - t0
    assert again.raw == cluster.raw
    assert took < 15, f"a second 'cluster up' took {took:.1f} s"


def test_status_says_every_daemon_runs(cluster: ClusterFacts) -> None:
    proc = clusterlib.cluster_cmd("status", timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    daemons = dict(ln.split("=", 1) for ln in proc.stdout.splitlines() if ln.startswith("daemon."))
    assert set(daemons) == {"daemon.munged", "daemon.mariadb", "daemon.slurmdbd",
                            "daemon.slurmctld", "daemon.slurmd-n1", "daemon.slurmd-n2",
                            "daemon.slurmd-n3", "daemon.smtp_sink"}
    assert all(v.startswith("running pid=") for v in daemons.values()), daemons


def test_gpualert_is_wired_in_as_an_admin_would(cluster: ClusterFacts) -> None:
    conf = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    prolog = cluster.root / "etc" / "hooks" / "gpualert-prolog"
    assert f"Prolog                  = {prolog}" in conf
    assert "Alloc" in next(ln for ln in conf.splitlines() if ln.startswith("PrologFlags"))
    assert f"export GPUALERT_CONFIG={cluster.gpualert_config}" in prolog.read_text()
    cfg = cluster.gpualert_config.read_text()
    assert f"spool: {cluster.spool}" in cfg and f"relay: 127.0.0.1:{cluster.smtp_port}" in cfg
    assert cluster.spool.stat().st_mode & 0o777 == 0o755
    # Plain commands work for the test user without any Slurm environment.
    proc = run_as_user(["sinfo", "-h", "-o", "%P"])
    assert proc.returncode == 0 and "debug*" in proc.stdout and "urgent" in proc.stdout


def test_cluster_script_refuses_bad_use_clearly(cluster: ClusterFacts) -> None:
    bad = subprocess.run([str(clusterlib.CLUSTER_SCRIPT), "bogus"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == 2 and "usage:" in bad.stderr
    no_venv = subprocess.run([str(clusterlib.CLUSTER_SCRIPT), "up"], capture_output=True,
                             text=True, timeout=200,
                             env=dict(os.environ, GPUALERT_VENV="/nonexistent/venv"))
    assert no_venv.returncode == 1
    assert "/nonexistent/venv/bin/python missing: run scripts/install.sh" in no_venv.stderr
    assert "Traceback" not in no_venv.stderr
