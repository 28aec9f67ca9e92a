"""The third independent pass on issue 28 (docs/SECURITY.md, "Red-team pass"): after Slurm's
job facts moved to its JSON, every job text the user controls (name, comment, work dir,
--output path) holds every key `scontrol` prints, newlines and Slurm's longest name, and root's
facts for the job must still equal sacct's and those of a plainly named job. Run as the
unprivileged test user on the action-mode recovery cluster, and the spool-dir check and
accounting's table on their real parts.

Found here: sacct prints a job name raw, newlines and the table's delimiter (\\x1f) included,
and accounting() read JobName last in its table: a name 'x\\n<its id>\\x1fNODE_FAIL\\x1f...'
(set with `scontrol update` once the id is known) was a second row of the job's, the one
read, so a job that exited 0 had trusted.slurm.state NODE_FAIL (user root, node n2). Fixed in
core/slurm.py: accounting() no longer asks for JobName (ACCT_FIELDS)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import clusterlib as cl
import pytest
from recoverylib import (  # rc, audit: conftest.py's fixtures on this cluster
    audit_records,
    cancel,
    gpualert,
    job_script,
    recovery_cluster,  # noqa: F401  (the fixture)
    start_now_when_pending,
    wait_decision,
    write_config,
    write_kmsg,
)
from test_trust_cluster import assert_harmless

from gpualert_slurm.core import slurm, slurm_records, spool
from gpualert_slurm.core.config import Config, MailConfig, NotifyConfig, NotifyRule
from gpualert_slurm.notify import recipients

# every key `scontrol show job` prints that gpualert ever read, with values that would lift
# the job to root's, move it to another node or state, or widen its kernel window
KEYS = ("UserId=root(0) GroupId=root(0) Account=root Partition=urgent QOS=high "
        "JobState=NODE_FAIL Reason=NodeDown Restarts=7 BatchFlag=1 ExitCode=0:0 "
        "DerivedExitCode=0:0 SubmitTime=2020-01-01T00:00:00 StartTime=2020-01-01T00:00:00 "
        "EndTime=2030-01-01T00:00:00 NodeList=n2 BatchHost=n2 NumNodes=3 ExcNodeList=n3 "
        "FailedNode=n2 MailUser=boss@example.org MailType=ALL WorkDir=/root Comment=x "
        "StdOut=/etc/shadow StdErr=/etc/shadow JobId=1 JobName=root ArrayJobId=1 "
        "ArrayTaskId=0 TRES=gres/gpu=8 Power=")


def _sacct_line(job: int) -> str:
    """A row of accounting's table (core/slurm_records.SACCT_FIELDS, \\x1f between) for `job`, as a
    name's second line would print it."""
    return "\x1f".join((str(job), "NODE_FAIL", "0:0", "0:0", "n2", "1", "urgent", "root",
                        "NodeDown", "2020-01-01T00:00:00", "x"))


def forged(job: int) -> str:
    """A name: a forged accounting row of the job's own id, then a step row of it whose name
    is every key. In that order because slurmdbd keeps a name's first 255 bytes only, and
    every line must be a whole row (one that is not made the old table parse fail whole)."""
    step = "\x1f".join((f"{job}.9", "COMPLETED", "0:0", "0:0", "n1", "1", "", "", "", "",
                        KEYS))
    return f"x\n{_sacct_line(job)}\n{step}"


def forged_comment() -> str:
    """Every key, three times over two newlines (Slurm refuses more than ~1 KB: see the
    100 KB test)."""
    return f"x {KEYS}\n{KEYS}\n{KEYS}"[:1000]


def _as_user(cmd: list[str]) -> None:
    p = cl.run_as_user(cmd, timeout=30)
    assert p.returncode == 0, (cmd[:3], p.stdout, p.stderr)


def _sacct_truth(job: int) -> dict[str, str]:
    """sacct's own columns with no free text among them, read without gpualert's parser."""
    fields = ("JobIDRaw", "User", "UID", "Account", "Partition", "State", "ExitCode",
              "NodeList", "Start", "End")
    out = slurm.run(["sacct", "-n", "-P", "-X", "--delimiter=\x1f", "-j", str(job), "-o",
                     ",".join(fields)])
    rows = [dict(zip(fields, ln.split("\x1f"), strict=True)) for ln in out.splitlines()
            if ln.split("\x1f")[0] == str(job)]
    assert len(rows) == 1, out
    return rows[0]


