"""A long range read Python first in pieces by forked children (scan.reading._range_pieces)
against one process reading it: the same events, line numbers, line order, counts and partial
reading, on logs that put what a piece boundary could break at the boundaries (a chunk of few
shapes beside one of many, repeated matched lines, CRLF, long lines, hex ids), with grep taking
over inside a piece, when a child fails, and when the time budget stops the first piece."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpualert_slurm.classify import scan
from gpualert_slurm.classify.rules import load_rules
from gpualert_slurm.classify.scan import grep as scan_grep
from gpualert_slurm.classify.scan import python as scan_python
from gpualert_slurm.classify.scan import reading as scan_reading

CHUNK = 64 << 10  # small chunks: a few MB of log are many chunks and several pieces
ERRORS = [
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
    b"RuntimeError: CUDA error: an illegal memory access was encountered\n",
    b"[rank3]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7) ran for 600012"
    b" milliseconds before timing out.\n",
    b"step 812 loss=nan grad_norm=nan\n",
    b"OSError: [Errno 28] No space left on device\n",
]


def _log(path: Path, rnd: random.Random, size: int, rich_from: float | None = None) -> Path:
    """Training output with errors, CRLF runs, long lines and hex ids scattered over it; from
    `rich_from` (a share of the file) on, lines of many shapes (grep's part of the range)."""
    out = bytearray()
    step = 0
    while len(out) < size:
        step += 1
        r = rnd.random()
        if rich_from is not None and len(out) > size * rich_from:
            word = "".join(rnd.choice("qwxzjvkm") for _ in range(rnd.randint(3, 12)))
            out += f"worker {word} {'abc' * rnd.randint(0, 9)} ready\n".encode()
        elif r < 0.002:
            out += rnd.choice(ERRORS)
        elif r < 0.0025:
            out += b"x" * rnd.randint(8 << 10, 40 << 10) + b" error at the end\n"  # > LINE_CAP
        elif r < 0.01:
            out += f"progress {step}%\r" .encode() * rnd.randint(1, 30) + b"\r\n"
        elif r < 0.02:
            out += (f"n1:{step}:{step} [0] NCCL INFO comm 0x{rnd.getrandbits(44):x} rank 0 "
                    f"busId {rnd.getrandbits(20):x}0 - Init COMPLETE\n").encode()
        else:
            out += (f"[2026-11-29 12:00:{step % 60:02d}] INFO train: step {step} "
                    f"loss={rnd.random() * 4:.4f} grad_norm={rnd.random():.3f}\n").encode()
    out += ERRORS[0]
    path.write_bytes(bytes(out))
    return path


def _sig(res: scan.ScanResult) -> tuple:
    return (res.lines, res.segments, res.bytes_read, res.partial, res.dropped, res.engine,
            [(e.line, e.order, e.rule.id, e.text, e.detail, e.task_label, e.rank_label,
              e.local_label, e.indented, e.ref_rank, e.ref_node) for e in res.events])


@pytest.fixture
def pieces(monkeypatch):
    """Small chunks and pieces; records the cuts of each range read in pieces."""
    for mod in (scan_python, scan_grep, scan_reading):
        monkeypatch.setattr(mod, "CHUNK", CHUNK)
    monkeypatch.setattr(scan_python, "SLOW_CHUNK_S", 3600.0)  # the same grid, loaded or not
    monkeypatch.setattr(scan_reading, "NATIVE_MIN", 0)
    monkeypatch.setattr(scan_grep, "SPLIT_MIN", 1 << 20)
    monkeypatch.setattr(scan_reading, "PYTHON_FIRST", True)
    cuts: list[list] = []
    real = scan_reading._range_pieces

    def spy(*a, **kw):
        cuts.append(a[-1])
        return real(*a, **kw)
    monkeypatch.setattr(scan_reading, "_range_pieces", spy)
    return cuts


def _scan(path: Path, parallel: bool, workers: int, monkeypatch, **kw) -> scan.ScanResult:
    monkeypatch.setattr(scan_reading, "PARALLEL", parallel)
    monkeypatch.setattr(scan_grep, "WORKERS", workers)
    kw.setdefault("budget_s", 3600.0)
    return scan.scan_file(str(path), load_rules(site=False), **kw)


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_pieces_read_what_one_process_reads(tmp_path, monkeypatch, pieces, workers):
    path = _log(tmp_path / "train.log", random.Random(workers), 6 << 20)
    one = _scan(path, False, workers, monkeypatch)
    assert not pieces
    cut = _scan(path, True, workers, monkeypatch)
    assert len(pieces) == 1 and pieces[0], pieces  # it was cut, not read whole
    assert {e.rule.cls for e in one.events} >= {"cuda_oom", "cuda_error", "disk_full"}
    assert one.engine == "python"
    assert _sig(cut) == _sig(one)


def test_a_repeated_matched_line_across_the_cuts(tmp_path, monkeypatch, pieces):
    # every line matches, each chunk keeps its first few and its last: which line is a chunk's
    # last depends on where its chunks begin, so a piece off the grid shows
    path = tmp_path / "train.log"
    path.write_bytes(b"".join(b"step %d loss=nan grad_norm=nan\n" % i for i in range(200_000)))
    one = _scan(path, False, 3, monkeypatch)
    cut = _scan(path, True, 3, monkeypatch)
    assert pieces and len(one.events) == 2 * scan.KEEP_EVENTS and one.dropped > 0  # merged too
    assert _sig(cut) == _sig(one)


def test_no_cut_inside_a_long_line(tmp_path, monkeypatch, pieces):
    # a grid line inside a line longer than LINE_CAP: one process would be skipping that line
    # there, so no piece may start near it; the other grid lines are cut
    ok = b"INFO train: step 1 loss=0.5\n" * (3 * CHUNK // 28)
    long_line = b"y" * (3 * scan.LINE_CAP) + b"\n"
    path = tmp_path / "train.log"
    path.write_bytes(ok[: 2 * CHUNK - scan.LINE_CAP - 5] + b"\n" + long_line + ok * 20)
    monkeypatch.setattr(scan_grep, "WORKERS", 3)
    monkeypatch.setattr(scan_grep, "SPLIT_MIN", 1)
    size = path.stat().st_size
    with path.open("rb") as f:
        cuts = scan_reading._pieces(f, None)
    grids = [size * k // 3 // CHUNK * CHUNK for k in (1, 2)]
    assert [g - lead for g, (_, lead) in zip(grids, cuts, strict=False)] == [at for at, _ in cuts]
    for at, lead in cuts:
        assert 0 < lead <= scan.LINE_CAP and path.read_bytes()[at - 1 : at] == b"\n"
    with path.open("rb") as f:  # the long line across the first grid line: not cut there
        f.seek(0)
        monkeypatch.setattr(scan_grep, "WORKERS", 2)
        size2 = 4 * CHUNK
        assert scan_reading._pieces(f, size2) == []  # its grid line 2 * CHUNK is in the line
    one = _scan(path, False, 3, monkeypatch)
    cut = _scan(path, True, 3, monkeypatch)
    assert pieces and _sig(cut) == _sig(one)


def test_grep_takes_over_inside_a_piece(tmp_path, monkeypatch, pieces):
    # the last third is lines of many shapes: the last piece hands it to its own grep
    path = _log(tmp_path / "train.log", random.Random(7), 6 << 20, rich_from=0.7)
    one = _scan(path, False, 3, monkeypatch)
    cut = _scan(path, True, 3, monkeypatch)
    assert pieces and one.engine == "grep" and cut.engine == "grep"
    assert _sig(cut) == _sig(one)


def test_no_pieces_where_grep_reads_from_the_start(tmp_path, monkeypatch, pieces):
    # the first chunk already holds many shapes: grep reads the range, in pieces of its own
    path = _log(tmp_path / "train.log", random.Random(8), 4 << 20, rich_from=0.0)
    res = _scan(path, True, 2, monkeypatch)
    assert not pieces and res.engine == "grep"


def test_a_failed_child_s_piece_is_read_by_the_parent(tmp_path, monkeypatch, pieces):
    path = _log(tmp_path / "train.log", random.Random(9), 6 << 20)
    one = _scan(path, False, 3, monkeypatch)

    def broken(*a, **kw):  # runs in the child only
        raise MemoryError("a child that could not read its piece")
    monkeypatch.setattr(scan_reading, "_read_piece", broken)
    cut = _scan(path, True, 3, monkeypatch)
    assert pieces
    assert _sig(cut) == _sig(one)


def test_no_pieces_when_the_budget_would_stop_them(tmp_path, monkeypatch, pieces):
    # the first chunk's speed says the pieces would not end in time: the others would read in
    # vain (their results dropped), so the range is read in one process
    path = _log(tmp_path / "train.log", random.Random(10), 6 << 20)
    res = _scan(path, True, 3, monkeypatch, budget_s=0.05)
    assert not pieces and res.partial
    _scan(path, True, 3, monkeypatch)
    assert pieces  # the same log with time enough: cut


def test_a_budget_that_stops_the_first_piece_drops_the_others(tmp_path, monkeypatch, pieces):
    # when the budget stops the first piece all the same (a machine slower than its first
    # chunk said): one stretch from the start, then the file's end, as in one process
    path = _log(tmp_path / "train.log", random.Random(10), 6 << 20)
    real = scan_reading._pieces
    monkeypatch.setattr(scan_reading, "_pieces", lambda f, limit, *a: real(f, limit))
    one = _scan(path, False, 3, monkeypatch, budget_s=1e-9)
    cut = _scan(path, True, 3, monkeypatch, budget_s=1e-9)
    assert pieces and one.partial and "the middle was skipped" in one.partial
    assert _sig(cut) == _sig(one)


def test_a_piece_s_child_ends_with_its_parent(tmp_path):
    # a hook's watchdog kills its classifier; the pieces' children must not outlive it
    import os
    import signal
    import subprocess
    import sys
    import time

    path = _log(tmp_path / "train.log", random.Random(3), 6 << 20)  # cut in two pieces
    pids = tmp_path / "child.pid"
    code = f"""
import os, time
from gpualert_slurm.classify import scan
from gpualert_slurm.classify.rules import load_rules
from gpualert_slurm.classify.scan import grep, python, reading
for m in (python, grep, reading):
    m.CHUNK = {CHUNK}
reading.NATIVE_MIN, grep.SPLIT_MIN, grep.WORKERS = 0, 1 << 20, 2
def stuck(*a, **kw):
    with open({str(pids)!r} + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename({str(pids)!r} + ".tmp", {str(pids)!r})
    time.sleep(120)
reading._read_piece = stuck
scan.scan_file({str(path)!r}, load_rules(site=False), budget_s=3600.0)
"""
    repo = Path(__file__).resolve().parent.parent
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=repo,
                              env=dict(os.environ, PYTHONPATH=str(repo)))
    try:
        for _ in range(600):
            if pids.exists() or parent.poll() is not None:
                break
            time.sleep(0.05)
        assert pids.exists(), "the scan was not read in pieces"
        child = int(pids.read_text())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        for _ in range(100):
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            if Path(f"/proc/{child}/stat").read_text().split(") ")[1][0] == "Z":
                break  # dead, waiting for init to reap it
            time.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the piece's child outlived its parent by 5 s")
    finally:
        if parent.poll() is None:
            parent.kill()
