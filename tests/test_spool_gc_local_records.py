"""`gpualert gc` sweeps the node-local exit records (/run/gpualert, the plugin's `local=`) of
jobs whose node Epilog never ran: older than retention.local_max_age, never a running job's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clusterlib import cancel_quietly, submit, wait_state

from gpualert_slurm.commands.gc import plan_local, scan_local
from gpualert_slurm.core.config import ConfigError, RetentionConfig, parse_config

REPO = Path(__file__).resolve().parent.parent
DAY = 86400
NOW = 1_800_000_000.0


def test_local_max_age_config():
    assert RetentionConfig().local_max_age_s == 2 * DAY
    r = parse_config({"retention": {"local_max_age": "12h"}}, "x").retention
    assert r.local_max_age_s == 12 * 3600
    with pytest.raises(ConfigError, match="retention.local_max_age: expected a duration"):
        parse_config({"retention": {"local_max_age": None}}, "x")
    with pytest.raises(ConfigError, match="retention.local_max_age: expected a duration"):
        parse_config({"retention": {"local_max_age": "soon"}}, "x")


def _local(tmp_path: Path) -> Path:
    d = tmp_path / "run-gpualert"
    d.mkdir(mode=0o700)
    return d


def _rec(d: Path, name: str, age_s: float) -> Path:
    p = d / name
    p.write_text('{"rank": 0}\n')
    t = time.time() - age_s
    os.utime(p, (t, t), follow_symlinks=False)
    return p


def test_plan_local_old_records_of_finished_jobs_go_running_ones_stay(tmp_path):
    d = _local(tmp_path)
    _rec(d, "71.0.batch.0.exit", 3 * DAY)           # finished, old: goes
    _rec(d, "72.1.0.3.exit", 3 * DAY)               # still in Slurm: stays
    _rec(d, "73.0.0.0.exit", 3600)                  # young: its node Epilog may still come
    _rec(d, ".74.0.0.1.exit.4242.tmp", 3 * DAY)     # a crashed slurmstepd's temp: goes
    _rec(d, "notes.txt", 30 * DAY)                  # not ours: never touched
    (d / "75.0.0.0.exit").symlink_to(tmp_path / "nowhere")  # not a plain file: not ours
    _rec(d, "76.0.start", 3 * DAY)                  # a Prolog's start no Epilog took: goes
    _rec(d, ".77.1.start.4242.0a1b2c3d.tmp", 3 * DAY)  # its writer's temp: goes
    _rec(d, "78.0.start.bak", 30 * DAY)             # not ours
    recs = scan_local(str(d))
    assert sorted(u.name for u in recs) == [".74.0.0.1.exit.4242.tmp",
                                           ".77.1.start.4242.0a1b2c3d.tmp", "71.0.batch.0.exit",
                                           "72.1.0.3.exit", "73.0.0.0.exit", "76.0.start"]
    ds = plan_local(recs, 2 * DAY, time.time(), active={72: "RUNNING"})
    why = {x.job.name: (x.remove, x.reason) for x in ds}
    assert why["71.0.batch.0.exit"][0] and "> local_max_age 2.0 d" in why["71.0.batch.0.exit"][1]
    assert why[".74.0.0.1.exit.4242.tmp"][0] and why["76.0.start"][0]
    assert why[".77.1.start.4242.0a1b2c3d.tmp"][0]
    assert why["72.1.0.3.exit"] == (False, "job still in Slurm (RUNNING)")
    assert why["73.0.0.0.exit"][0] is False and "younger than local_max_age" in \
        why["73.0.0.0.exit"][1]


def test_a_local_dir_others_can_write_is_refused(tmp_path):
    d = _local(tmp_path)
    d.chmod(0o733)
    with pytest.raises(OSError, match="not root's alone"):
        scan_local(str(d))


def gc(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "gpualert_slurm", "gc", *args],
                       capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    return r


def test_gc_sweeps_stale_local_records_but_not_a_running_jobs(cluster, workdir, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o755)
    cfg = tmp_path / "gpualert.yaml"
    cfg.write_text(f"spool: {spool}\nretention: {{max_age: 2d, min_age: 1h, "
                   "local_max_age: 1d}\n")
    d = _local(tmp_path)
    running = submit("#!/bin/bash\nsleep 120\n", "-o", "/dev/null", workdir=workdir)
    try:
        wait_state(running, "RUNNING", timeout=60)
        stale = _rec(d, "990000071.0.0.0.exit", 2 * DAY)
        mine = _rec(d, f"{running}.0.0.0.exit", 5 * DAY)  # looks old; Slurm still runs it
        young = _rec(d, "990000072.0.0.1.exit", 600)

        dry = gc("--config", str(cfg), "--local-dir", str(d), "--dry-run", "-v")
        assert dry.returncode == 0, dry.stderr
        assert "would remove local record 990000071.0.0.0.exit" in dry.stdout
        assert stale.exists()

        r = gc("--config", str(cfg), "--local-dir", str(d), "-v")
        assert r.returncode == 0, r.stderr + r.stdout
        assert not stale.exists() and mine.exists() and young.exists()
        assert f"keep local record {running}.0.0.0.exit" in r.stdout
        assert "job still in Slurm (RUNNING)" in r.stdout
        assert f"gc: local records in {d}: removed 1, kept 2" in r.stdout.splitlines()

        # --local-only: a compute node's sweep; the spool is not touched (not even needed)
        _rec(d, "990000073.0.0.0.exit", 2 * DAY)
        (spool / "990000074").mkdir(mode=0o700)
        old = time.time() - 9 * DAY
        os.utime(spool / "990000074", (old, old))  # past max_age: a spool pass would take it
        r = gc("--config", str(cfg), "--local-dir", str(d), "--local-only")
        assert r.returncode == 0, r.stderr + r.stdout
        assert not (d / "990000073.0.0.0.exit").exists() and mine.exists()
        assert (spool / "990000074").exists()
    finally:
        cancel_quietly(running)


def test_local_sweep_without_slurm_removes_nothing(tmp_path):
    cfg = tmp_path / "gpualert.yaml"
    cfg.write_text(f"spool: {tmp_path}\nretention: {{local_max_age: 1d}}\n")
    d = _local(tmp_path)
    stale = _rec(d, "990000081.0.0.0.exit", 9 * DAY)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": "/nonexistent"}
    r = subprocess.run([sys.executable, "-m", "gpualert_slurm", "gc", "--config", str(cfg),
                        "--local-dir", str(d), "--local-only"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 1
    assert "cannot tell which jobs are still running" in r.stderr
    assert stale.exists()
