"""`gpualert gc`: the retention plan (pure), and the command against a temp spool with the real
Slurm of the test cluster (a running job is kept) and a real outbox (an unsent report is kept)."""

from __future__ import annotations

import fcntl
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clusterlib import cancel_quietly, submit, wait_state

from gpualert_slurm.commands.gc import REMOVING_PREFIX, JobUsage, measure, plan
from gpualert_slurm.core.config import ConfigError, RetentionConfig, parse_config
from gpualert_slurm.notify.outbox import Outbox, new_id

REPO = Path(__file__).resolve().parent.parent
DAY = 86400
NOW = 1_800_000_000.0
USER = pwd.getpwnam("gpatest")


# ---- the plan --------------------------------------------------------------------------------

def job(name: str, age_d: float, size: int = 1000) -> JobUsage:
    return JobUsage(name, bytes=size, files=1, newest=NOW - age_d * DAY)


def removed(decisions) -> list[str]:
    return [d.job.name for d in decisions if d.remove]


def test_max_age_removes_only_old_finished_jobs():
    ret = RetentionConfig(max_age_s=30 * DAY, min_age_s=3600)
    ds = plan([job("1", 40), job("2", 31), job("3", 29), job("4", 50), job("5", 60)], ret, NOW,
              active={4: "RUNNING"}, unsent={"5": 1})
    assert removed(ds) == ["1", "2"]  # oldest first
    why = {d.job.name: d.reason for d in ds}
    assert why["4"] == "job still in Slurm (RUNNING)"
    assert why["5"] == "report not sent yet (1 outbox entries)"
    assert why["3"] == "within the limits"
    assert why["1"].startswith("idle 40.0 d > max_age 30.0 d")


def test_max_total_removes_oldest_first_until_under_the_limit():
    ret = RetentionConfig(max_age_s=None, max_total_bytes=2500, min_age_s=3600)
    ds = plan([job("10", 3), job("11", 5), job("12", 4), job("13", 1), job("14", 0.01)], ret,
              NOW, active={}, unsent={})
    # 5000 bytes over a 2500 limit: the three oldest go (11, 12, 10), then 2000 <= 2500.
    assert removed(ds) == ["11", "12", "10"]
    assert [d.reason for d in ds if d.job.name == "14"] == ["younger than min_age (14.4 m)"]


def test_min_age_protects_unknown_young_dirs_even_over_the_size_limit():
    ret = RetentionConfig(max_age_s=DAY, max_total_bytes=1, min_age_s=2 * 3600)
    ds = plan([job("20", 0.05), job("21", 0.5)], ret, NOW, active={}, unsent={})
    assert removed(ds) == ["21"]


def test_running_and_unsent_jobs_count_towards_the_total_but_stay():
    ret = RetentionConfig(max_age_s=None, max_total_bytes=1500, min_age_s=0)
    ds = plan([job("30", 9), job("31", 8), job("32", 1)], ret, NOW, active={30: "PENDING"},
              unsent={"31": 2})
    assert removed(ds) == ["32"]


def test_a_job_measured_in_part_by_the_time_limit_is_kept():
    ret = RetentionConfig(max_age_s=DAY, min_age_s=0)
    cut = job("60", 10)
    cut.partial = "time limit reached while measuring"
    deep = job("61", 10)
    deep.partial = "deeper than 64 levels: not measured below"  # the user's own making
    ds = plan([cut, deep], ret, NOW, active={}, unsent={})
    assert removed(ds) == ["61"]
    assert [d.reason for d in ds if d.job is cut] == [
        "not measured (time limit reached while measuring)"]


def test_leftovers():
    ret = RetentionConfig(min_age_s=3600)
    gc_left = JobUsage(f"{REMOVING_PREFIX}7-abcd", newest=NOW)
    old_tmp = JobUsage(".tmp-8-n1-1-ab", newest=NOW - 2 * 3600)
    new_tmp = JobUsage(".tmp-9-n1-1-ab", newest=NOW - 60)
    ds = plan([gc_left, old_tmp, new_tmp], ret, NOW, active={}, unsent={})
    assert removed(ds) == [old_tmp.name, gc_left.name]
    assert [d.reason for d in ds if d.job is new_tmp] == ["a Prolog's temp dir, in use"]


@pytest.mark.parametrize("value,message", [
    ({"max_age": "a month"}, "retention.max_age: expected a duration like 30d or 12h, or null"),
    ({"max_total": "50T"}, "retention.max_total: expected a size like 500G or 50M, or null"),
    ({"min_age": None}, "retention.min_age: expected a duration like 1h or 2d"),
    ({"max_age": "1h", "min_age": "2h"}, "retention.min_age: expected at most retention.max_age"),
    ({"keep": "1d"}, "unknown key retention.keep (accepted: max_age, max_total, min_age, "
                     "local_max_age)"),
    ("30d", "retention: expected a mapping of keys"),
])
def test_bad_retention_config(value, message):
    with pytest.raises(ConfigError, match="^gpualert: config x.yaml: " + message.replace(
            "(", r"\(").replace(")", r"\)")):
        parse_config({"retention": value}, "x.yaml")


