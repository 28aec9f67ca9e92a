"""The WSGI application: the caller's jobs, one page per job and attempt, their logs paged.

Plain WSGI and the one Jinja loader (core/templates.py): no framework, nothing to install
beyond what the package needs already. Served by `gpualert web` (wsgiref, 127.0.0.1) or by
Open OnDemand's Passenger (ood/gpualert/passenger_wsgi.py), in both cases as the user who
asks: store.py's reads are the user's, and the kernel is the access check.

Every page is GET; nothing changes anything. Each response carries a Content-Security-Policy
that allows no script at all (inline or not) and no third-party anything; the templates are
autoescaped. A request this module did not foresee is a 500 with no detail (the traceback goes
to the server's log), never a page that shows it.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from gpualert_slurm.core import slurm
from gpualert_slurm.core.config import Config, load_config
from gpualert_slurm.core.templates import get_template
from gpualert_slurm.core.termsafe import one_line
from gpualert_slurm.core.verdict import VerdictRecord
from gpualert_slurm.web import logpage, store

CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'self'")
HEADERS = [("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
           ("Referrer-Policy", "no-referrer"), ("Cache-Control", "private, no-store")]
STREAM_CHUNK = 1 << 20
CONTEXT = 10  # lines shown before an evidence line
PAST_DAYS = 30  # how far back accounting is asked by default (past=1)
STATES = ("all", "failed", "ok", "not ready")
_LOG_ROUTE = re.compile(r"/job/(\d{1,20})/(\d{1,6})/(log|raw)/([^/]+)")
_ART_ROUTE = re.compile(r"/job/(\d{1,20})/(\d{1,6})/artifact/(\d{1,5})")
_JOB_ROUTE = re.compile(r"/job/(\d{1,20})(?:/(\d{1,6}))?/?")

Response = tuple[str, list[tuple[str, str]], Iterable[bytes]]


class _Stream:
    """A file sent in STREAM_CHUNK reads (bounded memory); the server's close() closes it."""

    def __init__(self, stack: ExitStack, fd: int, size: int) -> None:
        self.stack, self.fd, self.size = stack, fd, size

    def __iter__(self) -> Iterator[bytes]:
        off = 0
        while off < self.size:
            b = os.pread(self.fd, min(STREAM_CHUNK, self.size - off), off)
            if not b:
                return
            off += len(b)
            yield b

    def close(self) -> None:
        self.stack.close()


def _human(n: int | None) -> str:
    from gpualert_slurm.report import human_size

    return human_size(n)


def _day(text: str) -> float | None:
    try:
        return dt.datetime.strptime(text, "%Y-%m-%d").timestamp()
    except ValueError:
        return None


