"""Attacks on root's readers (issue 17; docs/SECURITY.md sections 4 and 5, the readers' part):
what `gpualert watch`, the resume of interrupted decisions, the options, the routing, MailProg,
the admin commands' terminal output, gc and `gpualert classify <jobdir>` do with what a user
wrote. Each attack is made by the unprivileged test user (runuser) and asserted harmless: no
node drained, no other user's job touched, no other user's bytes in any mail or verdict,
watch alive and on time, root's time and memory within the bounds SECURITY.md gives.

Where an attack needs Slurm's word (a running job, squeue), the shared cluster is used, read
only: `watch` runs against a spool this module makes (the Prolog's layout, made with the
Prolog's own spool.create_job_dir), with its own config, in monitor mode. The one attack that
needs action mode (a forged verdict.json for watch's resume) runs on the recovery cluster
(recoverylib, exclusive use)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import clusterlib as cl
import pytest
import yaml

from gpualert_slurm.core import slurm
from gpualert_slurm.core import spool as sp
from gpualert_slurm.core.verdict import read_run

GPUALERT = "/opt/gpualert/venv/bin/gpualert"
SECRET = "SECRET-OF-ROOTS-JOB-7f3a9"
WATCH_RSS_MIB = 150  # SECURITY.md: `gpualert watch`'s peak RSS, whatever the spool holds
RAW_CTRL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# ---- helpers ---------------------------------------------------------------------------------

def _uid(user: str = cl.TEST_USER) -> tuple[int, int]:
    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


@contextlib.contextmanager
def own_spool() -> Iterator[Path]:
    """A spool as an admin makes it (root's, 0755) where the test user can reach their job
    dirs (under /var/tmp, not root's 0700 tmp_path)."""
    d = Path(tempfile.mkdtemp(prefix="gpa-trust-", dir="/var/tmp"))
    d.chmod(0o755)
    (d / "spool").mkdir(mode=0o755)
    try:
        yield d
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(d)], timeout=300)  # any depth


def prolog_dir(spool: Path, job: int, user: str, options_raw: str | None,
               start: float | None = None, work_dir: str | None = None) -> Path:
    """<spool>/<job> as the Prolog makes it: the user's 0700 dir, root's job.json."""
    uid, gid = _uid(user)
    rec = {"version": 1, "job_id": str(job), "user": user, "uid": uid, "gid": gid,
           "partition": "debug", "account": None, "work_dir": work_dir,
           "start_time": start if start is not None else time.time() - 600,
           "options_raw": options_raw, "options": {}, "restart_count": 0}
    jd = sp.create_job_dir(str(spool), job, uid, gid, rec)
    jd.close()
    return spool / str(job)


def as_user(cmd: str, cwd: Path, user: str = cl.TEST_USER) -> None:
    cl.run_as_user(cmd, cwd=cwd, user=user, check=True)


def sleep_jobs(cluster: cl.ClusterFacts, n: int, user: str = cl.TEST_USER,
               name: str = "sleeper", extra: tuple[str, ...] = ()) -> list[int]:
    d = cl.make_workdir(cluster, name)
    if user == "root":
        os.chown(d, 0, 0)
    script = cl.write_user_file(d / "sleep.sh", "#!/bin/bash\nsleep 400\n", user=user)
    return [cl.sbatch(script, "-J", name, "-n1", "--mem=50M", *extra, user=user)
            for _ in range(n)]


def wait_running(jobs: list[int], timeout: float = 60) -> None:
    for j in jobs:
        cl.wait_state(j, "RUNNING", timeout)


def write_cfg(base: Path, smtp: Any, audit: Path, mode: str = "monitor",
              **limits: Any) -> Path:
    doc = {"spool": str(base / "spool"),
           "mail": {"relay": f"127.0.0.1:{smtp.port}", "from": "gpualert@localhost",
                    "connect_timeout_s": 2, "send_timeout_s": 3},
           "notify": {"total_timeout_s": 5, "tries": 1, "outbox": str(base / "outbox")},
           "recovery": {"mode": mode, "audit_log": str(audit), "timeout_s": 10},
           "limits": {"watch_job_s": 2, **limits}}
    p = base / "gpualert.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def run_measured(argv: list[str], cfg: Path | None, timeout: float = 120,
                 env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                             float, float]:
    """(the process, wall seconds, peak RSS in MiB of it and its children)."""
    probe = ("import resource, subprocess, sys\n"
             "p = subprocess.run(sys.argv[1:])\n"
             "print(f'MAXRSS {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}',"
             " file=sys.stderr)\n"
             "sys.exit(p.returncode)\n")
    e = {**os.environ, **(env or {})}
    if cfg is not None:
        e["GPUALERT_CONFIG"] = str(cfg)
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True,
                       timeout=timeout, env=e, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t
    m = re.search(r"MAXRSS (\d+)", p.stderr)
    return p, wall, (int(m.group(1)) / 1024 if m else float("inf"))