def _wait_verdict(rc: cl.ClusterFacts, job: int, timeout: float = 90) -> dict[str, Any]:
    p = rc.spool / str(job) / "verdict.json"

    def get() -> dict[str, Any] | None:
        try:
            v = json.loads(p.read_text())
        except (OSError, ValueError):
            return None
        return v if v.get("trusted") else None

    return cl.wait_until(get, timeout, f"job {job}'s verdict.json")


def _metric_lines(rc: cl.ClusterFacts, word: str) -> list[str]:
    p = gpualert("metrics", "-o", "-", cfg=rc)
    assert p.returncode == 0, p.stderr
    return sorted(ln for ln in p.stdout.splitlines() if word in ln and not ln.startswith("#"))


def _routing_cfg(spool_dir: str) -> Config:
    """A site whose rules send root's and the urgent partition's jobs to their teams. Its
    spool is empty: job.json unreadable (as when the user moves it away), so routing asks
    Slurm (notify.recipients._job_facts)."""
    return Config(spool=spool_dir, notify=NotifyConfig(
        default=("site",),
        rules=(NotifyRule(channels=("root-team",), users=("root",)),
               NotifyRule(channels=("urgent-team",), partitions=("urgent",)),
               NotifyRule(channels=("root-acct",), accounts=("root",)))),
        mail=MailConfig(domain="example.org"))


def _facts_of(v: dict[str, Any]) -> dict[str, Any]:
    t, j = v["trusted"]["slurm"], v["job"]
    return {"t.user": t["user"], "t.partition": t["partition"], "t.state": t["state"],
            "t.reason": t["reason"], "t.nodes": t["nodes"], "j.user": j["user"],
            "j.uid": j["uid"], "j.account": j["account"], "j.partition": j["partition"],
            "j.slurm_state": j["slurm_state"], "j.nodes": j["nodes"],
            "j.nodelist": j["nodelist"], "j.exit_code": j["exit_code"],
            "j.signal": j["signal"], "class": v["verdict"]["class"]}


def _decision_shape(d: dict[str, Any]) -> dict[str, Any]:
    return {"class": d.get("class"), "backing": d.get("backing"),
            "trusted_suspects": d.get("trusted_suspects"),
            "flagged": d.get("flagged_nodes"), "exclude": d.get("exclude"),
            "planned": sorted((p["action"], str(p.get("target"))) for p in d["planned"]),
            "not_taken": sorted((p["action"], str(p.get("target")))
                                for p in d["not_taken"])}


