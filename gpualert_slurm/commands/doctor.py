"""`gpualert doctor`: check an installation, one line per check, and say how to fix what fails.

    ok   <check>
    warn <check>: <what is missing> -> <fix>      (optional parts, see the README's install;
                                                   the site's state: quarantined mail, an
                                                   open recovery circuit breaker)
    info <fact>                                   (spool usage, retention)
    FAIL <check>: <what is wrong> -> <fix>
Exit status 1 when any check fails; warnings do not fail. Reads files only (and asks nothing of
Slurm: `scontrol --version` prints the client's own release); the one network
action is a TCP connect to the mail relay to read its SMTP banner.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import socket
import stat
import subprocess
from dataclasses import dataclass

from gpualert_slurm.core import cgroup_layout
from gpualert_slurm.core.config import Config, ConfigError, config_path, load_config

PLUGIN_NAME = "gpualert.so"
DEFAULT_PLUGIN = "/opt/gpualert/lib/gpualert.so"
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"


@dataclass(frozen=True)
class Hook:
    """One slurm.conf hook line of the README's install, exactly as etc/slurm.conf.snippet
    writes it (tests/test_doctor.py checks that the three agree)."""

    key: str  # slurm.conf key
    hook: str  # `gpualert hook <hook>`, shim epilog.d/gpualert-<hook>
    value: str  # the value the README and the snippet give the key
    shim: str  # where the README installs the shim
    required: bool  # README: required install step; else optional (reports)
    without: str = ""  # what a site without it lacks (the warning's text)


HOOKS = (
    Hook("Prolog", "prolog", "/etc/slurm/prolog.d/*", "/etc/slurm/prolog.d/gpualert-prolog",
         True),
    Hook("Epilog", "epilog", "/etc/slurm/epilog.d/*", "/etc/slurm/epilog.d/gpualert-epilog",
         False, "no node verdicts (kernel log, GPU counters) for the reports"),
    Hook("EpilogSlurmctld", "epilog-slurmctld", "/etc/slurm/gpualert-epilog-slurmctld",
         "/etc/slurm/gpualert-epilog-slurmctld", False,
         "no verdicts and no reports (logs are still kept and `gpualert classify` works)"),
)
HOOK_KEYS = {h.key: h.hook for h in HOOKS}
MAX_INCLUDE_DEPTH = 8
SMTP_TIMEOUT_S = 5.0
SCAN_LIMIT_S = 10.0  # bound on measuring the spool (a huge one is reported in part)


@dataclass
class Result:
    check: str
    ok: bool
    problem: str = ""
    fix: str = ""
    kind: str = ""  # "warn": an optional part is missing; "info": a fact, not a check

    @property
    def failed(self) -> bool:
        """Only a FAIL fails the doctor; a warning never does, whatever its `ok`."""
        return not self.ok and self.kind not in ("warn", "info")

    def line(self) -> str:
        if self.kind == "info":
            return f"info {self.check}"
        if self.kind == "warn":
            return f"warn {self.check}: {self.problem} -> {self.fix}"
        if self.ok:
            return f"ok   {self.check}"
        return f"FAIL {self.check}: {self.problem} -> {self.fix}"


def _conf_lines(path: str, seen: set[str], depth: int = 0) -> list[tuple[str, int, str]]:
    """(file, line number, text) of a Slurm-style config and every file it `include`s, with
    comments stripped. Relative includes are relative to the including file's directory."""
    real = os.path.realpath(path)
    if real in seen or depth > MAX_INCLUDE_DEPTH:
        return []
    seen.add(real)
    out: list[tuple[str, int, str]] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, raw in enumerate(f, 1):
            text = raw.split("#", 1)[0].strip()
            if not text:
                continue
            words = text.split(None, 1)
            if words[0].lower() == "include" and len(words) == 2:
                pattern = words[1].strip()
                if not os.path.isabs(pattern):
                    pattern = os.path.join(os.path.dirname(path), pattern)
                for inc in sorted(glob.glob(pattern)):
                    try:
                        out += _conf_lines(inc, seen, depth + 1)
                    except OSError:
                        continue
                continue
            out.append((path, n, text))
    return out


