"""Where each fact comes from (docs/SECURITY.md, "Provenance model").

Origins: "slurm" (slurmctld, sacct), "root" (root on a node: its kernel log and NVML), "plugin"
(records root wrote where the user cannot write), "job" (anything in a file the job's user can
write, whatever it claims). Root's facts travel from the node Epilog to the controller in the
job's own spool directory, so they carry a seal: a MUNGE credential that root made on the node
over a digest of the facts, bound to the job, the attempt and the node. The controller accepts
them only when the seal checks (or, on a spool that does not squash root, when the record is
root's own file naming this run); anything else is the job's.

Which kernel lines may speak for the GPU driver: core/kernel_lines.py; which classes a sealed
driver line backs (the classifier's kernel rules): classify/node_trust.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpualert_slurm.core.evidence import parse_iso_line, run_tool
from gpualert_slurm.core.kernel_lines import driver_xid, without_comm  # noqa: F401 (tests, callers)

KIND = "gpualert-node-facts"
SEAL_VERSION = "v1"
MUNGE_TIMEOUT_S = 5.0
WINDOW_SLACK_S = 2.0  # Slurm gives whole seconds
LABEL_JOB = "printed by the job"
MAX_CHECKS = 64  # node records whose seal the job epilog checks (unmunge each)
# The seal's lifetime: MUNGE's default (300 s) is shorter than a job epilog may wait for its
# slot (hooks/gate.py, 900 s) behind a burst of other users' ending jobs, and an expired seal
# makes a real fault's facts the job's (no drain). 3600 s is munged's default --max-ttl (it
# caps a longer one); the replay cache still lets each credential be decoded once.
SEAL_TTL_S = 3600


def pci_id(bus_id: Any) -> str | None:
    """NVML's '00000000:3B:00.0' or the driver's '0000:3b:00' -> '0000:3b:00'."""
    m = re.fullmatch(r"(?:PCI:)?([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?",
                     str(bus_id or "").strip())
    if not m:
        return None
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}"


def job_gpu_bus_ids(env: dict[str, str], nvml_after: Any) -> list[str] | None:
    """The PCI bus ids of the job's GPUs on this node: the device indexes slurmd gave the
    Epilog (SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES) looked up in NVML. None when unknown
    (no NVML, no GPUs named, an index NVML does not have)."""
    raw = env.get("SLURM_JOB_GPUS") or env.get("CUDA_VISIBLE_DEVICES") or ""
    idx = [s.strip() for s in raw.split(",") if s.strip()]
    if not idx or not all(s.isdigit() for s in idx) or not isinstance(nvml_after, dict):
        return None
    by_index = {d.get("index"): pci_id(d.get("pci_bus_id"))
                for d in nvml_after.get("devices") or [] if isinstance(d, dict)}
    out = [by_index.get(int(s)) for s in idx]
    return None if any(b is None for b in out) else [str(b) for b in out]


# ---- the node's facts and their seal ------------------------------------------------------

def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      default=str).encode()


def seal_payload(root_facts: dict[str, Any]) -> str:
    digest = hashlib.sha256(canonical(root_facts)).hexdigest()
    return (f"{KIND}:{SEAL_VERSION}:{root_facts.get('job_id')}:{root_facts.get('attempt')}:"
            f"{root_facts.get('node')}:{digest}")


def munge_socket(configured: str | None = None, env: Mapping[str, str] | None = None
                 ) -> str | None:
    """The munged socket Slurm itself uses: the config's, else AuthInfo=socket= of the
    slurm.conf SLURM_CONF names (else /etc/slurm/slurm.conf), else None (munge's default)."""
    if configured:
        return configured
    env = os.environ if env is None else env
    conf = env.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    try:
        with open(conf, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.split("#", 1)[0].strip().partition("=")
        if key.strip().lower() != "authinfo":
            continue
        for part in value.split(","):
            k, _, v = part.strip().partition("=")
            if k.strip().lower() == "socket" and v.strip():
                return v.strip()
    return None


def seal(root_facts: dict[str, Any], socket: str | None,
         timeout: float = MUNGE_TIMEOUT_S) -> dict[str, Any]:
    """A MUNGE credential over the facts' digest, decodable by root only (-u 0); or, when
    munge is not there or fails, {"method": None, "why": ...} (the facts are then the job's
    unless the record's ownership speaks for it, see verify)."""
    argv = ["munge", "-u", "0", "-t", str(SEAL_TTL_S), "-s", seal_payload(root_facts)]
    if socket:
        argv += ["-S", socket]
    out, why = run_tool(argv, timeout)
    if out is None or not out.strip().startswith("MUNGE:"):
        return {"method": None, "why": why or "munge printed no credential"}
    return {"method": "munge", "credential": out.strip()}


@dataclass(frozen=True)
class Checked:
    verified: bool
    origin: str | None  # "munge" | "root-owned" | None
    why: str | None  # why not verified


def _unmunge(credential: str, socket: str | None, timeout: float) -> tuple[dict[str, str],
                                                                          str | None, str]:
    argv = ["unmunge", "-N"]
    if socket:
        argv += ["-S", socket]
    exe = shutil.which("unmunge")
    if exe is None:
        return {}, None, "unmunge is not installed"
    try:
        p = subprocess.run([exe, *argv[1:]], input=credential, capture_output=True, text=True,
                           errors="replace", timeout=timeout, close_fds=True)
    except subprocess.TimeoutExpired:
        return {}, None, f"unmunge: no answer within {timeout:g} s"
    except OSError as e:
        return {}, None, f"unmunge: {e}"
    head, sep, payload = p.stdout.partition("\n\n")
    meta = {}
    for line in head.splitlines():
        k, _, v = line.partition(":")
        meta[k.strip().upper()] = v.strip()
    if p.returncode != 0:
        err = (p.stderr or "").strip().removeprefix("unmunge: Error: ")[:200]
        return meta, None, f"the MUNGE seal does not check: {err or 'exit ' + str(p.returncode)}"
    return meta, payload.rstrip("\n") if sep else None, ""


def verify(record: Any, file_stat: os.stat_result | None, job_id: str, attempt: int,
           node: str, socket: str | None, root_owned_ok: bool = True,
           timeout: float = MUNGE_TIMEOUT_S) -> Checked:
    """Whether a node record's root_facts were collected by root on `node` for this job's
    attempt (docs/SECURITY.md): its MUNGE seal decodes (as root) to uid 0 and the facts'
    digest, or (root_owned_ok, a spool that does not squash root) it is root's own regular
    file, one link, writable by root only. Either way the facts must name this job, attempt
    and node: a record renamed in from another run is refused."""
    if not isinstance(record, dict):
        return Checked(False, None, "no node record")
    rf = record.get("root_facts")
    if not isinstance(rf, dict) or rf.get("kind") != KIND:
        return Checked(False, None, "the record carries no root facts")
    got = (str(rf.get("job_id")), str(rf.get("attempt")), str(rf.get("node")))
    if got != (str(job_id), str(attempt), str(node)):
        return Checked(False, None, f"the record is about job {got[0]} attempt {got[1]} on "
                       f"{got[2]}, not this run on {node}")
    s = record.get("seal") or {}
    why = str(s.get("why") or "the record is not sealed") if isinstance(s, dict) else \
        "the record's seal is not an object"
    if isinstance(s, dict) and s.get("method") == "munge" and isinstance(s.get("credential"),
                                                                         str):
        meta, payload, err = _unmunge(s["credential"][:4096], socket, timeout)
        if not err:
            uid = meta.get("UID", "")
            if uid != "0":
                why = f"the MUNGE seal was made by uid {uid or '?'}, not root"
            elif payload != seal_payload(rf):
                why = "the MUNGE seal is over other facts than the record holds"
            else:
                return Checked(True, "munge", None)
        else:
            why = err
    if root_owned_ok and file_stat is not None and file_stat.st_uid == 0 \
            and stat.S_ISREG(file_stat.st_mode) and file_stat.st_nlink == 1 \
            and not file_stat.st_mode & 0o022:
        return Checked(True, "root-owned", None)
    return Checked(False, None, why)


def kmsg_writable(path: str = "/dev/kmsg") -> str | None:
    """Why lines in this node's kernel log may not be the kernel's or root's: /dev/kmsg
    writable by someone other than root (a site's or container's change); None as shipped."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_uid != 0 or st.st_mode & 0o022:
        return f"{path} is writable by others than root (mode {stat.filemode(st.st_mode)})"
    return None


def _conf_files(main: str, dropins: str) -> list[str]:
    """A config file and its drop-ins, in the order they apply."""
    try:
        names = sorted(n for n in os.listdir(dropins) if n.endswith(".conf"))
    except OSError:
        names = []
    return [main, *(os.path.join(dropins, n) for n in names)]


def _read_small(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(1 << 20)
    except OSError:
        return ""


def kmsg_forwarded(journald: str = "/etc/systemd/journald.conf",
                   rsyslog: str = "/etc/rsyslog.conf",
                   sysctl: str = "/proc/sys") -> str | None:
    """Why lines in this node's kernel log may be any user's: journald with ForwardToKMsg= on,
    or rsyslog loading omkmsg (either writes a user's `logger` line into /dev/kmsg as root,
    its tag first: "<tag>[pid]: <text>"), or netfilter logging from every network namespace
    while users may make one (a LOG rule's prefix in the user's own namespace begins the
    kernel's line: 'NVRM: Xid (0000:3b:00): 79,' fits iptables' 29 characters). Any of them
    would make a line the user chose read as the driver's (red-team pass). None where none
    is set up (the defaults)."""
    nf = _read_small(os.path.join(sysctl, "net/netfilter/nf_log_all_netns")).strip()
    userns = _read_small(os.path.join(sysctl, "user/max_user_namespaces")).strip()
    if nf not in ("", "0") and userns not in ("", "0"):
        return ("netfilter logs from every network namespace (net.netfilter.nf_log_all_netns"
                f"={nf}) and users may make one (user.max_user_namespaces={userns})")
    on = None
    for f in _conf_files(journald, journald + ".d"):
        for line in _read_small(f).splitlines():
            k, _, v = line.split("#", 1)[0].partition("=")
            if k.strip() == "ForwardToKMsg":
                on = v.strip().lower() in ("1", "yes", "true", "on")
    if on:
        return f"journald forwards syslog lines to /dev/kmsg (ForwardToKMsg= in {journald})"
    for f in _conf_files(rsyslog, os.path.join(os.path.dirname(rsyslog), "rsyslog.d")):
        for line in _read_small(f).splitlines():
            if "omkmsg" in line.split("#", 1)[0]:
                return f"rsyslog writes syslog lines to /dev/kmsg (omkmsg in {f})"
    return None


def node_facts(job_id: str, attempt: int, node: str, window: tuple[float | None, float],
               window_source: str, kernel: dict[str, Any], nvml: dict[str, Any],
               gpus: list[str] | None) -> dict[str, Any]:
    """What root on this node collected, in the shape the seal covers."""
    lines = []
    for ln in kernel.get("lines") or []:
        t, text = parse_iso_line(ln)
        item: dict[str, Any] = {"time": t, "text": text}
        x = driver_xid(text)
        if x:
            item["pci"], item["xid"] = x
        lines.append(item)
    changed = nvml.get("changed") if isinstance(nvml, dict) else None
    return {"kind": KIND, "job_id": str(job_id), "attempt": int(attempt), "node": node,
            "kmsg_writable": kmsg_writable() or kmsg_forwarded(),
            "window": list(window), "window_source": window_source,
            "kernel": {"source": kernel.get("source"), "absent": kernel.get("absent"),
                       "lines": lines},
            "nvml": {"changed": changed if isinstance(changed, list) else [],
                     "absent": nvml.get("absent") if isinstance(nvml, dict) else None},
            "gpus": gpus}


# ---- the controller's view ----------------------------------------------------------------

def has_facts(rec: Any) -> bool:
    """Whether a node record's root facts hold anything (a kernel line, an NVML change)."""
    rf = rec.get("root_facts") if isinstance(rec, dict) else None
    if not isinstance(rf, dict):
        return False
    return bool((rf.get("kernel") or {}).get("lines") or (rf.get("nvml") or {}).get("changed"))


def may_back(rec: Any) -> bool:
    """Whether a node record's root facts hold a driver Xid line or an NVML change: what
    could back a class (the ones checked first when there are many)."""
    rf = rec.get("root_facts") if isinstance(rec, dict) else None
    if not isinstance(rf, dict):
        return False
    lines = (rf.get("kernel") or {}).get("lines") or []
    return any(isinstance(x, dict) and "xid" in x for x in lines) or \
        bool((rf.get("nvml") or {}).get("changed"))


def backing(trusted: Mapping[str, Any] | None, node: str, cls: str) -> str | None:
    """The Slurm or root fact that backs class `cls` on `node`, as a label for the report and
    the audit log ("kernel log of n2: NVRM: Xid ..."), or None."""
    n = ((trusted or {}).get("nodes") or {}).get(node) or {}
    if not n.get("verified"):
        return None
    for x in n.get("driver") or []:
        if not x.get("ignored") and cls in (x.get("classes") or []):
            return f"kernel log of {node}: {x.get('text')}"[:300]
    if cls == "gpu_hardware":
        for c in n.get("nvml_changed") or []:
            return (f"NVML of {node}: GPU {c.get('gpu')} {c.get('counter')} "
                    f"{c.get('before')} -> {c.get('after')}")
    return None


def not_backed(trusted: Mapping[str, Any] | None, node: str, cls: str) -> str:
    """Why nothing from Slurm or root backs `cls` on `node` (the report's "not acted on")."""
    t = trusted or {}
    slurm_nodes = list((t.get("slurm") or {}).get("nodes") or [])
    if node not in slurm_nodes:
        ran = ", ".join(slurm_nodes) or "no node Slurm named"
        return f"Slurm did not run this attempt on {node} (it ran on {ran})"
    n = (t.get("nodes") or {}).get(node) or {}
    if not n:
        return f"no node record from {node}: its kernel log and NVML are not known"
    if not n.get("verified") and not n.get("empty"):
        return f"{node}'s node record could not be verified as root's ({n.get('why')})"
    ignored = [x for x in n.get("driver") or [] if x.get("ignored")]
    if cls in ("gpu_hardware", "cuda_error"):
        what = "the Xid line was printed by the job, not found in" if not ignored else \
            f"the Xid line in {node}'s kernel log is {ignored[0]['ignored']}; nothing else in"
        return f"{what} {node}'s kernel log"
    return f"no fact from Slurm or root on {node} says {cls}"


def label(item: dict[str, Any], trusted: dict[str, Any] | None) -> dict[str, Any]:
    """The provenance of one evidence item of the verdict ({"origin", "node", "label"})."""
    f = str(item.get("file") or "")
    text = str(item.get("text") or "")
    slurm = (trusted or {}).get("slurm") or {}
    if f == "(slurm)":
        state = slurm.get("state") or (text.removeprefix("job state ").split() or ["?"])[0]
        return {"origin": "slurm", "node": None, "label": f"Slurm: {state}"}
    if f == "(exit status)":
        return {"origin": "slurm", "node": None, "label": "Slurm: the job's exit status"}
    if f in ("(kernel log)", "(nvml)"):
        m = re.match(r"([A-Za-z0-9_.\-]+): ", text)
        node = m.group(1) if m else None
        nodes = (trusted or {}).get("nodes") or {}
        n = nodes.get(node or "") or {}
        what = "kernel log" if f == "(kernel log)" else "NVML"
        if f == "(nvml)" and node not in nodes:  # NVML's line names no node: whose moved
            moved = [k for k, x in nodes.items() if x.get("verified") and x.get("nvml_changed")]
            if moved:
                return {"origin": "root", "node": moved[0] if len(moved) == 1 else None,
                        "label": f"NVML of {', '.join(moved)}"}
            node = None
        if node and n.get("verified"):
            return {"origin": "root", "node": node, "label": f"{what} of {node}"}
        why = n.get("why") or "no node record"
        return {"origin": "job", "node": node,
                "label": f"{node or 'a node'}'s {what} as its record says (not verified: "
                         f"{why})"}
    if f in ("(task records)", "(heartbeat)"):
        return {"origin": "job", "node": None, "label": "the job's files"}
    return {"origin": "job", "node": None, "label": LABEL_JOB}


def annotate(verdict: dict[str, Any], trusted: dict[str, Any] | None) -> None:
    """Put the provenance on every evidence item and cascade of a classifier verdict."""
    for key in ("evidence", "cascades"):
        for item in verdict.get(key) or []:
            if isinstance(item, dict):
                item["provenance"] = label(item, trusted)
