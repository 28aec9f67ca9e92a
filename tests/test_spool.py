"""The spool layout and the careful file operations root code uses in users' directories."""

import contextlib
import json
import os
import stat

import pytest

from gpualert_slurm.core import spool, task_records
from gpualert_slurm.core.spool import SpoolError


def test_layout_paths():
    assert spool.job_dir("/s", 12) == "/s/12"
    assert spool.job_json("/s", "12") == "/s/12/job.json"
    assert spool.node_prolog_record("/s", 12, "n1") == "/s/12/nodes/n1.prolog.json"
    assert spool.task_log("/s", 12, "batch", 0) == "/s/12/tasks/batch.0.log"
    assert spool.exit_record("/s", 12, "3", 7) == "/s/12/tasks/3.7.exit"
    assert spool.hooks_log("/s") == "/s/gpualert-hooks.log"


@pytest.mark.parametrize("bad", ["../etc", "12/..", "", "12_3", "-1", "1" * 30])
def test_job_ids_are_digits_only(bad):
    with pytest.raises(SpoolError):
        spool.job_dir("/s", bad)


def test_names_cannot_escape():
    with pytest.raises(SpoolError):
        spool.task_log("/s", 1, "../x", 0)
    with pytest.raises(SpoolError):
        spool.node_prolog_record("/s", 1, "..")


@pytest.mark.parametrize("step,name", [(0xFFFFFFFB, "batch"), (0, "0"), (17, "17"),
                                       (0xFFFFFFFC, None), (0xFFFFFFFA, None), ("4294967291",
                                                                                "batch")])
def test_step_names(step, name):
    assert spool.step_name(step) == name


def test_write_atomic_replaces_a_planted_symlink_not_its_target(tmp_path):
    target = tmp_path / "target"
    target.write_text("precious")
    d = tmp_path / "d"
    d.mkdir()
    (d / "job.json").symlink_to(target)
    with spool.opened_dir(str(d)) as fd:
        spool.write_json_atomic(fd, "job.json", {"a": 1}, 0o640)
    assert target.read_text() == "precious"
    assert not (d / "job.json").is_symlink()
    assert json.loads((d / "job.json").read_text()) == {"a": 1}
    assert stat.S_IMODE((d / "job.json").stat().st_mode) == 0o640
    assert sorted(p.name for p in d.iterdir()) == ["job.json"]  # no temp file left


def test_open_dir_refuses_symlinks(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(SpoolError, match="not a directory"):
        spool.open_dir(str(tmp_path / "link"))


def test_reader_refuses_symlink_hardlink_fifo_oversize_and_foreign_owner(tmp_path):
    (tmp_path / "ok").write_text("{}")
    (tmp_path / "secret").write_text("root only")
    (tmp_path / "sym").symlink_to(tmp_path / "secret")
    os.link(tmp_path / "secret", tmp_path / "hard")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * 100)
    with spool.opened_dir(str(tmp_path)) as fd:
        assert spool.read_json_nofollow("ok", fd) == {}
        with pytest.raises(OSError):
            spool.read_bytes_nofollow("sym", fd)
        with pytest.raises(SpoolError, match="hard links"):
            spool.read_bytes_nofollow("hard", fd)
        with pytest.raises(SpoolError, match="not a regular file"):
            spool.read_bytes_nofollow("fifo", fd)
        with pytest.raises(SpoolError, match="more than 10"):
            spool.read_bytes_nofollow("big", fd, limit=10)
        with pytest.raises(SpoolError, match="owned by uid"):
            spool.read_bytes_nofollow("ok", fd, owners=(4242,))


