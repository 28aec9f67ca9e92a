"""The grep path of the scanner (scan.grep._scan_range_native) against the Python path: the
same events, line numbers, line order, line and segment counts, on crafted logs that stress each
part (lines holding only gate words, short unique lines, CRLF, progress bars, NUL and binary
bytes, long lines, case, markup, Windows paths, repeated lines, partial reading), and the
fallback to Python when grep cannot be used."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from gpualert_slurm.classify import scan
from gpualert_slurm.classify.rules import load_rules
from gpualert_slurm.classify.scan import grep as scan_grep
from gpualert_slurm.classify.scan import python as scan_python
from gpualert_slurm.classify.scan import reading as scan_reading

FIX = Path(__file__).parent / "fixtures" / "classify"
GATES = ["error", "timeout", "nccl", "memory", "failed", "abort", "denied", "exhausted",
         "cancelled", "quota", "warning", "fault", "interrupt", "oom", "xid", "nan"]
OOM_TB = (b'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
          b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")


@pytest.fixture(autouse=True)
def _grep_only(monkeypatch):
    """NATIVE on means grep from a range's start here (the grep path under test); the
    Python-first path (scan.PYTHON_FIRST, the default) is compared in _both."""
    monkeypatch.setattr(scan_reading, "PYTHON_FIRST", False)


def _sig(res: scan.ScanResult) -> tuple:
    return (res.lines, res.segments, res.bytes_read, res.partial, res.dropped,
            [(e.line, e.order, e.rule.id, e.text, e.detail, e.task_label, e.rank_label,
              e.local_label) for e in res.events])


def _both(monkeypatch, path: Path, **kw) -> scan.ScanResult:
    """Scan with Python, then with one grep, then with two and three greps (each range cut in
    pieces at line ends); assert the same result; return grep's."""
    rules = load_rules(site=False)
    # engines are compared, not the time budget: on a loaded machine (load 8 on 2 cores) the
    # Python path ran past the budget's head share and read the file partially, grep did not
    kw.setdefault("budget_s", 3600.0)
    # nor the chunk size: a chunk slower than SLOW_CHUNK_S (a loaded machine) halves the next,
    # and a repeated line is matched a few times per chunk, so the grids must be the same
    monkeypatch.setattr(scan_python, "SLOW_CHUNK_S", 3600.0)
    monkeypatch.setattr(scan_reading, "NATIVE_MIN", 0)
    monkeypatch.setattr(scan_reading, "NATIVE", False)
    py = scan.scan_file(str(path), rules, **kw)
    assert py.engine == "python"
    monkeypatch.setattr(scan_reading, "NATIVE", True)
    monkeypatch.setattr(scan_grep, "WORKERS", 1)
    gr = scan.scan_file(str(path), rules, **kw)
    assert gr.engine == "grep", gr.engine
    assert _sig(gr) == _sig(py)
    monkeypatch.setattr(scan_grep, "SPLIT_MIN", 0)
    for workers in (2, 3):
        monkeypatch.setattr(scan_grep, "WORKERS", workers)
        cut = scan.scan_file(str(path), rules, **kw)
        assert cut.engine == "grep", cut.engine
        assert _sig(cut) == _sig(py), workers
    # Python first, handing over to grep at the first chunk (0 shapes), at none (the shapes
    # bound out of reach), and where the log's own lines make it (the shipped bound)
    monkeypatch.setattr(scan_reading, "PYTHON_FIRST", True)
    for shapes in (0, 1 << 30, scan.HANDOVER_SHAPES):
        monkeypatch.setattr(scan_python, "HANDOVER_SHAPES", shapes)
        hy = scan.scan_file(str(path), rules, **kw)
        assert hy.engine == ("grep" if shapes == 0 else hy.engine), hy.engine
        assert _sig(hy) == _sig(py), shapes
    monkeypatch.setattr(scan_reading, "PYTHON_FIRST", False)
    return gr