class App:
    """The WSGI callable over the config's spool, run as the user who asks."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.spool = cfg.spool
        os.environ.setdefault("GPUALERT_TEMPLATES", cfg.report.templates)

    # ---- WSGI -----------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        try:
            if method not in ("GET", "HEAD"):
                status, headers, body = self._message("405 Method Not Allowed",
                                                      "This page only shows things.")
                headers.append(("Allow", "GET, HEAD"))
            else:
                status, headers, body = self.route(environ)
        except store.NotFound:
            status, headers, body = self._message(
                "404 Not Found", "No such job, attempt or file of yours.")
        except store.Untrusted as e:
            status, headers, body = self._message(
                "503 Service Unavailable", f"The spool cannot be read, or is not one to "
                f"trust: {e}")
        except Exception:  # never show a traceback to the browser
            traceback.print_exc(file=environ.get("wsgi.errors") or sys.stderr)
            status, headers, body = self._message(
                "500 Internal Server Error", "gpualert could not show this page; the server's "
                "log says why.")
        start_response(status, headers + HEADERS)
        if method == "HEAD":
            if hasattr(body, "close"):
                body.close()
            return [b""]
        return body

    def route(self, environ: dict[str, Any]) -> Response:
        path = environ.get("PATH_INFO") or "/"
        q = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        base = (environ.get("SCRIPT_NAME") or "").rstrip("/")
        if path in ("/", ""):
            return self._html(self.list_page(base, q))
        if m := _LOG_ROUTE.fullmatch(path):
            jobid, attempt, kind, name = m.group(1), int(m.group(2)), m.group(3), m.group(4)
            if kind == "raw":
                return self.download_log(jobid, attempt, name)
            return self._html(self.log_page(base, jobid, attempt, name, q))
        if m := _ART_ROUTE.fullmatch(path):
            return self.download_artifact(m.group(1), int(m.group(2)), int(m.group(3)))
        if m := _JOB_ROUTE.fullmatch(path):
            attempt = None if m.group(2) is None else int(m.group(2))
            return self._html(self.job_page(base, m.group(1), attempt))
        raise store.NotFound(path)

    # ---- responses ------------------------------------------------------------------------

    def _html(self, text: str, status: str = "200 OK") -> Response:
        data = text.encode("utf-8")
        return status, [("Content-Type", "text/html; charset=utf-8"),
                        ("Content-Length", str(len(data)))], [data]

    def _message(self, status: str, text: str) -> Response:
        page = get_template("web/message.html.j2").render(
            title=status.partition(" ")[2], text=text, base="")
        return self._html(page, status)

    # ---- the list -------------------------------------------------------------------------

    def rows(self, root_fd: int) -> list[dict[str, Any]]:
        """One row per job dir of the caller's, latest attempt (unfiltered)."""
        from gpualert_slurm.report import labels, status_word

        out = []
        names = labels()
        for jobid in store.own_job_ids(root_fd):
            try:
                run, have = store.read_run(root_fd, jobid)
            except store.NotFound:  # gone meanwhile
                continue
            v = run.verdict
            row: dict[str, Any] = {"job_id": jobid, "attempt": run.attempt,
                                   "attempts": len(have), "when": run.mtime, "why": run.why,
                                   "name": "", "cls": "", "label": "", "word": run.why,
                                   "failed": False, "array": None, "task": None}
            if v is not None:
                cls = v.cause.klass
                # a name's control characters shown escaped, as a terminal shows them
                row.update(name=one_line(v.job.name or "", 80), cls=cls,
                           label=names.get(cls, cls),
                           word=status_word(v), failed=v.failed_or_silent,
                           when=v.job.end_time or v.time or run.mtime)
                if v.array is not None and v.array.job_id:
                    row.update(array=str(v.array.job_id), task=v.array.task_id)
            out.append(row)
        return out

    def list_page(self, base: str, q: dict[str, str]) -> str:
        state = q.get("state", "all") if q.get("state") in STATES else "all"
        cls = q.get("cls", "")
        since, until = _day(q.get("from", "")), _day(q.get("to", ""))
        array = q.get("array", "")
        with store.spool_fd(self.spool) as root_fd:
            rows = self.rows(root_fd)
        classes = sorted({r["cls"] for r in rows if r["cls"]})

        def keep(r: dict[str, Any]) -> bool:
            when = r["when"] if isinstance(r["when"], int | float) else 0
            return ((state == "all" or (state == "failed" and r["failed"])
                     or (state == "ok" and r["cls"] and not r["failed"])
                     or (state == "not ready" and r["why"]))
                    and (not cls or r["cls"] == cls)
                    and (since is None or when >= since)
                    and (until is None or when < until + 86400))

        shown = [r for r in rows if keep(r)]
        shown = [r for r in shown if r["array"] == array] if array else self._group_arrays(shown)
        for r in shown:
            r["when_h"] = _when(r["when"])
        past, past_note = [], ""
        if q.get("past") == "1":
            past, past_note = self._past(rows, since, until)
        query = {k: v for k, v in q.items() if k in ("state", "cls", "from", "to", "array")}
        return get_template("web/list.html.j2").render(
            base=base, rows=shown, total=len(rows), state=state, states=STATES, cls=cls,
            classes=classes, since=q.get("from", "") if since else "",
            until=q.get("to", "") if until else "", array=array, past=past,
            past_note=past_note, past_asked=q.get("past") == "1",
            past_href=base + "/?" + urlencode({**query, "past": "1"}))

    @staticmethod
    def _group_arrays(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """An array's tasks as one row: how many, how many failed, by class."""
        out: list[dict[str, Any]] = []
        groups: dict[str, dict[str, Any]] = {}
        for r in rows:
            if not r["array"]:
                out.append(r)
                continue
            g = groups.get(r["array"])
            if g is None:
                g = groups[r["array"]] = dict(r, group=True, tasks=0, failed_n=0, by_cls={})
                out.append(g)
            g["tasks"] += 1
            g["when"] = max(g["when"] or 0, r["when"] or 0)
            if r["failed"]:
                g["failed_n"] += 1
                g["failed"] = True
                g["by_cls"][r["label"]] = g["by_cls"].get(r["label"], 0) + 1
        for g in groups.values():
            g["summary"] = ", ".join(f"{k} x{n}" for k, n in
                                     sorted(g["by_cls"].items(), key=lambda kv: -kv[1]))
        return out

    def _past(self, rows: list[dict[str, Any]], since: float | None, until: float | None
              ) -> tuple[list[dict[str, Any]], str]:
        """The caller's jobs Slurm's accounting still knows and the spool no longer holds
        (past retention, or never monitored: accounting does not say which)."""
        import pwd

        have = {r["job_id"] for r in rows}
        start = since or time.time() - PAST_DAYS * 86400
        args = ["sacct", "-n", "-P", "-X", f"--delimiter={slurm.SACCT_DELIM}", "-u",
                pwd.getpwuid(os.getuid()).pw_name, "-S",
                time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)),
                "-o", ",".join(slurm.ACCT_FIELDS)]  # no JobName: sacct prints it raw
        if until:
            args += ["-E", time.strftime("%Y-%m-%dT23:59:59", time.localtime(until))]
        try:
            jobs = slurm.parse_sacct_table(slurm.run(args, timeout=10.0),
                                           fields=slurm.ACCT_FIELDS)
        except (slurm.SlurmError, OSError) as e:
            return [], f"Slurm's accounting could not be asked: {e}"
        out = [{"job_id": str(j.job_id), "state": j.state, "exit": str(j.exit_code),
                "partition": j.partition, "nodes": j.nodelist}
               for j in jobs if str(j.job_id) not in have]
        return out, ""

    # ---- one job --------------------------------------------------------------------------

    def job_page(self, base: str, jobid: str, attempt: int | None) -> str:
        from gpualert_slurm.report import context, status_word
        from gpualert_slurm.report.recovery_lines import report_lines

        with store.spool_fd(self.spool) as root_fd:
            run, have = store.read_run(root_fd, jobid, attempt, with_logs=True)
            others = []
            for n in have:
                other = run if n == run.attempt else store.read_run(root_fd, jobid, n)[0]
                ov = other.verdict
                others.append({
                    "n": n, "href": f"{base}/job/{jobid}/{n}", "current": n == run.attempt,
                    "word": status_word(ov) if ov else other.why,
                    "cls": ov.cause.klass if ov else "",
                    "recovery": _recovery(report_lines, ov)})
        here = f"{base}/job/{jobid}/{run.attempt}"
        logs = [{"name": n, "size_h": _human(s), "view": f"{here}/log/{quote(n)}",
                 "raw": f"{here}/raw/{quote(n)}"} for n, s in run.logs]
        r = None
        artifacts: list[dict[str, Any]] = []
        if run.verdict is not None:
            r = context(run.verdict)
            for e in r["evidence"]:
                e["href"] = _log_href(here, e.get("short"), e.get("line"))
            artifacts = _artifacts(run.verdict, here)
        return get_template("web/job.html.j2").render(
            base=base, r=r, job_id=jobid, attempt=run.attempt, why=run.why,
            detail=run.detail, attempts=others, logs=logs, artifacts=artifacts)

    # ---- logs -----------------------------------------------------------------------------

    def log_page(self, base: str, jobid: str, attempt: int, name: str,
                 q: dict[str, str]) -> str:
        here = f"{base}/job/{jobid}/{attempt}"
        with store.spool_fd(self.spool) as root_fd, \
                store.open_log(root_fd, jobid, attempt, name) as (fd, size):
            want = _int(q.get("line"))
            off, first = _int(q.get("off")), _int(q.get("first"))
            if q.get("tail") == "1":
                off, first = logpage.tail_start(fd, size)
            elif want is not None:
                want = max(1, want - CONTEXT)  # the evidence line with some before it
                at = logpage.line_offset(fd, size, want)
                off, first = (at, want) if at is not None else logpage.tail_start(fd, size)
            elif off is None or off > size or (off and os.pread(fd, 1, off - 1) != b"\n"):
                off, first = 0, 1  # only the start of a line is a page's start
            page = logpage.read_page(fd, size, off, first or 1)
        link = f"{here}/log/{quote(name)}"
        nxt = None if page.next_off is None else \
            link + "?" + urlencode({"off": page.next_off, "first": page.first + len(page.lines)})
        prev = None if page.off == 0 else \
            link + "?" + urlencode({"line": max(1, page.first - logpage.PAGE_LINES)})
        return get_template("web/log.html.j2").render(
            base=base, job_id=jobid, attempt=attempt, name=name, page=page,
            size_h=_human(page.size), next=nxt, prev=prev, first_href=link,
            tail_href=link + "?tail=1", raw=f"{here}/raw/{quote(name)}", job=here,
            line=_int(q.get("line")), line_max=logpage.LINE_BYTES)

    def download_log(self, jobid: str, attempt: int, name: str) -> Response:
        stack = ExitStack()
        try:
            root_fd = stack.enter_context(store.spool_fd(self.spool))
            fd, size = stack.enter_context(store.open_log(root_fd, jobid, attempt, name))
        except BaseException:
            stack.close()
            raise
        return self._download(stack, fd, size, f"{jobid}-{attempt}-{name}", "text/plain")

    def download_artifact(self, jobid: str, attempt: int, index: int) -> Response:
        with store.spool_fd(self.spool) as root_fd:
            run, _have = store.read_run(root_fd, jobid, attempt)
        if run.verdict is None:
            raise store.NotFound(jobid)
        items = _artifact_items(run.verdict)
        if index >= len(items):
            raise store.NotFound(str(index))
        stack = ExitStack()
        try:
            fd, size = stack.enter_context(
                store.open_artifact(run.verdict.job.work_dir or "", items[index]))
        except BaseException:
            stack.close()
            raise
        name = os.path.basename(items[index]) or "artifact"
        return self._download(stack, fd, size, name, "application/octet-stream")

    @staticmethod
    def _download(stack: ExitStack, fd: int, size: int, name: str, mime: str) -> Response:
        safe = re.sub(r"[^A-Za-z0-9._+-]", "_", name)[:120] or "file"
        return "200 OK", [("Content-Type", mime if mime != "text/plain"
                           else "application/octet-stream"),
                          ("Content-Length", str(size)),
                          ("Content-Disposition", f'attachment; filename="{safe}"')], \
            _Stream(stack, fd, size)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() and len(text) < 19 else None