def mails(smtp: Any) -> list[str]:
    return [p.read_text(errors="replace") for p in smtp.messages()]


def mails_for(smtp: Any, job: int) -> list[str]:
    return [m for m in mails(smtp) if f"X-Gpualert-Job: {job}" in m]


def cancel(*jobs: int) -> None:
    cl.cancel_quietly(*jobs)


# ---- watch: hostile job dirs (attacks 4 and 6), attempts counted once ------------------------

@pytest.mark.cluster
def test_watch_survives_hostile_dirs_and_mails_each_job_only_its_own_logs(
        cluster: cl.ClusterFacts, smtp_server: Any) -> None:
    """Root's running job R holds a secret in its task log. The test user's jobs: A replaced
    tasks/ by a symlink to R's tasks dir (attack 4); C has a directory named x.log, E a FIFO
    0.0.log, D a FIFO job.json (attack 6); F asks checkpoint=loop/**/x over a symlink loop
    (attack 6); G made 40 attempt-N dirs of its own. Every one of A..G is silent past its
    hang=. watch runs two passes: each is over within the bound, exits 0, and alerts C, E, F,
    G once each (G once, not per attempt dir), A and D not at all; no mail holds the secret."""
    root_jobs = sleep_jobs(cluster, 1, user="root", name="trust-root")
    user_jobs = sleep_jobs(cluster, 6, name="trust-user")
    r, (a, c, d, e, f, g) = root_jobs[0], user_jobs
    try:
        wait_running(root_jobs + user_jobs)
        with own_spool() as base:
            spool = base / "spool"
            opts = "hang=60s,mail=gpatest@localhost"
            rdir = prolog_dir(spool, r, "root", None)
            (rdir / "tasks" / "0.0.log").write_text(f"{SECRET}\n" * 50)
            work = cl.make_workdir(cluster, "trust-ckpt")
            dirs = {j: prolog_dir(spool, j, cl.TEST_USER,
                                  opts + (",checkpoint=loop/**/x" if j == f else ""),
                                  work_dir=str(work) if j == f else None)
                    for j in (a, c, d, e, f, g)}
            old = "touch -d '-10 minutes'"
            as_user(f"rmdir tasks && ln -s {rdir / 'tasks'} tasks", dirs[a])
            as_user(f"mkdir tasks/x.log tasks/0.1.log && echo 'epoch 3 C' > tasks/0.0.log && "
                    f"{old} tasks/0.0.log", dirs[c])
            as_user("rm -f job.json && mkfifo job.json && echo d > tasks/0.0.log && "
                    f"{old} tasks/0.0.log", dirs[d])
            as_user(f"mkfifo tasks/0.0.log && echo 'epoch 3 E' > tasks/0.1.log && "
                    f"{old} tasks/0.1.log", dirs[e])
            as_user(f"echo 'epoch 3 F' > tasks/0.0.log && {old} tasks/0.0.log", dirs[f])
            as_user("ln -s . loop && ln -s .. up", work)
            as_user(f"echo 'epoch 3 G' > tasks/0.0.log && {old} tasks/0.0.log && "
                    "for i in $(seq 1 40); do mkdir -p attempt-$i/tasks; "
                    f"echo late > attempt-$i/tasks/0.0.log; {old} attempt-$i/tasks/0.0.log; "
                    "done", dirs[g])
            cfg = write_cfg(base, smtp_server, base / "audit.jsonl")
            for _ in range(2):
                p, wall, rss = run_measured([GPUALERT, "watch"], cfg)
                assert p.returncode == 0, p.stdout + p.stderr
                # 7 jobs, each bounded by limits.watch_job_s (2 s), the mails 5 s each
                assert wall < 45, (wall, p.stderr)
                assert rss < WATCH_RSS_MIB, rss
                print(f"watch pass over 7 hostile job dirs: {wall:.1f} s, peak {rss:.0f} MiB")
            assert f"job {a}: skipped" in p.stderr and "not a directory" in p.stderr, p.stderr
            for j in (c, e, f, g):
                got = cl.wait_until(lambda j=j: mails_for(smtp_server, j), 20,
                                    f"the hang alert of job {j}")
                assert len(got) == 1, (j, len(got))
            assert mails_for(smtp_server, a) == [] and mails_for(smtp_server, d) == []
            assert "epoch 3 E" in mails_for(smtp_server, e)[0]
            assert not any(SECRET in m for m in mails(smtp_server))
            audit = (base / "audit.jsonl").read_text()
            assert SECRET not in audit
    finally:
        cancel(*root_jobs, *user_jobs)


