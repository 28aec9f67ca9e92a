"""The web pages (gpualert_slurm/web/) over a spool laid out as the hooks leave it, served for
real: by `gpualert web` and by Phusion Passenger through ood/gpualert/passenger_wsgi.py, each
as the user who asks. User A's app shows A's jobs, and never B's: not in the list, not by a
guessed URL, not through `..` or a symlink A planted (404, the same as a job that does not
exist). A verdict.json A made by hand shows on A's page as not gpualert's, and is trusted
nowhere; a missing or half-written one is "report not ready yet", never a 500. Logs are paged:
a line of several MB is cut and says so, binary bytes are shown escaped."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import weblib
from weblib import OTHER_USER, get, raw_get

from gpualert_slurm.core.verdict import VerdictRecord, write_at

USER_A = "gpatest"
SECRET_B = "SECRET-OF-USER-B"
EVIL = "<script>alert(1)</script>"


def _own(path: Path, pw: pwd.struct_passwd, mode: int) -> None:
    os.chown(path, pw.pw_uid, pw.pw_gid)
    path.chmod(mode)


def _job_dir(spool: Path, job: int, pw: pwd.struct_passwd) -> Path:
    d = spool / str(job)
    (d / "tasks").mkdir(parents=True)
    _own(d, pw, 0o700)
    _own(d / "tasks", pw, 0o700)
    return d


def _log(d: Path, name: str, data: bytes, pw: pwd.struct_passwd) -> None:
    p = d / "tasks" / name
    p.write_bytes(data)
    _own(p, pw, 0o600)


def _verdict(d: Path, job: int, attempt: int = 0, **kw) -> None:
    """verdict.json as the job epilog writes it: root's, through core.verdict.write_at."""
    v = {"version": 1, "job_id": str(job), "attempt": attempt, "attempt_path": str(d),
         "logs_dir": str(d / "tasks"), "failed": True,
         "job": {"name": kw.pop("name", "train"), "user": "u", "exit_code": 1,
                 "end_time": kw.pop("end", time.time() - 600), "partition": "gpu",
                 "work_dir": kw.pop("work_dir", "/nonexistent")},
         "verdict": {"class": kw.pop("cls", "cuda_oom"), "domain": "workload",
                     "confidence": 0.9, "root_rank": 0, "root_node": "n1",
                     "hint": "Lower the batch size.",
                     "evidence": kw.pop("evidence", [])}, **kw}
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_at(fd, VerdictRecord.from_json(v))
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def site() -> Iterator[dict]:
    """A spool with user A's jobs (a CUDA OOM with a big log, a report not ready, a
    half-written one, a hand-made one, a requeued job, an array) and user B's one job; the
    config that names it."""
    a = pwd.getpwnam(USER_A)
    b = weblib.ensure_user(OTHER_USER)
    base = weblib.shared_dir("gpualert-web-")
    spool = base / "spool"
    spool.mkdir(mode=0o755)
    # A: 201, the failed job; its log has an evidence line, a 3 MB line, binary bytes, and
    # enough lines for three pages
    d = _job_dir(spool, 201, a)
    lines = [f"step {i} loss 1.{i:04d}".encode() for i in range(1, 1300)]
    lines[2] = b"torch.OutOfMemoryError: CUDA out of memory " + EVIL.encode()
    lines[10] = b"Z" * (3 << 20)
    lines[20] = b"bin \x00\x01\x1b[31m\xff\xfe end"
    _log(d, "0.0.log", b"\n".join(lines) + b"\n", a)
    _log(d, "batch.0.log", b"srun: error: task 0: Exited with exit code 1\n", a)
    # its work dir: an artifact the report attached, a link A planted to a file of B's that
    # anyone may read, and a name that climbs out
    work = base / "work-a"
    work.mkdir()
    _own(work, a, 0o755)
    (work / "metrics.json").write_text('{"loss": 1.5}\n')
    _own(work / "metrics.json", a, 0o644)
    public_b = base / "b-public.txt"
    public_b.write_text(SECRET_B)
    _own(public_b, b, 0o644)
    os.symlink(public_b, work / "link.json")
    art = [{"kind": "artifact", "name": n, "size": 14, "attached_size": 14, "note": ""}
           for n in ("metrics.json", "link.json", "../b-public.txt")]
    _verdict(d, 201, name=EVIL + "\x1b]0;owned\x07", work_dir=str(work), evidence=[
        {"file": str(d / "tasks" / "0.0.log"), "line": 3, "text": lines[2].decode()}],
        artifacts={"budget": 1 << 20, "used": 42, "attached": art, "left_out": [
            {"kind": "artifact", "name": "ckpt/*.pt", "size": None, "reason": "no match",
             "where": str(work)}]})
    # a planted link to B's log, and an attempt dir that is a link to B's job
    os.symlink(spool / "301" / "tasks" / "0.0.log", d / "tasks" / "stolen.log")
    os.symlink(spool / "301", d / "attempt-7")
    # 202: no verdict yet; 203: a half-written one (root's); 204: one A made by hand
    _log(_job_dir(spool, 202, a), "0.0.log", b"still running\n", a)
    d = _job_dir(spool, 203, a)
    (d / "verdict.json").write_text('{"version": 1, "job_id": "203", "verd')
    d = _job_dir(spool, 204, a)
    (d / "verdict.json").write_text(json.dumps({"version": 1, "job_id": "204", "failed": True,
                                                "verdict": {"class": "gpu_hardware"}}))
    _own(d / "verdict.json", a, 0o644)
    # 205: requeued after a node loss; the decision is in attempt 0's verdict
    d = _job_dir(spool, 205, a)
    _verdict(d, 205, cls="node_failure", recovery={
        "mode": "action", "outcome": "planned", "rule": "node_failure",
        "planned": [{"action": "drain_node", "target": "n2"},
                    {"action": "requeue", "target": "205"}], "retries_left": 1})
    (d / "attempt-1" / "tasks").mkdir(parents=True)
    _own(d / "attempt-1", a, 0o700)
    _own(d / "attempt-1" / "tasks", a, 0o700)
    _verdict(d / "attempt-1", 205, attempt=1, cls="cuda_oom")
    # 210-212: an array of three, one failed
    for i, job in enumerate((210, 211, 212)):
        d = _job_dir(spool, job, a)
        _verdict(d, job, array={"job_id": "210", "task_id": i}, name="sweep",
                 cls="cuda_oom" if i == 1 else "success", failed=i == 1)
    # B: 301, with a secret in its log and its name
    d = _job_dir(spool, 301, b)
    _log(d, "0.0.log", f"{SECRET_B}\n".encode(), b)
    _verdict(d, 301, name=SECRET_B)
    cfg = base / "gpualert.yaml"
    cfg.write_text(f"spool: {spool}\n")
    cfg.chmod(0o644)
    yield {"spool": spool, "config": cfg, "base": base}
    shutil.rmtree(base, ignore_errors=True)


