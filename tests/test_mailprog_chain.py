"""MailProg chaining (mail.slurm_mail_chain): gpualert-mailprog enriches or suppresses as without
a chain, then hands Slurm's mail on to the site's previous MailProg (jobstats_mail.sh,
slurm-spool-mail) with the argv and environment Slurm gave. The stand-in previous MailProg
records what it received (argv, environment, stdin).

The cluster tests run on a cluster of their own (port offset +600, proctrack/linuxproc), since
they rewrite its gpualert.yaml and its MailProg wrapper: slurmctld itself calls MailProg there,
the wrapper records what Slurm gave before it runs gpualert-mailprog, and the test compares the
two records."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import clusterlib
import pytest
import yaml
from test_mailprog import FAILED, mails, put_verdict, slurm_env, write_config

REPO = Path(__file__).resolve().parent.parent

CHAIN_CLUSTER_ENV = {
    "GPUALERT_CLUSTER_DIR": "/var/lib/gpualert-cluster-chain",
    "GPUALERT_CLUSTER_NAME": "gpachain",
    "GPUALERT_CLUSTER_PORT_OFFSET": "600",
    "GPUALERT_CLUSTER_PROCTRACK": "linuxproc",
}

# The stand-in for jobstats_mail.sh / slurm-spool-mail: one JSON record per call.
STANDIN = """#!/usr/bin/python3
import json, os, sys, time
# /proc/self/environ: what this process was given (Python adds LC_CTYPE to os.environ)
raw = open("/proc/self/environ", "rb").read().split(b"\\0")
env = dict(i.decode().split("=", 1) for i in raw if b"=" in i)
rec = {"argv": sys.argv[1:], "env": env,
       "stdin": sys.stdin.buffer.read().decode("utf-8", "replace") if not sys.stdin.isatty()
       else None, "stdin_is_devnull": os.path.samestat(os.fstat(0), os.stat("/dev/null"))}
d = env.get("STANDIN_DIR") or {dir!r}
path = os.path.join(d, "%d.%d.json" % (time.time_ns(), os.getpid()))
with open(path + ".tmp", "w") as f:
    json.dump(rec, f)