def _plugstack_of(slurm_conf: str) -> str:
    """Where Slurm itself looks: PlugStackConfig=, else plugstack.conf beside slurm.conf."""
    try:
        for _, _, text in _conf_lines(slurm_conf, set()):
            k, eq, v = text.partition("=")
            if eq and k.strip().lower() == "plugstackconfig":
                return v.strip()
    except OSError:
        pass
    return os.path.join(os.path.dirname(slurm_conf) or ".", "plugstack.conf")


def check_config(path: str) -> tuple[Result, Config]:
    name = f"config {path}"
    if not os.path.exists(path):
        return Result(f"{name} (absent: built-in defaults)", True), Config()
    try:
        return Result(name, True), load_config(path)
    except ConfigError as e:
        return Result(name, False, str(e), "correct that key (annotated example: "
                      "etc/gpualert.yaml)"), Config()


def check_plugstack(plugstack: str, cfg: Config) -> list[Result]:
    line_fix = (f"add the line `optional {DEFAULT_PLUGIN} spool={cfg.spool} default=off` to "
                f"{plugstack} or a file it includes (Debian: /etc/slurm/plugstack.conf.d/"
                "gpualert.conf)")
    try:
        lines = _conf_lines(plugstack, set())
    except OSError as e:
        return [Result("plugin listed in plugstack.conf", False,
                       f"cannot read {plugstack}: {e.strerror or e}", line_fix)]
    found = None
    for file, n, text in lines:
        words = text.split()
        if len(words) >= 2 and words[0] in ("required", "optional") and \
                os.path.basename(words[1]) == PLUGIN_NAME:
            found = (file, n, words)
            break
    if found is None:
        res = [Result("plugin listed in plugstack.conf", False,
                      f"no required/optional line names {PLUGIN_NAME} in {plugstack} or its "
                      "includes", line_fix)]
        res.append(_check_plugin_file(DEFAULT_PLUGIN))
        return res
    file, n, words = found
    res = [Result(f"plugin listed in plugstack.conf ({file}:{n})", True)]
    res.append(_check_plugin_file(words[1]))
    args = dict(w.split("=", 1) for w in words[2:] if "=" in w)
    spool = args.get("spool")
    if spool is not None and os.path.normpath(spool) != cfg.spool:
        res.append(Result("plugin spool= matches the config", False,
                          f"{file}:{n} has spool={spool}, the config has spool: {cfg.spool}",
                          "make them the same path"))
    elif spool is not None:
        res.append(Result("plugin spool= matches the config", True))
    return res


def _check_plugin_file(path: str) -> Result:
    name = f"plugin file {path}"
    fix = "build and install it: `make -C spank install PREFIX=/opt/gpualert`"
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        return Result(name, False, f"cannot read it: {e.strerror or e}", fix)
    if magic != b"\x7fELF":
        return Result(name, False, "not a shared object (no ELF header)", fix)
    return Result(name, True)


def _is_shim(path: str, hook: str) -> bool:
    if os.path.basename(path) == f"gpualert-{hook}":
        return True
    try:  # a site copy under another name still calls `gpualert hook <hook>`
        with open(path, "rb") as f:
            return f"hook {hook} ".encode() in f.read(65536)
    except OSError:
        return False