def _gated(n: int, rnd: random.Random, letters: bool = False) -> bytes:
    """Lines holding gate words, each with a random id: hex (one line shape once hex ids are
    marked, lines.hex_keys) or, `letters`, of letters that are no hex digits (a shape each)."""
    out = b"".join(b"step %d worker %d %s rate 0.%02d %s %d nccl id=%x\n" % (
        i % 997, i % 89, GATES[i % 16].encode(), i % 97, GATES[i * 7 % 16].encode(), i % 60,
        rnd.getrandbits(40)) for i in range(n))
    if letters:
        table = bytes.maketrans(b"0123456789abcdef", b"ghijklmnopqrstuv")
        out = b"\n".join(line[:line.index(b"id=") + 3] + line[line.index(b"id=") + 3:]
                         .translate(table) if line else line for line in out.split(b"\n"))
    return out


def test_lines_holding_only_gate_words(tmp_path, monkeypatch):
    rnd = random.Random(1)
    log = tmp_path / "gated.log"
    log.write_bytes(_gated(60_000, rnd) + b"[rank1]: NCCL WARN Timeout waiting\n" * 10
                    + _gated(20_000, rnd) + OOM_TB)
    res = _both(monkeypatch, log)
    assert res.events[-1].rule.cls == "cuda_oom" and res.events[-1].line == res.lines
    assert res.lines == 80_013


def test_short_unique_lines(tmp_path, monkeypatch):
    rnd = random.Random(2)
    abc = b"abcdefghijklmnopqrstuvwxyz0123456789"
    log = tmp_path / "short.log"
    log.write_bytes(b"".join(bytes(rnd.choice(abc) for _ in range(19)) + b"\n"
                             for _ in range(40_000)) + OOM_TB)
    res = _both(monkeypatch, log)
    assert [e.line for e in res.events][-1] == 40_003


def test_crlf_and_progress_bars(tmp_path, monkeypatch):
    log = tmp_path / "crlf.log"
    log.write_bytes(b"a line\r\n" * 50_000 + b"ModuleNotFoundError: No module named 'x'\r\n"
                    + OOM_TB.replace(b"\n", b"\r\n"))
    res = _both(monkeypatch, log)
    assert res.events[0].line == 50_001 and res.segments == 2 * res.lines
    bar = "".join(f"\r{i}%|{'#' * (i // 5)}| {i}/100" for i in range(100)) * 500
    log = tmp_path / "tqdm.log"
    log.write_text("start\n" + bar + "\rFileNotFoundError: [Errno 2] No such file: 'x'\n" + bar
                   + "\n done\rRuntimeError: CUDA error: an illegal memory access\r\n")
    res = _both(monkeypatch, log)
    assert [(e.line, e.rule.cls) for e in res.events] == [(2, "file_not_found"),
                                                          (4, "cuda_error")]


def test_nul_and_binary_bytes(tmp_path, monkeypatch):
    log = tmp_path / "bin.log"
    log.write_bytes(os.urandom(2_000_000) + b"\n\xff\xfeRuntimeError: CUDA out of memory.\x00"
                    b"\xff\n" + os.urandom(50_000) + b"\nerror\x00\nValueError: bad\x00 x\n")
    res = _both(monkeypatch, log)
    assert "cuda_oom" in [e.rule.cls for e in res.events]


def test_long_lines_are_matched_on_their_first_line_cap_bytes(tmp_path, monkeypatch):
    log = tmp_path / "long.log"
    with open(log, "wb") as f:
        f.write(b"step 1\nModuleNotFoundError: No module named 'y' ")
        for _ in range(24):  # a 24 MiB line: grep is fed its first LINE_CAP bytes only
            f.write(b"x" * (1 << 20))
        f.write(b"\n" + b"y" * (scan.LINE_CAP + 10) + b" CUDA out of memory\n")
        f.write(b"z" * 5000 + b"\rKeyError: 'k'\n")
    res = _both(monkeypatch, log)
    assert [(e.line, e.rule.cls) for e in res.events][0] == (2, "import_error")
    assert res.lines == 4 and res.bytes_read == log.stat().st_size


