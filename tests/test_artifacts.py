"""The attachment budget: logs first (gzip, a huge one cut to head and tail), then artifacts
smallest first, read as the job's user in a child; every file left out is named with its size,
reason and where it stays. Real files, a real fork and a real privilege drop (run as root)."""

import gzip
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_prolog import USER

from gpualert_slurm.core.artifacts import Bundle, add_logs, bundle_for_job, run_forked


@dataclass
class Log:  # the fields add_logs uses of hooks.jobspool.TaskLog
    name: str
    step: str
    rank: int
    fd: int
    size: int
    path: str


def open_log(path: Path, step: str, rank: int) -> Log:
    fd = os.open(path, os.O_RDONLY)
    return Log(path.name, step, rank, fd, os.fstat(fd).st_size, str(path))


@pytest.fixture
def userdir(tmp_path):
    # the job's user must reach it: pytest's tmp dir is root's 0700
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="gpualert-art-"))
    top.chmod(0o755)
    os.chown(top, USER.pw_uid, USER.pw_gid)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def user_file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    os.chown(path, USER.pw_uid, USER.pw_gid)
    return path


def test_logs_first_then_artifacts_smallest_first(tmp_path, userdir):
    a = tmp_path / "0.0.log"
    a.write_text("rank 0 ok\n" * 100)
    b = tmp_path / "batch.0.log"
    b.write_text("batch says hi\n" * 10)
    logs = [open_log(a, "0", 0), open_log(b, "batch", 0)]
    for size, name in ((3000, "c.bin"), (1000, "a.bin"), (2000, "b.bin")):
        user_file(userdir / "out" / name, size)
    bundle = bundle_for_job(logs, 4096, USER.pw_uid, USER.pw_gid, str(userdir), ["out/*.bin"],
                            timeout_s=30)
    kinds = [(x["kind"], x["name"]) for x in bundle.attached]
    # batch log first, then the ranks; then a.bin (1000) and b.bin (2000) fit, c.bin does not
    assert kinds[:2] == [("log", "batch.0.log.gz"), ("log", "0.0.log.gz")]
    assert [n for k, n in kinds if k == "artifact"] == ["out/a.bin", "out/b.bin"]
    left = {x["name"]: x for x in bundle.left_out}
    assert set(left) == {"out/c.bin"}
    assert left["out/c.bin"]["size"] == 3000 and "over the budget" in left["out/c.bin"]["reason"]
    assert left["out/c.bin"]["where"] == str((userdir / "out" / "c.bin").resolve())
    assert bundle.used <= 4096 and bundle.used == sum(len(f.data) for f in bundle.files)
    assert gzip.decompress(bundle.files[0].data) == b.read_bytes()


def test_huge_log_cut_to_head_and_tail(tmp_path):
    p = tmp_path / "0.3.log"
    with open(p, "wb") as f:
        f.write(b"HEAD-LINE\n")
        f.write(os.urandom(3 << 20).hex().encode()[: 3 << 20])
        f.write(b"\nTAIL-LINE\n")
    bundle = Bundle(budget=2 << 20)
    add_logs(bundle, [open_log(p, "0", 3)])
    assert bundle.attached and "cut to its first and last" in bundle.attached[0]["note"]
    text = gzip.decompress(bundle.files[0].data)
    assert text.startswith(b"HEAD-LINE") and text.endswith(b"TAIL-LINE\n")
    assert f"the whole log is {p}".encode() in text


def test_log_over_the_budget_is_named_not_dropped(tmp_path):
    p = tmp_path / "0.0.log"
    p.write_bytes(os.urandom(300_000))  # incompressible
    bundle = Bundle(budget=100_000)
    add_logs(bundle, [open_log(p, "0", 0)])
    assert not bundle.attached
    (x,) = bundle.left_out
    assert x["size"] == 300_000 and x["where"] == str(p) and "over the budget" in x["reason"]


def test_glob_that_matches_nothing_is_said(userdir):
    b = bundle_for_job([], 10_000, USER.pw_uid, USER.pw_gid, str(userdir), ["ckpt/*.pt"], 30)
    assert b.left_out == [{"kind": "artifact", "name": "ckpt/*.pt", "size": None,
                           "where": str(userdir / "ckpt/*.pt"),
                           "reason": "the glob matched no file the job's user can see"}]


def test_child_runs_as_the_user_and_is_bounded():
    assert run_forked(os.getuid, 30, USER.pw_uid, USER.pw_gid) == USER.pw_uid
    assert run_forked(os.getgroups, 30, USER.pw_uid, USER.pw_gid) == [USER.pw_gid]
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        run_forked(lambda: time.sleep(30), 1.0)
    assert time.monotonic() - t0 < 5
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        run_forked(lambda: 1 / 0, 30)