def _servers() -> list[str]:
    return ["gpualert-web", "passenger"]


@pytest.fixture(scope="module", params=_servers())
def served(request, site) -> Iterator[dict]:
    """User A's and user B's apps, each as its user, by the server the param names."""
    serve = weblib.gpualert_web if request.param == "gpualert-web" else weblib.passenger
    with serve(USER_A, site["config"]) as url_a, serve(OTHER_USER, site["config"]) as url_b:
        weblib.wait_up(url_a + "/")
        weblib.wait_up(url_b + "/")
        yield {"a": url_a, "b": url_b, **site}


def _text(url: str) -> tuple[int, dict[str, str], str]:
    status, headers, body = get(url)
    return status, headers, body.decode("utf-8", errors="replace")


def test_the_list_shows_the_callers_jobs_only_an_array_as_one_row(served) -> None:
    status, headers, page = _text(served["a"] + "/")
    assert status == 200
    for job in ("201", "202", "203", "204", "205"):
        assert f'/job/{job}"' in page, job
    assert "array 210" in page and "3 tasks, 1 failed" in page
    assert "/job/211" not in page  # the array's tasks are one row
    assert "301" not in page and SECRET_B not in page
    assert EVIL not in page and "&lt;script&gt;" in page
    assert "\x1b" not in page and "\x07" not in page and "\\x1b]0;owned\\x07" in page
    # B sees B's one job, none of A's
    status, _h, page_b = _text(served["b"] + "/")
    assert status == 200 and '/job/301"' in page_b and "/job/201" not in page_b
    # the array's own list names its tasks
    _s, _h, tasks = _text(served["a"] + "/?array=210")
    assert all(f"/job/{j}" in tasks for j in ("210", "211", "212"))