def _when(t: Any) -> str:
    if not isinstance(t, int | float) or not t:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _log_href(here: str, short: Any, line: Any) -> str | None:
    """The log viewer at an evidence line, for a line of a task log of this attempt."""
    if not isinstance(short, str) or not short.startswith("tasks/"):
        return None
    name = short[len("tasks/"):]
    if not store.LOG_NAME.fullmatch(name):
        return None
    if isinstance(line, int) and line > 0:
        return f"{here}/log/{quote(name)}?line={line}#L{line}"
    return f"{here}/log/{quote(name)}"


def _recovery(report_lines: Callable[[Any], list[str]], v: VerdictRecord | None) -> list[str]:
    if v is None or not v.recovery:
        return []
    try:
        return report_lines(v.recovery)
    except (AttributeError, TypeError, KeyError):
        return []


def _artifact_items(v: VerdictRecord) -> list[str]:
    """The names of the job's artifact files the report listed, attached or left out."""
    man = v.artifacts or {}
    out = []
    for a in [*man.get("attached", []), *man.get("left_out", [])]:
        if isinstance(a, dict) and a.get("kind") == "artifact" and isinstance(a.get("name"), str):
            out.append(a["name"])
    return out


def _artifacts(v: VerdictRecord, here: str) -> list[dict[str, Any]]:
    man = v.artifacts or {}
    rows = [dict(a, state="attached") for a in man.get("attached", []) if isinstance(a, dict)]
    rows += [dict(a, state="left out") for a in man.get("left_out", []) if isinstance(a, dict)]
    items = _artifact_items(v)
    out = []
    for a in rows:
        href = None
        # a file the report named (a glob that matched nothing has no size): downloadable
        if a.get("kind") == "artifact" and a.get("name") in items and \
                isinstance(a.get("size"), int):
            href = f"{here}/artifact/{items.index(a['name'])}"
        out.append({"name": str(a.get("name") or "?"), "kind": str(a.get("kind") or ""),
                    "size_h": _human(a.get("size") if isinstance(a.get("size"), int) else None),
                    "state": a["state"], "note": str(a.get("note") or a.get("reason") or ""),
                    "href": href})
    return out