@pytest.mark.cluster
def test_every_scontrol_key_in_name_comment_workdir_and_output_changes_no_fact(
        rc: cl.ClusterFacts, audit: Path) -> None:
    """Hostile and plain jobs, one failing and one succeeding of each, on n1. The hostile
    ones' name and comment hold every key, newlines and an accounting row of their own id;
    their work dir and --output path hold the keys too. Root's facts (verdict.json's
    trusted.slurm and job section, the recovery decision, routing by Slurm's record, the
    metrics) equal sacct's and the plain pair's; nothing is drained."""
    write_config(rc, audit, mode="action", breaker={"share": 1.0})
    base = cl.make_workdir(rc, "redteam3-keys")
    weird = base / f"wd {KEYS[:200]}\nJobState=NODE_FAIL UserId=root(0)"
    weird.mkdir()
    cl.chown_to_user(weird)
    plain_dir = cl.make_workdir(rc, "redteam3-plain")
    out_path = f"{weird}/out UserId=root(0) StartTime=2020-01-01T00:00:00 NodeList=n2 %j.out"
    fail = 'echo "ValueError: the job\'s own failure"\nexit 1'
    ok = "echo fine"
    node_failure_before = _metric_lines(rc, 'class="node_failure"')
    jobs: dict[str, int] = {}
    try:
        for kind, body in (("fail", fail), ("ok", ok)):
            j = cl.submit(job_script(body), "-H", "-w", "n1", "-J", "placeholder", "-o",
                          out_path, workdir=weird, name=f"{kind}.sh")
            _as_user(["scontrol", "update", f"JobId={j}", f"JobName={forged(j)}",
                      f"Comment={forged_comment()}"])
            jobs[f"hostile-{kind}"] = j
            jobs[f"plain-{kind}"] = cl.submit(job_script(body), "-w", "n1", workdir=plain_dir,
                                              name=f"{kind}.sh")
        for kind in ("fail", "ok"):
            j = jobs[f"hostile-{kind}"]
            st = slurm.show_job(j)  # the attack's premise: Slurm took every text as given
            assert st.name == forged(j) and st.raw["Comment"] == forged_comment(), st.raw
            assert st.raw["WorkDir"] == str(weird), st.raw
            _as_user(["scontrol", "release", str(j)])
        cl.wait_final_many(list(jobs.values()), 120)
        # routing from Slurm's record while slurmctld still holds the jobs
        with tempfile.TemporaryDirectory() as empty:
            cfg = _routing_cfg(empty)
            chans = {k: recipients.channels_for_job(cfg, str(j)) for k, j in jobs.items()}
            assert set(map(tuple, chans.values())) == {("site",)}, chans
        decs = {k: wait_decision(audit, jobs[k]) for k in ("hostile-fail", "plain-fail")}
        vs = {k: _wait_verdict(rc, j) for k, j in jobs.items()}
        for kind in ("fail", "ok"):
            h = jobs[f"hostile-{kind}"]
            truth, fh, fp = _sacct_truth(h), _facts_of(vs[f"hostile-{kind}"]), \
                _facts_of(vs[f"plain-{kind}"])
            assert fh == fp, (kind, fh, fp)
            assert (fh["t.user"], fh["j.uid"], fh["j.account"], fh["t.partition"],
                    fh["t.state"], fh["t.nodes"]) == (
                truth["User"], int(truth["UID"]), truth["Account"], truth["Partition"],
                truth["State"].split()[0], slurm.expand_hostlist(truth["NodeList"])), \
                (kind, fh, truth)
            # the kernel window is Slurm's run, not the name's StartTime (2020)
            t = vs[f"hostile-{kind}"]["trusted"]["slurm"]
            assert abs(t["start"] - slurm.parse_time(truth["Start"])) <= 1, (t, truth)
            assert abs(t["end"] - slurm.parse_time(truth["End"])) <= 1, (t, truth)
            # the premise: read with its name, sacct's table has the forged row last
            named = slurm.parse_sacct_table(slurm.run(
                ["sacct", "-n", "-P", f"--delimiter={slurm.SACCT_DELIM}", "-j", str(h), "-o",
                 ",".join(slurm_records.SACCT_FIELDS)]))
            assert (named[-1].state, named[-1].user) == ("NODE_FAIL", "root"), named
            # accounting, as the job epilog reads it, is the job's one real row
            acct = slurm.accounting(h)
            assert (acct.state, acct.user, acct.nodes) == (
                truth["State"].split()[0], "gpatest", ("n1",)), acct
            assert vs[f"hostile-{kind}"]["job"]["mail_user"] == \
                vs[f"plain-{kind}"]["job"]["mail_user"] or \
                vs[f"hostile-{kind}"]["job"]["mail_user"] == "boss@example.org", vs
        assert _decision_shape(decs["hostile-fail"]) == _decision_shape(decs["plain-fail"]), \
            decs
        assert_harmless(rc, audit)
        assert not [r for r in audit_records(audit) if r.get("event") == "decision"
                    and r.get("id", "").startswith(f"{jobs['hostile-ok']}.")], "a decision"
        assert _metric_lines(rc, 'class="node_failure"') == node_failure_before
    finally:
        cancel(*jobs.values())