def test_retention_config():
    r = parse_config({"retention": {"max_age": "7d", "max_total": "50G", "min_age": "2h"}},
                     "x").retention
    assert (r.max_age_s, r.max_total_bytes, r.min_age_s) == (7 * DAY, 50 * 1024**3, 7200)
    assert parse_config({"retention": {"max_age": None}}, "x").retention.max_age_s is None
    assert parse_config({}, "x").retention == RetentionConfig()


def test_measure_counts_blocks_and_never_follows_symlinks(tmp_path):
    d = tmp_path / "5"
    (d / "tasks").mkdir(parents=True)
    (d / "tasks" / "a.log").write_bytes(b"x" * 100_000)
    (d / "tasks" / "big").symlink_to("/usr")  # would be huge if followed
    t = time.time() + 100  # later than the dirs' own mtimes: the newest
    os.utime(d / "tasks" / "a.log", (t, t))
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        u = measure(fd, "5")
    finally:
        os.close(fd)
    assert 100_000 <= u.bytes < 200_000 and u.files == 2 and u.newest == t
    assert not u.partial


def test_mtimes_in_the_future_do_not_make_a_job_young(tmp_path):
    d = tmp_path / "6"
    (d / "tasks").mkdir(parents=True)
    (d / "tasks" / "a.log").write_text("x")
    past, future = time.time() - 40 * DAY, time.time() + 3650 * DAY
    os.utime(d / "tasks" / "a.log", (future, future))  # the user's touch -d 2036
    for p in (d / "tasks", d):
        os.utime(p, (past, past))
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        u = measure(fd, "6")
    finally:
        os.close(fd)
    assert abs(u.newest - past) < 5


# ---- the command -----------------------------------------------------------------------------

