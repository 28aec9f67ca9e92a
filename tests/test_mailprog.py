"""`gpualert mailprog` run as slurmctld runs MailProg (argv `-s SUBJECT USER`, the job's facts
in the environment, stdin /dev/null) against a real SMTP sink: enrich, forward, suppress."""

from __future__ import annotations

import email
import json
import os
import subprocess
import sys
import threading
import time
from email import policy
from pathlib import Path

from notifylib import free_port

REPO = Path(__file__).resolve().parent.parent
FAILED = "Slurm Job_id={job} Name=train-llama Failed, Run time 00:00:07, FAILED, ExitCode 1"
VERDICT = {
    "class": "cuda_oom", "domain": "workload", "confidence": 0.97,
    "hint": "Lower the batch size or enable activation checkpointing.",
    "root_rank": 5, "root_node": "n2",
    "evidence": [{"file": "tasks/0.5.log", "line": 812, "text": "torch.OutOfMemoryError: "
                  "CUDA out of memory. Tried to allocate 2.00 GiB"}],
}


def write_config(tmp_path: Path, port: int, **mail) -> tuple[Path, Path]:
    spool = tmp_path / "spool"
    spool.mkdir(exist_ok=True)
    os.chmod(spool, 0o755)
    conf = tmp_path / "gpualert.yaml"
    conf.write_text(json.dumps({
        "spool": str(spool),
        "mail": {"relay": f"127.0.0.1:{port}", "from": "slurm@cluster.example.org",
                 "domain": "lab.example.org", "connect_timeout_s": 2, "send_timeout_s": 2,
                 **mail},
        "notify": {"total_timeout_s": 4, "tries": 1},
    }))
    return conf, spool


def slurm_env(conf: Path, job: int, mail_type: str = "Failed", state: str = "FAILED",
              spank: str | None = "on") -> dict[str, str]:
    """What slurmctld gives MailProg (job_common_env_vars + the mail variables)."""
    env = {
        "GPUALERT_CONFIG": str(conf), "SLURM_JOB_ID": str(job), "SLURM_JOBID": str(job),
        "SLURM_JOB_NAME": "train-llama", "SLURM_JOB_USER": "gpatest", "SLURM_JOB_UID": "1001",
        "SLURM_JOB_PARTITION": "debug", "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURM_JOB_MAIL_TYPE": mail_type, "SLURM_JOB_STATE": state,
        "SLURM_JOB_RUN_TIME": "00:00:07", "SLURM_JOB_EXIT_CODE_MAX": "1",
        "SLURM_CLUSTER_NAME": "gpualert-test",
    }
    if spank is not None:
        env["SPANK_GPUALERT"] = spank
    return env


def mailprog(subject: str, user: str, env: dict[str, str],
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpualert_slurm", "mailprog", "-s", subject,
                           user], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def mails(sink) -> list[email.message.EmailMessage]:
    return [email.message_from_bytes(p.read_bytes(), policy=policy.default)
            for p in sink.messages()]


def put_verdict(spool: Path, job: int) -> None:
    d = spool / str(job)
    d.mkdir(exist_ok=True)
    # as the job epilog writes it: root's file, about this job and attempt
    (d / "verdict.json").write_text(json.dumps({"job_id": str(job), "attempt": 0,
                                                "verdict": VERDICT}))


def test_enriched_with_the_verdict(tmp_path, smtp_server):
    conf, spool = write_config(tmp_path, smtp_server.port)
    put_verdict(spool, 77)
    p = mailprog(FAILED.format(job=77), "gpatest", slurm_env(conf, 77))
    assert p.returncode == 0, p.stderr
    assert "sent with the verdict" in p.stdout
    [m] = mails(smtp_server)
    assert m["Subject"] == FAILED.format(job=77) + " [gpualert: cuda_oom]"
    assert m["X-Sink-Rcpt-To"] == "gpatest@lab.example.org"
    assert m["From"] == "slurm@cluster.example.org"
    body = m.get_content()
    assert "Cause: cuda_oom" in body and "Lower the batch size" in body
    assert "First failure: rank 5, node n2" in body
    assert "tasks/0.5.log:812: torch.OutOfMemoryError" in body
    assert "gpualert show 77" in body


def test_waits_for_a_verdict_written_late(tmp_path, smtp_server):
    conf, spool = write_config(tmp_path, smtp_server.port, slurm_mail_wait_s=10)
    timer = threading.Timer(1.5, put_verdict, args=(spool, 78))
    timer.start()
    t0 = time.monotonic()
    p = mailprog(FAILED.format(job=78), "gpatest", slurm_env(conf, 78))
    took = time.monotonic() - t0
    timer.join()
    assert p.returncode == 0, p.stderr
    assert 1.5 <= took < 10, took
    [m] = mails(smtp_server)
    assert m["Subject"].endswith("[gpualert: cuda_oom]")