os.rename(path + ".tmp", path)
print("standin: recorded", path)
sys.exit(int(env.get("STANDIN_EXIT", "0")))
"""


def make_standin(where: Path, records: Path, mode: int = 0o755) -> Path:
    records.mkdir(parents=True, exist_ok=True)
    prog = where / "previous-mailprog"
    prog.write_text(STANDIN.replace("{dir!r}", repr(str(records))))
    prog.chmod(mode)
    return prog


def records_in(d: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))]


def chain_config(tmp_path: Path, port: int, prog: Path, **mail: Any) -> tuple[Path, Path]:
    return write_config(tmp_path, port, slurm_mail_chain=str(prog), **mail)


def mailprog_argv(argv: list[str], env: dict[str, str], stdin: Any = subprocess.DEVNULL,
                  timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpualert_slurm", "mailprog", *argv], cwd=REPO,
                          env=env, stdin=stdin, capture_output=True, text=True, timeout=timeout)


# ---- without the cluster: what is handed on, and when ----------------------------------------

def test_chain_gets_slurms_argv_env_and_the_verdict_on_stdin(tmp_path, smtp_server):
    prog = make_standin(tmp_path, tmp_path / "rec")
    conf, spool = chain_config(tmp_path, smtp_server.port, prog)
    put_verdict(spool, 77)
    env = {**slurm_env(conf, 77), "PATH": "/usr/bin:/bin"}
    argv = ["-s", FAILED.format(job=77), "alice"]
    p = mailprog_argv(argv, env)
    assert p.returncode == 0, p.stderr
    assert f"handed on to {prog}" in p.stdout and "with the verdict" in p.stdout
    [rec] = records_in(tmp_path / "rec")
    assert rec["argv"] == argv
    assert rec["env"] == env
    assert "Cause: cuda_oom" in rec["stdin"] and "First failure: rank 5, node n2" in rec["stdin"]
    assert mails(smtp_server) == []  # the previous MailProg sends; gpualert does not


def test_chain_without_a_verdict_gets_devnull_as_from_slurm(tmp_path, smtp_server):
    prog = make_standin(tmp_path, tmp_path / "rec")
    conf, _ = chain_config(tmp_path, smtp_server.port, prog, slurm_mail="forward")
    env = slurm_env(conf, 78)
    argv = ["-s", FAILED.format(job=78), "bob@lab.example.org"]
    p = mailprog_argv(argv, env)
    assert p.returncode == 0, p.stderr
    [rec] = records_in(tmp_path / "rec")
    assert rec["argv"] == argv and rec["stdin_is_devnull"] and rec["stdin"] == ""


def test_suppressed_mail_is_not_handed_on_but_begin_mail_is(tmp_path, smtp_server):
    prog = make_standin(tmp_path, tmp_path / "rec")
    conf, _ = chain_config(tmp_path, smtp_server.port, prog, slurm_mail="suppress")
    p = mailprog_argv(["-s", FAILED.format(job=79), "alice"], slurm_env(conf, 79))
    assert p.returncode == 0 and "suppressed" in p.stdout
    assert records_in(tmp_path / "rec") == []
    begin = "Slurm Job_id=79 Name=train-llama Began, Queued time 00:00:01"
    p = mailprog_argv(["-s", begin, "alice"], slurm_env(conf, 79, mail_type="Began",
                                                        state="RUNNING"))
    assert p.returncode == 0, p.stderr
    [rec] = records_in(tmp_path / "rec")
    assert rec["argv"] == ["-s", begin, "alice"]


def test_chain_send_also_sends_gpualerts_enriched_copy(tmp_path, smtp_server):
    prog = make_standin(tmp_path, tmp_path / "rec")
    conf, spool = chain_config(tmp_path, smtp_server.port, prog, slurm_mail_chain_send=True)
    put_verdict(spool, 80)
    p = mailprog_argv(["-s", FAILED.format(job=80), "alice"], slurm_env(conf, 80))
    assert p.returncode == 0, p.stderr
    [m] = mails(smtp_server)
    assert m["Subject"] == FAILED.format(job=80) + " [gpualert: cuda_oom]"
    assert m["X-Sink-Rcpt-To"] == "alice@lab.example.org"
    [rec] = records_in(tmp_path / "rec")
    assert "Cause: cuda_oom" in rec["stdin"]


def test_chained_mailprogs_failure_is_mailprogs_exit_status(tmp_path, smtp_server):
    prog = make_standin(tmp_path, tmp_path / "rec")
    conf, _ = chain_config(tmp_path, smtp_server.port, prog, slurm_mail="forward")
    p = mailprog_argv(["-s", FAILED.format(job=81), "alice"],
                      {**slurm_env(conf, 81), "STANDIN_EXIT": "3"})
    assert p.returncode == 3
    assert "exit status 3" in p.stderr and "standin: recorded" in p.stderr


def test_a_chain_others_could_replace_is_refused(tmp_path, smtp_server):
    prog = make_standin(tmp_path, tmp_path / "rec", mode=0o777)
    conf, _ = chain_config(tmp_path, smtp_server.port, prog, slurm_mail="forward")
    p = mailprog_argv(["-s", FAILED.format(job=82), "alice"], slurm_env(conf, 82))
    assert p.returncode == 1
    assert "writable by no one else" in p.stderr and "refused" in p.stderr
    assert records_in(tmp_path / "rec") == []


def test_a_chain_that_hangs_is_killed_within_the_bound(tmp_path, smtp_server, monkeypatch):
    from gpualert_slurm.notify import mailprog

    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nsleep 300 &\nwait\n")
    hang.chmod(0o755)
    t0 = time.monotonic()
    status, line = mailprog.run_chain(str(hang), ["-s", "x", "alice"], os.environ, None, 2.0)
    assert status == 1 and "killed after 2 s" in line
    assert time.monotonic() - t0 < 10


def test_config_refuses_a_relative_chain(tmp_path):
    from gpualert_slurm.core.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match="mail.slurm_mail_chain: expected an absolute path"):
        parse_config({"mail": {"slurm_mail_chain": "jobstats_mail.sh"}}, "x.yaml")
    cfg = parse_config({"mail": {"slurm_mail_chain": "/usr/local/bin/jobstats_mail.sh",
                                 "slurm_mail_chain_send": True}}, "x.yaml")
    assert cfg.mail.slurm_mail_chain == "/usr/local/bin/jobstats_mail.sh"
    assert cfg.mail.slurm_mail_chain_send is True


# ---- slurmctld calls MailProg: the real cluster ----------------------------------------------

# The cluster's MailProg wrapper, with a recorder before gpualert-mailprog: what Slurm gave.
WRAPPER = """#!/bin/sh
export GPUALERT_CONFIG={etc}/gpualert.yaml
export SLURM_CONF={etc}/slurm.conf
/usr/bin/env STANDIN_DIR={given} {standin} "$@" </dev/null >/dev/null 2>&1
{venv}/bin/gpualert-mailprog "$@"
rc=$?
echo "$rc" > {given}/done.$SLURM_JOB_ID.$$
exit $rc
"""


@pytest.fixture(scope="module")
def chain_cluster() -> Iterator[tuple[clusterlib.ClusterFacts, Path, Path]]:
    try:
        facts = clusterlib.cluster_up(env=CHAIN_CLUSTER_ENV)
    except clusterlib.ClusterError as e:
        pytest.fail(f"the chain test cluster is not available:\n{e}", pytrace=False)
    etc = facts.conf.parent
    base = facts.root / "chain"
    base.mkdir(mode=0o755, exist_ok=True)
    handed, given = base / "handed", base / "given"
    for d in (handed, given):
        d.mkdir(mode=0o755, exist_ok=True)
        for p in d.iterdir():
            p.unlink()
    standin = make_standin(base, handed)
    cfg_path = etc / "gpualert.yaml"
    original = cfg_path.read_text()
    data = yaml.safe_load(original) or {}
    data.setdefault("mail", {}).update(slurm_mail_chain=str(standin), slurm_mail_wait_s=60)
    cfg_path.write_text(yaml.safe_dump(data))
    wrapper = etc / "hooks" / "gpualert-mailprog"
    venv = Path(os.environ.get("GPUALERT_PREFIX", "/opt/gpualert")) / "venv"
    wrapper.write_text(WRAPPER.format(etc=etc, given=given, standin=standin, venv=venv))
    wrapper.chmod(0o755)
    try:
        with clusterlib.using_conf(facts):
            yield facts, handed, given
    finally:
        cfg_path.write_text(original)
        clusterlib.cluster_cmd("down", env=CHAIN_CLUSTER_ENV)


def _wait_done(given: Path, job: int, timeout: float = 150) -> str:
    def done() -> str | None:
        files = list(given.glob(f"done.{job}.*"))
        return files[0].read_text().strip() if files else None
    return clusterlib.wait_until(done, timeout, f"MailProg's end for job {job}")


def test_slurmctld_mail_is_handed_on_with_slurms_argv_and_env(chain_cluster):
    facts, handed, given = chain_cluster
    workdir = clusterlib.make_workdir(facts, "chain-fail")
    script = ("#!/bin/bash\n#SBATCH -N1 -o out.%j\n"
              "python3 -c \"raise FileNotFoundError(2, 'No such file or directory', "
              "'/data/shards/train-0001.bin')\"\n")
    job = clusterlib.submit(script, "--gpualert", "--mail-type=FAIL", workdir=workdir)
    st = clusterlib.wait_final(job, root=facts.root)
    assert st.state == "FAILED"
    assert _wait_done(given, job) == "0"
    slurm_gave = [r for r in records_in(given) if r["env"].get("SLURM_JOB_ID") == str(job)]
    got = [r for r in records_in(handed) if r["env"].get("SLURM_JOB_ID") == str(job)]
    assert len(slurm_gave) == 1 and len(got) == 1, (slurm_gave, got)
    gave, rec = slurm_gave[0], got[0]
    # Same argv and environment as slurmctld gave MailProg (STANDIN_DIR is the recorder's own).
    assert rec["argv"] == gave["argv"]
    assert rec["argv"][0] == "-s" and rec["argv"][1].startswith(f"Slurm Job_id={job} ")
    assert rec["argv"][2] == facts.user
    gave_env = {k: v for k, v in gave["env"].items() if k != "STANDIN_DIR"}
    assert rec["env"] == gave_env
    assert rec["env"]["SLURM_JOB_MAIL_TYPE"] == "Failed"
    assert "SPANK_GPUALERT" in rec["env"]
    # Enriched: the job's verdict on the chained MailProg's stdin.
    verdict = json.loads((facts.spool / str(job) / "verdict.json").read_text())["verdict"]
    assert verdict["class"] == "file_not_found"
    assert f"Cause: {verdict['class']}" in rec["stdin"]
    # gpualert sent no copy of Slurm's mail itself (its own report is another message).
    subjects = [m["Subject"] or "" for m in mails_in(facts.maildir)]
    assert not any(s.startswith(f"Slurm Job_id={job} ") for s in subjects), subjects


def mails_in(maildir: Path) -> list[Any]:
    import email
    from email import policy

    return [email.message_from_bytes(p.read_bytes(), policy=policy.default)
            for p in clusterlib.mail_files(maildir)]


def test_slurmctld_mail_suppressed_is_not_handed_on(chain_cluster):
    facts, handed, given = chain_cluster
    cfg_path = facts.conf.parent / "gpualert.yaml"
    before = cfg_path.read_text()
    data = yaml.safe_load(before)
    data["mail"]["slurm_mail"] = "suppress"
    cfg_path.write_text(yaml.safe_dump(data))
    try:
        workdir = clusterlib.make_workdir(facts, "chain-suppress")
        job = clusterlib.submit("#!/bin/bash\n#SBATCH -N1 -o out.%j\nexit 3\n", "--gpualert",
                                "--mail-type=FAIL", workdir=workdir)
        assert clusterlib.wait_final(job, root=facts.root).state == "FAILED"
        assert _wait_done(given, job) == "0"
    finally:
        cfg_path.write_text(before)
    assert [r for r in records_in(given) if r["env"].get("SLURM_JOB_ID") == str(job)]
    assert not [r for r in records_in(handed) if r["env"].get("SLURM_JOB_ID") == str(job)]
    assert stat.S_IMODE(cfg_path.stat().st_mode) & 0o022 == 0


def test_doctor_checks_the_chained_mailprog(tmp_path):
    from gpualert_slurm.commands import doctor
    from gpualert_slurm.core.config import parse_config

    assert doctor.check_mail_chain(parse_config({}, "x.yaml")) == []
    prog = make_standin(tmp_path, tmp_path / "rec")
    [ok] = doctor.check_mail_chain(parse_config({"mail": {"slurm_mail_chain": str(prog)}},
                                                "x.yaml"))
    assert ok.ok and not ok.failed
    missing = str(tmp_path / "jobstats_mail.sh")
    [bad] = doctor.check_mail_chain(parse_config({"mail": {"slurm_mail_chain": missing}},
                                                 "x.yaml"))
    assert bad.failed and "cannot stat it" in bad.problem and missing in bad.fix
    prog.chmod(0o777)
    [bad] = doctor.check_mail_chain(parse_config({"mail": {"slurm_mail_chain": str(prog)}},
                                                 "x.yaml"))
    assert bad.failed and "writable by no one else" in bad.problem