def check_slurm_conf(slurm_conf: str) -> list[Result]:
    try:
        lines = _conf_lines(slurm_conf, set())
    except OSError as e:
        return [Result(f"{h.key}= in slurm.conf", False, f"cannot read {slurm_conf}: "
                       f"{e.strerror or e}", "pass --slurm-conf PATH") for h in HOOKS]
    values: dict[str, tuple[str, int, str]] = {}
    for file, n, text in lines:
        for tok in text.split():
            k, eq, v = tok.partition("=")
            for h in HOOKS:
                if eq and k.lower() == h.key.lower():
                    values[h.key] = (file, n, v)
    res = []
    for h in HOOKS:
        check = f"{h.key}= in slurm.conf runs gpualert-{h.hook}"
        fix = (f"install epilog.d/gpualert-{h.hook} as {h.shim} (mode 0755) and set "
               f"{h.key}={h.value} in slurm.conf"
               + (" (then restart slurmctld)" if h.key == "EpilogSlurmctld" else ""))
        if h.key not in values:
            if h.required:
                res.append(Result(check, False, f"no {h.key}= in {slurm_conf}", fix))
            else:
                res.append(Result(f"{h.key}= in slurm.conf", True,
                                  f"not configured (optional): {h.without}", fix, kind="warn"))
            continue
        file, n, value = values[h.key]
        paths = [p for part in value.split(",") for p in sorted(glob.glob(part))]
        shims = [p for p in paths if _is_shim(p, h.hook)]
        if not shims:
            res.append(Result(check, False, f"{file}:{n} {h.key}={value} matches no "
                              f"gpualert-{h.hook} script", fix))
        elif not all(os.access(p, os.X_OK) for p in shims):
            res.append(Result(check, False, f"{shims[0]} is not executable",
                              f"chmod 0755 {shims[0]}"))
        else:
            res.append(Result(check, True))
    return res


def _conf_value(path: str, key: str) -> str:
    """KEY's value in a Slurm-style conf file (and its includes), or "" (unset, unreadable)."""
    value = ""
    with contextlib.suppress(OSError):
        for _file, _n, text in _conf_lines(path, set()):
            for tok in text.split():
                k, eq, v = tok.partition("=")
                if eq and k.lower() == key.lower():
                    value = v
    return value


def check_cgroup(slurm_conf: str, mounts: str = "/proc/self/mounts") -> Result:
    """This host's cgroup layout, and whether the tap's stall guarantee holds on it
    (core/cgroup_layout.py): a warning where it does not."""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as f:
            kind = cgroup_layout.layout(f.read())
    except OSError as e:
        return Result("cgroup layout", True, f"cannot read {mounts}: {e.strerror or e}",
                      "run doctor on a compute node", kind="warn")
    g = cgroup_layout.tap_guarantee(
        kind, _conf_value(slurm_conf, "ProctrackType"),
        _conf_value(os.path.join(os.path.dirname(slurm_conf), "cgroup.conf"), "CgroupPlugin"))
    if g.holds:
        return Result(f"cgroup layout {kind}: the tap's stall guarantee holds ({g.why})", True,
                      kind="info")
    return Result(f"cgroup layout {kind}", True, f"the tap's stall guarantee does not hold: "
                  f"{g.why}", "mount one layout (cgroup2 alone at /sys/fs/cgroup, or v1) and "
                  "match cgroup.conf's CgroupPlugin to it", kind="warn")


def spool_usage(cfg: Config, time_limit_s: float = SCAN_LIMIT_S) -> list[Result]:
    """What the spool holds and what `gpualert gc` will keep of it (facts, not checks)."""
    import time

    from gpualert_slurm.commands.gc import fmt_age, fmt_bytes, scan_spool

    r = cfg.retention
    ret = (f"retention: max_age {fmt_age(r.max_age_s) if r.max_age_s else 'none'}, "
           f"max_total {fmt_bytes(r.max_total_bytes) if r.max_total_bytes else 'none'}, "
           f"min_age {fmt_age(r.min_age_s)}, local_max_age {fmt_age(r.local_max_age_s)} "
           "(applied by `gpualert gc`: "
           "etc/systemd/gpualert-gc.timer)")
    try:
        entries = scan_spool(cfg.spool, time.monotonic() + time_limit_s)
    except OSError as e:  # check_spool says what is wrong with it
        return [Result(f"spool usage: cannot read {cfg.spool}: {e.strerror or e}", True,
                       kind="info"), Result(ret, True, kind="info")]
    jobs = [u for u in entries if u.is_job]
    text = f"spool usage: {len(jobs)} job dirs, {fmt_bytes(sum(u.bytes for u in entries))}"
    if jobs:
        oldest = min(jobs, key=lambda u: u.newest)
        text += f", oldest: job {oldest.name}, idle {fmt_age(time.time() - oldest.newest)}"
    partial = [u for u in entries if u.partial]
    if partial:
        text += f" (partly measured: {partial[0].name}: {partial[0].partial})"
    return [Result(text, True, kind="info"), Result(ret, True, kind="info")]


