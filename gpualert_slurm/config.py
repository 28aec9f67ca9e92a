"""The site config (/etc/gpualert/gpualert.yaml, or $GPUALERT_CONFIG). A missing file means the
defaults; a present but wrong file is a ConfigError naming the file, the key and what is
accepted, so that `gpualert doctor` and the hooks can report it in one line."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from gpualert_slurm.options import ADDR_RE, parse_duration, parse_size

DEFAULT_PATH = "/etc/gpualert/gpualert.yaml"
RECOVERY_ACTIONS = ("requeue", "exclude_node", "drain_node", "hold", "cancel")
_HOSTPORT_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})$")
_DOMAIN_RE = re.compile(r"^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*$")


class ConfigError(ValueError):
    """str() is a one-line message: file, key, what is accepted."""


@dataclass(frozen=True)
class MailConfig:
    relay: str = "localhost:25"
    sender: str = "gpualert@localhost"  # the YAML key is `from`
    domain: str | None = None  # user@domain when the job gave no mail=

    @property
    def relay_host(self) -> str:
        return self.relay.rsplit(":", 1)[0].strip("[]")

    @property
    def relay_port(self) -> int:
        return int(self.relay.rsplit(":", 1)[1])


@dataclass(frozen=True)
class RecoveryConfig:
    mode: str = "monitor"  # monitor: only record what would be done; action: do it
    actions: tuple[str, ...] = ()
    max_retries: int = 2


@dataclass(frozen=True)
class Config:
    path: str | None = None  # the file it came from; None for built-in defaults
    spool: str = "/var/spool/gpualert"
    default_monitoring: bool = False
    hook_timeout_s: float = 20.0
    epilog_wait_s: float = 30.0
    budget_bytes: int = 20 * 1024**2
    hang_s: int | None = None  # None: no hang detection unless the job asks (hang=)
    mail: MailConfig = field(default_factory=MailConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)


def config_path(explicit: str | None = None) -> str:
    return explicit or os.environ.get("GPUALERT_CONFIG") or DEFAULT_PATH


class _Checker:
    def __init__(self, path: str) -> None:
        self.path = path

    def err(self, key: str, accepted: str, got: Any) -> ConfigError:
        return ConfigError(f"gpualert: config {self.path}: {key}: expected {accepted}, got {got!r}")

    def mapping(self, key: str, value: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.err(key or "top level", "a mapping of keys", value)
        for k in value:
            if k not in allowed:
                where = f"{key}.{k}" if key else str(k)
                raise ConfigError(
                    f"gpualert: config {self.path}: unknown key {where} "
                    f"(accepted: {', '.join(allowed)})"
                )
        return value

    def boolean(self, key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.err(key, "true or false", value)
        return value

    def number(self, key: str, value: Any, lo: float, hi: float) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
            raise self.err(key, f"a number from {lo:g} to {hi:g}", value)
        return float(value)

    def string(self, key: str, value: Any, pattern: re.Pattern[str] | None, what: str) -> str:
        if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
            raise self.err(key, what, value)
        return value


def parse_config(data: Any, path: str) -> Config:
    """Validate an already-loaded YAML document."""
    c = _Checker(path)
    top = c.mapping("", data, (
        "spool", "default_monitoring", "hook_timeout_s", "epilog_wait_s", "budget", "hang",
        "mail", "recovery",
    ))
    kw: dict[str, Any] = {"path": path}
    if "spool" in top:
        spool = c.string("spool", top["spool"], None, "an absolute path")
        if not os.path.isabs(spool):
            raise c.err("spool", "an absolute path", spool)
        kw["spool"] = os.path.normpath(spool)
    if "default_monitoring" in top:
        kw["default_monitoring"] = c.boolean("default_monitoring", top["default_monitoring"])
    if "hook_timeout_s" in top:
        kw["hook_timeout_s"] = c.number("hook_timeout_s", top["hook_timeout_s"], 1, 3600)
    if "epilog_wait_s" in top:
        kw["epilog_wait_s"] = c.number("epilog_wait_s", top["epilog_wait_s"], 0, 3600)
    if "budget" in top:
        try:
            kw["budget_bytes"] = parse_size(str(top["budget"]))
        except ValueError:
            raise c.err("budget", "a size like 500K, 20M or 1G", top["budget"]) from None
    if top.get("hang") is not None:
        try:
            kw["hang_s"] = parse_duration(str(top["hang"]))
        except ValueError:
            what = "a duration like 90s, 30m, 2h or 1d, or null"
            raise c.err("hang", what, top["hang"]) from None

    m = c.mapping("mail", top.get("mail"), ("relay", "from", "domain"))
    mkw: dict[str, Any] = {}
    if "relay" in m:
        relay = c.string("mail.relay", m["relay"], _HOSTPORT_RE, "host:port")
        if not 0 < int(relay.rsplit(":", 1)[1]) < 65536:
            raise c.err("mail.relay", "host:port with a port from 1 to 65535", relay)
        mkw["relay"] = relay
    if "from" in m:
        mkw["sender"] = c.string("mail.from", m["from"], ADDR_RE, "an address user@domain")
    if m.get("domain") is not None:
        mkw["domain"] = c.string("mail.domain", m["domain"], _DOMAIN_RE, "a domain like lab.org")
    kw["mail"] = MailConfig(**mkw)

    r = c.mapping("recovery", top.get("recovery"), ("mode", "actions", "max_retries"))
    rkw: dict[str, Any] = {}
    if "mode" in r:
        if r["mode"] not in ("monitor", "action"):
            raise c.err("recovery.mode", "monitor or action", r["mode"])
        rkw["mode"] = r["mode"]
    if r.get("actions") is not None:
        acts = r["actions"]
        what = f"a list of {', '.join(RECOVERY_ACTIONS)}"
        if not isinstance(acts, list) or any(a not in RECOVERY_ACTIONS for a in acts):
            raise c.err("recovery.actions", what, acts)
        rkw["actions"] = tuple(acts)
    if "max_retries" in r:
        v = r["max_retries"]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 100:
            raise c.err("recovery.max_retries", "an integer from 0 to 100", v)
        rkw["max_retries"] = v
    kw["recovery"] = RecoveryConfig(**rkw)
    return Config(**kw)


def load_config(path: str | None = None) -> Config:
    """Load and validate; a missing file gives the defaults, anything wrong a ConfigError."""
    import yaml  # imported here: `gpualert run` never needs it

    p = config_path(path)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return Config()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"gpualert: config {p}: cannot read: {e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"gpualert: config {p}:{line}: not valid YAML: {problem}") from None
    return parse_config(data, p)