def test_read_exit_records(tmp_path):
    t = tmp_path / "tasks"
    t.mkdir()
    (t / "batch.0.exit").write_text(json.dumps({"rank": 0, "exit_code": 3, "extra": "x"}))
    (t / "1.2.exit").write_text("{not json")
    (t / "1.3.log").write_text("log")
    (t / "1.4.exit").symlink_to(tmp_path / "elsewhere")
    recs = task_records.read_exit_records(str(tmp_path))
    assert list(recs) == ["batch.0.exit"]
    r = recs["batch.0.exit"]
    assert r["exit_code"] == 3 and r["signal"] is None and r["extra"] == "x"
    assert task_records.read_exit_records(str(tmp_path), owners=(4242,)) == {}


def test_create_job_dir_then_join(tmp_path):
    root = tmp_path / "spool"
    root.mkdir()
    root.chmod(0o755)
    a = spool.create_job_dir(str(root), 5, 65534, 65534, {"n": 1}, tag="n1")
    b = spool.create_job_dir(str(root), 5, 65534, 65534, {"n": 2}, tag="n2")
    try:
        assert a.created and not b.created
        assert json.loads((root / "5" / "job.json").read_text()) == {"n": 1}
        st = (root / "5").stat()
        assert st.st_uid == 65534 and stat.S_IMODE(st.st_mode) == 0o700
    finally:
        a.close()
        b.close()
    assert [p.name for p in root.iterdir()] == ["5"]


def test_existing_job_dir_without_subdirs_is_completed(tmp_path):
    # E.g. made by an older version: nodes/ and tasks/ are added, owned by the user.
    root = tmp_path / "spool"
    root.mkdir()
    root.chmod(0o755)
    (root / "6").mkdir(mode=0o700)
    os.chown(root / "6", 65534, 65534)
    jd = spool.create_job_dir(str(root), 6, 65534, 65534, {}, tag="n1")
    jd.close()
    assert not jd.created
    for sub in ("nodes", "tasks"):
        st = (root / "6" / sub).lstat()
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == 65534
        assert stat.S_IMODE(st.st_mode) == 0o700


def test_a_subdir_added_to_a_joined_job_dir_is_never_roots_under_its_name(tmp_path,
                                                                          monkeypatch):
    """A late Prolog joining a job dir the job already writes to: the job's copier (the user)
    may open tasks/ at any moment, so tasks/ must never be there under its name while root's
    (a mkdir then chown gave the copier EACCES: a task's log lost). Checked just before each
    ownership change: whatever is at tasks/ and nodes/ then is the user's already."""
    root = tmp_path / "spool"
    root.mkdir()
    root.chmod(0o755)
    (root / "9").mkdir(mode=0o700)
    os.chown(root / "9", 65534, 65534)
    seen = []
    real_fchown, real_chown = os.fchown, os.chown

    def note() -> None:
        for d in ("tasks", "nodes"):
            with contextlib.suppress(FileNotFoundError):
                seen.append((d, (root / "9" / d).lstat().st_uid))

    monkeypatch.setattr(os, "fchown", lambda *a, **k: (note(), real_fchown(*a, **k))[1])
    monkeypatch.setattr(os, "chown", lambda *a, **k: (note(), real_chown(*a, **k))[1])
    spool.create_job_dir(str(root), 9, 65534, 65534, {}, tag="n1").close()
    assert seen, "no ownership change seen with a subdir there"
    assert all(uid == 65534 for _, uid in seen), seen
    assert sorted(os.listdir(root / "9")) == ["nodes", "tasks"]
    assert all((root / "9" / d).stat().st_uid == 65534 for d in ("nodes", "tasks"))


def test_planted_subdir_symlink_is_refused(tmp_path):
    root = tmp_path / "spool"
    root.mkdir()
    root.chmod(0o755)
    jd = spool.create_job_dir(str(root), 7, 65534, 65534, {}, tag="n1")
    jd.close()
    (root / "7" / "nodes").rmdir()
    (root / "7" / "nodes").symlink_to("/etc")
    with pytest.raises(SpoolError, match="nodes: not a directory"):
        spool.create_job_dir(str(root), 7, 65534, 65534, {}, tag="n2")


