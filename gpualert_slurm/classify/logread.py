"""Reading lines of a task log again, after the scan, as the rules see them: the lines after an
event (a traceback's stack, the message under a header line) and a log's last lines. Each
function reads only the lines it needs; OSError is the caller's to handle unless it says so."""

from __future__ import annotations

from collections.abc import Iterator

from gpualert_slurm.classify.scan import line_view
from gpualert_slurm.core.spool import open_log


def _raw_lines(path: str, line: int, last: int) -> Iterator[str]:
    """Lines line+1 .. last (1-based) of a log, each segment of a \\r-redrawn line its own."""
    with open_log(path) as f:
        for i, raw in enumerate(f, 1):
            if i <= line:
                continue
            if i > last:
                return
            for seg in raw.rstrip(b"\r\n").split(b"\r"):
                yield seg.decode("utf-8", "replace")


def _log_lines(path: str, line: int, last: int) -> Iterator[str]:
    """Lines line+1 .. last (1-based) of a log as the rules see them (line_view's body; a CRLF
    end dropped, a progress bar's last draw kept). Raises OSError."""
    with open_log(path) as f:
        for i, raw in enumerate(f, 1):
            if i <= line:
                continue
            if i > last:
                return
            seg = raw.rstrip(b"\r\n").rsplit(b"\r", 1)[-1]
            yield line_view(seg.decode("utf-8", "replace")).body


COUNT_MAX = 64 << 20  # a log's lines are counted only up to this size (below: from its end)


def _tail_lines(path: str, n: int = 3, size: int = 16384) -> list[tuple[int | None, str, str]]:
    """The last n non-blank lines of a log as (line number, text as the rules see it, the raw
    line's last segment); [] if it cannot be read. Read from the end: the lines are counted
    only in a log of at most COUNT_MAX bytes (a sparse 1 TB log is the user's to make, and
    counting it ate the hook's time bound: issue 28); past that the number is None."""
    try:
        with open_log(path) as f:
            f.seek(0, 2)
            end = f.tell()
            f.seek(max(0, end - size))
            data = f.read(size)
            total: int | None = None
            if end <= COUNT_MAX:
                f.seek(0)
                total = sum(chunk.count(b"\n")
                            for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return []
    raw = data.split(b"\n")
    if end > size:
        raw = raw[1:]
    if data.endswith(b"\n"):
        raw = raw[:-1]
    elif total is not None:
        total += 1  # a last line without its newline
    out: list[tuple[int | None, str, str]] = []
    for i in range(len(raw) - 1, -1, -1):
        seg = raw[i].rstrip(b"\r").rsplit(b"\r", 1)[-1].decode("utf-8", "replace")
        body = line_view(seg).body.strip()
        if body:
            out.append((None if total is None else total - (len(raw) - 1 - i), body, seg))
            if len(out) >= n:
                break
    return out[::-1]


def _next_line(path: str, line: int | None) -> str | None:
    """The first non-blank line after line `line` (1-based) of a log, as the rules see it: the
    message a runtime prints under its header line (Rust's panic, R's error). Read only for the
    deciding event, whose log is at hand; None if it cannot be read."""
    if not line:
        return None
    try:
        for body in _log_lines(path, line, line + 4):
            if body.strip():
                return body.strip()[:200]
    except OSError:
        return None
    return None