@pytest.mark.cluster
def test_a_100_kb_name_comment_or_output_path_is_refused_by_slurm_or_changes_nothing(
        rc: cl.ClusterFacts) -> None:
    """A 100 KB name of keys: Slurm (22.05) refuses it at sbatch and at update ("too long");
    where a version takes it, root's JSON record still says the job's own user and state."""
    big = f"x {KEYS}\n" * (100_000 // (len(KEYS) + 3))
    assert len(big) >= 99_000
    d = cl.make_workdir(rc, "redteam3-big")
    cl.write_user_file(d / "big.sh", job_script("true"))
    for args in (["-J", big], ["--comment", big], ["-o", f"{d}/{big.replace(chr(10), ' ')}"]):
        p = cl.run_as_user(["sbatch", "--parsable", "-H", *args, str(d / "big.sh")], cwd=d,
                           timeout=60)
        if p.returncode != 0:
            assert "too long" in p.stderr, p.stderr
            continue
        j = int(p.stdout.strip().split(";")[0])
        try:
            st = slurm.show_job(j)
            assert (st.user, st.state, st.partition) == ("gpatest", "PENDING", "debug"), st
        finally:
            cancel(j)


@pytest.mark.cluster
@pytest.mark.parametrize("mode", ["0755", "0700"])
def test_a_stale_xid_a_user_shaped_attempt_dir_and_a_forged_start_drain_nothing(
        rc: cl.ClusterFacts, audit: Path, mode: str) -> None:
    """Issue 28's drain, redone: run 0 makes attempt-1/ ahead (0755: its Prolog will refuse
    it; 0700: it joins it), names itself 'StartTime=<long ago>' with an accounting row, and
    requeues itself; root writes a hardware Xid while the job waits; run 1 fails. The Xid is
    before run 1: nothing is drained, and no verdict holds the Xid."""
    write_config(rc, audit, mode="action", breaker={"share": 1.0})
    d = cl.make_workdir(rc, "redteam3-stale")
    ago = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 3600))
    body = (
        'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then\n'
        f'  mkdir -m {mode} {rc.spool}/$SLURM_JOB_ID/attempt-1\n'
        f'  chmod {mode} {rc.spool}/$SLURM_JOB_ID/attempt-1\n'
        '  name=$(printf "x StartTime=%s EndTime=2030-01-01T00:00:00 Restarts=0\\n'
        '%s\\037NODE_FAIL\\0370:0\\0370:0\\037n1\\0371\\037debug\\037gpatest\\037NodeDown'
        f'\\037%s\\037x" "{ago}" "$SLURM_JOB_ID" "{ago}")\n'
        '  scontrol update JobId=$SLURM_JOB_ID JobName="$name" Comment="$name"\n'
        '  echo requeueing; scontrol requeue $SLURM_JOB_ID; sleep 60\n'
        'fi\n'
        'echo "ValueError: run 1 fails on its own"\nexit 1')
    job = cl.submit(job_script(body), "-w", "n1", workdir=d)
    a1 = rc.spool / str(job) / "attempt-1"
    try:
        # the Xid lands after run 0 ends and before run 1 starts
        cl.wait_until(lambda: slurm.show_job(job).restarts >= 1, 90, "run 0 requeued")
        write_kmsg("<3>NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.")
        xid_at = time.time()
        time.sleep(2.5)
        start_now_when_pending(job, 1, timeout=90)
        cl.wait_final(job, 120)
        if mode == "0755":
            # run 1's Prolog refused attempt-1: its epilogs refuse it too, and say so
            log = rc.spool / "gpualert-hooks.log"
            said = (f"epilog-slurmctld: job {job}: {a1} exists with mode 0755",
                    f"epilog: job {job}: {a1} exists with mode 0755")
            cl.wait_until(lambda: all(x in log.read_text(errors="replace") for x in said),
                          60, f"job {job}'s epilogs refusing attempt-1")
        else:
            dec = wait_decision(audit, job, attempt=1, timeout=90)
            assert dec["class"] == "python_exception", dec
        time.sleep(3)  # a decision, were one made, is written with the job epilog's end
        st = slurm.show_job(job)
        assert st.name.startswith("x StartTime="), st.name  # the attack ran as written
        assert stat.S_IMODE(os.lstat(a1).st_mode) == int(mode, 8), oct(os.lstat(a1).st_mode)
        assert xid_at > 0
        assert_harmless(rc, audit)
        decs = [r for r in audit_records(audit) if r.get("event") == "decision"
                and r.get("job") == str(job)]
        assert all(not d["backing"] and not d["trusted_suspects"] and "drain_node" not in
                   {p["action"] for p in d["planned"]} for d in decs), decs
        # no verdict holds the Xid; run 1's window (if it has a verdict) is its own run
        for v in (rc.spool / str(job)).rglob("verdict.json"):
            doc = json.loads(v.read_text())
            if doc.get("attempt") == 1:
                assert doc["trusted"]["slurm"]["start"] > xid_at - 1, doc["trusted"]
            lines = [ln for n in (doc.get("nodes") or {}).values()
                     for ln in (n.get("kernel") or {}).get("lines") or []]
            assert not [ln for ln in lines if "Xid" in ln], (v, lines)
    finally:
        cancel(job)