# The Slurm releases tests/test_version_matrix.py runs (its VERSIONS; test_doctor_slurm_version
# checks the two agree): another release may parse, time or fail differently.
TESTED_SLURM = ("22.05", "24.11", "26.05")
SLURM_VERSIONS_DOC = "docs/SLURM-VERSIONS.md"


def check_slurm_version(scontrol: str = "scontrol") -> Result:
    """This node's Slurm release against the tested matrix. `scontrol --version` prints the
    client's own version: no RPC, slurmctld is not asked."""
    check = "Slurm version"
    try:
        out = subprocess.run([scontrol, "--version"], capture_output=True, text=True,
                             timeout=10, stdin=subprocess.DEVNULL).stdout.split()
    except (OSError, subprocess.TimeoutExpired) as e:
        return Result(check, True, f"cannot run {scontrol} --version ({e})",
                      "run doctor where Slurm's clients are installed", kind="warn")
    return judge_slurm_version(out[-1] if out else "")


def judge_slurm_version(version: str) -> Result:
    """The doctor's line for Slurm `version` ("26.05.5"): ok inside the tested matrix, else a
    warning that says so."""
    check = "Slurm version"
    release = ".".join(version.split(".")[:2])
    if release in TESTED_SLURM:
        return Result(f"{check} {version} (tested: {', '.join(TESTED_SLURM)})", True)
    return Result(check, True, f"Slurm {version or '(unknown)'} is outside the tested matrix "
                  f"({', '.join(TESTED_SLURM)}): JSON shapes, defaults and SPANK may differ",
                  f"see {SLURM_VERSIONS_DOC}; run tests/test_version_matrix.py against it "
                  "before relying on it", kind="warn")


# What Slurm gives the hooks before it kills them (PrologTimeout, EpilogTimeout, both from
# PrologEpilogTimeout; unset: no limit) against the shims' own bounds (epilog.d): the Prolog
# shim holds a job at most its wait for the queue worker (GPUALERT_PROLOG_COLD_WAIT, 8 s) and
# runs a Prolog nobody took detached; the node Epilog is `timeout -k 2` of
# GPUALERT_HOOK_TIMEOUT (25 s), EpilogSlurmctld 55 s, the kill included. A node's Prolog or
# Epilog killed by Slurm drains the node, EpilogSlurmctld killed loses the report
# (slurm.conf(5)). EpilogTimeout bounds both epilogs. BatchStartTimeout (default 10 s)
# counts the Prolog: past it slurmctld requeues the job, "missing from batch node".
HOOK_BOUNDS_S = {"PrologTimeout": 10, "EpilogTimeout": 57, "BatchStartTimeout": 10}


def check_hook_timeouts(slurm_conf: str) -> list[Result]:
    both = _conf_value(slurm_conf, "PrologEpilogTimeout")
    res = []
    for key, bound in HOOK_BOUNDS_S.items():
        value = _conf_value(slurm_conf, key) or (both if key != "BatchStartTimeout" else "")
        if not value or not value.isdigit():
            continue  # unset: Slurm waits for the hooks without a limit, or 10 s for a batch
        if int(value) >= bound:
            continue
        if key == "BatchStartTimeout":
            res.append(Result(f"{key} ({value} s)", False, f"gpualert's Prolog may hold a job "
                              f"{bound - 1} s (its wait for the queue worker), and slurmctld "
                              "requeues a batch job not started within BatchStartTimeout "
                              "(\"missing from batch node\")", f"set {key}= to {bound} or "
                              "more (Slurm's default), or lower GPUALERT_PROLOG_COLD_WAIT in "
                              "the Prolog shim", kind="warn"))
            continue
        res.append(Result(f"{key} ({value} s)", False, f"gpualert's hooks may run {bound} s "
                          "and Slurm would kill them first (a node's Prolog or Epilog "
                          "killed drains the node; EpilogSlurmctld killed loses the "
                          f"report)", f"set {key}= (or PrologEpilogTimeout=) to {bound} or "
                          "more, or lower GPUALERT_HOOK_TIMEOUT in the shims", kind="warn"))
    return res