def test_case_markup_paths_and_line_ends(tmp_path, monkeypatch):
    log = tmp_path / "case.log"
    log.write_bytes(
        b"x\n" * 1000 + b"CUDA OUT OF MEMORY\nmodulenotfounderror: NO MODULE NAMED 'z'\n"
        b"OSError: [Errno 28] No space left on device\n"
        b"PermissionError: [Errno 13] Permission denied: 'C:\\data\\x'\n"
        b"\x1b[31mRuntimeError: CUDA out of mem\x1b[0mory\x1b[0m\n"
        b"**RuntimeError**: `CUDA out of memory`\nKeyError: 'x'   \nsome Exception\n"
        b"[rank3]: torch.OutOfMemoryError: CUDA out of memory.\n"
        b"ValueError: no newline at the end")
    res = _both(monkeypatch, log)
    classes = [e.rule.cls for e in res.events]
    assert {"cuda_oom", "disk_full", "permission_denied"} <= set(classes)
    assert res.events[-1].line == res.lines == 1010
    assert any(e.rank_label == 3 for e in res.events)


def test_repeated_lines_keep_first_and_last_per_chunk(tmp_path, monkeypatch):
    log = tmp_path / "nan.log"
    log.write_bytes(b"".join(b"step %d loss=0.%02d\n" % (i, i % 97) for i in range(100_000))
                    + b"".join(b"step %d loss=nan\n" % i for i in range(100_000, 200_000)))
    res = _both(monkeypatch, log)
    lines = [e.line for e in res.events]
    assert lines[0] == 100_001 and lines[-1] == 200_000 and len(lines) < 50
    # mostly distinct lines around a repeated matched line: the same rule as the dedup path
    rnd = random.Random(4)
    ids = b"".join(b"sample %x path=/d/%x.bin\n" % (rnd.getrandbits(64), rnd.getrandbits(40))
                   for _ in range(30_000))
    log = tmp_path / "mix.log"
    log.write_bytes(ids + b"NCCL WARN Call to ibv_reg_mr failed\n" * 12 + ids + OOM_TB)
    _both(monkeypatch, log)


def test_partial_reading_is_the_same(tmp_path, monkeypatch):
    log = tmp_path / "big.log"
    with open(log, "wb") as f:
        f.write(b"ModuleNotFoundError: No module named 'early'\n")
        f.write(b"step 123 loss=0.5\r\n" * 400_000)
        f.write(b"torch.OutOfMemoryError: CUDA out of memory.\n")
    res = _both(monkeypatch, log, head_bytes=1 << 20, tail_bytes=1 << 20)
    assert "skipped" in res.partial
    assert [e.rule.cls for e in res.events] == ["import_error", "cuda_oom"]
    assert res.events[1].line is None


@pytest.mark.parametrize("workers", [1, 3])
def test_time_budget_is_a_bound_on_the_grep_path(tmp_path, monkeypatch, workers):
    monkeypatch.setattr(scan_reading, "NATIVE_MIN", 0)
    monkeypatch.setattr(scan_grep, "WORKERS", workers)
    monkeypatch.setattr(scan_grep, "SPLIT_MIN", 0)  # three greps: the pieces after the 1st dropped
    log = tmp_path / "slow.log"
    log.write_bytes(b"ModuleNotFoundError: No module named 'early'\n"
                    + _gated(200_000, random.Random(3)) + OOM_TB)
    res = scan.scan_file(str(log), load_rules(site=False), tail_bytes=1 << 20, budget_s=0.0)
    assert res.engine == "grep"
    assert res.partial and "time budget" in res.partial and "skipped" in res.partial
    assert res.bytes_read < log.stat().st_size
    assert [e.rule.cls for e in res.events][0] == "import_error"
    assert res.events[-1].rule.cls == "cuda_oom"


def test_fixture_logs_are_the_same(monkeypatch):
    for log in sorted(FIX.glob("*.log")):
        _both(monkeypatch, log)