@pytest.mark.cluster
def test_gpualert_show_as_root_writes_no_terminal_control_of_the_jobs(
        rc: cl.ClusterFacts, audit: Path) -> None:
    """`gpualert show` quotes the job's own lines (its last lines, the evidence), which
    report.render keeps raw. A job that printed OSC 52 (set the clipboard), a title, a
    clear-screen and a C1 CSI must not have them reach root's terminal: cli.main's SafeStream
    shows them escaped, in text, HTML and JSON alike."""
    write_config(rc, audit, mode="monitor")
    d = cl.make_workdir(rc, "redteam3-show")
    body = ("printf 'ValueError: \\033]52;c;ZWNobyBwd25lZAo=\\a\\033]0;root@x\\a"
            "\\033[2J\\302\\233H\\r over\\n'\nexit 1")
    job = cl.submit(job_script(body), "-w", "n1", workdir=d)
    try:
        cl.wait_final(job, 90)
        out = (d / f"slurm-{job}.out").read_bytes()
        assert b"\x1b]52;c;" in out and b"\xc2\x9b" in out, out  # the job printed them
        p = rc.spool / str(job) / "verdict.json"
        cl.wait_until(p.exists, 90, f"job {job}'s verdict.json")
        for args in ((), ("--html",), ("--json",)):
            r = gpualert("show", str(job), *args, cfg=rc)
            assert r.returncode == 0, r.stderr
            assert "ZWNobyBwd25lZAo" in r.stdout, (args, r.stdout[-2000:])  # quoted...
            bad = sorted({hex(ord(c)) for c in r.stdout
                          if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f})
            assert not bad, (args, bad)  # ...inert
    finally:
        cancel(job)


@pytest.mark.cluster
def test_one_users_undecodable_job_name_leaves_every_other_jobs_facts(
        rc: cl.ClusterFacts, audit: Path) -> None:
    """22.05's scontrol has no --json, so root reads a job from `squeue --json`: every job
    slurmctld holds, names included, in one document. A held job of the test user named
    with bytes that are not UTF-8 made that output undecodable: show_job raised
    UnicodeDecodeError (not even a SlurmError) for every job of every user, for as long as
    the held job stayed, and another job's epilog lost Slurm's facts. Slurm's output is now
    decoded with errors="replace"."""
    write_config(rc, audit, mode="action", breaker={"share": 1.0})
    d = cl.make_workdir(rc, "redteam3-utf8")
    cl.write_user_file(d / "held.sh", job_script("true"))
    bad = "x\udcff\udcfe UserId=root(0) JobState=NODE_FAIL"  # argv bytes: x 0xff 0xfe ...
    p = cl.run_as_user(["sbatch", "--parsable", "-H", "-J", bad, "--comment", bad,
                        str(d / "held.sh")], cwd=d, timeout=30)
    assert p.returncode == 0, p.stderr
    held = int(p.stdout.strip().split(";")[0])
    job = 0
    try:
        # the premise on 22.05: Slurm passes the bytes through, and its JSON is not UTF-8
        raw = subprocess.run(["squeue", "--json"], capture_output=True, timeout=30).stdout
        assert b"\xff\xfe UserId=root(0)" in raw or raw.decode("utf-8"), raw[:200]
        assert [q.user for q in slurm.queue() if q.job_id == held] == ["gpatest"]
        job = cl.submit(job_script('echo "ValueError: its own failure"\nexit 1'), "-w", "n1",
                        workdir=d)
        dec = wait_decision(audit, job)
        assert dec["class"] == "python_exception", dec
        v = _wait_verdict(rc, job)
        truth = _sacct_truth(job)
        t = v["trusted"]["slurm"]
        assert t["error"] is None and v["job"]["slurm_error"] is None, (t, v["job"])
        assert (t["user"], t["state"], v["job"]["account"]) == (
            truth["User"], truth["State"].split()[0], truth["Account"]), (t, truth)
        st = slurm.show_job(held)  # and the held job itself reads as Slurm's
        assert (st.user, st.state) == ("gpatest", "PENDING"), st
        assert_harmless(rc, audit)
    finally:
        cancel(held, *([job] if job else []))


