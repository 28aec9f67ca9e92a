"""The config's checker: each value of /etc/gpualert/gpualert.yaml checked against what is
accepted, each error one line naming the file, the key and what is accepted (core/config.py
holds the sections; this, the checks they share)."""

from __future__ import annotations

import os
import re
from typing import Any

from gpualert_slurm.core.options import parse_duration
from gpualert_slurm.core.vocab import ACTION_NAMES


class ConfigError(ValueError):
    """str() is a one-line message: file, key, what is accepted."""


class Checker:
    """Checks one config file's values; every error is a ConfigError naming the file, the key
    and what is accepted."""

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

    def str_list(self, key: str, value: Any, pattern: re.Pattern[str] | None,
                  what: str) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or any(
                not isinstance(v, str) or (pattern is not None and not pattern.fullmatch(v))
                for v in value):
            raise self.err(key, f"a list of {what}", value)
        return tuple(value)

    def abs_path(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or not os.path.isabs(value) or "\n" in value:
            raise self.err(key, "an absolute path", value)
        return os.path.normpath(value)

    def duration(self, key: str, value: Any) -> int:
        try:
            return parse_duration(str(value))
        except ValueError:
            raise self.err(key, "a duration like 90s, 30m, 2h or 1d", value) from None

    def actions(self, key: str, value: Any) -> tuple[str, ...]:
        """A list of recovery actions (the names of core/vocab.py's ACTION_SPECS)."""
        if not isinstance(value, list) or any(a not in ACTION_NAMES for a in value):
            raise self.err(key, f"a list of {', '.join(ACTION_NAMES)}", value)
        return tuple(value)