@pytest.mark.parametrize("grep", ["/nonexistent/grep", "false"])
def test_without_a_working_grep_the_python_path_says_so(tmp_path, monkeypatch, grep):
    log = tmp_path / "x.log"
    log.write_bytes(b"step 1\n" * 1000 + OOM_TB)
    rules = load_rules(site=False)
    monkeypatch.setattr(scan_reading, "NATIVE_MIN", 0)
    want = _sig(scan.scan_file(str(log), rules))
    monkeypatch.setattr(scan_grep, "GREP", grep)
    res = scan.scan_file(str(log), rules)
    assert res.engine.startswith("python (grep failed:"), res.engine
    assert _sig(res) == want


def test_grep_lets_through_every_line_a_rule_matches(tmp_path):
    """Over the fixture logs and crafted lines, grep (with the patterns the scanner gives it)
    prints every line on which some rule pattern matches, after cleaning and prefix removal."""
    rules = load_rules(site=False).scanned("log")
    lines = [ln for f in sorted(FIX.glob("*.log")) for ln in f.read_bytes().splitlines()]
    lines += [b"[rank3]: torch.OutOfMemoryError: CUDA out of memory.",
              b"OSError: [Errno 28] No space left on device",
              b"PermissionError: [Errno 13] Permission denied: 'C:\\x\\y'",
              b"2026-11-29 12:00:01,123 - loss = nan", b"\x1b[31mKeyError\x1b[0m: 'k'"]
    want = []
    for raw in lines:
        body = scan.line_view(raw.decode("utf-8", "replace").rstrip()).body.lstrip()
        if any(p.search(body) for r in rules for p in r.patterns):
            want.append(raw)
    assert len(want) > 50
    src = tmp_path / "lines.log"
    src.write_bytes(b"\n".join(lines) + b"\n")
    cmd = [scan.GREP, *scan.GREP_MATCH]
    for p in scan.grep_patterns(rules):
        cmd += ["-e", p]
    out = subprocess.run([*cmd, str(src)], capture_output=True, env=dict(os.environ, LC_ALL="C"),
                         check=True).stdout.splitlines()
    missed = [w for w in want if w not in set(out)]
    assert not missed, missed[:5]


def test_grep_lets_through_no_line_of_mere_gate_words(tmp_path):
    """A rule whose grep literal is a common word ("abort" of work_stopped did, in a log where
    every line holds a gate word) sends every such line to Python's regexes: the gated
    benchmark fell from ~450 to 13 MB/s. The shipped rules' EREs must admit none of them."""
    log = tmp_path / "gated.log"
    log.write_bytes(_gated(40_000, random.Random(3)))
    pats = scan.grep_patterns(load_rules(site=False, use_cache=False).rules)
    argv = [scan.GREP.encode(), b"-a", b"-E"] + [a for p in pats for a in (b"-e", p)]
    out = subprocess.run([*argv, str(log).encode()], capture_output=True,
                         env=dict(os.environ, LC_ALL="C")).stdout
    admitted = out.splitlines()
    assert len(admitted) <= 40, (len(admitted), admitted[:5])


def test_a_newline_in_a_rule_pattern_goes_to_grep_as_any_byte(tmp_path, monkeypatch):
    """A rule's [^\\n], [\\n ] or \\n cannot go to grep as written: a pattern holding a newline
    is two patterns to grep, "...[^" alone is invalid, grep fails, and every log of 1 MiB or
    more was scanned in Python. grep's lines hold no newline: such an item is read as any byte
    (or left out of a class); the events stay Python's."""
    site = tmp_path / "site.yaml"
    site.write_text("rules:\n  - id: zq_alloc\n    class: cuda_oom\n    patterns: ["
                    r"'zqalloc\w*[^\n]{0,80}?\bout of memory\b', 'zqpool[\n ]exhausted',"
                    r" 'zqarena [^\n ]+ failed'" "]\n")
    rules = load_rules(extra_files=[site], use_cache=False, site=False)
    pats = scan.grep_patterns(rules.scanned("log"))
    assert [p for p in pats if b"zq" in p or b"arena" in p or b"exhausted" in p]
    assert not [p for p in pats if b"\n" in p]
    log = tmp_path / "alloc.log"
    log.write_bytes(b"".join(b"step %d loss=0.%04d\n" % (i, i) for i in range(60_000))
                    + b"zqallocAsync retry 3: out of memory\nzqpool exhausted\n"
                    + b"zqarena 0x7f failed\n" + OOM_TB)
    monkeypatch.setattr(scan_reading, "NATIVE_MIN", 0)
    monkeypatch.setattr(scan_reading, "NATIVE", False)
    py = scan.scan_file(str(log), rules)
    monkeypatch.setattr(scan_reading, "NATIVE", True)
    gr = scan.scan_file(str(log), rules)
    assert gr.engine == "grep", gr.engine
    assert [e.rule.id for e in gr.events].count("zq_alloc") == 3
    assert _sig(gr) == _sig(py)