def test_filters_by_state_class_and_date(served) -> None:
    # a requeued job is listed by its latest attempt (205's second run: a CUDA OOM)
    _s, _h, failed = _text(served["a"] + "/?state=failed&cls=cuda_oom")
    assert '/job/205"' in failed and '/job/201"' in failed and '/job/202"' not in failed
    _s, _h, none = _text(served["a"] + "/?cls=gpu_hardware")  # 204's is hand-made: no class
    assert '/job/204"' not in none and "0 shown" in none
    _s, _h, pending = _text(served["a"] + "/?state=not+ready")
    assert '/job/202"' in pending and '/job/203"' in pending and '/job/201"' not in pending
    _s, _h, future = _text(served["a"] + "/?from=2999-01-01")
    assert '/job/201"' not in future


def test_every_page_forbids_script_and_escapes_what_the_job_wrote(served) -> None:
    for path in ("/", "/job/201", "/job/201/0/log/0.0.log", "/job/999"):
        status, headers, page = _text(served["a"] + path)
        csp = headers.get("Content-Security-Policy", "")
        assert "default-src 'none'" in csp and "script-src" not in csp, (path, csp)
        assert headers.get("X-Content-Type-Options") == "nosniff"
        assert "<script" not in page, path


def test_job_page_has_the_report_evidence_links_and_logs(served) -> None:
    status, _h, page = _text(served["a"] + "/job/201")
    assert status == 200
    assert "Lower the batch size." in page and "CUDA out of memory" in page
    assert "/job/201/0/log/0.0.log?line=3#L3" in page  # the evidence line, in the viewer
    assert "/job/201/0/raw/0.0.log" in page and "batch.0.log" in page
    assert "stolen.log" not in page  # a link is no log


def test_log_viewer_pages_cuts_a_huge_line_and_escapes_binary(served) -> None:
    status, _h, page = _text(served["a"] + "/job/201/0/log/0.0.log?line=3")
    assert status == 200 and 'id="L3" class="hit"' in page
    assert "line cut: " in page and "more bytes not shown" in page
    assert len(page) < 1 << 20  # never the 3 MB line, never the whole log
    assert "\\x00\\x01\\x1b[31m\\xff\\xfe" in page and "not text" in page
    assert 'id="L500"' in page and 'id="L600"' not in page  # one page
    nxt = page.split('next page</a>')[0].rsplit('href="', 1)[1].split('"')[0]
    status, _h, page2 = _text(served["a"] + nxt.replace("&amp;", "&"))
    assert status == 200 and 'id="L501"' in page2 and 'id="L3"' not in page2
    _s, _h, last = _text(served["a"] + "/job/201/0/log/0.0.log?tail=1")
    assert 'id="L1299"' in last and "step 1299 " in last
    status, headers, body = get(served["a"] + "/job/201/0/raw/0.0.log")
    assert status == 200 and len(body) > 3 << 20 and "attachment" in headers[
        "Content-Disposition"]


def test_artifacts_download_only_the_jobs_own_files(served) -> None:
    s, _h, page = _text(served["a"] + "/job/201")
    assert "metrics.json" in page and "ckpt/*.pt" in page
    status, headers, body = get(served["a"] + "/job/201/0/artifact/0")
    assert status == 200 and body == b'{"loss": 1.5}\n', (status, body)
    assert headers["Content-Disposition"] == 'attachment; filename="metrics.json"'
    for i in (1, 2, 3, 99):  # the planted link, the climb out, the glob, none
        status, _h, body = get(served["a"] + f"/job/201/0/artifact/{i}")
        assert status == 404 and SECRET_B.encode() not in body, i
    assert get(served["b"] + "/job/201/0/artifact/0")[0] == 404


