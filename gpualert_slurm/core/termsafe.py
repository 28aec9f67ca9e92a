"""Text from job data made safe for an admin's terminal (docs/SECURITY.md, attack 8).

Job output, job names and file names are the user's bytes. Printed raw, ESC/CSI/OSC sequences
move the cursor, rewrite what an admin sees, set the window title, or (OSC 52) write to the
clipboard. Every `gpualert` command's stdout and stderr go through `SafeStream` (cli.main), so
each control character is shown escaped (`\\x1b`), whatever command prints it.
"""

from __future__ import annotations

import io
import re
from typing import Any, TextIO

# C0 but tab and newline, DEL, C1 (0x80-0x9f: 0x9b is a one-byte CSI), Unicode line breaks
# and the bidi controls that reorder what is shown (Trojan Source).
_CTRL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CTRL_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _esc(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def escape(text: Any, keep_newlines: bool = True) -> str:
    """`text` with every control character written as an escape (tab and, unless
    keep_newlines is False, newline kept): shows what was there, does nothing."""
    s = str(text)
    return (_CTRL if keep_newlines else _CTRL_LINE).sub(_esc, s)


def one_line(text: Any, limit: int = 200) -> str:
    """One escaped line, at most `limit` characters: for drain reasons, titles, headers."""
    s = escape(text, keep_newlines=False)
    return s if len(s) <= limit else s[:limit - 1] + "…"


class SafeStream(io.TextIOBase):
    """A text stream that escapes control characters before they reach `raw`."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def write(self, s: str) -> int:
        self.raw.write(escape(s))
        return len(s)

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # typeshed: a plain attribute
        return self.raw.encoding

    @property
    def buffer(self) -> Any:
        """Bytes written here bypass the escaping: only our own (a pickled result, a tar)."""
        return self.raw.buffer

    def writable(self) -> bool:
        return True