def test_python_first_hands_over_to_grep_mid_file(tmp_path, monkeypatch):
    """Ordinary training output (a few line shapes per chunk) is read by Python's dedup, which
    is cheaper than grep's automaton; at the first chunk of many distinct shapes (an
    NCCL_DEBUG dump, ids) the rest of the range goes to grep, on the same chunk grid: the
    same events, line numbers and counts as either engine alone."""
    rnd = random.Random(5)
    progress = b"".join(b"[2026-11-29 12:00:%02d,%03d] INFO train: step %d loss=%.4f "
                        b"grad_norm=%.3f lr=3.0e-04\n" % (i % 60, i % 1000, i, rnd.random(),
                                                        rnd.random()) for i in range(70_000))
    log = tmp_path / "mixed.log"
    log.write_bytes(b"ModuleNotFoundError: No module named 'early'\n" + progress
                    + b"step 9 loss=nan\n" * 20 + _gated(60_000, rnd, letters=True)
                    + b"[rank1]: NCCL WARN Timeout waiting\n" * 5 + OOM_TB)
    assert log.stat().st_size > 3 * scan.CHUNK
    grids: list[int] = []
    native = scan.grep._scan_range_native

    def spy(*a, **kw):  # the real grep path; records where the handover put it
        grids.append(kw.get("grid", a[9] if len(a) > 9 else 0))
        return native(*a, **kw)

    res = _both(monkeypatch, log)
    monkeypatch.setattr(scan_reading, "_scan_range_native", spy)
    monkeypatch.setattr(scan_reading, "PYTHON_FIRST", True)
    monkeypatch.setattr(scan_reading, "NATIVE_MIN", 0)
    # one process (_both left WORKERS at 3: the range would be read in pieces, each piece's
    # handover in a child; tests/test_scan_pieces.py compares those)
    monkeypatch.setattr(scan_reading, "PARALLEL", False)
    hy = scan.scan_file(str(log), load_rules(site=False), budget_s=3600.0)
    assert hy.engine == "grep" and len(grids) == 1
    assert grids[0] >= scan.CHUNK and grids[0] % scan.CHUNK != 0  # mid-file, at a line start
    assert _sig(hy) == _sig(res)
    classes = [e.rule.cls for e in res.events]
    assert classes[0] == "import_error" and classes[-1] == "cuda_oom"
    assert res.events[-1].line == res.lines