def check_spool(spool: str) -> Result:
    name = f"spool {spool}"
    fix = f"install -d -o root -g root -m 0755 {spool}"
    try:
        st = os.lstat(spool)
    except OSError as e:
        return Result(name, False, f"{e.strerror or e}", fix)
    if stat.S_ISLNK(st.st_mode):
        return Result(name, False, "is a symlink", f"use the real path in the config and "
                      f"plugstack.conf, or {fix}")
    if not stat.S_ISDIR(st.st_mode):
        return Result(name, False, "is not a directory", fix)
    if st.st_uid != 0:
        return Result(name, False, f"owned by uid {st.st_uid}, not root",
                      f"chown root:root {spool}")
    if st.st_mode & 0o022:
        return Result(name, False, f"writable by group or others (mode "
                      f"{stat.S_IMODE(st.st_mode):04o})", f"chmod 0755 {spool}")
    return Result(name, True)


def check_relay(cfg: Config) -> Result:
    relay = cfg.mail.relay
    name = f"mail relay {relay}"
    fix = "start the relay or set mail.relay in the config to one the controller can reach"
    try:
        with socket.create_connection((cfg.mail.relay_host, cfg.mail.relay_port),
                                      timeout=SMTP_TIMEOUT_S) as s:
            s.settimeout(SMTP_TIMEOUT_S)
            banner = b""
            while b"\n" not in banner and len(banner) < 4096:
                chunk = s.recv(1024)
                if not chunk:
                    break
                banner += chunk
            if banner.startswith(b"220"):
                with contextlib.suppress(OSError):
                    s.sendall(b"QUIT\r\n")
                return Result(name, True)
            first = banner.split(b"\n", 1)[0].decode(errors="replace").strip()
            return Result(name, False, f"connected, but no SMTP greeting (got {first!r})", fix)
    except (OSError, TimeoutError) as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        return Result(name, False, f"cannot connect: {why}", fix)


def check_mail_chain(cfg: Config) -> list[Result]:
    """mail.slurm_mail_chain: the site's previous MailProg must be there and safe to run, or
    gpualert-mailprog refuses it and Slurm's mail goes nowhere."""
    chain = cfg.mail.slurm_mail_chain
    if not chain:
        return []
    from gpualert_slurm.notify.mailprog import check_chain

    why = check_chain(chain)
    check = f"mail.slurm_mail_chain {chain}"
    if why is None:
        return [Result(check, True)]
    return [Result(check, False, why, f"install the site's previous MailProg at {chain} "
                   "(root's, mode 0755), or remove mail.slurm_mail_chain")]


