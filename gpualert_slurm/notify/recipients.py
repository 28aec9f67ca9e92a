"""Who gets a report, and on which channels.

Recipients: the job's `mail=` option, else the job's --mail-user (Slurm's MailUser, which
defaults to the bare user name when --mail-type was given alone), else the site's user->address
rule (mail.users, then mail.domain). Every address then passes the admin's allowlist of
domains (mail.allow_domains) and, where the site says `mail.recipients: owner`, must be the
job's user's own address; one refused is listed in `.refused` with the reason, never dropped
silently.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from gpualert_slurm.core.config import Config
from gpualert_slurm.core.options import ADDR_RE

SCONTROL_TIMEOUT_S = 5.0


class Recipients(list[str]):
    """A list of addresses, plus what was refused and where the addresses came from."""

    def __init__(self, addrs: Iterable[str] = (), refused: list[tuple[str, str]] | None = None,
                 source: str = "") -> None:
        super().__init__(addrs)
        self.refused: list[tuple[str, str]] = refused or []
        self.source = source


def check_addresses(addrs: Iterable[str], cfg: Config) -> tuple[list[str], list[tuple[str, str]]]:
    """(allowed, [(address, why refused)]), duplicates removed, order kept."""
    allowed: list[str] = []
    refused: list[tuple[str, str]] = []
    allow = cfg.mail.allow_domains
    for a in addrs:
        a = a.strip()
        if not a or a in allowed:
            continue
        if not ADDR_RE.fullmatch(a):
            refused.append((a, "not an address local@domain"))
            continue
        if "%" in a or "!" in a:
            # source routing: a relay that honours it delivers user%evil.org@lab.org to evil.org,
            # past the domain allow-list
            refused.append((a, "'%' or '!' in the address (source routing): refused"))
            continue
        domain = a.rsplit("@", 1)[1].lower()
        if allow and not any(domain == d or domain.endswith("." + d) for d in allow):
            refused.append((a, f"domain {domain} is not in mail.allow_domains "
                               f"({', '.join(allow)})"))
            continue
        allowed.append(a)
    return allowed, refused


def _opt_mail(opts: Any) -> list[str]:
    value = opts.get("mail") if isinstance(opts, Mapping) else getattr(opts, "mail", None)
    if not value:
        return []
    if isinstance(value, str):
        return [v for v in value.split(":") if v]
    return [str(v) for v in value]


def _slurm_mail_user(env: Mapping[str, str]) -> str | None:
    """The job's MailUser: from the environment where a Slurm version exports it, else from
    `scontrol show job` (bounded; None when Slurm cannot say)."""
    for key in ("SLURM_JOB_MAIL_USER", "SLURM_MAIL_USER"):
        if env.get(key):
            return env[key]
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job_id:
        return None
    from gpualert_slurm.core import slurm

    try:
        return slurm.mail_user(job_id, timeout=SCONTROL_TIMEOUT_S)
    except slurm.SlurmError:
        return None


def _map_user(name: str, cfg: Config) -> str | None:
    return name if "@" in name else cfg.mail.address_for(name)


def resolve_recipients(opts: Any, env: Mapping[str, str], cfg: Config) -> Recipients:
    """Addresses for a job's report (see the module's doc). `opts`: the parsed options (an
    `Options`, its to_json() dict, or {"mail": "a@x:b@y"})."""
    candidates = _opt_mail(opts)
    source = "mail= option"
    unmapped: list[tuple[str, str]] = []
    if not candidates:
        mail_user = _slurm_mail_user(env)
        if mail_user:
            for name in (n.strip() for n in mail_user.split(",")):
                if not name:
                    continue
                addr = _map_user(name, cfg)
                if addr:
                    candidates.append(addr)
                else:
                    unmapped.append((name, "a user name, and the config has no mail.users "
                                     "entry or mail.domain to make it an address"))
            source = "--mail-user"
    if not candidates:
        user = env.get("SLURM_JOB_USER", "")
        addr = cfg.mail.address_for(user) if user else None
        if addr:
            candidates = [addr]
            source = "mail.users/mail.domain"
        elif user:
            unmapped.append((user, "no mail=, no --mail-user, and the config has no "
                             "mail.users entry or mail.domain for this user"))
    allowed, refused = check_addresses(candidates, cfg)
    if cfg.mail.recipients == "owner":
        # the site's policy: a job's report goes to its own user only; job text (mail=,
        # --mail-user) cannot make gpualert mail anyone else in its name
        user = env.get("SLURM_JOB_USER", "")
        own = cfg.mail.address_for(user) if user else None
        refused += [(a, f"mail.recipients is 'owner': only {user or 'the job user'}'s own "
                        f"address ({own or 'none configured'}) may receive the job's report")
                    for a in allowed if a != own]
        allowed = [a for a in allowed if a == own]
        if not allowed and own and own not in {a for a, _ in refused} | set(candidates):
            allowed = [own]
            source = "mail.users/mail.domain"
    return Recipients(allowed, unmapped + refused, source if allowed else "")


def _job_facts(cfg: Config, job_id: str) -> dict[str, Any]:
    """user/partition/account for routing: from the job.json root wrote (the Prolog, from
    Slurm's environment), read the careful way (spool.read_job_file: root's file, no link,
    no FIFO); a job.json the user replaced is refused, and Slurm is asked instead. A user must
    not route their report, text they control, to another team's channel."""
    from gpualert_slurm.core.spool import read_job_file

    try:
        data = read_job_file(cfg.spool, job_id, "job.json")
        if isinstance(data, dict):
            return data
    except (OSError, ValueError):
        pass
    from gpualert_slurm.core import slurm

    try:
        st = slurm.show_job(job_id, timeout=SCONTROL_TIMEOUT_S)
    except slurm.SlurmError:
        return {}
    return {"user": st.user, "partition": st.partition,
            "account": str(st.raw.get("Account") or "")}


def resolve_channels(facts: Mapping[str, Any], cfg: Config) -> list[str]:
    """Channels for a job from the config's rules (first match), else notify.default.
    `facts`: user/partition/account, as in job.json or SLURM_JOB_USER/... in an env."""
    def get(key: str) -> str:
        return str(facts.get(key) or facts.get(f"SLURM_JOB_{key.upper()}") or "")

    for rule in cfg.notify.rules:
        if rule.users and get("user") not in rule.users:
            continue
        if rule.partitions and not set(get("partition").split(",")) & set(rule.partitions):
            continue
        if rule.accounts and get("account") not in rule.accounts:
            continue
        return list(rule.channels)
    return list(cfg.notify.default)


def channels_for_job(cfg: Config, job_id: str) -> list[str]:
    if not cfg.notify.rules:
        return list(cfg.notify.default)
    return resolve_channels(_job_facts(cfg, job_id), cfg)


def envelope_sender(cfg: Config) -> str:
    return cfg.mail.sender or f"gpualert@{os.uname().nodename}"