def test_python_first_keeps_a_shape_quiet_beside_a_rule_reading_digits(tmp_path, monkeypatch):
    """A rule whose pattern reads digit values ("nan(0x7ff...)") and whose literal is a word of
    every progress line ("loss") made each such line cannot-be-quiet, so every one was matched
    in Python (169,000 regex runs on the benchmark's 256 MiB log: 0.4 -> 12 CPU-s). The shape
    is quiet when the patterns made blind to digit values find nothing in it; a shape one of
    them can match (Errno 28 among Errno 13) is still matched line by line."""
    site = tmp_path / "site.yaml"
    site.write_text("rules:\n  - id: zq_loss_nan_hex\n    class: nan_divergence\n"
                    "    patterns: ['(?i)\\bloss=\\s*-?nan\\((?:0x[0-9a-f]+|ind)\\)']\n")
    rules = load_rules(extra_files=[site], use_cache=False, site=False)
    m = scan._Matcher(rules, "log")
    line = b"[2026-11-29 12:00:01,123] INFO train: step 812 loss=0.5123 lr=3.0e-04"
    shape = line.translate(scan.NORM)
    assert not m.can_be_quiet(shape) and m.can_be_quiet(shape, line)
    hit = b"step 3 loss=nan(0x7ff8)"
    assert not m.can_be_quiet(hit.translate(scan.NORM), b"step 3 loss=nan(1x7ff8)")
    errno = b"OSError: [Errno 13] Permission denied: 'x'"
    assert not m.can_be_quiet(errno.translate(scan.NORM), errno)  # Errno 28 is that shape
    log = tmp_path / "loss.log"
    log.write_bytes(b"".join(b"%s step %d loss=0.%04d\n" % (line[:25], i, i % 9999)
                             for i in range(60_000))
                    + b"step 60001 loss=nan(0x7ff8)\n" + OOM_TB)
    monkeypatch.setattr(scan_reading, "NATIVE_MIN", 0)
    monkeypatch.setattr(scan_reading, "NATIVE", False)
    calls = 0
    match = scan._Matcher.match

    def counted(self, raw):
        nonlocal calls
        calls += 1
        return match(self, raw)

    monkeypatch.setattr(scan._Matcher, "match", counted)
    py = scan.scan_file(str(log), rules, budget_s=3600.0)
    assert calls < 100, calls
    assert [(e.line, e.rule.cls) for e in py.events][:1] == [(60_001, "nan_divergence")]
    monkeypatch.setattr(scan._Matcher, "match", match)
    monkeypatch.setattr(scan_reading, "NATIVE", True)
    assert _sig(scan.scan_file(str(log), rules, budget_s=3600.0)) == _sig(py)


@pytest.mark.parametrize("pattern,reads,yes,no", [
    (r"Errno 28\b", True, ["Errno 13", "Errno 28"], ["Errno x"]),
    (r"(?i)nan\((?:ind|0x[0-9a-f]*)\)", True, ["NaN(0x7f)", "nan(1x7f)", "nan(ind)"],
     ["nan(x)"]),
    (r"[1-6] failed(?!\d)", True, ["0 failed3", "9 failed"], ["x failed"]),
    (r"(?<=rank )[0-3]: (\d+) == \1", True, ["rank 7: 12 == 34"], ["rank x: 1 == 1"]),
    (r"code (?P<c>[^5])", True, ["code 5", "code x"], ["code"]),
    (r"(?i)step \d{3,}\s+loss=[-+]?nan\b(?!\w)", False, ["STEP 123 loss=nan"],
     ["step 12 loss=nan", "step 123 loss=nanx"]),
    (r"(?i)^(?!.*[=:]\s*[-+]?(?:nan|inf)\b).*\bno nan\b", False, ["no nan", "x=nan no nan"],
     ["nonan"]),
])
def test_digit_blind_patterns_match_every_digit_variant(pattern, reads, yes, no):
    """_digit_blind: a regex matching what the pattern matches and every text differing from
    such a text only in its digits' values; and whether the pattern reads digit values (one
    that does not matches all digit variants of a text or none)."""
    got = scan._digit_blind(pattern)
    assert got is not None
    rx, dep = got
    assert dep == reads
    assert all(rx.search(t) for t in yes) and not any(rx.search(t) for t in no)


def test_python_first_hands_over_to_a_failing_grep_and_says_so(tmp_path, monkeypatch):
    """The handover's grep cannot run: the range is read on in Python from where it stopped,
    engine says why, and the events are Python's."""
    log = tmp_path / "ids.log"
    log.write_bytes(b"step 1 loss=0.5\n" * 50_000 + _gated(40_000, random.Random(6), letters=True)
                    + OOM_TB)
    rules = load_rules(site=False)
    monkeypatch.setattr(scan_reading, "NATIVE_MIN", 0)
    monkeypatch.setattr(scan_reading, "NATIVE", False)
    want = _sig(scan.scan_file(str(log), rules, budget_s=3600.0))
    monkeypatch.setattr(scan_reading, "NATIVE", True)
    monkeypatch.setattr(scan_reading, "PYTHON_FIRST", True)
    monkeypatch.setattr(scan_grep, "GREP", "false")
    res = scan.scan_file(str(log), rules, budget_s=3600.0)
    assert res.engine.startswith("python (grep failed:"), res.engine
    assert _sig(res) == want


