"""Which kernel lines may speak for the GPU driver (data/kernel-trust.yaml, docs/SECURITY.md):
a driver Xid line from its first character, and no line whose driver words came from a process
or file name a user chose. Read by the node's evidence collection and by provenance."""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any


@functools.cache
def _trust_rules() -> dict[str, Any]:
    import yaml

    text = resources.files("gpualert_slurm").joinpath("data/kernel-trust.yaml").read_text()
    data = yaml.safe_load(text)
    return {"xid": re.compile(data["driver_xid"]),
            "words": re.compile(data["driver_words"], re.IGNORECASE),
            "prefixes": tuple(data["driver_prefixes"]),
            "named": [re.compile(p) for p in data["named_shapes"]]}


def driver_xid(message: str) -> tuple[str, int] | None:
    """(PCI bus id as 'dddd:bb:dd', lower case; Xid number) when the kernel message is a
    driver Xid line from its first character, else None."""
    m = _trust_rules()["xid"].match(message)
    if not m:
        return None
    return m.group(1).lower(), int(m.group(2))


def kernel_line_kept(message: str) -> bool:
    """False for a line that holds the driver's or the hardware's words without being the
    driver's own message: those words came from a process or file name a user chose."""
    r = _trust_rules()
    if not r["words"].search(message):
        return True
    if driver_xid(message):
        return True
    if not message.startswith(r["prefixes"]):
        return False
    return not any(p.search(message) for p in r["named"])


COMM_BYTES = 15  # TASK_COMM_LEN - 1: the most of a process name the kernel keeps
_ESCAPED = re.compile(r"\\x[0-9a-fA-F]{2}")


def without_comm(text: str) -> str:
    """A driver Xid line with the process name it quotes ("pid=N, name=<comm>, ...") cut out.
    The name is the user's (prctl, argv[0]), up to 15 bytes, ", " inside it too: "NVLink fatal"
    made a user's own application Xid 13 match a hardware rule ('NVLink.*fatal'), a drain on
    its first run (red-team pass). Where it ends cannot be told, so 15 bytes go (dmesg's \\xNN
    escape of a byte counts as one); what follows is the driver's."""
    i = text.find(", name=")
    if i < 0:
        return text
    j = i + len(", name=")
    n = 0
    while j < len(text) and n < COMM_BYTES:
        m = _ESCAPED.match(text, j)
        step = m.end() - j if m else 1
        n += 1 if m else len(text[j].encode("utf-8", "surrogatepass"))
        j += step
    return text[:i] + ", name=?" + text[j:]
