"""The `--gpualert[=OPTS]` grammar, shared with the C plugin (spank/), which must give the same
verdicts and the same error texts.

    OPTS    := "" | "on" | "off" | KEY=VALUE ("," KEY=VALUE)*     (at most 1024 characters)
    mail=ADDR[:ADDR...]        local@domain
    notify=fail|always|never   default fail
    artifacts=GLOB[:GLOB...]
    hang=DURATION              90s, 30m, 2h, 1d
    budget=SIZE                500K, 20M, 1G (powers of 1024)
    checkpoint=GLOB
    recover=on|off
No spaces are trimmed, a key may appear once, `on`/`off` stand alone. "" is accepted here (the
defaults) though the plugin never sets SPANK_GPUALERT to it. Each check mirrors
spank/options.c's validate_opts(); keep them in step.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

KEYS = ("mail", "notify", "artifacts", "hang", "budget", "checkpoint", "recover", "off")

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZE_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3}
_DURATION_RE = re.compile(r"^([0-9]{1,9})([smhd])\Z")
_SIZE_RE = re.compile(r"^([0-9]{1,12})([kmgKMG])\Z")
OPTS_MAX = 1024  # as the plugin: the value travels in the job's environment
# Conservative: these strings end up in mail headers and shell-free argv only, but a narrow
# alphabet keeps header injection and surprises out.
ADDR_RE = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\Z")
# Globs are relative to the job's work dir or absolute; control characters never belong there.
_GLOB_BAD = re.compile(r"[\x00-\x1f\x7f,]")

ACCEPTED = {
    "mail": "one or more addresses local@domain separated by ':'",
    "notify": "fail, always or never",
    "artifacts": "one or more file globs separated by ':'",
    "hang": "a duration like 90s, 30m, 2h or 1d (greater than 0)",
    "budget": "a size like 500K, 20M or 1G (greater than 0)",
    "checkpoint": "one file glob",
    "recover": "on or off",
}


class OptionError(ValueError):
    """A bad --gpualert value; str() is the message shown to the user."""


@dataclass(frozen=True)
class Options:
    monitored: bool = True
    mail: tuple[str, ...] = ()
    notify: str = "fail"
    artifacts: tuple[str, ...] = ()
    hang_s: int | None = None
    budget_bytes: int | None = None
    checkpoint: str | None = None
    recover: bool | None = None  # None: the site's config decides

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["mail"] = list(self.mail)
        d["artifacts"] = list(self.artifacts)
        return d


def parse_duration(text: str) -> int:
    """'90s' -> 90, '30m' -> 1800 ... ; ValueError when not of that form or zero."""
    m = _DURATION_RE.match(text)
    if not m or int(m.group(1)) == 0:
        raise ValueError(text)
    return int(m.group(1)) * _DURATION_UNITS[m.group(2)]


def parse_size(text: str) -> int:
    """'500K' -> 512000, '1G' -> 1073741824; ValueError when not of that form or zero."""
    m = _SIZE_RE.match(text)
    if not m or int(m.group(1)) == 0:
        raise ValueError(text)
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]


def _bad(key: str, value: str) -> OptionError:
    return OptionError(f"gpualert: bad option {key}={value}: {ACCEPTED[key]}")


def _list(key: str, value: str, ok: re.Pattern[str] | None) -> tuple[str, ...]:
    parts = value.split(":")
    for p in parts:
        if not p or (ok is not None and not ok.match(p)) or (ok is None and _GLOB_BAD.search(p)):
            raise _bad(key, value)
    return tuple(parts)


def parse_options(text: str | None) -> Options:
    """Parse a --gpualert value (or SPANK_GPUALERT). None, "" and "on" give the defaults."""
    text = text or ""
    if len(text) > OPTS_MAX:
        raise OptionError(f"gpualert: bad option list: longer than {OPTS_MAX} characters")
    if text in ("", "on"):
        return Options()
    if text == "off":
        return Options(monitored=False)
    fields: dict[str, Any] = {}
    seen: set[str] = set()
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if key in ("on", "off"):
            raise OptionError(
                f"gpualert: bad option {key}: '{key}' cannot be combined with other options")
        if key == "":
            raise OptionError(
                f"gpualert: empty option in '{text}' (accepted: KEY=VALUE[,KEY=VALUE...])")
        if key not in KEYS:
            raise OptionError(
                f"gpualert: unknown option {key} (accepted: {', '.join(KEYS)})"
            )
        if key in seen:
            raise OptionError(f"gpualert: bad option {key}={value}: {key} given twice")
        seen.add(key)
        if not sep or not value:
            raise _bad(key, "")
        if key == "mail":
            fields["mail"] = _list(key, value, ADDR_RE)
        elif key == "notify":
            if value not in ("fail", "always", "never"):
                raise _bad(key, value)
            fields["notify"] = value
        elif key == "artifacts":
            fields["artifacts"] = _list(key, value, None)
        elif key == "checkpoint":
            if _GLOB_BAD.search(value):
                raise _bad(key, value)
            fields["checkpoint"] = value
        elif key == "hang":
            try:
                fields["hang_s"] = parse_duration(value)
            except ValueError:
                raise _bad(key, value) from None
        elif key == "budget":
            try:
                fields["budget_bytes"] = parse_size(value)
            except ValueError:
                raise _bad(key, value) from None
        elif key == "recover":
            if value not in ("on", "off"):
                raise _bad(key, value)
            fields["recover"] = value == "on"
    return Options(**fields)


def options_from_env(value: str | None, default_monitoring: bool) -> Options:
    """What the hooks use: SPANK_GPUALERT when present, else the site default."""
    if value is None:
        return Options(monitored=default_monitoring)
    return parse_options(value)
