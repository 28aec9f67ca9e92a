"""The site config (/etc/gpualert/gpualert.yaml, or $GPUALERT_CONFIG). A missing file means the
defaults; a present but wrong file is a ConfigError naming the file, the key and what is
accepted, so that `gpualert doctor` and the hooks can report it in one line."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

from gpualert_slurm.core.classes import class_domains
from gpualert_slurm.core.config_check import Checker
from gpualert_slurm.core.config_check import ConfigError as ConfigError  # the one error
from gpualert_slurm.core.options import ADDR_RE, Options, parse_duration, parse_size
from gpualert_slurm.core.vocab import DEFAULT_ACTIONS, MAIL_CHANNEL, MODES, Mode

DEFAULT_PATH = "/etc/gpualert/gpualert.yaml"
_HOSTPORT_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})$")
_DOMAIN_RE = re.compile(r"^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*$")
_HOST_RE = re.compile(r"^([A-Za-z0-9._-]+|[0-9A-Fa-f:.]+)$")
_USER_RE = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,63}$")
_SMTP_USER_RE = re.compile(r"^[!-~]{1,256}$")
_CHANNEL_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_URL_RE = re.compile(r"^[a-z][a-z0-9+.-]*://[!-~]+$")


MAIL_TLS = ("none", "starttls", "ssl")
SLURM_MAIL_MODES = ("enrich", "forward", "suppress")


@dataclass(frozen=True)
class MailConfig:
    relay: str = "localhost:25"  # host:port; the YAML may also say host: and port:
    sender: str = "gpualert@localhost"  # the YAML key is `from`
    domain: str | None = None  # user@domain when the job gave no mail=
    users: tuple[tuple[str, str], ...] = ()  # user -> address, before `domain`
    allow_domains: tuple[str, ...] = ()  # recipients' domains allowed; empty: any
    # who a job's report may go to: "allowed" (any address allow_domains lets through) or
    # "owner" (the job's user's own address, from users/domain, only)
    recipients: str = "allowed"
    tls: str = "none"  # none | starttls | ssl
    username: str | None = None
    password_file: str | None = None  # never the password itself in this file
    ca_file: str | None = None  # CA bundle for the relay's certificate; None: the system's
    connect_timeout_s: float = 5.0
    send_timeout_s: float = 10.0  # per SMTP command
    slurm_mail: str = "enrich"  # what `gpualert mailprog` does with Slurm's own mail
    slurm_mail_wait_s: float = 20.0  # how long mailprog waits for a verdict to enrich with
    # The site's previous MailProg (jobstats_mail.sh, slurm-spool-mail): mailprog hands Slurm's
    # mail on to it, same argv and environment; None: mailprog sends the mail itself.
    slurm_mail_chain: str | None = None
    slurm_mail_chain_send: bool = False  # with a chain, also send gpualert's own copy

    @property
    def relay_host(self) -> str:
        return self.relay.rsplit(":", 1)[0].strip("[]")

    @property
    def relay_port(self) -> int:
        return int(self.relay.rsplit(":", 1)[1])

    def address_for(self, user: str) -> str | None:
        """The configured address of a Slurm user name: the users map, else user@domain."""
        for name, addr in self.users:
            if name == user:
                return addr
        return f"{user}@{self.domain}" if self.domain else None


@dataclass(frozen=True)
class ChannelConfig:
    """A named webhook channel (an apprise URL). `url_file` keeps a secret URL out of this
    world-readable file."""

    name: str
    url: str | None = None
    url_file: str | None = None


@dataclass(frozen=True)
class NotifyRule:
    """Jobs matching every given field (empty: any) go to `channels`."""

    channels: tuple[str, ...]
    users: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()


@dataclass(frozen=True)
class NotifyConfig:
    outbox: str | None = None  # None: <spool>/.outbox
    total_timeout_s: float = 15.0  # bound of one submit(), all tries included
    tries: int = 2  # sending tries inside submit() before leaving it to `gpualert flush`
    backoff_s: float = 1.0  # first pause between tries; doubles
    max_attempts: int = 8  # flush attempts before a message is quarantined
    max_age_s: int = 3 * 86400  # a message older than this is quarantined
    quarantine_keep_s: int = 30 * 86400  # quarantined messages older than this are deleted
    default: tuple[str, ...] = (MAIL_CHANNEL,)  # channels when no rule matches
    rules: tuple[NotifyRule, ...] = ()
    channels: tuple[ChannelConfig, ...] = ()

    def channel(self, name: str) -> ChannelConfig | None:
        return next((c for c in self.channels if c.name == name), None)


@dataclass(frozen=True)
class RecoveryConfig:
    """What gpualert does after a failure (gpualert_slurm/recovery/; docs/RECOVERY.md). The
    built-in rules are gpualert_slurm/recovery/policy.yaml; `rules` here override them."""

    mode: Mode = Mode.MONITOR  # monitor: only record what would be done; action: do it
    partitions: tuple[tuple[str, Mode], ...] = ()  # partition -> mode, over `mode`
    # The whitelist: what gpualert may do at all (core/vocab.py's ACTION_SPECS: cancel only
    # when an admin adds it).
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    max_retries: int = 2  # requeues per job; below Slurm 22.05's fixed MaxBatchRequeue=5
    same_cause_limit: int = 2  # attempts ending with the same signature before it stops
    rules: tuple[tuple[str, dict[str, Any]], ...] = ()  # class or domain:<d> -> rule override
    escalate_after: int = 2  # same hardware signature on one node this often: drain it
    blast_nodes: int = 3  # same signature on this many nodes in the window: not the nodes
    blast_window_s: int = 3600
    flag_drains: int = 3  # a node drained this often in flag_window_s: flagged for the admin
    flag_window_s: int = 86400
    breaker_share: float = 0.2  # drains in breaker_window_s over this share of a partition
    breaker_window_s: int = 600
    breaker_per_user: int = 2  # nodes drained for one user's jobs (now or in the window)
    attribution: tuple[str, ...] = ()  # argv: verdict JSON on stdin -> amended on stdout
    attribution_timeout_s: float = 5.0
    timeout_s: float = 15.0  # bound of one decision with its actions (fail open past it)
    audit_log: str | None = None  # None: <spool>/.gpualert/recovery/audit.jsonl

    def mode_for(self, partition: str | None) -> Mode:
        return dict(self.partitions).get(partition or "", self.mode)


@dataclass(frozen=True)
class ReportConfig:
    templates: str = "/etc/gpualert/templates"  # site overrides of the report templates
    artifacts: tuple[str, ...] = ()  # globs attached for every job, after the job's own
    arrays: str = "summary"  # summary: one report per job array; per_task: one per task
    max_per_array: int = 10  # reports per array in per_task mode
    max_per_user_hour: int = 60  # reports to one user in any hour; beyond, kept unsent
    # the job's web page (gpualert web, Open OnDemand's app), {job} = the job id; the mail
    # links to it when set (https://ondemand.example.org/pun/sys/gpualert/job/{job})
    url: str | None = None


@dataclass(frozen=True)
class RetentionConfig:
    """What `gpualert gc` may remove from the spool (job dirs that are finished and reported)."""

    max_age_s: int | None = 30 * 86400  # idle longer than this: removed; None: no age limit
    max_total_bytes: int | None = None  # over this, the oldest go first; None: no size limit
    min_age_s: int = 3600  # never removed while younger, whatever the limits
    # a node-local exit record (/run/gpualert) its node Epilog never moved in: removed after
    local_max_age_s: int = 2 * 86400


@dataclass(frozen=True)
class LimitsConfig:
    """The site's bounds on what a job's --gpualert options may ask of root (docs/SECURITY.md):
    a user's option is cut down to these, never the other way round (bound_options)."""

    budget_max_bytes: int | None = None  # budget= at most this; None: the site's `budget`
    hang_min_s: int = 10  # hang= below this is raised to it (watch's alerts, the classifier)
    max_recipients: int = 5  # addresses a job's mail= may name
    checkpoint_max_matches: int = 10000  # files a checkpoint= glob may visit
    checkpoint_timeout_s: float = 2.0  # and for how long (as the job's user, in a child)
    watch_job_s: float = 5.0  # `gpualert watch`: one job's reads in one pass
    watch_alerts_per_job: int = 4  # alerts for one job, all attempts together
    watch_alerts_per_user_hour: int = 10  # alerts for one user's jobs in any hour