def test_not_ready_half_written_and_hand_made_verdicts(served) -> None:
    s, _h, page = _text(served["a"] + "/job/202")
    assert s == 200 and "report not ready yet" in page and "0.0.log" in page
    s, _h, page = _text(served["a"] + "/job/203")
    assert s == 200 and "report not ready yet" in page
    s, _h, page = _text(served["a"] + "/job/204")
    assert s == 200 and "not written by gpualert" in page and "gpu_hardware" not in page
    # B's app: none of A's, whatever it is
    for job in ("201", "202", "203", "204"):
        assert get(served["b"] + f"/job/{job}")[0] == 404, job


def test_requeued_job_shows_every_attempt_and_the_recovery_decision(served) -> None:
    s, _h, page = _text(served["a"] + "/job/205")
    assert s == 200 and "Attempts" in page and "/job/205/0" in page
    s, _h, page0 = _text(served["a"] + "/job/205/0")
    assert "gpualert drains node n2 now" in page0 and "requeues the job now" in page0
    assert "Retries left for this job: 1." in page0


def test_no_way_into_another_users_job(served) -> None:
    a = served["a"]
    for path in ("/job/301", "/job/301/0", "/job/301/0/log/0.0.log", "/job/301/0/raw/0.0.log",
                 "/job/201/0/log/stolen.log", "/job/201/0/raw/stolen.log", "/job/201/7",
                 "/job/201/7/log/0.0.log", "/job/201/0/log/..%2F..%2F301%2Ftasks%2F0.0.log",
                 "/job/201/0/artifact/1", "/job/0201", "/nope"):
        status, _h, body = get(a + path)
        assert status == 404, (path, status)
        assert SECRET_B.encode() not in body, path
    for path in ("/job/201/../301", "/job/201/0/log/../../../301/tasks/0.0.log",
                 "/../301/tasks/0.0.log", "/job/301/0/log/%2e%2e%2f0.0.log"):
        status, body = raw_get(a, path)
        assert status == 404, (path, status)
        assert SECRET_B.encode() not in body, path
    # B's own app reads it
    s, _h, page = _text(served["b"] + "/job/301/0/log/0.0.log")
    assert s == 200 and SECRET_B in page


def test_gpualert_web_wants_its_token(site) -> None:
    """Any user of the login node can connect to 127.0.0.1: only the printed link opens it."""
    with weblib.gpualert_web(USER_A, site["config"]) as url:
        weblib.wait_up(url + "/")
        for path in ("/", "/job/201", "/job/201/0/raw/0.0.log", "/job/201?token=wrong"):
            status, _h, body = get(url + path, token=False)
            assert status == 403 and b"CUDA" not in body and b"201" not in body, path
        # the printed link sets the cookie and sends the browser on, the token out of the URL
        page = weblib.chromium_dom(url + "/job/201/0/log/0.0.log?line=3")
        assert 'id="L3" class="hit"' in page


