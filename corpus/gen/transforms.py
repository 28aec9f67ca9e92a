"""Shapes real logs come in (issue 10, point 4), applied to a really-run log after capture.

A transform is a name; `apply("crlf+rank_prefix", data, seed)` applies them left to right. The
label records the names, so a case says which shape it is. Transforms only re-dress what the run
printed (prefixes, line ends, markup, paths, a progress bar, a cut tail); they add no evidence.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

# Where a failure's output starts: the line a progress bar glues onto, the line a cut keeps.
FAILURE_START = re.compile(
    rb"^(Traceback|\S*(Error|Exception)\b|[A-Za-z_.]*Error:|Killed|Segmentation|Bus error|"
    rb"terminate called|Fatal Python|srun: error|slurmstepd|\*\*\*|E\d{4}|\[E|NCCL|"
    rb"RuntimeError|.*\b(error|ERROR|failed|FAILED)\b)")


def _lines(data: bytes) -> list[bytes]:
    """Lines split at \n only: a \r-redrawn progress bar stays one line, as launchers see it."""
    parts = data.split(b"\n")
    out = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _per_line(prefix: Callable[[int], bytes]) -> Callable[[bytes, random.Random], bytes]:
    def t(data: bytes, rng: random.Random) -> bytes:
        return b"".join(prefix(i) + ln for i, ln in enumerate(_lines(data)))
    return t


def crlf(data: bytes, rng: random.Random) -> bytes:
    return re.sub(rb"\r?\n", b"\r\n", data)


# The prefixes that name a rank: a log of a multi-rank case gets its own task's rank (`rank`),
# so that the labels agree with the case's ranks; a single log gets a drawn one.
def rank_prefix(data: bytes, rng: random.Random, rank: int | None = None) -> bytes:
    r = rng.randrange(1, 8) if rank is None else rank
    return _per_line(lambda i: b"[rank%d]: " % r)(data, rng)


def torchrun_prefix(data: bytes, rng: random.Random, rank: int | None = None) -> bytes:
    r = rng.randrange(0, 8) if rank is None else rank
    return _per_line(lambda i: b"[default%d]:" % r)(data, rng)


def srun_label(data: bytes, rng: random.Random, rank: int | None = None) -> bytes:
    r = rng.randrange(0, 4) if rank is None else rank
    return _per_line(lambda i: b"%d: " % r)(data, rng)


def host_prefix(data: bytes, rng: random.Random) -> bytes:
    host = rng.choice([b"gpu-a100-017", b"node042", b"cn-0123", b"hpc-g7"])
    return _per_line(lambda i: host + b": ")(data, rng)


def timestamp(data: bytes, rng: random.Random) -> bytes:
    fmt = rng.choice([b"[2026-03-%02d %02d:%02d:%02d,%03d] ",
                      b"2026-03-%02dT%02d:%02d:%02d.%03dZ "])
    day, h, m = rng.randrange(1, 28), rng.randrange(0, 24), rng.randrange(0, 60)

    def stamp(i: int) -> bytes:
        s = i // 3
        return fmt % (day, h, m + s // 60 if m + s // 60 < 60 else 59, s % 60, (i * 37) % 1000)
    return _per_line(stamp)(data, rng)


def indent(data: bytes, rng: random.Random) -> bytes:
    pad = rng.choice([b"    ", b"\t", b"  "])
    return _per_line(lambda i: pad)(data, rng)


def quote(data: bytes, rng: random.Random) -> bytes:
    return _per_line(lambda i: b"> ")(data, rng)


def markdown(data: bytes, rng: random.Random) -> bytes:
    """A pasted issue: prose, the log in a fence, the failure line repeated in bold."""
    lines = _lines(data)
    start = _failure_index(lines)
    bold = lines[-1].strip() if lines else b""
    for ln in reversed(lines[start:]):
        if ln.strip():
            bold = ln.strip()
            break
    head = rng.choice([b"My job fails with the following output:", b"Log of the run:",
                       b"### Error output"])
    body = b"".join(lines)
    if not body.endswith(b"\n"):
        body += b"\n"
    return (head + b"\n\n```\n" + body + b"```\n\nThe important part is **" + bold
            + b"** as far as I can tell.\n")


_POSIX_PATH = re.compile(rb"/(?:home|opt|usr|tmp|root|var|work|data|scratch)(?:/[\w.+@-]+)+")


def windows(data: bytes, rng: random.Random) -> bytes:
    """Posix paths as a Windows/conda machine has them (backslashes, a drive letter)."""
    user = rng.choice([b"alex", b"mlu", b"Student"])

    def sub(m: re.Match) -> bytes:
        p = m.group(0)
        k = p.find(b"site-packages/")
        if k >= 0:
            rest = p[k:]
            base = b"C:/Users/" + user + b"/anaconda3/envs/train/Lib/"
            return (base + rest).replace(b"/", b"\\")
        if p.startswith(b"/usr/lib/python3"):
            tail = p.split(b"/", 4)[-1]
            return (b"C:/Users/" + user + b"/anaconda3/envs/train/Lib/" + tail).replace(b"/", b"\\")
        if p.startswith(b"/tmp/"):
            return (b"C:/Users/" + user + b"/AppData/Local/Temp/" + p[5:]).replace(b"/", b"\\")
        tail = p.rsplit(b"/", 2)[-2:]
        return (b"D:/projects/" + b"/".join(tail)).replace(b"/", b"\\")
    return _POSIX_PATH.sub(sub, data)


def _failure_index(lines: list[bytes]) -> int:
    for i, ln in enumerate(lines):
        if FAILURE_START.match(ln.lstrip()):
            return i
    return max(len(lines) - 1, 0)


def cr_glue(data: bytes, rng: random.Random) -> bytes:
    """A tqdm-style bar redrawn with \\r and left without a newline, so the first failure line
    lands glued onto it (as in a terminal log)."""
    lines = _lines(data)
    i = _failure_index(lines)
    total = rng.choice([50, 100, 250, 1000])
    stop = rng.randrange(total // 4, total - 1)
    name = rng.choice([b"Epoch 3", b"train", b"Iteration", b"eval"])
    bar = b""
    for n in range(0, stop + 1, max(1, stop // 6)):
        pct = n * 100 // total
        fill = b"#" * (pct // 10) + b" " * (10 - pct // 10)
        bar += b"\r%s: %3d%%|%s| %d/%d [00:%02d<00:%02d, %.2fit/s]" % (
            name, pct, fill, n, total, n % 60, (total - n) % 60, 3.0 + n % 7)
    return b"".join(lines[:i]) + bar + b"".join(lines[i:])


def truncate(data: bytes, rng: random.Random) -> bytes:
    """The tail is missing: the lines after the last failure-looking line are cut, and the last
    line kept is cut mid-way when it is not that failure line."""
    lines = _lines(data)
    last = max((i for i, ln in enumerate(lines) if FAILURE_START.match(ln.lstrip())), default=-1)
    if last < 0 or last >= len(lines) - 1:
        keep = lines[:max(1, len(lines) - 1)]
        return b"".join(keep)
    keep = lines[:last + 1]
    nxt = lines[last + 1]
    return b"".join(keep) + nxt[:max(1, len(nxt) * 3 // 5)]


TRANSFORMS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "crlf": crlf, "rank_prefix": rank_prefix, "torchrun_prefix": torchrun_prefix,
    "srun_label": srun_label, "host_prefix": host_prefix, "timestamp": timestamp,
    "indent": indent, "quote": quote, "markdown": markdown, "windows": windows,
    "cr_glue": cr_glue, "truncate": truncate,
}
SHAPES = tuple(TRANSFORMS)
RANKED = ("rank_prefix", "torchrun_prefix", "srun_label")


def apply(spec: str, data: bytes, seed: str, rank: int | None = None) -> bytes:
    """Apply `a+b+c` to a log's bytes; deterministic for a given seed (the case id). `rank`:
    the task's own rank, for the logs of a multi-rank case (the rank-naming prefixes use it)."""
    rng = random.Random(seed)
    for name in spec.split("+"):
        args = (rank,) if name in RANKED else ()
        data = TRANSFORMS[name](data, rng, *args)  # type: ignore[call-arg]
    return data


def case_rank(tasks: list[dict], log_name: str) -> int | None:
    """The rank a log of a case's label should be prefixed with: its task's own rank when the
    case has several task logs, else None (a drawn one)."""
    if len(tasks) < 2:
        return None
    return next((t.get("rank") for t in tasks if t["log"].rsplit("/", 1)[-1] == log_name),
                None)