def _nccl_info(n: int, rnd: random.Random) -> bytes:
    """NCCL_DEBUG=INFO's set-up lines as a 16-rank job prints them: each with its own comm
    address and bus id (hex), so no two lines have one digit shape."""
    out = []
    for i in range(n):
        head = b"gpu%03d:%d:%d [%d] NCCL INFO " % (i % 4, 2000 + i % 7, 2100 + i % 5, i % 8)
        comm, bus = rnd.getrandbits(44) | 1 << 40, rnd.getrandbits(16) << 4 | 1 << 20
        if i % 2:
            out.append(head + b"comm 0x%x rank %d nranks 16 cudaDev %d busId %x - Init "
                       b"COMPLETE\n" % (comm, i % 16, i % 8, bus))
        else:
            out.append(head + b"Connected all rings, comm 0x%x nRanks 16 busId %x localRanks 8"
                       b"\n" % (comm, bus))
    return b"".join(out)


def test_lines_differing_in_hex_ids_are_one_shape(tmp_path, monkeypatch):
    """NCCL's set-up lines differ only in hex ids (lines.hex_keys marks them): the rules cannot
    tell them apart (hex_uniform), so they are matched as one shape - a few per chunk, not each
    one - by Python, by grep and after a handover alike; the crash at the end decides."""
    log = tmp_path / "nccl.log"
    log.write_bytes(_nccl_info(40_000, random.Random(8)) + OOM_TB)
    assert log.stat().st_size > 2 * scan.CHUNK
    res = _both(monkeypatch, log)
    setup = [e for e in res.events if e.rule.id == "collective_setup"]
    # 3 + the last of each key a chunk (a few keys: ids of other lengths, bus ids of digits
    # only), not one event a line (40,000, all but KEEP_EVENTS at each end dropped)
    assert 0 < len(setup) <= 100 and res.dropped == 0
    assert res.events[-1].rule.cls == "cuda_oom" and res.events[-1].line == res.lines
    # the Python path reads it all (a few keys a chunk), no handover to grep
    monkeypatch.setattr(scan_reading, "PYTHON_FIRST", True)
    monkeypatch.setattr(scan_reading, "NATIVE_MIN", 0)
    assert scan.scan_file(str(log), load_rules(site=False), budget_s=3600.0).engine == "python"


def test_hex_ids_a_rule_reads_keep_their_lines_apart(tmp_path, monkeypatch):
    """'NCCL Error \\d' matches "NCCL Error 1b2c3d" but not "NCCL Error a1b2c3": lines of one
    hex key that a rule can tell apart are matched by their digit shapes, as before, so the
    matching ones are not lost behind a quiet first line."""
    rules = load_rules(site=False)
    m = scan._Matcher(rules, "log")
    yes, no = b"worker: NCCL Error 1b2c3d here", b"worker: NCCL Error a1b2c3 here"
    key = scan.hex_key(yes.translate(scan.NORM))
    assert key == scan.hex_key(no.translate(scan.NORM)) and not m.hex_uniform(key, no)
    ok = b"gpu0:1:1 [0] NCCL INFO comm 0x7f3a9c0e1b rank 3 nranks 16 - Init COMPLETE"
    assert m.hex_uniform(scan.hex_key(ok.translate(scan.NORM)), ok)
    log = tmp_path / "mixed.log"
    log.write_bytes(b"step 1 loss=0.5\n" * 30_000 + (no + b"\n") * 20 + (yes + b"\n") * 5
                    + b"step 1 loss=0.5\n" * 30_000)
    res = _both(monkeypatch, log)
    assert [e.rule.cls for e in res.events if e.text == yes.decode()] == ["nccl_error"] * 4
