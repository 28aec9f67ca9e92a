"""A log read one page at a time, in bounded memory, whatever its size: a page is at most
PAGE_LINES lines and PAGE_BYTES shown bytes; a line longer than LINE_BYTES is cut, and the
page says how many bytes it left out (a line of several MB is skipped, not held); bytes that
are not UTF-8 text (a binary log) are shown escaped, never sent as they are.

Pages are addressed by byte offset (`off`, the start of a line) with the number of the line
there (`first`, for display only); a line number alone (`line`, an evidence link) is found by
counting newlines from the start in CHUNK-sized reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from gpualert_slurm.core.termsafe import escape

CHUNK = 1 << 20
PAGE_LINES = 500
PAGE_BYTES = 512 * 1024
LINE_BYTES = 16 * 1024


@dataclass
class Line:
    no: int
    text: str
    cut: int = 0  # bytes of this line not shown


@dataclass
class Page:
    off: int  # where the page starts
    first: int  # the number of its first line
    size: int  # the log's size when read
    lines: list[Line] = field(default_factory=list)
    next_off: int | None = None  # None: the page ends at the end of the log
    binary: bool = False  # bytes that are not text were shown escaped


def line_offset(fd: int, size: int, line: int) -> int | None:
    """The offset of the start of line `line` (1-based), counted in CHUNK reads; None when
    the log has fewer lines."""
    want = max(1, line) - 1  # newlines before it
    seen, off = 0, 0
    if want == 0:
        return 0
    while off < size:
        b = os.pread(fd, min(CHUNK, size - off), off)
        if not b:
            break
        n = b.count(b"\n")
        if seen + n >= want:
            pos = -1
            for _ in range(want - seen):
                pos = b.index(b"\n", pos + 1)
            start = off + pos + 1
            return start if start < size else None
        seen += n
        off += len(b)
    return None


def tail_start(fd: int, size: int) -> tuple[int, int]:
    """(offset, number) of the first line of the log's last page, in one pass: each chunk's
    newline count is kept (a few bytes a MiB), then the chunk the page starts in is read
    again."""
    counts: list[int] = []
    off, last = 0, b"\n"
    while off < size:
        b = os.pread(fd, min(CHUNK, size - off), off)
        if not b:
            break
        counts.append(b.count(b"\n"))
        last = b[-1:]
        off += len(b)
    total = sum(counts) + (last != b"\n")
    first = max(1, total - PAGE_LINES + 1)
    want, seen = first - 1, 0  # newlines before the page
    for i, n in enumerate(counts):
        if seen + n >= want:
            b = os.pread(fd, min(CHUNK, size - i * CHUNK), i * CHUNK)
            pos = -1
            for _ in range(want - seen):
                pos = b.index(b"\n", pos + 1)
            return i * CHUNK + pos + 1, first
        seen += n
    return 0, 1


def _show(raw: bytes) -> tuple[str, bool]:
    """The bytes as text: UTF-8 where they are, every other byte and control character
    (tab but) as an escape (\\x00, termsafe's); True when there was any such byte."""
    try:
        text, odd = raw.decode("utf-8"), False
    except UnicodeDecodeError:
        text, odd = raw.decode("utf-8", errors="backslashreplace"), True
    shown = escape(text)
    return shown, odd or shown != text


def read_page(fd: int, size: int, off: int, first: int) -> Page:
    """The page of lines starting at byte `off` (line number `first`)."""
    page = Page(off=off, first=first, size=size)
    pos, shown = off, 0
    buf = b""
    no = first
    while pos < size and len(page.lines) < PAGE_LINES and shown < PAGE_BYTES:
        if not buf:
            buf = os.pread(fd, min(CHUNK, size - pos), pos)
            if not buf:
                break
        nl = buf.find(b"\n")
        if nl >= 0 and nl <= LINE_BYTES:
            raw, used = buf[:nl], nl + 1
            buf = buf[nl + 1:]
            cut = 0
        elif nl < 0 and len(buf) < LINE_BYTES and pos + len(buf) < size:
            more = os.pread(fd, min(CHUNK, size - pos - len(buf)), pos + len(buf))
            if not more:
                raw, used, cut, buf = buf, len(buf), 0, b""
            else:
                buf += more
                continue
        elif nl < 0 and pos + len(buf) >= size:  # the last line, no newline at its end
            raw, used, cut = buf[:LINE_BYTES], len(buf), max(0, len(buf) - LINE_BYTES)
            buf = b""
        else:  # a line longer than LINE_BYTES: show its head, skip to its end
            raw = buf[:LINE_BYTES]
            used, buf, had_nl = _skip_line(fd, size, pos, buf)
            cut = used - len(raw) - had_nl
        text, odd = _show(raw)
        page.binary = page.binary or odd
        page.lines.append(Line(no, text, max(0, cut)))
        shown += len(raw)
        pos += used
        no += 1
    page.next_off = pos if pos < size else None
    return page


def _skip_line(fd: int, size: int, pos: int, buf: bytes) -> tuple[int, bytes, int]:
    """(bytes the line at `pos` takes, its newline included; what follows it in the buffer;
    1 if it ends with a newline, else 0), reading on in CHUNKs until its newline: the line
    itself is never held."""
    nl = buf.find(b"\n")
    if nl >= 0:
        return nl + 1, buf[nl + 1:], 1
    at = pos + len(buf)
    while at < size:
        b = os.pread(fd, min(CHUNK, size - at), at)
        if not b:
            break
        nl = b.find(b"\n")
        if nl >= 0:
            return at + nl + 1 - pos, b[nl + 1:], 1
        at += len(b)
    return at - pos, b"", 0