class TokenGate:
    """`gpualert web`'s lock: every user of a login node can connect to its 127.0.0.1 port,
    so a request must carry the secret the command printed (the URL's `token=`, then the
    cookie it sets; the link only the invoking user saw). Else 403, before anything is read.
    Open OnDemand needs none: its front end authenticates and routes to the user's own PUN."""

    COOKIE = "gpualert_token"

    def __init__(self, app: Callable[..., Iterable[bytes]], token: str) -> None:
        self.app, self.token = app, token

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        import hmac
        from http.cookies import CookieError, SimpleCookie

        q = parse_qs(environ.get("QUERY_STRING", ""))
        given = (q.get("token") or [""])[0]
        if given and hmac.compare_digest(given.encode(), self.token.encode()):
            rest = urlencode([(k, v) for k, vs in q.items() if k != "token" for v in vs])
            path = (environ.get("SCRIPT_NAME") or "") + (environ.get("PATH_INFO") or "/")
            where = quote(path) + (f"?{rest}" if rest else "")
            start_response("303 See Other", [
                ("Location", where),
                ("Set-Cookie", f"{self.COOKIE}={self.token}; Path=/; HttpOnly; "
                               "SameSite=Strict"), ("Content-Length", "0")] + HEADERS)
            return [b""]
        try:
            jar = SimpleCookie(environ.get("HTTP_COOKIE", ""))
        except CookieError:
            jar = SimpleCookie()
        have = jar[self.COOKIE].value if self.COOKIE in jar else ""
        if have and hmac.compare_digest(have.encode(), self.token.encode()):
            return self.app(environ, start_response)
        body = (b"403 Forbidden: open the link `gpualert web` printed (it carries its "
                b"token).\n")
        start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8"),
                                         ("Content-Length", str(len(body)))] + HEADERS)
        return [body]


def make_app(cfg: Config | None = None) -> App:
    """The application over the site config (load_config: $GPUALERT_CONFIG or the default)."""
    return App(cfg or load_config())
