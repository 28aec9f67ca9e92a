"""`gpualert doctor` against a made-up installation in a temp dir and a real SMTP server."""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller

REPO = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sink:
    async def handle_DATA(self, server, session, envelope):
        return "250 OK"


@pytest.fixture
def smtp():
    port = free_port()
    c = Controller(Sink(), hostname="127.0.0.1", port=port)
    c.start()
    yield port
    c.stop()


@pytest.fixture
def install(tmp_path, smtp):
    """A complete, correct installation; each test breaks one part of it."""
    spool = tmp_path / "spool"
    spool.mkdir()
    spool.chmod(0o755)
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy("/bin/true", lib / "gpualert.so")  # any ELF file passes the file check
    (tmp_path / "plugstack.conf.d").mkdir()
    (tmp_path / "plugstack.conf").write_text("include plugstack.conf.d/*.conf\n")
    (tmp_path / "plugstack.conf.d" / "gpualert.conf").write_text(
        f"# gpualert\noptional {lib / 'gpualert.so'} spool={spool} default=off\n")
    for d, hook in (("prolog.d", "prolog"), ("epilog.d", "epilog"),
                    ("ctld.d", "epilog-slurmctld")):
        (tmp_path / d).mkdir()
        shutil.copy(REPO / "epilog.d" / f"gpualert-{hook}", tmp_path / d)
        (tmp_path / d / f"gpualert-{hook}").chmod(0o755)
    (tmp_path / "nodes.conf").write_text(f"Epilog={tmp_path / 'epilog.d'}/*\n")
    (tmp_path / "slurm.conf").write_text(
        "ClusterName=test\n"
        f"Prolog={tmp_path / 'prolog.d'}/*   # comment\n"
        "Include nodes.conf\n"
        f"EpilogSlurmctld={tmp_path / 'ctld.d' / 'gpualert-epilog-slurmctld'}\n"
        "NodeName=n1 Port=17001\n")
    cfg = tmp_path / "gpualert.yaml"
    cfg.write_text(f"spool: {spool}\nmail: {{relay: '127.0.0.1:{smtp}'}}\n")
    return tmp_path