def _spool_root(tmp_path):
    root = tmp_path / "spool"
    root.mkdir()
    root.chmod(0o755)
    return root


def test_attempt_dirs_for_a_requeued_job(tmp_path):
    root = _spool_root(tmp_path)
    spool.create_job_dir(str(root), 8, 65534, 65534, {"a": 0}, tag="n1").close()
    a = spool.create_job_dir(str(root), 8, 65534, 65534, {"a": 1}, tag="n1", attempt=1)
    b = spool.create_job_dir(str(root), 8, 65534, 65534, {"a": 1}, tag="n2", attempt=1)
    try:
        assert not a.created and a.attempt == 1 and a.attempt_path == str(root / "8" / "attempt-1")
        os.write(os.open("probe", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=b.nodes_fd), b"x")
    finally:
        a.close()
        b.close()
    att = root / "8" / "attempt-1"
    for d in (att, att / "nodes", att / "tasks"):
        st = d.lstat()
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == 65534 and stat.S_IMODE(st.st_mode) == 0o700
    assert (att / "nodes" / "probe").exists()
    assert sorted(p.name for p in (root / "8").iterdir()) == ["attempt-1", "job.json", "nodes",
                                                             "tasks"]
    assert spool.list_attempts(str(root / "8")) == [0, 1]
    assert spool.latest_attempt(str(root / "8")) == 1


def test_first_prolog_at_a_later_attempt_makes_only_that_attempt(tmp_path):
    # The job was not monitored (or its dir removed) before the requeue: no attempt-0 dirs.
    root = _spool_root(tmp_path)
    jd = spool.create_job_dir(str(root), 9, 65534, 65534, {"a": 2}, tag="n1", attempt=2)
    jd.close()
    assert jd.created
    assert sorted(p.name for p in (root / "9").iterdir()) == ["attempt-2", "job.json"]
    assert sorted(p.name for p in (root / "9" / "attempt-2").iterdir()) == ["nodes", "tasks"]
    assert spool.list_attempts(str(root / "9")) == [2]
    assert [p.name for p in root.iterdir()] == ["9"]


def test_concurrent_attempt_creation_on_many_nodes(tmp_path):
    # Forked processes race for the same attempt dir: one makes it, all end up in it.
    root = _spool_root(tmp_path)
    spool.create_job_dir(str(root), 10, 65534, 65534, {}, tag="n0").close()
    pids = []
    for i in range(8):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                jd = spool.create_job_dir(str(root), 10, 65534, 65534, {}, tag=f"n{i}",
                                          attempt=3)
                os.close(os.open(f"n{i}", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=jd.nodes_fd))
                jd.close()
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    assert [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids] == [0] * 8
    att = root / "10" / "attempt-3"
    assert sorted(p.name for p in (att / "nodes").iterdir()) == [f"n{i}" for i in range(8)]
    assert not [p for p in (root / "10").iterdir() if p.name.startswith(".tmp")]


@pytest.mark.parametrize("plant", ["symlink", "file", "foreign"])
def test_planted_attempt_dir_is_refused(tmp_path, plant):
    root = _spool_root(tmp_path)
    spool.create_job_dir(str(root), 11, 65534, 65534, {}, tag="n1").close()
    target = tmp_path / "victim"
    target.mkdir()
    p = root / "11" / "attempt-1"
    if plant == "symlink":
        p.symlink_to(target)
    elif plant == "file":
        p.write_text("x")
    else:
        p.mkdir(mode=0o700)
        os.chown(p, 4242, 4242)
    with pytest.raises(SpoolError, match="attempt-1"):
        spool.create_job_dir(str(root), 11, 65534, 65534, {}, tag="n1", attempt=1)
    assert list(target.iterdir()) == [] and target.stat().st_uid == 0


def test_bad_attempt_number():
    with pytest.raises(SpoolError, match="bad attempt"):
        spool.attempt_subdir(-1)