@pytest.mark.cluster
def test_watch_caps_alerts_per_user(cluster: cl.ClusterFacts, smtp_server: Any) -> None:
    """Three hung jobs of one user, limits.watch_alerts_per_user_hour 2: two alerts go, the
    third is recorded as not sent, and no later pass sends it."""
    jobs = sleep_jobs(cluster, 3, name="trust-cap")
    try:
        wait_running(jobs)
        with own_spool() as base:
            for j in jobs:
                jd = prolog_dir(base / "spool", j, cl.TEST_USER,
                                "hang=60s,mail=gpatest@localhost")
                as_user("echo quiet > tasks/0.0.log && touch -d '-10 minutes' tasks/0.0.log",
                        jd)
            cfg = write_cfg(base, smtp_server, base / "audit.jsonl",
                            watch_alerts_per_user_hour=2)
            p1, _, _ = run_measured([GPUALERT, "watch"], cfg)
            p2, _, _ = run_measured([GPUALERT, "watch"], cfg)
            assert p1.returncode == 0 and p2.returncode == 0, p1.stderr + p2.stderr
            lines = [json.loads(ln) for ln in p1.stdout.splitlines() if ln.startswith("{")]
            assert sorted(int(a["job"]) for a in lines) == sorted(jobs), p1.stdout
            capped = [a for a in lines if str(a["mail"]).startswith("not sent")]
            assert len(capped) == 1 and "watch_alerts_per_user_hour" in capped[0]["mail"]
            time.sleep(2)
            assert len([m for j in jobs for m in mails_for(smtp_server, j)]) == 2
            assert p2.stdout.strip() == "", p2.stdout  # once per attempt: nothing new
    finally:
        cancel(*jobs)


@pytest.mark.cluster
def test_watch_skips_a_job_whose_spool_stalls_and_goes_on(cluster: cl.ClusterFacts,
                                                          smtp_server: Any) -> None:
    """One job's directory is a FUSE mount that hangs (SIGSTOPped, as a hung NFS server): watch
    gives it limits.watch_job_s, says it skipped it, alerts the other hung job on time and
    exits; the next pass does not start a second read of the stuck job."""
    from test_tap_stall import StallableMount

    jobs = sleep_jobs(cluster, 2, name="trust-stall")
    stuck, hung = jobs
    try:
        wait_running(jobs)
        with own_spool() as base:
            spool = base / "spool"
            (base / "backing").mkdir(mode=0o755)
            bdir = prolog_dir(base / "backing", stuck, cl.TEST_USER, "hang=60s")
            hdir = prolog_dir(spool, hung, cl.TEST_USER, "hang=60s,mail=gpatest@localhost")
            for jd in (bdir, hdir):
                as_user("echo quiet > tasks/0.0.log && touch -d '-10 minutes' tasks/0.0.log", jd)
            (spool / str(stuck)).mkdir()
            mount = StallableMount(bdir, spool / str(stuck))
            try:
                mount.stall()
                _watch_past_a_stall(base, smtp_server, stuck, hung)
            finally:
                mount.close()  # before the spool's removal
    finally:
        cancel(*jobs)


