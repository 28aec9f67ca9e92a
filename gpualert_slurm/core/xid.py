"""The GPU fault catalogue (data/xid-catalogue.yaml, a site's xid.d overrides): what an NVIDIA
Xid code means, who made it (the class) and NVIDIA's resolution bucket (what the node needs).
Recovery reads the bucket of a sealed driver line; the report says it in words."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from gpualert_slurm.core.kernel_lines import driver_xid

SITE_XID_DIR = "/etc/gpualert/xid.d"
BUCKETS = ("IGNORE", "RESTART_APP", "RESET_GPU", "RESTART_BM", "CONTACT_SUPPORT")
UNKNOWN_BUCKET = "CONTACT_SUPPORT"
CAUSES = ("application", "hardware", "informational")
CAUSE_CLASS = {"application": "cuda_error", "hardware": "gpu_hardware", "informational": None}
# what the node needs, in Slurm's Reason= and the report
BUCKET_WORDS = {"IGNORE": "nothing to do", "RESTART_APP": "restart the program",
                "RESET_GPU": "reset GPU", "RESTART_BM": "reboot",
                "CONTACT_SUPPORT": "contact support"}
BUCKET_ADVICE = {"IGNORE": "no action is needed for the node",
                 "RESTART_APP": "restart the program (the GPU itself needs nothing)",
                 "RESET_GPU": "reset the GPU before it runs another job",
                 "RESTART_BM": "reboot the node",
                 "CONTACT_SUPPORT": "take the node out of service and contact NVIDIA support"}
# recovery's actions per bucket (on a sealed root fact only)
BUCKET_ACTIONS = {"IGNORE": (), "RESTART_APP": ("requeue",),
                  "RESET_GPU": ("drain_node", "requeue", "exclude_node"),
                  "RESTART_BM": ("drain_node", "requeue", "exclude_node"),
                  "CONTACT_SUPPORT": ("drain_node", "requeue", "exclude_node")}
SEVERITY = {b: i for i, b in enumerate(BUCKETS)}
ROW_KEYS = {"code", "mnemonic", "short", "meaning", "nvidia", "bucket", "why", "cause",
            "cause_why", "nvsentinel"}
_NVLINK = re.compile(r"^\d+, (?P<unit>[A-Z][A-Z0-9_]*) (?P<sev>Link Fatal|Nonfatal|Fatal)\b"
                     r".*?\((?P<info>0x[0-9A-Fa-f]{1,8}) (?P<status>0x[0-9A-Fa-f]{1,8})")


def default_cause(bucket: str) -> str:
    return {"RESTART_APP": "application", "IGNORE": "informational"}.get(bucket, "hardware")


@dataclass(frozen=True)
class XidFact:
    """One driver Xid line as the catalogue reads it."""

    code: int
    pci: str
    short: str
    meaning: str
    bucket: str  # after the NVLink / recovery-action decode
    nvidia: str | None
    cause: str
    known: bool = True
    sub: dict[str, Any] = field(default_factory=dict)  # NVLink: unit, severity, sub_code, status

    @property
    def cls(self) -> str | None:
        return CAUSE_CLASS.get(self.cause)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "pci": self.pci, "short": self.short,
                "meaning": self.meaning, "bucket": self.bucket, "nvidia": self.nvidia,
                "cause": self.cause, "class": self.cls, "known": self.known,
                **({"sub": dict(self.sub)} if self.sub else {})}


@dataclass
class Catalogue:
    rows: dict[int, dict[str, Any]]
    escalate_after: int
    escalate_window_s: int
    nvlink: dict[str, Any]
    recovery_action: list[tuple[re.Pattern[str], str]]
    sources: list[str]  # the files read, shipped first
    errors: list[str] = field(default_factory=list)  # site files refused, and why

    def row(self, code: int) -> dict[str, Any]:
        """The row of `code`, its bucket and cause filled in; an unknown code's default."""
        r = self.rows.get(code)
        if r is None:
            return {"code": code, "mnemonic": "UNKNOWN", "short": "unknown Xid",
                    "meaning": "a code this catalogue does not know: a person should look",
                    "nvidia": None, "bucket": UNKNOWN_BUCKET, "cause": "hardware",
                    "known": False}
        bucket = r.get("bucket") or r.get("nvidia") or UNKNOWN_BUCKET
        return {**r, "bucket": bucket, "cause": r.get("cause") or default_cause(bucket),
                "known": True}

    def read(self, text: str) -> XidFact | None:
        """The driver Xid line `text` (from its first character, "NVRM: Xid (...): N, ...") as
        a fact: the row, with the NVLink sub-code and Xid 154's named action decoded."""
        x = driver_xid(text)
        if not x:
            return None
        pci, code = x
        r = self.row(code)
        bucket = r["bucket"]
        sub: dict[str, Any] = {}
        rest = text.split("): ", 1)[1] if "): " in text else ""
        if code in (self.nvlink.get("codes") or ()):
            bucket, sub = self._nvlink(code, rest, bucket)
        elif code == 154:
            named = rest.rsplit(" to ", 1)[-1] if " to " in rest else ""
            for pat, b in self.recovery_action:
                if pat.search(f"to {named}"):
                    bucket = b
                    break
        cause = r["cause"]
        if code == 154 and bucket == "IGNORE" and code in self.rows \
                and "cause" not in (self._site_keys.get(code) or {}):
            cause = "informational"  # "to 0x0 (None)": nothing failed
        return XidFact(code=code, pci=pci, short=str(r.get("short") or ""),
                       meaning=str(r.get("meaning") or ""), bucket=bucket,
                       nvidia=r.get("nvidia"), cause=cause, known=r["known"], sub=sub)

    _site_keys: dict[int, dict[str, Any]] = field(default_factory=dict)

    def _nvlink(self, code: int, rest: str, bucket: str) -> tuple[str, dict[str, Any]]:
        m = _NVLINK.match(rest)
        if not m:
            return bucket, {}
        info, status = int(m["info"], 16), int(m["status"], 16)
        sub = {"unit": m["unit"], "severity": m["sev"], "sub_code": (info >> 20) & 0x3F,
               "intrinfo": f"0x{info:08x}", "status": f"0x{status:08x}"}
        for e in self.nvlink.get("exceptions") or []:
            if e.get("code") != code or not m["unit"].startswith(str(e.get("unit"))):
                continue
            if "sub_code" in e and e["sub_code"] != sub["sub_code"]:
                continue
            if "status" in e and e["status"] != status:
                continue
            return str(e["bucket"]), sub
        sev = (self.nvlink.get("severity") or {}).get(m["sev"])
        return (str(sev) if sev else bucket), sub


