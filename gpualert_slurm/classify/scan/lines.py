"""A log line as the rules see it, and its shape.

A candidate line is cleaned (colour codes, Markdown marks, "\\" paths: clean_text), checked
with one regex for the rule literals it holds, and only then stripped of launcher prefixes and
timestamps (line_view) and matched against the regexes of those rules, highest priority first.
A chunk is normalised with one `bytes.translate` (NORM: every digit -> '0', CR -> LF) before it
is split into segments: lines that differ only in their numbers have one shape. A line longer
than LINE_CAP is matched on its first LINE_CAP bytes, else on its last LINE_CAP (a crash line
glued after a NUL hole or a blob ends such a line); the middle is skipped without being
buffered (_capped, _roll).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LINE_CAP = 8 << 10

_TABLE = bytearray(range(256))
for _c in range(ord("0"), ord("9") + 1):
    _TABLE[_c] = ord("0")
_TABLE[ord("\r")] = ord("\n")
NORM = bytes(_TABLE)

# What people's logs wrap around a message (launcher prefixes, timestamps, quoting, markup): the
# rules match the message itself. Each entry: (regex, label kind or None). A label kind says
# whose line it is: "task" (srun --label "3: ", OpenMPI "[1,3]<stderr>:"), "rank" (the global
# rank: torch's "[rank3]:"), "local" (torchrun --tee "[default1]:", a local rank).
_PREFIXES: list[tuple[str, str | None]] = [
    (r"\s*\[rank(\d+)\]:\s?", "rank"),
    (r"\s*\[default(\d+)\]:\s?", "local"),
    (r"\s*\[\d+,(\d+)\]<std(?:out|err)>:\s?", "task"),
    (r"\s*(\d+): ", "task"),
    (r"[ \t]*(?:>[ \t]?)+", None),  # e-mail / Markdown quoting
    # timestamps: ISO (logging, Slurm), clock-only, syslog, dmesg
    (r"\[?\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?"
     r"(?:\s*[|:-]\s*|\s+)", None),
    (r"\[?\d\d:\d\d:\d\d(?:[.,]\d+)?\]?(?:\s*[|-]\s*|\s+)", None),
    (r"[A-Z][a-z]{2} [ \d]?\d \d\d:\d\d:\d\d\s+", None),
    (r"\[\s*\d+\.\d+\]\s*", None),
    (r"(?:[\w.-]+\s+)?kernel:\s*(?:\[\s*\d+\.\d+\]\s*)?", None),
    # docker compose ("trainer-1  | "), kubectl --prefix ("[pod/trainer-0/main] "), journald
    # ("n1 python[4242]: ")
    (r"[A-Za-z][\w.-]*\s+\| ", None),
    (r"\[pod/[^\]\s]+\]\s", None),
    (r"[\w.-]+\s+[\w./-]+\[\d+\]:\s", None),
    # Ray's driver printing its workers' lines ("(pid=4242) ", "(pid=4242, ip=10.0.0.3) ",
    # "(RayTrainWorker pid=4242, ip=10.0.0.3) ", "(train_fn pid=4242) ": worker.py
    # print_worker_logs)
    (r"\((?:[A-Za-z_][\w.:-]* )?pid=\d+(?:, ip=[0-9A-Fa-f.:]+)?\)\s+", None),
    # pdsh / DeepSpeed / srun-style host prefixes: a name with a digit ("gpu041: ", "n3: ")
    (r"[a-z][a-z0-9-]*\d[a-z0-9-]*(?:\.[a-z0-9-]+)*: (?=\S)", None),
    # a tqdm bar the message was glued onto (the bar ends with "\r", not a newline)
    (r".*?\d+%\|[^|]*\|[^\[]*\[[^\]]*\]\s*", None),
]
# one regex, the alternatives in the order above (the first that matches is removed)


def _alternative(i: int, p: str) -> str:
    num = r"(?P<n" + str(i) + r">\d+)"  # the label's number, named per alternative
    return "(?P<a" + str(i) + ">" + p.replace(r"(\d+)", num, 1) + ")"


_PREFIX_RX = re.compile("|".join(_alternative(i, p) for i, (p, _) in enumerate(_PREFIXES)))
_PREFIX_KIND = [kind for _, kind in _PREFIXES]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")
# Markdown bold and code marks around a message; not "x**2", not Python's __dunders__
_MARKUP = re.compile(r"^(\s*)(?:\*\*(?!\*)|`+)|(?<!\*)(?:\*\*|`+)\s*$|(?<=\s)\*\*(?=[^\s*])"
                     r"|(?<=[^\s*])\*\*(?=[\s:,.])")
MAX_PREFIXES = 8
# an exception line quoted inside prose ("The error was **KeyError: 'x'** here", "got
# `torch.cuda.OutOfMemoryError: CUDA out of memory` again"): a bold or code span that opens
# after some text and holds `[module.]Name: message`; the span is read as the line
_EXC_SPAN = re.compile(r"(?<=\S)\s+(\*\*|`+)((?:[A-Za-z_]\w*\.)*_?[A-Z]\w*: \S.*?)(?:\1|$)")
_SPAN_MARK = "\ue000"  # where such a span began: line_view reads the body from there


@dataclass
class LineView:
    """One log line as the rules see it: prefixes and markup removed."""

    body: str  # leading whitespace kept (a traceback's source lines are indented)
    task: int | None = None
    rank: int | None = None
    local: int | None = None

    @property
    def indented(self) -> bool:
        return self.body[:1].isspace()


def clean_text(text: str) -> str:
    """A line without terminal colour codes and Markdown marks, with "/" paths."""
    body = _ANSI.sub("", text) if ("\x1b" in text or "\x08" in text) else text
    if "\\" in body:  # Windows paths: rules are written with "/"
        body = body.replace("\\", "/")
    if "**" in body or "`" in body:
        span = _EXC_SPAN.search(body)
        if span is not None:
            body = body[:span.start()] + " " + _SPAN_MARK + span.group(2)
        body = _MARKUP.sub(lambda m: m.group(1) or "", body)
    return body


def line_view(text: str, cleaned: bool = False) -> LineView:
    v = LineView(text if cleaned else clean_text(text))
    for _ in range(MAX_PREFIXES):
        m = _PREFIX_RX.match(v.body)
        if m is None or m.end() >= len(v.body):
            break
        i = int(m.lastgroup[1:])  # type: ignore[index]
        if _PREFIX_KIND[i] is not None:
            setattr(v, _PREFIX_KIND[i], int(m.group(f"n{i}")))
        v.body = v.body[m.end():]
    if _SPAN_MARK in v.body:  # an exception quoted in prose: the span is the line (the
        v.body = v.body[v.body.index(_SPAN_MARK) + 1:]  # launcher prefixes before it kept)
    return v


def _capped(line: bytes) -> bytes:
    """What of a line is matched: all of it up to 2 x LINE_CAP, else its first and its last
    LINE_CAP bytes (_Matcher.match tries the first, then the rest)."""
    return line if len(line) <= 2 * LINE_CAP else line[:LINE_CAP] + line[-LINE_CAP:]


def _roll(tail: bytes, more: bytes) -> bytes:
    """The last LINE_CAP bytes of tail + more, without copying a long `more` whole."""
    if len(more) >= LINE_CAP:
        return more[-LINE_CAP:]
    return (tail + more)[-LINE_CAP:]


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip()


def _first_sep(b: bytes) -> int:
    a, c = b.find(b"\n"), b.find(b"\r")
    if a < 0:
        return c
    return a if c < 0 else min(a, c)


def _last_sep(b: bytes) -> int:
    """Where the last separator (LF or CR) of b is; -1: none. (A CR is looked for only after
    the last LF: b may be a 2 MiB chunk, and most hold no CR.)"""
    nl = b.rfind(b"\n")
    return max(nl, b.rfind(b"\r", nl + 1))


# Hex ids in a shape (comm 0x7f3a9c0e1b20, busId 1b000, a commit or a hash): digits are "0"
# there already, so their letters are what tells one id from another and the line shape with
# them (NCCL_DEBUG=INFO's "Init COMPLETE" lines: each one its own shape). A key over shapes
# marks each character of such an id "1", which no shape holds (every digit is "0"), so the
# id's length and place stay: a run of lowercase hex after "0x", or one of at least HEX_MIN
# standing alone that holds a digit and a letter (not a float's exponent, "1.0000e-04"). Lines
# of one key are matched as one shape only when the rules cannot tell their ids apart
# (python._Matcher.hex_uniform); else by their digit shapes, as before.
HEX_MIN = 5
_HEX_ID = re.compile(rb"\b0x([0a-f]+)\b|\b(?!0+e[-+])(?=[a-f]*0)(?=0*[a-f])[0a-f]{%d,}\b" % HEX_MIN)
HEX_MARK = ord("1")


def _marked(m: re.Match[bytes]) -> bytes:
    if m.group(1) is not None:
        return b"0x" + b"1" * (m.end() - m.start() - 2)
    return b"1" * (m.end() - m.start())


def hex_keys(shapes: list[bytes]) -> list[bytes]:
    """The key of each shape (digit-normalised line): its hex ids marked, else itself."""
    joined = b"\n".join(shapes)
    out = _HEX_ID.sub(_marked, joined)
    return shapes if out == joined else out.split(b"\n")


def hex_key(shape: bytes) -> bytes:
    return _HEX_ID.sub(_marked, shape)