def test_no_verdict_forwards_slurms_mail_after_the_bounded_wait(tmp_path, smtp_server):
    conf, _ = write_config(tmp_path, smtp_server.port, slurm_mail_wait_s=1)
    t0 = time.monotonic()
    p = mailprog(FAILED.format(job=79), "gpatest", slurm_env(conf, 79))
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert took < 1 + 5, took
    [m] = mails(smtp_server)
    assert m["Subject"] == FAILED.format(job=79)
    body = m.get_content()
    assert "State: FAILED" in body and "Nodes: n[1-3]" in body and "gpualert" not in body.lower()


def test_begin_mail_is_forwarded_without_waiting(tmp_path, smtp_server):
    conf, _ = write_config(tmp_path, smtp_server.port, slurm_mail_wait_s=30)
    subject = "Slurm Job_id=80 Name=train-llama Began, Queued time 00:00:01"
    t0 = time.monotonic()
    p = mailprog(subject, "gpatest", slurm_env(conf, 80, "Began", "RUNNING"))
    assert p.returncode == 0 and time.monotonic() - t0 < 10
    [m] = mails(smtp_server)
    assert m["Subject"] == subject


def test_suppress_drops_only_what_the_report_replaces(tmp_path, smtp_server):
    conf, _ = write_config(tmp_path, smtp_server.port, slurm_mail="suppress")
    p = mailprog(FAILED.format(job=81), "gpatest", slurm_env(conf, 81))
    assert p.returncode == 0 and "suppressed" in p.stdout
    assert mails(smtp_server) == []
    # Not replaced by a report: a begin mail, an unmonitored job, notify=never, a success.
    cases = [
        ("Slurm Job_id=82 Name=x Began, Queued time 00:00:01",
         slurm_env(conf, 82, "Began", "RUNNING")),
        (FAILED.format(job=83), slurm_env(conf, 83, spank="off")),
        (FAILED.format(job=84), slurm_env(conf, 84, spank="notify=never")),
        ("Slurm Job_id=85 Name=x Ended, Run time 00:00:07, COMPLETED, ExitCode 0",
         slurm_env(conf, 85, "Ended", "COMPLETED")),
    ]
    for subject, env in cases:
        p = mailprog(subject, "gpatest", env)
        assert p.returncode == 0 and "suppressed" not in p.stdout, (subject, p.stdout)
    got = sorted(m["Subject"] for m in mails(smtp_server))
    assert got == sorted(s for s, _ in cases)


def test_forward_keeps_slurms_message_unchanged(tmp_path, smtp_server):
    conf, spool = write_config(tmp_path, smtp_server.port, slurm_mail="forward")
    put_verdict(spool, 86)
    p = mailprog(FAILED.format(job=86), "someone@lab.example.org", slurm_env(conf, 86))
    assert p.returncode == 0, p.stderr
    [m] = mails(smtp_server)
    assert m["Subject"] == FAILED.format(job=86)
    assert m["X-Sink-Rcpt-To"] == "someone@lab.example.org"
    assert "cuda_oom" not in m.get_content()


def test_job_name_with_line_breaks_injects_no_header(tmp_path, smtp_server):
    conf, _ = write_config(tmp_path, smtp_server.port, slurm_mail="forward")
    subject = ("Slurm Job_id=87 Name=x\r\nBcc: victim@evil.example.com\nX-Injected: 1 Failed, "
               "Run time 00:00:01, FAILED, ExitCode 1")
    p = mailprog(subject, "gpatest", slurm_env(conf, 87))
    assert p.returncode == 0, p.stderr
    [m] = mails(smtp_server)
    assert m["Bcc"] is None and m["X-Injected"] is None
    assert m["X-Sink-Rcpt-To"] == "gpatest@lab.example.org"
    assert "victim@evil.example.com" in m["Subject"]  # kept as text, on one line


def test_relay_down_keeps_the_mail_for_flush(tmp_path, smtp_server):
    port = free_port()
    conf, spool = write_config(tmp_path, port, slurm_mail="forward")
    p = mailprog(FAILED.format(job=88), "gpatest", slurm_env(conf, 88))
    assert p.returncode == 0 and "queued" in p.stdout, p
    outbox = spool / ".outbox"
    assert len(list(outbox.glob("*.eml"))) == 1
    conf.write_text(conf.read_text().replace(f"127.0.0.1:{port}",
                                             f"127.0.0.1:{smtp_server.port}"))
    f = subprocess.run([sys.executable, "-m", "gpualert_slurm", "flush", "--all"], cwd=REPO,
                       env={**os.environ, "GPUALERT_CONFIG": str(conf)}, capture_output=True,
                       text=True, timeout=60)
    assert "sent 1" in f.stdout, f
    [m] = mails(smtp_server)
    assert m["Subject"] == FAILED.format(job=88)


def test_recipient_outside_the_allowlist_is_refused_loudly(tmp_path, smtp_server):
    conf, _ = write_config(tmp_path, smtp_server.port, allow_domains=["lab.example.org"])
    p = mailprog(FAILED.format(job=89), "eve@evil.example.com", slurm_env(conf, 89))
    assert p.returncode == 1
    assert "no permitted recipient" in p.stderr and "allow_domains" in p.stderr
    assert mails(smtp_server) == []