def check_outbox(cfg: Config) -> list[Result]:
    """Reports waiting in the outbox, and those given up on (quarantined) with the oldest
    reason; also that the SMTP password file, if any, is root-only."""
    from gpualert_slurm.notify import summarise

    s = summarise(cfg)
    res: list[Result] = []
    name = f"outbox {s.path}"
    if not s.exists:
        res.append(Result(f"{name}: not there yet (made at the first report)", True))
    elif s.error:
        res.append(Result(name, False, s.error, "fix the outbox directory (root, mode 0700), "
                          "or set notify.outbox"))
    else:
        age = "" if s.oldest_waiting_s is None else f", oldest {s.oldest_waiting_s / 60:.0f} min"
        res.append(Result(f"{name}: {s.waiting} waiting{age}", True))
        # Quarantined messages are the site's state, not a broken installation: a warning
        # with the oldest reason and what to do, which does not fail the doctor.
        if s.quarantined:
            res.append(Result(
                f"{name}: quarantine", False,
                f"{s.quarantined} message(s) given up on; oldest: {s.oldest_quarantine_reason}",
                "fix the cause, then `gpualert flush --requeue` (or delete them: "
                "`gpualert flush --list` shows the files)", kind="warn"))
        else:
            res.append(Result(f"{name}: quarantine empty", True))
    if cfg.mail.password_file:
        from gpualert_slurm.notify.smtp import read_secret

        pname = f"SMTP password file {cfg.mail.password_file}"
        try:
            read_secret(cfg.mail.password_file, "mail.password_file")
            res.append(Result(pname, True))
        except (OSError, ValueError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            res.append(Result(pname, False, why, "root-owned, mode 0600, holding the password"))
    return res


def check_breakers(cfg: Config) -> Result:
    """The recovery drain circuit breakers (recovery/audit.py): one open stops gpualert from
    draining nodes in its partition until an admin resets it. Like a quarantined message,
    an open breaker is the site's state, not a broken installation: a warning."""
    import time

    from gpualert_slurm.recovery.audit import AuditLog, audit_path, open_breakers

    path = audit_path(cfg)
    name = "recovery circuit breakers"
    try:
        opened = open_breakers(AuditLog(path).read())
    except OSError as e:
        fix = ("run gpualert doctor as root (the audit log is root's, 0600)"
               if isinstance(e, PermissionError) else
               "make it a file root can read, or set recovery.audit_log")
        return Result(name, False, f"cannot read {path}: {e.strerror or e}", fix, kind="warn")
    if not opened:
        return Result(f"{name}: none open", True)
    parts = []
    for p, b in sorted(opened.items()):
        try:
            t = float(b.get("time"))
            since = (f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t))} "
                     f"({(time.time() - t) / 3600:.1f} h)")
        except (TypeError, ValueError):
            since = "an unknown time"
        parts.append((p, f"open since {since}: {b.get('why') or 'no reason recorded'}; "
                         f"gpualert drains no more nodes in partition {p}"))
    fix = ("see what tripped it (`gpualert history`, `sinfo -R`), fix or resume the nodes, "
           "then `gpualert resume --breaker {p}`")
    if len(parts) == 1:
        p, problem = parts[0]
        return Result(f"recovery circuit breaker of partition {p}", False, problem,
                      fix.format(p=p), kind="warn")
    return Result(f"{name} open in {len(parts)} partitions", False,
                  "; ".join(f"{p}: {why}" for p, why in parts),
                  fix.format(p="PARTITION") + " for each (or `gpualert resume --breaker` "
                  "for all)", kind="warn")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="gpualert doctor", description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="config file (default: $GPUALERT_CONFIG or "
                    "/etc/gpualert/gpualert.yaml)")
    ap.add_argument("--plugstack", help="default: slurm.conf's PlugStackConfig, else "
                    "plugstack.conf next to slurm.conf")
    ap.add_argument("--slurm-conf", help=f"default: $SLURM_CONF or {DEFAULT_SLURM_CONF}")
    args = ap.parse_args(argv)
    slurm_conf = args.slurm_conf or os.environ.get("SLURM_CONF") or DEFAULT_SLURM_CONF
    plugstack = args.plugstack or _plugstack_of(slurm_conf)
    res, cfg = check_config(config_path(args.config))
    results = [res]
    results += check_plugstack(plugstack, cfg)
    hooks = check_slurm_conf(slurm_conf)
    results += hooks
    results.append(check_spool(cfg.spool))
    relay = check_relay(cfg)
    if not relay.ok and any(r.kind == "warn" and r.check.startswith("EpilogSlurmctld=")
                            for r in hooks):
        # Only the job epilog sends mail: until reports are set up, the relay can wait.
        relay = Result(relay.check, True, f"{relay.problem} (needed once EpilogSlurmctld is "
                       "configured)", relay.fix, kind="warn")
    results.append(relay)
    results += check_mail_chain(cfg)
    results += check_outbox(cfg)
    results.append(check_breakers(cfg))
    results += spool_usage(cfg)
    results.append(check_cgroup(slurm_conf))
    results.append(check_slurm_version())
    results += check_hook_timeouts(slurm_conf)
    for r in results:
        print(r.line(), flush=True)
    failed = sum(r.failed for r in results)
    warned = sum(r.kind == "warn" for r in results)
    oks = sum(r.ok and not r.kind for r in results)
    print(f"{oks} ok, {warned} warnings, {failed} failed")
    return 1 if failed else 0