@pytest.fixture
def site(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    spool.chmod(0o755)
    cfg = tmp_path / "gpualert.yaml"
    cfg.write_text(f"spool: {spool}\nretention: {{max_age: 2d, min_age: 1h}}\n")
    return spool, cfg


def make_job(spool: Path, name: str, age_s: float, size: int = 4096) -> Path:
    """A job dir as the Prolog and the tap leave it, every entry `age_s` old."""
    d = spool / name
    for sub in ("nodes", "tasks"):
        (d / sub).mkdir(parents=True)
    (d / "job.json").write_text("{}")
    (d / "tasks" / "batch.0.log").write_bytes(b"y" * size)
    for p in [d, *d.rglob("*")]:
        if p.name != "job.json":
            os.chown(p, USER.pw_uid, USER.pw_gid, follow_symlinks=False)
    os.chmod(d, 0o700)
    return age(d, age_s)


def age(d: Path, age_s: float) -> Path:
    t = time.time() - age_s
    for p in [*d.rglob("*"), d]:
        os.utime(p, (t, t), follow_symlinks=False)
    return d


def gc(cfg: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if path is not None:
        env["PATH"] = path
    r = subprocess.run([sys.executable, "-m", "gpualert_slurm", "gc", "--config", str(cfg),
                        *args], capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    return r


def test_gc_removes_old_jobs_keeps_running_and_unsent(cluster, workdir, site, tmp_path):
    spool, cfg = site
    running = submit("#!/bin/bash\nsleep 120\n", "-o", "/dev/null", workdir=workdir)
    try:
        wait_state(running, "RUNNING", timeout=60)
        old = make_job(spool, "990000001", 3 * DAY)
        young = make_job(spool, "990000002", 600)
        unsent = make_job(spool, "990000003", 5 * DAY)
        mine = make_job(spool, str(running), 9 * DAY)  # its dir looks old; Slurm runs it
        with Outbox(str(spool / ".outbox")).open(create=True) as ob:
            ob.put(new_id("990000003", "mail"), b"Subject: x\r\n\r\nbody\r\n", {"job": "x"})
        # The user planted a link to a file of root's in an old job dir: never followed.
        victim = tmp_path / "victim"
        victim.write_text("precious")
        (old / "tasks" / "link").symlink_to(victim)
        (old / "tasks" / "dirlink").symlink_to(tmp_path)
        age(old, 3 * DAY)

        dry = gc(cfg, "--dry-run", "-v")
        assert dry.returncode == 0, dry.stderr
        assert "would remove 990000001 " in dry.stdout and old.exists()
        assert f"keep {running} " in dry.stdout and "job still in Slurm (RUNNING)" in dry.stdout

        r = gc(cfg, "-v")
        assert r.returncode == 0, r.stderr + r.stdout
        assert not old.exists() and young.exists() and unsent.exists() and mine.exists()
        assert victim.read_text() == "precious" and (tmp_path / "gpualert.yaml").exists()
        lines = r.stdout.splitlines()
        assert any(line.startswith("removed 990000001 ") and "idle 3.0 d > max_age 2.0 d"
                   in line for line in lines)
        assert "keep 990000003 " in r.stdout and "report not sent yet (1 outbox" in r.stdout
        assert "keep 990000002 " in r.stdout and "younger than min_age" in r.stdout
        assert lines[-1].startswith("gc: removed 1 (")
        assert "kept 3 job dirs" in lines[-1]
        assert not [p for p in spool.iterdir() if p.name.startswith(REMOVING_PREFIX)]
    finally:
        cancel_quietly(running)


def test_gc_without_slurm_removes_nothing(site):
    spool, cfg = site
    old = make_job(spool, "990000011", 30 * DAY)
    r = gc(cfg, path="/nonexistent")  # no squeue: cannot tell what runs
    assert r.returncode == 1
    assert "cannot tell which jobs are still running" in r.stderr
    assert "squeue: command not found" in r.stderr and "nothing removed" in r.stderr
    assert old.exists()


def test_second_gc_waits_for_none_and_removes_nothing(cluster, site):
    spool, cfg = site
    old = make_job(spool, "990000021", 30 * DAY)
    with open(spool / ".gc.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        r = gc(cfg)
    assert r.returncode == 0 and "another gpualert gc holds" in r.stdout
    assert old.exists()
    assert gc(cfg).returncode == 0 and not old.exists()


def test_gc_max_total_removes_oldest_first(cluster, site):
    spool, cfg = site
    cfg.write_text(f"spool: {spool}\nretention: {{max_age: null, max_total: 1M, "
                   "min_age: 1h}\n")
    dirs = [make_job(spool, f"99000003{i}", (5 - i) * DAY, size=400_000) for i in range(4)]
    r = gc(cfg)
    assert r.returncode == 0, r.stderr
    # 4 x ~400 KB over a 1 MiB limit: the two oldest go.
    assert [d.exists() for d in dirs] == [False, False, True, True]
    assert r.stdout.index("removed 990000030 ") < r.stdout.index("removed 990000031 ")


def test_gc_refuses_a_spool_writable_by_others(site):
    spool, cfg = site
    make_job(spool, "990000041", 30 * DAY)
    spool.chmod(0o777)
    r = gc(cfg)
    assert r.returncode == 1 and "writable by group or others" in r.stderr
    assert (spool / "990000041").exists()


def test_gc_bad_config_says_what_to_fix(site):
    spool, cfg = site
    cfg.write_text(f"spool: {spool}\nretention: {{max_age: forever}}\n")
    r = gc(cfg)
    assert r.returncode == 2
    assert "retention.max_age: expected a duration like 30d or 12h, or null, got 'forever'" \
        in r.stderr
    assert "nothing removed" in r.stderr


def test_systemd_units_verify():
    units = [REPO / "etc" / "systemd" / f"gpualert-gc.{kind}" for kind in ("service", "timer")]
    r = subprocess.run(["systemd-analyze", "verify", *map(str, units)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    service = units[0].read_text()
    assert "ExecStart=/opt/gpualert/venv/bin/gpualert gc " in service
    assert "OnUnitActiveSec=1h" in units[1].read_text()


def test_min_interval_keeps_an_epilog_run_cheap(cluster, site):
    spool, cfg = site
    first = make_job(spool, "990000051", 30 * DAY)
    assert gc(cfg).returncode == 0 and not first.exists()
    second = make_job(spool, "990000052", 30 * DAY)
    r = gc(cfg, "--min-interval", "3600")  # the last pass was seconds ago: nothing to do
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "") and second.exists()
    os.utime(spool / ".gc.lock", (time.time() - 7200, time.time() - 7200))
    r = gc(cfg, "--min-interval", "3600")
    assert r.returncode == 0 and "removed 990000052 " in r.stdout and not second.exists()


def test_gc_removes_a_deep_tree_the_user_made(cluster, site):
    spool, cfg = site
    d = make_job(spool, "990000061", 30 * DAY)
    deep = d / "tasks" / "/".join(["d"] * 150)
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    age(d, 30 * DAY)
    r = gc(cfg, "-v")
    assert r.returncode == 0, r.stderr
    assert "removed 990000061 " in r.stdout and not d.exists()
    assert [p.name for p in spool.iterdir() if p.name.startswith(REMOVING_PREFIX)] == []


def test_epilog_pass_is_bounded_rate_limited_and_never_raises(cluster, site):
    from gpualert_slurm.commands.gc import epilog_pass
    from gpualert_slurm.core.config import load_config

    spool, cfg = site
    old = make_job(spool, "990000071", 30 * DAY)
    line = epilog_pass(load_config(str(cfg)), time_limit_s=20)
    assert line.startswith("gc: removed 1 (") and not old.exists()
    again = make_job(spool, "990000072", 30 * DAY)
    assert epilog_pass(load_config(str(cfg))) == "" and again.exists()  # ran < 1 h ago
    spool.chmod(0o777)  # a broken spool: a line for the log, no exception
    assert "writable by group or others" in epilog_pass(load_config(str(cfg)), min_interval_s=0)