def _merge_site(rows: dict[int, dict[str, Any]], doc: Any, path: str,
                esc: dict[str, Any], site_keys: dict[int, dict[str, Any]]) -> None:
    """One site file's rows and escalation merged in (ValueError: the file is refused whole)."""
    if not isinstance(doc, dict) or not set(doc) <= {"codes", "escalation"}:
        raise ValueError(f"{path}: a mapping of codes: and escalation: expected")
    codes = doc.get("codes") or {}
    if not isinstance(codes, dict):
        raise ValueError(f"{path}: codes: must map an Xid number to its fields")
    new: dict[int, dict[str, Any]] = {}
    for k, v in codes.items():
        try:
            code = int(k)
        except (TypeError, ValueError):
            raise ValueError(f"{path}: {k!r} is not an Xid number") from None
        if not isinstance(v, dict) or not set(v) <= ROW_KEYS - {"code"}:
            raise ValueError(f"{path}: Xid {code}: fields are {sorted(ROW_KEYS - {'code'})}")
        if "bucket" in v and v["bucket"] not in BUCKETS:
            raise ValueError(f"{path}: Xid {code}: bucket {v['bucket']!r} is not one of "
                             f"{', '.join(BUCKETS)}")
        if "cause" in v and v["cause"] not in CAUSES:
            raise ValueError(f"{path}: Xid {code}: cause is one of {', '.join(CAUSES)}")
        new[code] = v
    e = doc.get("escalation") or {}
    if not isinstance(e, dict) or not set(e) <= {"after", "window_s"} or not all(
            isinstance(x, int) and x > 0 for x in e.values()):
        raise ValueError(f"{path}: escalation: {{after: N, window_s: S}}, positive integers")
    for code, v in new.items():
        base = rows.get(code) or {"code": code, "mnemonic": "SITE", "short": f"Xid {code}",
                                  "meaning": "defined by this site", "nvidia": None}
        rows[code] = {**base, **v, "origin": path}
        site_keys.setdefault(code, {}).update(v)
    esc.update(e)


def load_catalogue(site_dir: str | None = None, site: bool = True) -> Catalogue:
    """The shipped catalogue with the site's xid.d files merged in (GPUALERT_XID_DIR, else
    /etc/gpualert/xid.d); a site file that does not parse or holds a wrong field is refused
    whole and named in `errors`, the rest still applies."""
    import yaml

    data = yaml.safe_load(resources.files("gpualert_slurm").joinpath(
        "data/xid-catalogue.yaml").read_text())
    rows = {int(r["code"]): dict(r) for r in data["codes"]}
    esc = dict(data.get("escalation") or {})
    sources = ["data/xid-catalogue.yaml"]
    errors: list[str] = []
    site_keys: dict[int, dict[str, Any]] = {}
    d = site_dir or os.environ.get("GPUALERT_XID_DIR", SITE_XID_DIR)
    if site:
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith((".yaml", ".yml")))
        except OSError:
            names = []
        for n in names:
            path = os.path.join(d, n)
            try:
                with open(path, encoding="utf-8") as f:
                    doc = yaml.safe_load(f.read(1 << 20))
                trial, trial_esc, trial_keys = dict(rows), dict(esc), dict(site_keys)
                _merge_site(trial, doc, path, trial_esc, trial_keys)
                rows, esc, site_keys = trial, trial_esc, trial_keys
                sources.append(path)
            except (OSError, ValueError, yaml.YAMLError) as e:
                errors.append(f"{path}: {str(e)[:200]}")
    ra = [(re.compile(x["match"]), str(x["bucket"])) for x in data.get("recovery_action") or []]
    return Catalogue(rows=rows, escalate_after=int(esc.get("after", 2)),
                     escalate_window_s=int(esc.get("window_s", 604800)),
                     nvlink=dict(data.get("nvlink") or {}), recovery_action=ra,
                     sources=sources, errors=errors, _site_keys=site_keys)


@functools.cache
def catalogue() -> Catalogue:
    """The catalogue this process uses (read once: a hook's process is short-lived)."""
    return load_catalogue()


def read_line(text: str) -> XidFact | None:
    """The catalogue's reading of one driver Xid line, or None for any other line."""
    return catalogue().read(text)


def worst(buckets: list[str]) -> str:
    """The bucket that asks the most of the node."""
    return max(buckets, key=lambda b: SEVERITY.get(b, len(BUCKETS))) if buckets else "IGNORE"