# ---- the spool dirs: one check, on a real filesystem, as root for the test user ----------

def _job_dir(tmp: Path, uid: int, gid: int) -> tuple[str, Path]:
    root = tmp / "spool"
    root.mkdir(mode=0o755)
    jd = root / "77"
    jd.mkdir(mode=0o700)
    os.chown(jd, uid, gid)
    return str(root), jd


def test_the_one_spool_check_refuses_user_shaped_attempt_dirs(tmp_path: Path) -> None:
    """open_attempt (both epilogs, watch, show; the Prolog and the plugin check the same):
    an attempt dir that is 0755, a link to another of the user's dirs, another user's, or a
    file is refused; a nodes/ that is a FIFO fails at once (no open blocks on it)."""
    import pwd

    pw = pwd.getpwnam(cl.TEST_USER)
    os.chmod(tmp_path, 0o755)
    root, jd = _job_dir(tmp_path, pw.pw_uid, pw.pw_gid)
    ok = jd / "attempt-1"
    ok.mkdir(mode=0o700)
    os.chown(ok, pw.pw_uid, pw.pw_gid)
    d = spool.open_attempt(root, "77", pw.pw_uid, 1)
    d.close()
    cases = {}
    wide = jd / "attempt-2"
    wide.mkdir(mode=0o755)
    os.chown(wide, pw.pw_uid, pw.pw_gid)
    os.chmod(wide, 0o755)
    cases[2] = "0755"
    (jd / "attempt-3").symlink_to(ok)
    os.lchown(jd / "attempt-3", pw.pw_uid, pw.pw_gid)
    cases[3] = "a link"
    roots = jd / "attempt-4"
    roots.mkdir(mode=0o700)  # root's own: not the job user's
    cases[4] = "root's"
    (jd / "attempt-5").write_text("")
    os.chown(jd / "attempt-5", pw.pw_uid, pw.pw_gid)
    cases[5] = "a file"
    os.mkfifo(jd / "attempt-6", 0o600)
    os.chown(jd / "attempt-6", pw.pw_uid, pw.pw_gid)
    cases[6] = "a FIFO"
    for n, what in cases.items():
        t0 = time.monotonic()
        with pytest.raises((spool.SpoolError, OSError)):
            spool.open_attempt(root, "77", pw.pw_uid, n).close()
        assert time.monotonic() - t0 < 2, what
    # the job dir itself 0755: every attempt refused, the good one too
    os.chmod(jd, 0o755)
    with pytest.raises((spool.SpoolError, OSError)):
        spool.open_attempt(root, "77", pw.pw_uid, 1).close()
    os.chmod(jd, 0o700)
    # nodes/ as a FIFO or a file: the job epilog's node wait fails at once
    from gpualert_slurm.hooks.job_epilog.facts import wait_node_verdicts
    from gpualert_slurm.hooks.jobspool import open_job_spool

    for shape in ("fifo", "file"):
        nodes = ok / "nodes"
        if nodes.exists() or nodes.is_symlink():
            nodes.unlink()
        if shape == "fifo":
            os.mkfifo(nodes, 0o600)
        else:
            nodes.write_text("")
        os.chown(nodes, pw.pw_uid, pw.pw_gid)
        js = open_job_spool(root, "77", pw.pw_uid, 1)
        try:
            t0 = time.monotonic()
            got = wait_node_verdicts(js, ["n1", "n2"], 20.0)
            assert time.monotonic() - t0 < 2, shape
            assert set(got) == {"n1", "n2"} and all("error" in g for g in got.values()), got
        finally:
            js.close()