def test_bad_config_exits_1_naming_the_key(tmp_path):
    conf = tmp_path / "gpualert.yaml"
    conf.write_text("mail: {slurm_mail: sometimes}\n")
    p = mailprog(FAILED.format(job=90), "gpatest", slurm_env(conf, 90))
    assert p.returncode == 1
    assert "mail.slurm_mail" in p.stderr and str(conf) in p.stderr


def test_console_script_entry_takes_slurms_argv(tmp_path, smtp_server):
    # MailProg= names gpualert-mailprog (setup.cfg's console script for entry()); Slurm gives
    # it exactly `-s SUBJECT USER` and no PATH.
    conf, _ = write_config(tmp_path, smtp_server.port, slurm_mail="forward")
    code = "import sys; from gpualert_slurm.notify.mailprog import entry; sys.exit(entry())"
    env = slurm_env(conf, 91)
    assert "PATH" not in env
    p = subprocess.run([sys.executable, "-c", code, "-s", FAILED.format(job=91), "gpatest"],
                       cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    [m] = mails(smtp_server)
    assert m["Subject"] == FAILED.format(job=91)


def test_real_job_slurm_mail_enriched_with_its_verdict(cluster, workdir, tmp_path, smtp_server):
    # A real failing job on the cluster with --gpualert and --mail-type=FAIL; the cluster's
    # EpilogSlurmctld writes the verdict. mailprog is then run with what slurmctld hands
    # MailProg for that job, against a private sink.
    import clusterlib

    from gpualert_slurm.core import slurm

    script = ("#!/bin/bash\n#SBATCH -N1 -o out.%j\n"
              "python3 -c \"raise MemoryError('CUDA out of memory. Tried to allocate 2.00 "
              "GiB')\"\n")
    job = clusterlib.submit(script, "--gpualert", "--mail-type=FAIL", workdir=workdir)
    st = clusterlib.wait_final(job, root=cluster.root)
    assert st.state == "FAILED"
    conf, _ = write_config(tmp_path, smtp_server.port, slurm_mail_wait_s=60)
    data = json.loads(conf.read_text())
    data["spool"] = str(cluster.spool)
    conf.write_text(json.dumps(data))
    mail_user = slurm.mail_user(job)  # --mail-type alone: the user name
    assert mail_user == cluster.user
    subject = (f"Slurm Job_id={job} Name=job.sh Failed, Run time 00:00:01, FAILED, "
               f"ExitCode {st.exit_code.code}")
    env = {**slurm_env(conf, job), "SLURM_JOB_NAME": "job.sh", "SLURM_JOB_USER": cluster.user,
           "SLURM_JOB_NODELIST": st.nodelist}
    p = mailprog(subject, mail_user, env, timeout=90)
    assert p.returncode == 0, p.stderr
    verdict = json.loads((cluster.spool / str(job) / "verdict.json").read_text())["verdict"]
    [m] = mails(smtp_server)
    assert m["Subject"] == f"{subject} [gpualert: {verdict['class']}]"
    assert m["X-Sink-Rcpt-To"] == f"{cluster.user}@lab.example.org"
    body = m.get_content()
    assert f"Cause: {verdict['class']}" in body and verdict["hint"] in body
    assert verdict["evidence"][0]["text"][:60] in body


def test_slurmctld_calls_mailprog_and_the_mail_is_enriched(cluster, workdir):
    # End to end, nothing run by hand: the test cluster's slurm.conf points MailProg at
    # gpualert-mailprog (as README tells admins), slurmctld calls it when the job fails, and
    # Slurm's own FAIL mail arrives in the cluster's SMTP sink with the verdict's class added.
    import email
    import email.policy

    import clusterlib

    script = ("#!/bin/bash\n#SBATCH -N1 -o out.%j\n"
              "python3 -c \"raise FileNotFoundError(2, 'No such file or directory', "
              "'/data/shards/train-0001.bin')\"\n")
    job = clusterlib.submit(script, "--gpualert", "--mail-type=FAIL", workdir=workdir)
    st = clusterlib.wait_final(job, root=cluster.root)
    assert st.state == "FAILED"
    path = clusterlib.wait_for_mail(cluster.maildir, f"Slurm Job_id={job} ", timeout=90)
    m = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
    verdict = json.loads((cluster.spool / str(job) / "verdict.json").read_text())["verdict"]
    assert verdict["class"] == "file_not_found"
    assert m["Subject"].startswith(f"Slurm Job_id={job} ")
    assert m["Subject"].endswith("[gpualert: file_not_found]"), m["Subject"]
    # --mail-type without --mail-user: MailUser is the user name, mapped through mail.domain.
    assert m["X-Sink-Rcpt-To"] == f"{cluster.user}@cluster.test"
