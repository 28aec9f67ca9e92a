"""The grep pipeline: GNU grep finds the candidate lines of a range, Python matches them.

A file of at least reading.NATIVE_MIN bytes (1 MiB) is searched by GNU grep
(`LC_ALL=C grep -a -b -n -E`, fed through a pipe, see _scan_range_native): its patterns are the
rules' own regexes translated to EREs (ere.py), so grep prints only the lines a rule can match -
on a log where every line holds a common word ("error rate 0.01", NCCL_DEBUG=INFO's "NCCL")
almost none. Python then matches those lines with the rules (python._pick) and gets the same
events, line numbers and line order as its own path (tests/test_scan_native.py). grep's
automaton is what bounds the speed (some 250 MB/s a core over about 650 patterns on the
benchmark's training log, where half of the bytes can start one of them; `grep -c error`: about
1 GB/s): a range of at least SPLIT_MIN (32 MiB) is cut at line ends into up to WORKERS pieces
(one per CPU, at most 4), each searched by its own grep at the same time. When grep is missing
or fails, NativeError: the range is scanned in Python (reading._range).
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import os
import time

from gpualert_slurm.classify.scan.ere import grep_patterns
from gpualert_slurm.classify.scan.lines import LINE_CAP, NORM, _capped, _first_sep, _roll
from gpualert_slurm.classify.scan.python import CHUNK, Event, _group, _Matcher, _pick

# grep reads the range through a pipe that a feeder thread fills from the file, so the reading
# policy stays exact: the feeder stops at the byte limit or once past the deadline, then writes
# a sentinel line whose number gives the range's line count. CR becomes LF on the way: the
# scanner's segments are grep's lines, so grep -n numbers them as Event.order does, and no line
# grep buffers is longer than a block plus LINE_CAP (the rest of a longer segment is not fed).
# Lines holding what clean_text removes (escape codes, "**", "`") are always printed.

# a hook may run with a bare PATH: Debian's grep is /usr/bin/grep (/bin/grep, merged /usr)
def _which(name: str) -> str | None:
    """shutil.which(name) (shutil's import, with its compression modules, costs more than this
    lookup: every `gpualert classify` imports this module)."""
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(d or ".", name)
        if os.access(path, os.F_OK | os.X_OK) and not os.path.isdir(path):
            return path
    return None


GREP = os.environ.get("GPUALERT_SCAN_GREP") or _which("grep") or "/usr/bin/grep"
BLOCK = 1 << 20
GREP_MATCH = ("-a", "-E")  # case-sensitive: a rule that ignores case has [xX] classes
# grep's multi-pattern automaton bounds the speed (about 250 MB/s a core): a range of at least
# SPLIT_MIN bytes is cut in up to WORKERS pieces (at least SPLIT_MIN / 2 each), each searched
# by its own grep at the same time; at most 4, so a node's next job keeps its CPUs
_CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
WORKERS = min(4, int(os.environ.get("GPUALERT_SCAN_WORKERS", "0") or 0) or _CPUS)
SPLIT_MIN = int(os.environ.get("GPUALERT_SCAN_SPLIT_MIN", str(32 << 20)))


class NativeError(RuntimeError):
    """grep could not be used for a range; the caller scans it in Python."""



def _native_ok(matcher: _Matcher) -> list[bytes]:
    if matcher.native_patterns is False:
        matcher.native_patterns = grep_patterns(matcher.rules)
    return matcher.native_patterns


class _Feeder:
    """Thread: file bytes [pos, limit) -> grep's stdin, CR as LF, long segments cut at
    LINE_CAP; stops past the deadline (after at least one block), then the sentinel. It notes
    which blocks held CRs (line numbers count LF only), so the file is not read a second time
    to count them."""

    def __init__(self, f, pos: int, limit: int | None, deadline: float | None,
                 pipe, sentinel: bytes) -> None:
        self.f, self.pos, self.limit, self.deadline = f, pos, limit, deadline
        self.pipe, self.sentinel = pipe, sentinel
        self.read = 0  # bytes read from the file
        self.fed = 0  # bytes written to grep (without the sentinel)
        self.last = b"\n"  # the last byte fed
        self.skips: list[tuple[int, int]] = []  # (stream offset, file bytes not fed before it)
        self.crs = 0  # CRs in the bytes read
        # blocks holding a CR: offsets from pos (appended before the block is fed, so a reader
        # of grep's output finds the block of every line it gets) and (CRs before, CRs, length)
        self.cr_starts: list[int] = []
        self.cr_blocks: list[tuple[int, int, int]] = []
        self.error: BaseException | None = None
        import threading  # grep's modules: imported by the scans that use grep (>= 1 MiB)

        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self._feed()
        except BaseException as e:  # reported by the reader; grep gets EOF either way
            self.error = e
        finally:
            with contextlib.suppress(OSError):
                self.pipe.close()

    def _feed(self) -> None:
        since = 0  # bytes of the current segment fed so far
        cutting = False  # in a segment longer than LINE_CAP: skip to its end
        tail = b""  # the last LINE_CAP bytes skipped of that segment: fed at its end (_capped)
        skipped = 0
        write = self.pipe.write
        left = self.limit
        first = True
        while left is None or left > 0:
            if not first and self.deadline is not None and time.monotonic() > self.deadline:
                break
            first = False
            n = BLOCK if left is None else min(BLOCK, left)
            block = os.pread(self.f.fileno(), n, self.pos + self.read)
            if not block:
                break
            if b"\r" in block:
                k = block.count(b"\r")
                self.cr_blocks.append((self.crs, k, len(block)))
                self.cr_starts.append(self.read)
                self.crs += k
                block = block.replace(b"\r", b"\n")
            self.read += len(block)
            if left is not None:
                left -= len(block)
            first_sep = block.find(b"\n")
            head_len = len(block) if first_sep < 0 else first_sep
            if cutting or since + head_len > LINE_CAP:
                # the current segment is too long: feed up to LINE_CAP of it, skip the rest
                keep = max(0, LINE_CAP - since) if not cutting else 0
                if keep:
                    write(block[:keep])
                    self.fed += keep
                    self.last = block[keep - 1 : keep]
                if first_sep < 0:
                    tail = _roll(tail, block[keep:])
                    skipped += len(block) - keep
                    since, cutting = LINE_CAP, True
                    continue
                tail = _roll(tail, block[keep:first_sep])
                skipped += first_sep - keep
                self._feed_tail(write, tail, skipped)
                tail = b""
                cutting = False
                block = block[first_sep:]
            last_sep = block.rfind(b"\n")
            since = len(block) - last_sep - 1 if last_sep >= 0 else since + len(block)
            write(block)
            self.fed += len(block)
            self.last = block[-1:]
        if cutting:  # the range ends inside a long line: its end as far as read
            self._feed_tail(write, tail, skipped)
        write(b"\n" + self.sentinel + b"\n")

    def _feed_tail(self, write, tail: bytes, skipped: int) -> None:
        """Feed the end of a cut segment (the `tail` bytes just before where the segment was
        left, `skipped` counting them): what follows maps back past what was not fed."""
        self.skips.append((self.fed, skipped - len(tail)))
        if tail:
            write(tail)
            self.fed += len(tail)
            self.last = tail[-1:]

    def file_offset(self, stream: int) -> int:
        """Offset in the file (from self.pos) of a stream offset grep reports."""
        k = bisect.bisect_right(self.skips, (stream, 1 << 62))
        return stream + (self.skips[k - 1][1] if k else 0)


class _CrCount:
    """CRs before an offset of a feeder's range: those of the CR blocks before it, plus, inside
    a CR block, counted from the file (forward only, as grep's lines come in order). A log
    without CR costs one bisect per line."""

    def __init__(self, f, feeder: _Feeder) -> None:
        self.fd, self.fe = f.fileno(), feeder
        self.i = -1  # the CR block being counted in
        self.data = b""
        self.done = self.n = 0

    def before(self, off: int) -> int:
        fe = self.fe
        i = bisect.bisect_right(fe.cr_starts, off) - 1
        if i < 0:
            return 0
        cum, k, length = fe.cr_blocks[i]
        rel = off - fe.cr_starts[i]
        if rel >= length:
            return cum + k
        if i != self.i:
            self.i, self.done, self.n = i, 0, 0
            self.data = os.pread(self.fd, length, fe.pos + fe.cr_starts[i])
        if rel < self.done:
            self.done = self.n = 0
        self.n += self.data.count(b"\r", self.done, rel)
        self.done = rel
        return cum + self.n


class _Grep:
    """One grep over the file bytes [pos, pos + limit) (limit None: to the end of the file),
    fed by a _Feeder thread."""

    def __init__(self, f, pos: int, limit: int | None, deadline: float | None,
                 patterns: list[bytes]) -> None:
        self.sentinel = b"gpualert-scan-end-" + os.urandom(12).hex().encode()
        cmd = [GREP, *GREP_MATCH, "-b", "-n"]
        for p in [*patterns, self.sentinel]:
            cmd += ["-e", p]
        import subprocess

        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=dict(os.environ, LC_ALL="C"),
                                         bufsize=1 << 16)
        except OSError as e:
            raise NativeError(f"{GREP} cannot be run: {e}") from None
        with contextlib.suppress(OSError, AttributeError):  # fewer switches: feeder and grep
            fcntl.fcntl(self.proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, BLOCK)  # type: ignore
        self.feeder = _Feeder(f, pos, limit, deadline, self.proc.stdin, self.sentinel)
        self.crs = _CrCount(f, self.feeder)
        self.lines_total: int | None = None
        self.feeder.thread.start()

    def rows(self):
        """(grep's line index, offset from pos in the file, raw line) of each line grep prints;
        the sentinel's line sets lines_total. Raises ValueError on output not as expected."""
        out = self.proc.stdout
        assert out is not None
        while True:
            row = out.readline(2 * LINE_CAP + 64)
            if not row:
                return
            if not row.endswith(b"\n"):  # a long line: its start and its end (_capped)
                end = b""
                while True:
                    more = out.readline(1 << 16)
                    end = _roll(end, more)
                    if not more or more.endswith(b"\n"):
                        break
                row += end
            a = row.index(b":")
            b = row.index(b":", a + 1)
            seg = int(row[:a]) - 1
            stream = int(row[a + 1 : b])
            raw = _capped(row[b + 1 :].rstrip(b"\n"))
            if raw == self.sentinel and stream == self.feeder.fed + 1:
                self.lines_total = seg
                continue
            yield seg, self.feeder.file_offset(stream), raw

    def finish(self) -> int:
        """Wait for grep and the feeder; the range's segment count. NativeError if either
        failed."""
        self.proc.wait()
        self.feeder.thread.join()
        err = self.proc.stderr.read().decode(errors="replace").strip() if self.proc.stderr else ""
        if self.feeder.error is not None:
            raise NativeError(f"feeding grep failed: {self.feeder.error}")
        if self.proc.returncode != 0 or self.lines_total is None:
            raise NativeError(f"{GREP} failed (exit {self.proc.returncode}): {err[-300:]}")
        # the sentinel's line: one after an empty line when the range ended with a separator
        fe = self.feeder
        return self.lines_total - 1 if fe.fed == 0 or fe.last == b"\n" else self.lines_total

    def close(self) -> None:
        """Stop grep (if still running) and its feeder; close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.feeder.thread.join()
        for s in (self.proc.stdout, self.proc.stderr):
            if s is not None:
                s.close()


class _Ahead:
    """A thread reading a _Grep's rows while the lines before its range are matched: at most
    QUEUE batches of BATCH rows or BATCH_BYTES ahead (at most about 9 MiB; then grep and its
    feeder wait: only a log with that many candidate lines, bound by Python anyway)."""

    QUEUE, BATCH, BATCH_BYTES = 128, 256, 64 << 10

    def __init__(self, grep: _Grep) -> None:
        import queue
        import threading

        self.grep = grep
        self.q: queue.Queue[list | None] = queue.Queue(self.QUEUE)
        self.full = queue.Full
        self.stop = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            batch: list = []
            size = 0
            for row in self.grep.rows():
                batch.append(row)
                size += len(row[2])
                if len(batch) >= self.BATCH or size >= self.BATCH_BYTES:
                    self._put(batch)
                    batch, size = [], 0
            self._put(batch)
        except BaseException as e:  # raised again by rows() in the scanning thread
            self.error = e
        finally:
            self._put(None)

    def _put(self, item: list | None) -> None:
        while not self.stop:
            with contextlib.suppress(self.full):
                self.q.put(item, timeout=0.1)
                return

    def rows(self):
        while (batch := self.q.get()) is not None:
            yield from batch
        self.thread.join()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.stop = True
        if self.grep.proc.poll() is None:  # its output ends: the thread sees the end
            self.grep.proc.kill()
        self.thread.join()
        self.grep.close()


def _pieces(f, start: int, limit: int | None) -> list[int]:
    """Where a range is cut for WORKERS greps: just after the first line end past each
    1/n-th of it, n such that each piece holds at least SPLIT_MIN / 2 bytes (no cut: [])."""
    fd = f.fileno()
    size = os.fstat(fd).st_size
    stop = size if limit is None else min(start + limit, size)
    span = stop - start
    n = min(WORKERS, span // max(1, SPLIT_MIN // 2)) if SPLIT_MIN > 0 else WORKERS
    if n < 2 or span < 2:
        return []
    cuts: list[int] = []
    for k in range(1, n):
        at = max(start + span * k // n, cuts[-1] if cuts else start)
        for _ in range(64):  # up to 4 MiB further: no line end there, no cut there
            b = os.pread(fd, 1 << 16, at)
            i = _first_sep(b) if b else -1
            if i >= 0:
                if at + i + 1 < stop:
                    cuts.append(at + i + 1)
                break
            if not b:
                break
            at += len(b)
    return sorted(set(cuts))


def _scan_range_native(f, limit, res, col, matcher, line_base, resync=False, order_base=0,
                       deadline=None, grid=0) -> int:
    """_scan_range with grep finding the candidate lines; the same events, lines, order and
    file position afterwards. Raises NativeError (nothing added) when grep cannot be used.

    A range of SPLIT_MIN bytes or more is cut at line ends into up to WORKERS pieces, each
    searched by its own grep at the same time (grep's automaton is what bounds the speed);
    the pieces' lines are matched one piece after the other, in file order. When the deadline
    stops a piece early, the pieces after it are dropped: what was read stays one stretch.
    `grid`: how far the range starts past the start of _scan_range's chunk grid (after a
    handover: the chunks are those of the Python path's, so are the events)."""
    patterns = _native_ok(matcher)
    start = f.tell()
    read = 0  # bytes before `start` that belong to this range (the resync)
    if resync:  # mid-line after a seek: the scan starts after the first separator
        while True:
            b = f.read(BLOCK)
            if not b:
                res.bytes_read += read
                return order_base
            cut = _first_sep(b)
            if cut >= 0:
                read += cut + 1
                break
            read += len(b)
        start += read
        if limit is not None:
            limit = max(0, limit - read)
    events: list[Event] = []
    chunk_no = -1
    groups: dict[bytes, list[tuple]] = {}
    meta: dict[int, tuple[int, int]] = {}  # range offset -> (segment index, line index)

    def flush() -> None:
        for p, got in sorted(_pick(groups, matcher), key=lambda x: x[0]):
            seg, line = meta[p]
            rule, detail, text, hit = got
            v = hit.view
            events.append(Event(res.path, None if line_base is None else line_base + line + 1,
                                text[:500], rule, detail, order_base + seg, v.task, v.rank,
                                v.local, v.indented, hit.ref_rank, hit.ref_node))
        groups.clear()
        meta.clear()

    def take(rows, at: int, seg_base: int, cr_base: int, crs: _CrCount) -> None:
        """Group one grep's candidate lines by chunk (the one holding a line's end, as the
        Python path reads them) and shape; `at`: where its range starts in this range."""
        nonlocal chunk_no
        for seg, where, raw in rows:
            seg += seg_base
            n_cr = cr_base + crs.before(where)
            where += at
            k = (grid + read + where + len(raw)) // CHUNK
            if k != chunk_no:
                flush()
                chunk_no = k
            meta[where] = (seg, seg - n_cr)
            _group(groups, raw.translate(NORM), where, raw)

    cuts = _pieces(f, start, limit) if WORKERS > 1 else []
    bounds = [start, *cuts]
    greps: list[_Grep] = []
    aheads: list[_Ahead] = []
    got = crs = segs = 0  # bytes read, CRs in them, segments: the pieces matched so far
    try:
        for k, at in enumerate(bounds):
            if k + 1 < len(bounds):
                size: int | None = bounds[k + 1] - at
            else:
                size = None if limit is None else start + limit - at
            greps.append(_Grep(f, at, size, deadline, patterns))
            if k:
                aheads.append(_Ahead(greps[-1]))
        for k, g in enumerate(greps):
            take(g.rows() if k == 0 else aheads[k - 1].rows(), got, segs, crs, g.crs)
            segs += g.finish()
            got, crs = got + g.feeder.read, crs + g.feeder.crs
            if k + 1 < len(bounds) and start + got < bounds[k + 1]:
                break  # the deadline stopped this piece: the ones after it are dropped
        flush()
    except (ValueError, OSError) as e:  # output not as expected: the Python path decides
        raise NativeError(f"reading {GREP}'s output failed: {e}") from None
    finally:
        for a in aheads:
            a.close()
        for g in greps:
            g.close()
    for ev in events:
        col.add(ev)
    res.bytes_read += read + got
    if line_base is not None:
        res.lines += segs - crs
    f.seek(start + got)
    return order_base + segs