def test_accountings_table_takes_no_row_from_a_job_name() -> None:
    """The fix's unit: a table as sacct prints a name with a newline and the delimiter."""
    real = "\x1f".join(("51", "COMPLETED", "0:0", "0:0", "n1", "1", "debug", "gpatest",
                        "None", "2026-12-06T04:43:21"))
    text = f"{real}\x1fx\n{_sacct_line(51)}\n"
    # the table with JobName (the web's, the caller's own jobs): the name forges a row
    assert slurm.parse_sacct_table(text)[-1].state == "NODE_FAIL"
    # accounting's fields have no free text: the same job's output is one row per line
    rows = slurm.parse_sacct_table(real + "\n", fields=slurm.ACCT_FIELDS)
    assert [(r.state, r.user, r.nodes) for r in rows] == [("COMPLETED", "gpatest", ("n1",))]
    assert "JobName" not in slurm.ACCT_FIELDS


def test_the_from_line_names_the_job_user_and_adds_no_address() -> None:
    """The report's From says whose job it is. The user name is the system's (not the
    job's text); even a name with a comma, angle brackets and CRLF stays one quoted
    display name of gpualert's own sender."""
    from email import policy
    from email.parser import BytesParser

    from gpualert_slurm.report import build_message

    for user in (cl.TEST_USER, 'x", evil@example.org, <evil@example.org>\r\nBcc: e@x.org'):
        msg = build_message("s", "t", "<p>t</p>", sender="gpualert@site.org",
                            recipients=["u@site.org"], job_id="42", job_user=user)
        back = BytesParser(policy=policy.default).parsebytes(msg.as_bytes())
        addrs = back["From"].addresses
        assert [a.addr_spec for a in addrs] == ["gpualert@site.org"], back["From"]
        assert "42" in addrs[0].display_name, addrs
        assert back["Bcc"] is None, msg.as_string()[:500]


def test_no_address_form_routes_a_report_past_the_sites_policy() -> None:
    """Source routing ('%', '!'), quoted or commented local parts, a domain that only ends
    like an allowed one, a second address hidden in one: each refused by the allow-list;
    with mail.recipients: owner, even an allowed address of someone else is refused."""
    cfg = Config(mail=MailConfig(allow_domains=("lab.org",), domain="lab.org"))
    bad = ["u%evil.org@lab.org", "evil.org!u@lab.org", '"evil@evil.org"@lab.org',
           "u(comment)@lab.org", "u@evil-lab.org", "u@lab.org.evil.org",
           "u@lab.org,evil@evil.org", "u@lab.org evil@evil.org", "<u@lab.org>",
           "u@[127.0.0.1]", "u@lab.org.", "u@LAB.ORG\r\nBcc: e@evil.org", "u@ｌab.org"]
    allowed, refused = recipients.check_addresses(bad, cfg)
    assert allowed == [], allowed
    assert {a for a, _ in refused} == {a.strip() for a in bad}, refused
    # --mail-user (Slurm's MailUser, here from the environment) meets the same checks
    env = {"SLURM_JOB_USER": cl.TEST_USER, "SLURM_JOB_MAIL_USER": "boss@lab.org,x%y@lab.org"}
    r = recipients.resolve_recipients({}, env, cfg)
    assert list(r) == ["boss@lab.org"], (list(r), r.refused)
    owner = Config(mail=MailConfig(allow_domains=("lab.org",), domain="lab.org",
                                   recipients="owner"))
    r = recipients.resolve_recipients({"mail": "boss@lab.org"}, env, owner)
    assert list(r) == [f"{cl.TEST_USER}@lab.org"], (list(r), r.refused)
    assert ("boss@lab.org" in {a for a, _ in r.refused}), r.refused