def _watch_past_a_stall(base: Path, smtp_server: Any, stuck: int, hung: int) -> None:
    """`gpualert watch --loop` while the job dir of `stuck` hangs."""
    cfg = write_cfg(base, smtp_server, base / "audit.jsonl")
    t = time.monotonic()
    proc = subprocess.Popen([GPUALERT, "watch", "--loop", "--interval", "1"],
                            env={**os.environ, "GPUALERT_CONFIG": str(cfg)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        got = cl.wait_until(lambda: mails_for(smtp_server, hung), 30,
                            "the other job's alert")
        took = time.monotonic() - t
        time.sleep(4)  # two more passes
        assert proc.poll() is None, "watch ended"
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert len(got) == 1 and took < 2 + 15, took
    assert f"job {stuck}: skipped: its spool did not answer within 2 s" in err, err
    assert f"job {stuck}: skipped: its spool read of an earlier pass is still " \
        "blocked" in err, err
    print(f"watch with one stalled job dir: the other job alerted after {took:.1f} s")


# ---- attack 3: watch's resume acts on the audit log, never on a verdict.json ------------------

@pytest.mark.cluster
def test_resume_ignores_a_forged_verdict_json(smtp_server: Any) -> None:
    """Action mode, the recovery cluster. The test user's job U was stopped mid-decision (the
    audit log, root's, holds its decision with no outcome: requeue U). U's user then wrote
    verdict.json naming root's job V on n3, class gpu_hardware, and a second one for a decision
    the lock left undone. watch carries on U's decision from the audit record (requeue U, as
    decided) and nothing else: V is untouched, no node drained, the forged one abandoned."""
    from recoverylib import (
        recovery_cluster_session,
        resume_node,
        wait_node_usable,
        write_config,
    )

    with recovery_cluster_session() as rc:
        for n in rc.nodes:
            resume_node(n)
            wait_node_usable(n)
        audit = rc.root / "audit" / f"trust-{os.getpid()}.jsonl"
        audit.parent.mkdir(exist_ok=True)
        audit.unlink(missing_ok=True)
        write_config(rc, audit, mode="action", timeout_s=2)
        victim = sleep_jobs(rc, 1, user="root", name="trust-victim", extra=("-w", "n3"))[0]
        d = cl.make_workdir(rc, "trust-attacker")
        script = cl.write_user_file(d / "a.sh", "#!/bin/bash\n#SBATCH --gpualert\nsleep 400\n")
        u = cl.sbatch(script, "-w", "n1", "-n1")
        u2 = cl.sbatch(script, "-w", "n1", "-n1")
        try:
            wait_running([victim, u, u2])
            cl.wait_until(lambda: (rc.spool / str(u)).is_dir(), 30, "U's spool dir")
            st = slurm.show_job(u)
            now = time.time() - 10  # older than 2 x recovery.timeout_s
            recs = [
                {"time": now, "event": "decision", "id": f"{u}.0", "job": str(u), "attempt": 0,
                 "class": "python_exception", "rule": "test", "mode": "action",
                 "partition": st.partition, "nodes": list(st.nodes), "user": st.user,
                 "planned": [{"action": "requeue", "target": str(u)}], "exclude": [],
                 "evidence": "ValueError"},
                {"time": now, "event": "outcome", "id": f"{u2}.0", "job": str(u2),
                 "attempt": 0, "outcome": "abandoned",
                 "why": "the audit lock did not come within the bound"}]
            audit.write_text("".join(json.dumps(r) + "\n" for r in recs))
            os.chmod(audit, 0o600)
            forged = {"job_id": str(victim), "attempt": 0, "failed": True,
                      "decision_id": f"{victim}.0",
                      "job": {"nodes": ["n3"], "partition": "debug", "user": "root"},
                      "verdict": {"class": "gpu_hardware", "root_node": "n3",
                                  "evidence": [{"file": "x", "text": "NVRM: Xid 79"}]}}
            for j, v in ((u, {**forged, "job_id": str(u)}), (u2, forged)):
                src = cl.write_user_file(d / f"forged-{j}.json", json.dumps(v), mode=0o644)
                as_user(f"cp {src} {rc.spool / str(j) / 'verdict.json'}", d)
            p, wall, _ = run_measured([GPUALERT, "watch"], rc.gpualert_config,
                                      env={"SLURM_CONF": str(rc.conf)})
            assert p.returncode == 0, p.stdout + p.stderr
            out = [json.loads(ln) for ln in p.stdout.splitlines() if '"resumed"' in ln]
            got = {r["resumed"].get("id"): r["resumed"] for r in out}
            assert [t["action"] for t in got[f"{u}.0"]["taken"]] == ["requeue"], got
            after = [json.loads(ln) for ln in audit.read_text().splitlines()]
            acts = [r for r in after if r.get("event") == "action"]
            assert [(r["action"], r["target"]) for r in acts] == [("requeue", str(u))], acts
            why = [r for r in after if r.get("id") == f"{u2}.0" and r.get("event") == "outcome"]
            assert "root's verdict cannot be read" in why[-1]["why"], why
            assert not any(r.get("job") == str(victim) for r in after), after
            v = slurm.show_job(victim)
            assert v.state == "RUNNING" and v.restarts == 0, v
            for n in rc.nodes:
                assert not slurm.node_info(n).drained, n
        finally:
            cancel(victim, u, u2)


# ---- attack 7a: budget= beyond the site's, with a sparse file ---------------------------------

@pytest.mark.cluster
def test_budget_option_is_capped_by_the_sites_budget(cluster: cl.ClusterFacts) -> None:
    """budget=900G and an 8 GiB sparse artifact (it costs the user nothing): the job epilog
    works under the site's budget (20 MiB), the artifact is left out and named, and the job
    epilog's peak RSS stays within SECURITY.md's bound."""
    d = cl.make_workdir(cluster, "trust-budget")
    job = cl.submit("#!/bin/bash\n#SBATCH --gpualert=budget=900G,artifacts=big.bin,"
                    "mail=gpatest@localhost,notify=always\n#SBATCH -o slurm-%j.out\n"
                    "truncate -s 8G big.bin\necho 'ValueError: bad shape'\nexit 1\n",
                    workdir=d)
    try:
        cl.wait_final(job, 120)
        vpath = cluster.spool / str(job) / "verdict.json"
        v = cl.wait_until(lambda: vpath.exists() and json.loads(vpath.read_text()).get(
            "artifacts") and json.loads(vpath.read_text()), 90, "the verdict's artifacts")
        assert v["options"]["budget_bytes"] == 20 * 1024**2, v["options"]
        art = json.dumps(v["artifacts"])
        assert v["artifacts"]["budget"] == 20 * 1024**2 and v["artifacts"]["used"] <= \
            20 * 1024**2, art
        left = [x for x in v["artifacts"]["left_out"] if x["name"] == "big.bin"]
        assert left and "over the budget" in left[0]["reason"], art
        log = (cluster.spool / "gpualert-hooks.log").read_text(errors="replace")
        cost = re.findall(rf"job {job}: epilog-slurmctld cost .* peak rss ([0-9.]+) MiB", log)
        assert cost and float(cost[-1]) < 300, cost
    finally:
        cancel(job)


# ---- attack 8: terminal escapes in every admin command ----------------------------------------

OSC52 = "\x1b]52;c;cm0gLXJmIC8K\x07"


@pytest.mark.cluster
def test_admin_commands_print_job_data_with_control_characters_escaped(
        cluster: cl.ClusterFacts) -> None:
    """A failed job printed OSC 52 (clipboard write) and CSI sequences, and is named with an
    OSC title sequence; another such job still runs. `gpualert show` (text and JSON),
    `history` and `status` print them escaped: no raw control character reaches the admin."""
    d = cl.make_workdir(cluster, "trust-esc")
    name = "train\x1b]0;owned\x07"
    body = (f"printf 'RuntimeError: CUDA out of memory {OSC52.replace(chr(27), chr(92) + 'e')}"
            "\\e[2J\\e[1;1H\\x9b31m\\n'\nexit 1\n")
    failed = cl.submit(f"#!/bin/bash\n#SBATCH --gpualert\n#SBATCH -o slurm-%j.out\n{body}",
                       "-J", name, workdir=d)
    running = cl.submit("#!/bin/bash\n#SBATCH --gpualert\nsleep 300\n", "-J", name,
                        workdir=d, name="run.sh")
    env = {**os.environ, "GPUALERT_CONFIG": str(cluster.gpualert_config)}
    try:
        cl.wait_final(failed, 120)
        vpath = cluster.spool / str(failed) / "verdict.json"
        cl.wait_until(lambda: vpath.exists(), 90, "the verdict")
        assert "\x1b]52" in vpath.read_text(encoding="utf-8") or "\\u001b]52" in \
            vpath.read_text(), "the attack did not reach the verdict"
        cl.wait_state(running, "RUNNING", 60)
        outs = []
        for args in (["show", str(failed)], ["show", "--json", str(failed)],
                     ["history", "--job", str(failed)], ["status"]):
            p = subprocess.run([GPUALERT, *args], capture_output=True, text=True, env=env,
                               timeout=60, stdin=subprocess.DEVNULL)
            assert p.returncode == 0, (args, p.stderr)
            text = p.stdout + p.stderr
            assert not RAW_CTRL.search(text), (args, repr(RAW_CTRL.search(text)))
            outs.append(text)
        assert "\\x1b]52" in outs[0] and "\\x1b]0;owned" in outs[3], (outs[0][-400:], outs[3])
    finally:
        cancel(failed, running)


# ---- attack 9: routing and MailProg by user-written files -------------------------------------

def test_routing_and_mailprog_ignore_user_written_records(smtp_server: Any) -> None:
    """The test user replaced job.json (claiming to be root, in partition ops) and wrote an
    attempt-1/verdict.json with text of their own. notify.rules route by root's facts: the
    report goes to the default channel, not to ops' webhook; MailProg's enrichment takes
    nothing from the forged verdict."""
    from gpualert_slurm.core.config import load_config
    from gpualert_slurm.notify import recipients

    with own_spool() as base:
        spool = base / "spool"
        job = 88000001  # not a job Slurm knows: Slurm's fallback has nothing to say either
        jd = prolog_dir(spool, job, cl.TEST_USER, None)
        fake_job = json.dumps({"user": "root", "partition": "ops"})
        fake_verdict = json.dumps({"job_id": str(job), "attempt": 1, "verdict": {
            "class": "gpu_hardware", "hint": "FORGED-HINT"}})
        as_user(f"rm -f job.json && echo '{fake_job}' > job.json && mkdir -p attempt-1 && "
                f"echo '{fake_verdict}' > attempt-1/verdict.json", jd)
        cfgp = base / "gpualert.yaml"
        cfgp.write_text(yaml.safe_dump({
            "spool": str(spool),
            "mail": {"relay": f"127.0.0.1:{smtp_server.port}", "from": "g@localhost",
                     "domain": "localhost", "connect_timeout_s": 2, "send_timeout_s": 2},
            "notify": {"total_timeout_s": 4, "tries": 1, "outbox": str(base / "outbox"),
                       "channels": {"ops": {"url": "json://127.0.0.1:9/ops"}},
                       "rules": [{"users": ["root"], "channels": ["ops"]},
                                 {"partitions": ["ops"], "channels": ["ops"]}]}}))
        cfg = load_config(str(cfgp))
        assert recipients.channels_for_job(cfg, str(job)) == ["mail"]
        env = {"GPUALERT_CONFIG": str(cfgp), "SLURM_JOB_ID": str(job),
               "SLURM_JOB_USER": cl.TEST_USER, "SLURM_JOB_MAIL_TYPE": "Failed",
               "SLURM_JOB_STATE": "FAILED", "SPANK_GPUALERT": "on",
               "PATH": os.environ["PATH"]}
        p = subprocess.run([GPUALERT, "mailprog", "-s",
                            f"Slurm Job_id={job} Name=x Failed, ExitCode 1", cl.TEST_USER],
                           env=env, capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr
        got = mails(smtp_server)
        assert len(got) == 1 and "FORGED-HINT" not in got[0] and "gpu_hardware" not in got[0]


# ---- lower: the output handoff's socket name --------------------------------------------------

@pytest.mark.cluster
def test_handoff_socket_names_are_not_guessable_and_a_squatter_changes_nothing(
        cluster: cl.ClusterFacts) -> None:
    """Another user binds, before the job starts, every abstract name the old scheme would
    have used (uid/job/step/rank/attempt) for a held job; the job's tasks still flush (their
    exit records say log_flushed true), and the names they bound, seen in /proc/net/unix,
    carry a random part and not the job id."""
    d = cl.make_workdir(cluster, "trust-sock")
    script = cl.write_user_file(d / "s.sh", (
        "#!/bin/bash\n#SBATCH --gpualert\n#SBATCH -o slurm-%j.out\n"
        "srun -n2 bash -c 'grep -o \"@gpualert-tap/[^ ]*\" /proc/net/unix "
        "> names.$SLURM_PROCID; echo rank $SLURM_PROCID done'\n"))
    job = cl.sbatch(script, "-H", "-n2")
    uid, _ = _uid()
    squat = []
    try:
        for step, rank in [("0", 0), ("0", 1), ("batch", 0)]:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(f"\0gpualert-tap/{uid}/{job}/{step}/{rank}/0")
            s.listen(1)
            squat.append(s)
        subprocess.run(["scontrol", "release", str(job)], check=True, timeout=30)
        cl.wait_final(job, 120)
        tasks = cluster.spool / str(job) / "tasks"
        for r in (0, 1):
            rec = cl.wait_until(lambda r=r: (tasks / f"0.{r}.exit").exists() and json.loads(
                (tasks / f"0.{r}.exit").read_text()), 30, f"exit record 0.{r}")
            assert rec.get("log_flushed") is True, rec
        # each rank lists the names bound when it ran: its own copier's and the batch step's
        # at least (a copier binds before its task starts); the other rank's only if that one
        # started first. Together they hold all three.
        names = sorted({n for r in (0, 1) for n in (d / f"names.{r}").read_text().split()})
        squatted = {"@" + s.getsockname()[1:].decode() for s in squat}
        assert squatted <= set(names), (squatted, names)  # the squatter held its names
        mine = [n for n in names if n.startswith(f"@gpualert-tap/{uid}/") and n not in squatted]
        assert len(mine) >= 3, names  # the batch step's and the two ranks' copiers
        assert all(re.fullmatch(rf"@gpualert-tap/{uid}/[0-9a-f]{{16}}", n) for n in mine), mine
        assert not any(f"/{job}/" in n for n in mine), mine
    finally:
        for s in squat:
            s.close()
        cancel(job)


# ---- lower: gc on a very deep tree and a huge directory ---------------------------------------

@pytest.mark.cluster
def test_gc_removes_a_very_deep_tree_and_a_huge_directory_and_goes_on(
        cluster: cl.ClusterFacts) -> None:
    """The test user made a 3000-level tree in one finished job's dir and 60000 files in
    another's; a third job dir comes after them. One `gpualert gc` pass removes all three
    (the old recursive removal failed on the deep one every pass), within its time limit and
    a bounded memory."""
    with own_spool() as base:
        spool = base / "spool"
        jobs = [88100001, 88100002, 88100003]
        dirs = [prolog_dir(spool, j, cl.TEST_USER, None) for j in jobs]
        as_user("python3 -c \"import os\nos.chdir('tasks')\nfor i in range(3000):\n"
                "    os.mkdir('d'); os.chdir('d')\nopen('f', 'w')\"", dirs[0])
        as_user("python3 -c \"import os\nfor i in range(60000): open(f'tasks/f{i}', 'w')\"",
                dirs[1])
        as_user("echo x > tasks/0.0.log", dirs[2])
        for dd in dirs:
            # (gc measures down to 64 levels: deeper mtimes do not count, so are left as made)
            subprocess.run(["find", str(dd), "-maxdepth", "80", "-exec", "touch", "-h", "-d",
                            "-3 days", "{}", "+"], check=True, timeout=120)
        cfgp = base / "gpualert.yaml"
        cfgp.write_text(yaml.safe_dump({"spool": str(spool), "notify": {
            "outbox": str(base / "outbox")}, "retention": {"max_age": "1d", "min_age": "1h"}}))
        p, wall, rss = run_measured([GPUALERT, "gc", "--config", str(cfgp), "--time-limit",
                                     "100", "--local-dir", str(base / "nolocal")], None,
                                    timeout=200)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "removed 3" in p.stdout, p.stdout
        assert not any(dd.exists() for dd in dirs)
        assert [n for n in os.listdir(spool) if n.startswith(".gc-")] == []
        assert rss < 150, rss
        assert wall < 100, wall
        print(f"gc pass, 3000 levels + 60000 files + one plain dir: {wall:.1f} s, "
              f"peak {rss:.0f} MiB")


# ---- issue 22: `gpualert classify <jobdir>` as root and a planted tasks symlink ---------------

def test_classify_jobdir_refuses_a_tasks_symlink_to_another_jobs_logs() -> None:
    with own_spool() as base:
        spool = base / "spool"
        rdir = prolog_dir(spool, 88200001, "root", None)
        (rdir / "tasks" / "0.0.log").write_text(f"RuntimeError: {SECRET}\n")
        udir = prolog_dir(spool, 88200002, cl.TEST_USER, None)
        as_user(f"rmdir tasks && ln -s {rdir / 'tasks'} tasks", udir)
        p = subprocess.run([GPUALERT, "classify", str(udir)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 2, p.stdout + p.stderr
        assert SECRET not in p.stdout + p.stderr
        assert "refused" in p.stderr, p.stderr


# ---- pure parts -------------------------------------------------------------------------------

def test_bound_options_never_exceed_the_sites_bounds() -> None:
    from gpualert_slurm.core.config import Config, LimitsConfig, bound_options
    from gpualert_slurm.core.options import parse_options

    cfg = Config(budget_bytes=20 * 1024**2, limits=LimitsConfig(hang_min_s=60, max_recipients=2))
    o = bound_options(parse_options("budget=900G,hang=1s,mail=a@x.org:b@x.org:c@x.org"), cfg)
    assert o.budget_bytes == 20 * 1024**2 and o.hang_s == 60 and o.mail == ("a@x.org", "b@x.org")
    small = parse_options("budget=1M,hang=2h")
    assert bound_options(small, cfg) == small  # lowering is the user's right
    big = Config(budget_bytes=20 * 1024**2, limits=LimitsConfig(budget_max_bytes=1024**3))
    assert bound_options(parse_options("budget=2G"), big).budget_bytes == 1024**3


def test_limits_config_is_checked() -> None:
    from gpualert_slurm.core.config import ConfigError, parse_config

    cfg = parse_config({"limits": {"budget_max": "1G", "hang_min": "5m", "watch_job_s": 3,
                                   "watch_alerts_per_user_hour": 7}}, "x.yaml")
    assert cfg.limits.budget_max_bytes == 1024**3 and cfg.limits.hang_min_s == 300
    assert cfg.limits.watch_job_s == 3 and cfg.limits.watch_alerts_per_user_hour == 7
    with pytest.raises(ConfigError, match="limits.max_recipients"):
        parse_config({"limits": {"max_recipients": 0}}, "x.yaml")
    with pytest.raises(ConfigError, match="unknown key limits.nope"):
        parse_config({"limits": {"nope": 1}}, "x.yaml")


def test_escape_shows_every_control_character_and_keeps_text() -> None:
    from gpualert_slurm.core.termsafe import escape, one_line

    s = f"ok {OSC52} \x1b[2J\x9b31m bidi\u202e tab\tend\r\nnext"
    e = escape(s)
    assert not RAW_CTRL.search(e) and "\u202e" not in e
    assert "\\x1b]52;c;" in e and "\\x9b" in e and "\\u202e" in e and "\\x0d" in e
    assert "tab\tend" in e and e.endswith("\nnext") and e.startswith("ok ")
    assert "\n" not in one_line("a\nb", 10) and one_line("x" * 50, 10).endswith("…")


def test_drain_reason_and_webhook_text_carry_no_raw_control_text() -> None:
    import email.message

    from gpualert_slurm.notify.webhook import title_and_body
    from gpualert_slurm.recovery.actions import drain_reason

    r = drain_reason("gpu_hardware", f"Xid 79 {OSC52}\nline two")
    assert not RAW_CTRL.search(r) and r.startswith("gpualert: gpu_hardware") and len(r) <= 200
    m = email.message.EmailMessage()
    m["Subject"] = "job x"
    m.set_content(f"evidence {OSC52}\n")
    title, body = title_and_body(m.as_bytes())
    assert not RAW_CTRL.search(title + body) and "\\x1b]52" in body


def test_heartbeats_refuse_links_fifos_and_other_owners(tmp_path: Path) -> None:
    from gpualert_slurm.recovery.watch import heartbeats

    with own_spool() as base:
        spool = base / "spool"
        jd = prolog_dir(spool, 88300001, cl.TEST_USER, None)
        as_user("echo a > tasks/0.0.log && mkfifo tasks/0.1.log && mkdir tasks/0.2.log && "
                "ln /etc/hostname tasks/0.3.log 2>/dev/null || true; "
                "ln -s /etc/shadow tasks/0.4.log", jd)
        uid, _ = _uid()
        t = time.monotonic()
        att, beats = heartbeats(str(spool), "88300001", time.time(), attempt=0, uid=uid,
                                tails=True)
        assert time.monotonic() - t < 2
        assert att == 0 and sorted(beats) == ["0.0"], beats
        assert beats["0.0"]["tail"] == ["a"]
        with pytest.raises(sp.SpoolError):  # the dir is not root's job's user's
            heartbeats(str(spool), "88300001", time.time(), attempt=0, uid=0)


def test_read_run_verdict_wants_roots_file_about_this_run() -> None:
    with own_spool() as base:
        spool = base / "spool"
        jd = prolog_dir(spool, 88400001, cl.TEST_USER, None)
        good = {"job_id": "88400001", "attempt": 0, "verdict": {"class": "cuda_oom"}}
        fd = os.open(jd, os.O_RDONLY | os.O_DIRECTORY)
        try:
            sp.write_json_atomic(fd, "verdict.json", good)
        finally:
            os.close(fd)
        assert read_run(str(spool), 88400001, 0).cause.to_json() == {"class": "cuda_oom"}
        as_user("mkdir attempt-1 && cp verdict.json attempt-1/verdict.json", jd)
        with pytest.raises(sp.SpoolError, match="owned by uid"):  # the user's own file
            read_run(str(spool), 88400001, 1)
        as_user("rm attempt-1/verdict.json", jd)
        os.rename(jd / "verdict.json", jd / "attempt-1" / "verdict.json")  # root's, moved
        with pytest.raises(sp.SpoolError, match="another run"):
            read_run(str(spool), 88400001, 1)


def test_remove_tree_any_depth_bounded_fds(tmp_path: Path) -> None:
    from gpualert_slurm.commands import gc

    root = tmp_path / "r"
    root.mkdir()
    p = root / ".gc-deep"
    p.mkdir()
    fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1500):  # deeper than Python's recursion limit
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    os.close(fd)
    (p / "link").symlink_to("/etc")
    rfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        before = len(os.listdir("/proc/self/fd"))
        assert gc.remove_entry(rfd, ".gc-deep", time.monotonic() + 60)
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        os.close(rfd)
    assert os.listdir(root) == [] and os.path.isdir("/etc")


def test_hooks_log_lines_carry_no_raw_control_text(tmp_path: Path) -> None:
    """A hook's message quotes job data: one line per event in gpualert-hooks.log, escaped."""
    from gpualert_slurm.hooks.common import HookLog

    log = HookLog("epilog")
    log.set_spool(str(tmp_path))
    log.error(f"job 7: cannot read {OSC52}x.log\nFAKE 2026-01-01 n1 INFO forged line")
    lines = (tmp_path / "gpualert-hooks.log").read_text().splitlines()
    assert len(lines) == 1 and not RAW_CTRL.search(lines[0]) and "\\x1b]52" in lines[0]