@dataclass(frozen=True)
class ProvenanceConfig:
    """How root's facts from a node are checked on the controller (docs/SECURITY.md)."""

    munge_socket: str | None = None  # None: slurm.conf's AuthInfo=socket=, else munge's own
    root_owned: bool = True  # a root-owned record naming the run counts (a spool without
    # root squash); false: the MUNGE seal only


@dataclass(frozen=True)
class Config:
    path: str | None = None  # the file it came from; None for built-in defaults
    spool: str = "/var/spool/gpualert"
    default_monitoring: bool = False
    hook_timeout_s: float = 20.0
    epilog_wait_s: float = 30.0
    # job epilogs of one user at work at once on the controller (hooks/queue.py); None: half
    epilog_slots_per_user: int | None = None
    budget_bytes: int = 20 * 1024**2
    hang_s: int | None = None  # None: no hang detection unless the job asks (hang=)
    mail: MailConfig = field(default_factory=MailConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    provenance: ProvenanceConfig = field(default_factory=ProvenanceConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)

    @property
    def outbox(self) -> str:
        return self.notify.outbox or os.path.join(self.spool, ".outbox")


def config_path(explicit: str | None = None) -> str:
    return explicit or os.environ.get("GPUALERT_CONFIG") or DEFAULT_PATH


def parse_config(data: Any, path: str) -> Config:
    """Validate an already-loaded YAML document."""
    c = Checker(path)
    top = c.mapping("", data, (
        "spool", "default_monitoring", "hook_timeout_s", "epilog_wait_s", "budget", "hang",
        "mail", "recovery", "notify", "report", "retention", "limits", "provenance",
        "epilog_slots_per_user",
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
    if "epilog_slots_per_user" in top:
        kw["epilog_slots_per_user"] = int(c.number("epilog_slots_per_user",
                                                   top["epilog_slots_per_user"], 1, 1024))
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

    kw["mail"] = _parse_mail(c, top.get("mail"))
    kw["notify"] = _parse_notify(c, top.get("notify"))

    kw["recovery"] = _parse_recovery(c, top.get("recovery"))
    kw["retention"] = _parse_retention(c, top.get("retention"))
    kw["report"] = _report_config(c, top.get("report"))
    kw["limits"] = _parse_limits(c, top.get("limits"))
    if top.get("provenance") is not None:
        pv = c.mapping("provenance", top["provenance"], ("munge_socket", "root_owned"))
        pkw: dict[str, Any] = {}
        if pv.get("munge_socket") is not None:
            pkw["munge_socket"] = c.string("provenance.munge_socket", pv["munge_socket"],
                                           re.compile(r"/\S*"), "an absolute path")
        if "root_owned" in pv:
            pkw["root_owned"] = c.boolean("provenance.root_owned", pv["root_owned"])
        kw["provenance"] = ProvenanceConfig(**pkw)
    return Config(**kw)


def _parse_limits(c: Checker, value: Any) -> LimitsConfig:
    r = c.mapping("limits", value, (
        "budget_max", "hang_min", "max_recipients", "checkpoint_max_matches",
        "checkpoint_timeout_s", "watch_job_s", "watch_alerts_per_job",
        "watch_alerts_per_user_hour"))
    kw: dict[str, Any] = {}
    if r.get("budget_max") is not None:
        try:
            kw["budget_max_bytes"] = parse_size(str(r["budget_max"]))
        except ValueError:
            raise c.err("limits.budget_max", "a size like 20M or 1G", r["budget_max"]) from None
    if "hang_min" in r:
        kw["hang_min_s"] = c.duration("limits.hang_min", r["hang_min"])
    for key, lo, hi in (("max_recipients", 1, 100), ("checkpoint_max_matches", 1, 10**7),
                        ("watch_alerts_per_job", 1, 1000),
                        ("watch_alerts_per_user_hour", 1, 100000)):
        if key in r:
            kw[key] = int(c.number(f"limits.{key}", r[key], lo, hi))
    for key, low, high in (("checkpoint_timeout_s", 0.1, 60), ("watch_job_s", 0.5, 120)):
        if key in r:
            kw[key] = c.number(f"limits.{key}", r[key], low, high)
    return LimitsConfig(**kw)


def bound_options(opts: Options, cfg: Config) -> Options:
    """The job's options cut down to the site's bounds (cfg.limits): budget= at most the
    site's budget (or limits.budget_max), hang= at least limits.hang_min, at most
    limits.max_recipients addresses in mail=. What the user wrote is never a bound of root's."""
    lim = cfg.limits
    cap = lim.budget_max_bytes or cfg.budget_bytes
    changes: dict[str, Any] = {}
    if opts.budget_bytes is not None and opts.budget_bytes > cap:
        changes["budget_bytes"] = cap
    if opts.hang_s is not None and opts.hang_s < lim.hang_min_s:
        changes["hang_s"] = lim.hang_min_s
    if len(opts.mail) > lim.max_recipients:
        changes["mail"] = opts.mail[:lim.max_recipients]
    return replace(opts, **changes) if changes else opts


RULE_KEYS = ("do", "retries", "shadow")
RECOVERY_MAX_RETRIES = 4  # Slurm 22.05 stops requeueing a batch job after 5 (MaxBatchRequeue)


def _parse_recovery(c: Checker, value: Any) -> RecoveryConfig:
    r = c.mapping("recovery", value, (
        "mode", "partitions", "actions", "max_retries", "same_cause_limit", "rules",
        "escalate_after", "blast_nodes", "blast_window", "flag_drains", "flag_window",
        "breaker", "attribution", "timeout_s", "audit_log"))
    kw: dict[str, Any] = {}
    modes = " or ".join(MODES)
    if "mode" in r:
        if r["mode"] not in MODES:
            raise c.err("recovery.mode", modes, r["mode"])
        kw["mode"] = Mode(r["mode"])
    if r.get("partitions") is not None:
        p = r["partitions"]
        if not isinstance(p, dict) or any(not isinstance(k, str) or not _USER_RE.fullmatch(k)
                                           or v not in MODES for k, v in p.items()):
            raise c.err("recovery.partitions", f"a mapping of partition names to {modes}", p)
        kw["partitions"] = tuple(sorted((k, Mode(v)) for k, v in p.items()))
    if r.get("actions") is not None:
        kw["actions"] = c.actions("recovery.actions", r["actions"])
    for key, lo, hi in (("max_retries", 0, RECOVERY_MAX_RETRIES), ("same_cause_limit", 1, 100),
                        ("escalate_after", 1, 100), ("blast_nodes", 2, 100000),
                        ("flag_drains", 1, 1000)):
        if key in r:
            v = r[key]
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                extra = " (Slurm 22.05 requeues a batch job at most 5 times: MaxBatchRequeue)" \
                    if key == "max_retries" else ""
                raise c.err(f"recovery.{key}", f"an integer from {lo} to {hi}{extra}", v)
            kw[key] = v
    for key in ("blast_window", "flag_window"):
        if key in r:
            kw[f"{key}_s"] = c.duration(f"recovery.{key}", r[key])
    if r.get("breaker") is not None:
        b = c.mapping("recovery.breaker", r["breaker"], ("share", "window", "per_user"))
        if "share" in b:
            kw["breaker_share"] = c.number("recovery.breaker.share", b["share"], 0, 1)
        if "window" in b:
            kw["breaker_window_s"] = c.duration("recovery.breaker.window", b["window"])
        if "per_user" in b:
            kw["breaker_per_user"] = int(c.number("recovery.breaker.per_user", b["per_user"],
                                                  0, 100000))
    if r.get("attribution") is not None:
        a = c.mapping("recovery.attribution", r["attribution"], ("command", "timeout_s"))
        cmd = a.get("command")
        if isinstance(cmd, str):
            import shlex

            cmd = shlex.split(cmd)
        if not isinstance(cmd, list) or not cmd or not all(isinstance(x, str) for x in cmd) \
                or not os.path.isabs(cmd[0]):
            raise c.err("recovery.attribution.command",
                        "a command line (or argv list) starting with an absolute path", cmd)
        kw["attribution"] = tuple(cmd)
        if "timeout_s" in a:
            kw["attribution_timeout_s"] = c.number("recovery.attribution.timeout_s",
                                                   a["timeout_s"], 0.1, 60)
    if "timeout_s" in r:
        kw["timeout_s"] = c.number("recovery.timeout_s", r["timeout_s"], 1, 120)
    if r.get("audit_log") is not None:
        kw["audit_log"] = c.abs_path("recovery.audit_log", r["audit_log"])
    if r.get("rules") is not None:
        rules = r["rules"]
        if not isinstance(rules, dict):
            raise c.err("recovery.rules", "a mapping of failure classes (or domain:NAME) to "
                        "{do: [actions], retries: N, shadow: true|false}", rules)
        out = []
        for name, spec in rules.items():
            key = f"recovery.rules.{name}"
            if not isinstance(name, str) or not re.fullmatch(r"(domain:)?[a-z_]{1,40}", name):
                raise c.err("recovery.rules", "class ids like gpu_hardware or domain:workload",
                            name)
            s = c.mapping(key, spec, RULE_KEYS)
            rule: dict[str, Any] = {}
            if "do" in s:
                rule["do"] = list(c.actions(f"{key}.do", s["do"] or []))
            if "retries" in s:
                v = s["retries"]
                if isinstance(v, bool) or not isinstance(v, int) \
                        or not 0 <= v <= RECOVERY_MAX_RETRIES:
                    raise c.err(f"{key}.retries", f"an integer from 0 to {RECOVERY_MAX_RETRIES}",
                                v)
                rule["retries"] = v
            if "shadow" in s:
                rule["shadow"] = c.boolean(f"{key}.shadow", s["shadow"])
            out.append((name, rule))
        kw["rules"] = tuple(out)
        bad = check_rule_names(RecoveryConfig(rules=kw["rules"]))
        if bad:
            doms = sorted({f"domain:{d}" for d in class_domains().values()})
            raise c.err(f"recovery.rules.{bad[0]}", "a failure class id (gpualert classify's "
                        f"classes: {', '.join(sorted(class_domains()))}) or one of "
                        f"{', '.join(doms)}", bad[0])
    return RecoveryConfig(**kw)


def check_rule_names(cfg: RecoveryConfig) -> list[str]:
    """Recovery overrides naming no known class or domain (for `gpualert doctor` and the
    tests)."""
    classes = class_domains()
    domains = set(classes.values())
    bad = []
    for name, _ in cfg.rules:
        dom = name.removeprefix("domain:")
        if (name.startswith("domain:") and dom not in domains) or (
                not name.startswith("domain:") and name not in classes):
            bad.append(name)
    return bad


_PAGE_URL_RE = re.compile(r"https?://[^\s{}]+\{job\}[^\s{}]*")


def _report_config(c: Checker, value: Any) -> ReportConfig:
    r = c.mapping("report", value, ("templates", "artifacts", "arrays", "max_per_array",
                                    "max_per_user_hour", "url"))
    kw: dict[str, Any] = {}
    if "templates" in r:
        t = c.string("report.templates", r["templates"], None, "an absolute path")
        if not os.path.isabs(t):
            raise c.err("report.templates", "an absolute path", t)
        kw["templates"] = t
    if r.get("artifacts") is not None:
        a = r["artifacts"]
        if not isinstance(a, list) or not all(isinstance(g, str) and g for g in a):
            raise c.err("report.artifacts", "a list of file globs", a)
        kw["artifacts"] = tuple(a)
    if "arrays" in r:
        if r["arrays"] not in ("summary", "per_task"):
            raise c.err("report.arrays", "summary or per_task", r["arrays"])
        kw["arrays"] = r["arrays"]
    for key in ("max_per_array", "max_per_user_hour"):
        if key in r:
            kw[key] = int(c.number(f"report.{key}", r[key], 0, 100000))
    if r.get("url") is not None:
        kw["url"] = c.string("report.url", r["url"], _PAGE_URL_RE,
                             "an http(s) URL with {job}, e.g. https://host/pun/sys/gpualert/job/{job}")
    return ReportConfig(**kw)


def _parse_mail(c: Checker, data: Any) -> MailConfig:
    m = c.mapping("mail", data, (
        "relay", "host", "port", "from", "domain", "users", "allow_domains", "tls", "username",
        "password_file", "password", "ca_file", "connect_timeout_s", "send_timeout_s",
        "slurm_mail", "slurm_mail_wait_s", "slurm_mail_chain", "slurm_mail_chain_send",
        "recipients",
    ))
    mkw: dict[str, Any] = {}
    if "password" in m:
        raise ConfigError(
            f"gpualert: config {c.path}: mail.password: not accepted here (this file is "
            "world-readable): put the password in a root-only file (chmod 600) and name it in "
            "mail.password_file")
    if "relay" in m and ("host" in m or "port" in m):
        raise ConfigError(f"gpualert: config {c.path}: mail.relay and mail.host/mail.port "
                          "both given: keep one of them")
    if "relay" in m:
        relay = c.string("mail.relay", m["relay"], _HOSTPORT_RE, "host:port")
        if not 0 < int(relay.rsplit(":", 1)[1]) < 65536:
            raise c.err("mail.relay", "host:port with a port from 1 to 65535", relay)
        mkw["relay"] = relay
    elif "host" in m or "port" in m:
        host = c.string("mail.host", m.get("host", "localhost"), _HOST_RE, "a host name or IP")
        port = m.get("port", 465 if m.get("tls") == "ssl" else 25)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise c.err("mail.port", "a port from 1 to 65535", port)
        mkw["relay"] = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if "from" in m:
        mkw["sender"] = c.string("mail.from", m["from"], ADDR_RE, "an address user@domain")
    if m.get("domain") is not None:
        mkw["domain"] = c.string("mail.domain", m["domain"], _DOMAIN_RE, "a domain like lab.org")
    if m.get("users") is not None:
        users = m["users"]
        what = "a mapping of Slurm user names to addresses user@domain"
        if not isinstance(users, dict) or any(
                not isinstance(k, str) or not _USER_RE.fullmatch(k) or not isinstance(v, str)
                or not ADDR_RE.fullmatch(v) for k, v in users.items()):
            raise c.err("mail.users", what, users)
        mkw["users"] = tuple(sorted(users.items()))
    if "recipients" in m:
        if m["recipients"] not in ("allowed", "owner"):
            raise c.err("mail.recipients", "allowed or owner", m["recipients"])
        mkw["recipients"] = m["recipients"]
    if m.get("allow_domains") is not None:
        mkw["allow_domains"] = tuple(d.lower() for d in c.str_list(
            "mail.allow_domains", m["allow_domains"], _DOMAIN_RE, "domains like lab.org"))
    if "tls" in m:
        if m["tls"] not in MAIL_TLS:
            raise c.err("mail.tls", " or ".join(MAIL_TLS), m["tls"])
        mkw["tls"] = m["tls"]
    if ("username" in m) != ("password_file" in m):
        raise ConfigError(f"gpualert: config {c.path}: mail.username and mail.password_file "
                          "go together: give both or neither")
    if "username" in m:
        mkw["username"] = c.string("mail.username", m["username"], _SMTP_USER_RE,
                                   "a user name without spaces or control characters")
        mkw["password_file"] = c.abs_path("mail.password_file", m["password_file"])
    if m.get("ca_file") is not None:
        mkw["ca_file"] = c.abs_path("mail.ca_file", m["ca_file"])
    for key in ("connect_timeout_s", "send_timeout_s", "slurm_mail_wait_s"):
        if key in m:
            mkw[key] = c.number(f"mail.{key}", m[key], 0 if key == "slurm_mail_wait_s" else 0.1,
                                90 if key == "slurm_mail_wait_s" else 600)
    if "slurm_mail" in m:
        if m["slurm_mail"] not in SLURM_MAIL_MODES:
            raise c.err("mail.slurm_mail", ", ".join(SLURM_MAIL_MODES), m["slurm_mail"])
        mkw["slurm_mail"] = m["slurm_mail"]
    if m.get("slurm_mail_chain") is not None:
        mkw["slurm_mail_chain"] = c.abs_path("mail.slurm_mail_chain", m["slurm_mail_chain"])
    if "slurm_mail_chain_send" in m:
        mkw["slurm_mail_chain_send"] = c.boolean("mail.slurm_mail_chain_send",
                                                 m["slurm_mail_chain_send"])
    return MailConfig(**mkw)


def _parse_notify(c: Checker, data: Any) -> NotifyConfig:
    n = c.mapping("notify", data, (
        "outbox", "total_timeout_s", "tries", "backoff_s", "max_attempts", "max_age",
        "quarantine_keep", "default", "rules", "channels",
    ))
    nkw: dict[str, Any] = {}
    if n.get("outbox") is not None:
        nkw["outbox"] = c.abs_path("notify.outbox", n["outbox"])
    if "total_timeout_s" in n:
        nkw["total_timeout_s"] = c.number("notify.total_timeout_s", n["total_timeout_s"], 1, 600)
    if "backoff_s" in n:
        nkw["backoff_s"] = c.number("notify.backoff_s", n["backoff_s"], 0, 60)
    for key, lo, hi in (("tries", 1, 10), ("max_attempts", 1, 1000)):
        if key in n:
            v = n[key]
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise c.err(f"notify.{key}", f"an integer from {lo} to {hi}", v)
            nkw[key] = v
    if "max_age" in n:
        nkw["max_age_s"] = c.duration("notify.max_age", n["max_age"])
    if "quarantine_keep" in n:
        nkw["quarantine_keep_s"] = c.duration("notify.quarantine_keep", n["quarantine_keep"])
    channels: list[ChannelConfig] = []
    chans = n.get("channels")
    if chans is not None:
        if not isinstance(chans, dict):
            raise c.err("notify.channels", "a mapping of channel names to {url: ...}", chans)
        for name, spec in chans.items():
            key = f"notify.channels.{name}"
            if not isinstance(name, str) or not _CHANNEL_RE.fullmatch(name) or name == MAIL_CHANNEL:
                raise c.err("notify.channels", "channel names of letters, digits, - and _ "
                            "(not 'mail', the built-in channel)", name)
            s = c.mapping(key, spec, ("url", "url_file"))
            if ("url" in s) == ("url_file" in s):
                raise ConfigError(f"gpualert: config {c.path}: {key}: give exactly one of url "
                                  "(an apprise URL such as json://host/path, ntfy://host/topic, "
                                  "mmost://host/token, slack://T/B/C) or url_file")
            if "url" in s:
                url = c.string(f"{key}.url", s["url"], _URL_RE, "an apprise URL scheme://...")
                channels.append(ChannelConfig(name, url=url))
            else:
                channels.append(ChannelConfig(name, url_file=c.abs_path(
                    f"{key}.url_file", s["url_file"])))
    nkw["channels"] = tuple(channels)
    known = {MAIL_CHANNEL, *(ch.name for ch in channels)}

    def names(key: str, value: Any) -> tuple[str, ...]:
        out = c.str_list(key, value, _CHANNEL_RE, "channel names")
        for v in out:
            if v not in known:
                raise c.err(key, f"channels defined in notify.channels (or mail): "
                            f"{', '.join(sorted(known))}", v)
        return out

    if "default" in n:
        nkw["default"] = names("notify.default", n["default"] or [])
    if n.get("rules") is not None:
        if not isinstance(n["rules"], list):
            raise c.err("notify.rules", "a list of {users, partitions, accounts, channels}",
                        n["rules"])
        rules = []
        for i, r in enumerate(n["rules"]):
            key = f"notify.rules[{i}]"
            rd = c.mapping(key, r, ("users", "partitions", "accounts", "channels"))
            if "channels" not in rd:
                raise c.err(f"{key}.channels", "a list of channel names", None)
            rules.append(NotifyRule(
                channels=names(f"{key}.channels", rd["channels"]),
                **{f: c.str_list(f"{key}.{f}", rd[f], _USER_RE, "names")
                   for f in ("users", "partitions", "accounts") if rd.get(f) is not None}))
        nkw["rules"] = tuple(rules)
    return NotifyConfig(**nkw)


def _parse_retention(c: Checker, value: Any) -> RetentionConfig:
    r = c.mapping("retention", value, ("max_age", "max_total", "min_age", "local_max_age"))
    kw: dict[str, Any] = {}
    for key, attr, parse, what in (
            ("max_age", "max_age_s", parse_duration, "a duration like 30d or 12h, or null"),
            ("min_age", "min_age_s", parse_duration, "a duration like 1h or 2d"),
            ("local_max_age", "local_max_age_s", parse_duration, "a duration like 2d or 12h"),
            ("max_total", "max_total_bytes", parse_size, "a size like 500G or 50M, or null")):
        if key not in r:
            continue
        if r[key] is None and key not in ("min_age", "local_max_age"):
            kw[attr] = None
            continue
        try:
            kw[attr] = parse(str(r[key]))
        except ValueError:
            raise c.err(f"retention.{key}", what, r[key]) from None
    ret = RetentionConfig(**kw)
    if ret.max_age_s is not None and ret.min_age_s > ret.max_age_s:
        raise c.err("retention.min_age", f"at most retention.max_age ({ret.max_age_s} s)",
                    r.get("min_age"))
    return ret


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