def test_gpualert_web_refuses_root_and_other_addresses(site) -> None:
    env = {**os.environ, "GPUALERT_CONFIG": str(site["config"])}
    r = subprocess.run([weblib.GPUALERT, "web"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "refused as root" in r.stderr
    cmd = ["runuser", "-u", USER_A, "--", "env", f"GPUALERT_CONFIG={site['config']}",
           weblib.GPUALERT, "web", "--bind"]
    for addr in ("0.0.0.0", "10.1.2.3", "localhost.evil.org", "::"):
        r = subprocess.run(cmd + [addr], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "only 127.0.0.1 or ::1" in r.stderr, (addr, r.stderr)


def test_a_spool_a_user_made_is_not_read(site) -> None:
    """A config naming a spool the user owns (a fake one): refused, nothing under it shown."""
    a = pwd.getpwnam(USER_A)
    fake = weblib.shared_dir("gpualert-fake-")
    os.chown(fake, a.pw_uid, a.pw_gid)
    cfg = fake / "gpualert.yaml"
    cfg.write_text(f"spool: {site['spool']}-fake\n")
    shutil.copytree(site["spool"], f"{site['spool']}-fake", symlinks=True)
    os.chown(f"{site['spool']}-fake", a.pw_uid, a.pw_gid)
    try:
        with weblib.gpualert_web(USER_A, cfg) as url:
            weblib.wait_up(url + "/")
            status, _h, body = get(url + "/job/201")
            assert status == 503 and b"not one to trust" in body and b"uid" in body
            assert b"CUDA out of memory" not in body
    finally:
        shutil.rmtree(fake, ignore_errors=True)
        shutil.rmtree(f"{site['spool']}-fake", ignore_errors=True)


def test_report_url_links_the_mail_to_the_page(tmp_path) -> None:
    """report.url (config): the mail's text and HTML parts link to the job's page; a URL
    without {job} or of another scheme is refused; unset, the mail says nothing of it."""
    from gpualert_slurm.core.config import ConfigError, load_config
    from gpualert_slurm.report import render

    cfg = tmp_path / "c.yaml"
    cfg.write_text("report:\n  url: https://ondemand.example.org/pun/sys/gpualert/job/{job}\n")
    url = load_config(str(cfg)).report.url
    v = {"version": 1, "job_id": "77", "failed": True, "verdict": {"class": "cuda_oom"}}
    page = "https://ondemand.example.org/pun/sys/gpualert/job/77"
    assert f"This job's page: {page}" in render(v, "text", url=url)
    assert f'<a href="{page}">' in render(v, "html", url=url)
    assert "This job's page" not in render(v, "text") + render(v, "html")
    for bad in ("javascript:alert(1)/{job}", "https://host/job/", "https://h/{job} x"):
        cfg.write_text(f"report:\n  url: '{bad}'\n")
        with pytest.raises(ConfigError, match="report.url"):
            load_config(str(cfg))


def test_under_open_ondemands_prefix_every_link_keeps_it(site) -> None:
    """OnDemand mounts the app at /pun/sys/gpualert (SCRIPT_NAME): each link and the filter
    form stay under it. The app called as WSGI, as user A, the way Passenger calls it."""
    code = (
        "import sys\n"
        "from wsgiref.util import setup_testing_defaults\n"
        "from gpualert_slurm.web import make_app\n"
        "app = make_app()\n"
        "for path in ('/', '/job/201'):\n"
        "    env = {}\n"
        "    setup_testing_defaults(env)\n"
        "    env.update(SCRIPT_NAME='/pun/sys/gpualert', PATH_INFO=path)\n"
        "    sys.stdout.write(b''.join(app(env, lambda s, h: None)).decode())\n")
    r = subprocess.run(["runuser", "-u", USER_A, "--", "env", f"GPUALERT_CONFIG={site['config']}",
                        weblib.VENV_PYTHON, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    hrefs = re.findall(r'(?:href|action)="([^"#]+)', r.stdout)
    assert len(hrefs) > 10 and "/pun/sys/gpualert/job/201/0/log/0.0.log?line=3" in hrefs
    assert all(h.startswith("/pun/sys/gpualert/") for h in hrefs), [
        h for h in hrefs if not h.startswith("/pun/sys/gpualert/")]


def test_the_ondemand_app_dir_is_what_ondemand_reads() -> None:
    """manifest.yml parses with the keys OnDemand's dashboard shows; passenger_wsgi.py is the
    startup file (a WSGI `application`), refusing root."""
    import yaml

    app = weblib.REPO / "ood" / "gpualert"
    m = yaml.safe_load((app / "manifest.yml").read_text())
    assert m["role"] == "app" and m["name"] and m["category"] and m["description"]
    src = (app / "passenger_wsgi.py").read_text()
    assert "application = make_app()" in src and "geteuid() == 0" in src


def test_a_spool_that_is_not_there_is_a_503_not_a_500(tmp_path) -> None:
    from wsgiref.util import setup_testing_defaults

    from gpualert_slurm.core.config import Config
    from gpualert_slurm.web import make_app

    app = make_app(Config(spool=str(tmp_path / "no-spool")))
    for path in ("/", "/job/1", "/job/1/0/log/0.0.log"):
        env: dict = {}
        setup_testing_defaults(env)
        env["PATH_INFO"] = path
        got: dict = {}
        body = b"".join(app(env, lambda s, h, got=got: got.update(s=s, h=dict(h))))
        assert got["s"].startswith("503") and b"cannot be read" in body, (path, got["s"])
        assert "default-src 'none'" in got["h"]["Content-Security-Policy"]