def doctor(tmp, *extra):
    r = subprocess.run([sys.executable, "-m", "gpualert_slurm", "doctor",
                        "--config", str(tmp / "gpualert.yaml"),
                        "--plugstack", str(tmp / "plugstack.conf"),
                        "--slurm-conf", str(tmp / "slurm.conf"), *extra],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "Traceback" not in r.stdout + r.stderr
    return r


def fails(r):
    return [line for line in r.stdout.splitlines() if line.startswith("FAIL ")]


def test_good_installation_passes(install):
    r = doctor(install)
    assert r.returncode == 0, r.stdout
    assert fails(r) == []
    oks = [line for line in r.stdout.splitlines() if line.startswith("ok   ")]
    # config, plugstack, plugin file, spool=, 3 hooks, spool, relay, outbox (not made yet),
    # recovery circuit breakers, this host's Slurm release (in the tested matrix)
    assert len(oks) == 12
    assert r.stdout.splitlines()[-1] == "12 ok, 0 warnings, 0 failed"
    assert any("mail relay 127.0.0.1:" in line for line in oks)
    assert any("plugstack.conf.d/gpualert.conf:2" in line for line in oks)


def test_closed_relay_port_fails(install):
    port = free_port()  # nothing listens there
    (install / "gpualert.yaml").write_text(
        f"spool: {install / 'spool'}\nmail: {{relay: '127.0.0.1:{port}'}}\n")
    r = doctor(install)
    assert r.returncode == 1
    (line,) = fails(r)
    assert line.startswith(f"FAIL mail relay 127.0.0.1:{port}: cannot connect: Connection refused")
    assert "-> start the relay" in line


def test_non_smtp_server_fails(install):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    (install / "gpualert.yaml").write_text(
        f"spool: {install / 'spool'}\nmail: {{relay: '127.0.0.1:{port}'}}\n")
    import threading

    def serve():
        c, _ = srv.accept()
        c.sendall(b"HTTP/1.0 400 Bad\r\n")
        c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    r = doctor(install)
    srv.close()
    (line,) = fails(r)
    assert "no SMTP greeting" in line and "HTTP/1.0 400 Bad" in line


def test_plugin_not_listed(install):
    (install / "plugstack.conf.d" / "gpualert.conf").write_text("# removed\n")
    r = doctor(install)
    assert r.returncode == 1
    assert any(line.startswith("FAIL plugin listed in plugstack.conf: no required/optional "
                               "line names gpualert.so") and "-> add the line `optional "
               in line for line in fails(r))


def test_plugin_file_missing(install):
    (install / "lib" / "gpualert.so").unlink()
    r = doctor(install)
    (line,) = fails(r)
    assert "FAIL plugin file" in line and "make -C spank install" in line


def test_spool_mismatch_between_plugin_and_config(install):
    (install / "plugstack.conf.d" / "gpualert.conf").write_text(
        f"optional {install / 'lib' / 'gpualert.so'} spool=/elsewhere\n")
    (line,) = fails(doctor(install))
    assert "spool=/elsewhere" in line and "make them the same path" in line


def test_prolog_missing_and_not_a_shim(install):
    conf = install / "slurm.conf"
    conf.write_text(conf.read_text().replace("Prolog=", "#Prolog="))
    (line,) = fails(doctor(install))
    assert line.startswith("FAIL Prolog= in slurm.conf runs gpualert-prolog: no Prolog=")
    assert "-> install epilog.d/gpualert-prolog" in line
    conf.write_text(conf.read_text().replace("#Prolog=", "Prolog=/bin/true,"))
    (install / "prolog.d" / "gpualert-prolog").unlink()
    (line,) = fails(doctor(install))
    assert "matches no gpualert-prolog script" in line


def test_shim_not_executable(install):
    (install / "epilog.d" / "gpualert-epilog").chmod(0o644)
    (line,) = fails(doctor(install))
    assert "is not executable -> chmod 0755" in line


@pytest.mark.parametrize("mode,problem", [(0o777, "writable by group or others (mode 0777)"),
                                          (0o775, "writable by group or others")])
def test_spool_permissions(install, mode, problem):
    (install / "spool").chmod(mode)
    (line,) = fails(doctor(install))
    assert problem in line and "-> chmod 0755" in line


def test_spool_not_root_owned(install):
    os.chown(install / "spool", 4242, 4242)
    (line,) = fails(doctor(install))
    assert "owned by uid 4242, not root -> chown root:root" in line


def test_spool_missing(install):
    (install / "spool").rmdir()
    (line,) = fails(doctor(install))
    assert "No such file or directory -> install -d -o root -g root -m 0755" in line


def test_bad_config(install):
    (install / "gpualert.yaml").write_text("hook_timeout_s: forever\n")
    r = doctor(install)
    assert r.returncode == 1
    assert any("hook_timeout_s: expected a number" in line for line in fails(r))


def test_missing_plugstack(install):
    r = doctor(install, "--plugstack", str(install / "nope.conf"))
    assert any("cannot read" in line and "nope.conf" in line for line in fails(r))


def test_plugstack_found_through_slurm_conf(install):
    # Without --plugstack: slurm.conf's PlugStackConfig=, as Slurm does.
    other = install / "elsewhere"
    other.mkdir()
    (install / "plugstack.conf").rename(other / "ps.conf")
    (other / "ps.conf").write_text(f"include {install / 'plugstack.conf.d'}/*.conf\n")
    conf = install / "slurm.conf"
    conf.write_text(conf.read_text() + f"PlugStackConfig={other / 'ps.conf'}\n")
    r = subprocess.run([sys.executable, "-m", "gpualert_slurm", "doctor",
                        "--config", str(install / "gpualert.yaml"),
                        "--slurm-conf", str(conf)],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stdout
    assert "plugstack.conf.d/gpualert.conf:2" in r.stdout


def warns(r):
    return [line for line in r.stdout.splitlines() if line.startswith("warn ")]


def test_optional_epilogs_missing_warn_but_pass(install):
    # README step 4 is optional: a site that did steps 1-3 and 5 passes, with two warnings.
    conf = install / "slurm.conf"
    conf.write_text(conf.read_text().replace("EpilogSlurmctld=", "#EpilogSlurmctld="))
    (install / "nodes.conf").write_text("# no Epilog yet\n")
    r = doctor(install)
    assert r.returncode == 0, r.stdout
    assert fails(r) == []
    w = warns(r)
    assert len(w) == 2
    assert w[0].startswith("warn Epilog= in slurm.conf: not configured (optional): no node "
                           "verdicts") and "set Epilog=/etc/slurm/epilog.d/* in slurm.conf" in w[0]
    assert w[1].startswith("warn EpilogSlurmctld= in slurm.conf: not configured (optional)")
    assert "as /etc/slurm/gpualert-epilog-slurmctld (mode 0755) and set EpilogSlurmctld=" \
        "/etc/slurm/gpualert-epilog-slurmctld in slurm.conf (then restart slurmctld)" in w[1]
    # 8 + the breakers + the Slurm release
    assert r.stdout.splitlines()[-1] == "10 ok, 2 warnings, 0 failed"


def test_relay_is_a_warning_until_reports_are_configured(install):
    port = free_port()  # nothing listens there
    (install / "gpualert.yaml").write_text(
        f"spool: {install / 'spool'}\nmail: {{relay: '127.0.0.1:{port}'}}\n")
    conf = install / "slurm.conf"
    conf.write_text(conf.read_text().replace("EpilogSlurmctld=", "#EpilogSlurmctld="))
    r = doctor(install)
    assert r.returncode == 0, r.stdout
    assert any(line.startswith(f"warn mail relay 127.0.0.1:{port}: cannot connect")
               and "(needed once EpilogSlurmctld is configured)" in line for line in warns(r))


def test_configured_epilog_that_is_wrong_fails(install):
    (install / "nodes.conf").write_text("Epilog=/bin/true\n")
    (line,) = fails(doctor(install))
    assert line.startswith("FAIL Epilog= in slurm.conf runs gpualert-epilog:")
    assert "Epilog=/bin/true matches no gpualert-epilog script" in line


def _snippet_settings() -> dict[str, str]:
    out = {}
    for raw in (REPO / "etc" / "slurm.conf.snippet").read_text().splitlines():
        text = raw.split("#", 1)[0].strip()
        if "=" in text:
            k, v = text.split("=", 1)
            out[k] = v
    return out


def test_readme_snippet_and_doctor_agree():
    from gpualert_slurm.commands.doctor import HOOKS

    snippet = _snippet_settings()
    readme = (REPO / "README.md").read_text()
    install = readme[readme.index("## Installing"):readme.index("## Using it")]
    for h in HOOKS:
        assert snippet[h.key] == h.value, h.key
        assert f"       {h.key}={h.value}\n" in install, h.key  # the README's code block
        assert f"`{h.shim}`" in install, h.shim
        assert (h.key == "Prolog") == h.required
    assert "Optional" in install[install.index("Epilog=") - 600:install.index("Epilog=")]
    assert snippet["PrologFlags"] == "Alloc" and "PrologFlags=Alloc" in install
    # The plugstack line: the README's, the shipped file's and the one doctor suggests.
    shipped = [line for line in (REPO / "etc" / "plugstack.conf.d" / "gpualert.conf")
               .read_text().splitlines() if line and not line.startswith("#")]
    assert len(shipped) == 1 and f"       {shipped[0]}\n" in install
    assert "`/etc/slurm/plugstack.conf.d/gpualert.conf`" in install
    from gpualert_slurm.commands.doctor import check_plugstack
    from gpualert_slurm.core.config import Config

    (missing, *_) = check_plugstack("/nonexistent/plugstack.conf", Config())
    assert f"add the line `{shipped[0]}`" in missing.fix


def test_spool_usage_and_retention_are_shown(install):
    spool = install / "spool"
    for job, size in (("41", 3000), ("42", 5000)):
        (spool / job / "tasks").mkdir(parents=True)
        (spool / job / "tasks" / "batch.0.log").write_bytes(b"z" * size)
    old = time.time() - 3 * 86400
    for p in (spool / "41", spool / "41" / "tasks", spool / "41" / "tasks" / "batch.0.log"):
        os.utime(p, (old, old))
    (install / "gpualert.yaml").write_text(
        (install / "gpualert.yaml").read_text()
        + "retention: {max_age: 14d, max_total: 2G, min_age: 2h}\n")
    r = doctor(install)
    assert r.returncode == 0, r.stdout
    infos = [line for line in r.stdout.splitlines() if line.startswith("info ")]
    assert infos[0].startswith("info spool usage: 2 job dirs, ")
    assert ", oldest: job 41, idle 3.0 d" in infos[0]
    assert infos[1].startswith("info retention: max_age 14.0 d, max_total 2.0 GiB, min_age 2.0 h")


def test_doctor_passes_on_the_test_cluster_as_installed(cluster):
    # The cluster's own files, as `cluster up` installed them: its slurm.conf (and the
    # plugstack.conf it names), its gpualert config, its spool, its SMTP sink.
    r = subprocess.run([sys.executable, "-m", "gpualert_slurm", "doctor",
                        "--config", str(cluster.gpualert_config),
                        "--slurm-conf", str(cluster.conf)],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "Traceback" not in r.stdout + r.stderr
    assert r.returncode == 0, r.stdout
    assert fails(r) == []
    out = r.stdout
    assert f"ok   plugin file {cluster.plugin}" in out
    assert "ok   Prolog= in slurm.conf runs gpualert-prolog" in out
    assert f"ok   spool {cluster.spool}" in out
    assert f"ok   mail relay {cluster.smtp_host}:{cluster.smtp_port}" in out
    assert "info spool usage: " in out
    # Epilog lines: ok where the cluster configures them, an optional warning where not.
    for key, hook in (("Epilog", "epilog"), ("EpilogSlurmctld", "epilog-slurmctld")):
        configured = any(line.split("#", 1)[0].strip().startswith(f"{key}=")
                         for line in cluster.conf.read_text().splitlines())
        want = f"ok   {key}= in slurm.conf runs gpualert-{hook}" if configured else \
            f"warn {key}= in slurm.conf: not configured (optional)"
        assert want in out, out


def test_an_open_recovery_breaker_is_named_with_its_time_and_the_reset(install):
    """The drain circuit breaker (recovery/) opened in one partition, reset in another: the
    doctor warns about the open one only, says since when and why, and how to reset it."""
    from gpualert_slurm.recovery.audit import AuditLog

    r = doctor(install)
    assert "ok   recovery circuit breakers: none open" in r.stdout, r.stdout
    audit = install / "audit.jsonl"
    (install / "gpualert.yaml").write_text((install / "gpualert.yaml").read_text()
                                           + f"recovery: {{audit_log: {audit}}}\n")
    log = AuditLog(str(audit))
    opened = time.time() - 2 * 3600
    for rec in ({"event": "breaker", "partition": "gpu", "state": "open", "id": "7.0",
                 "why": "circuit breaker trips: 2 drains in partition gpu within 600 s",
                 "time": opened},
                {"event": "breaker", "partition": "debug", "state": "open", "id": "8.0",
                 "why": "x", "time": opened},
                {"event": "breaker", "partition": "debug", "state": "reset", "id": "9.0"}):
        log.append(rec)
    r = doctor(install)
    assert r.returncode == 0, r.stdout  # the site's state, not a broken installation
    lines = [ln for ln in r.stdout.splitlines() if "circuit breaker" in ln]
    assert len(lines) == 1, lines
    (line,) = lines
    since = time.strftime("%Y-%m-%d %H:%M", time.localtime(opened))
    assert line.startswith("warn recovery circuit breaker of partition gpu: open since "
                           f"{since}"), line
    assert "(2.0 h)" in line and "2 drains in partition gpu within 600 s" in line
    assert "-> " in line and "gpualert resume --breaker gpu" in line
    assert "gpualert history" in line


def test_an_unreadable_audit_log_is_said_not_hidden(install):
    """Not root (the audit log is root's, 0600): said, with the fix; an audit log that is not
    a file: said too. Never "none open" when the doctor could not tell."""
    import tempfile

    pub = Path(tempfile.mkdtemp(prefix="gpualert-doctor-"))  # reachable by nobody
    try:
        pub.chmod(0o755)
        audit = pub / "audit.jsonl"
        audit.write_text('{"event": "breaker"}\n')
        audit.chmod(0o600)
        cfg = pub / "gpualert.yaml"
        cfg.write_text(f"spool: {pub}\nrecovery: {{audit_log: {audit}}}\n")
        cfg.chmod(0o644)
        r = subprocess.run([sys.executable, "-m", "gpualert_slurm", "doctor", "--config",
                            str(cfg), "--slurm-conf", str(pub / "none.conf")],
                           capture_output=True, text=True, timeout=60, user=65534, group=65534,
                           cwd="/", env={**os.environ, "PYTHONPATH": str(REPO)})
        assert "Traceback" not in r.stdout + r.stderr
        line = next(ln for ln in r.stdout.splitlines() if "circuit breaker" in ln)
        assert line.startswith(f"warn recovery circuit breakers: cannot read {audit}: "
                               "Permission denied"), line
        assert "run gpualert doctor as root" in line
    finally:
        shutil.rmtree(pub)

    not_a_file = install / "audit.jsonl"
    not_a_file.mkdir()
    (install / "gpualert.yaml").write_text((install / "gpualert.yaml").read_text()
                                           + f"recovery: {{audit_log: {not_a_file}}}\n")
    line = next(ln for ln in doctor(install).stdout.splitlines() if "circuit breaker" in ln)
    assert line.startswith("warn recovery circuit breakers: cannot read "), line
    assert "Is a directory" in line and "recovery.audit_log" in line
