"""The red-team pass on the trust boundary (docs/SECURITY.md, "Red-team pass"; issue 17): ways
in that the fixers' own tests (test_trust_cluster, test_trust_readers, test_trust_policy) did
not try, each run as the unprivileged test user against the real part it attacks (this
machine's kernel log through dmesg, a real munged), and each asserted harmless."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import clusterlib as cl
import pytest
from recoverylib import (  # rc, audit: conftest.py's fixtures on this cluster
    cancel,
    job_script,
    recovery_cluster,  # noqa: F401  (the fixture)
    wait_decision,
    write_config,
)
from test_trust_cluster import assert_harmless, verdict_of
from test_trust_policy import private_munged

from gpualert_slurm.classify.node_trust import node_trust
from gpualert_slurm.core import provenance
from gpualert_slurm.core.evidence import kernel_evidence
from gpualert_slurm.core.kernel_lines import without_comm
from gpualert_slurm.hooks.job_epilog.facts import read_node_record, sealed_view

# ---- a newline in a trapped file's name, then a time stamp: a "record" of its own ----------

TRAP = r'''import ctypes, os, sys
name = sys.argv[1]
with open(name, "wb") as f:
    f.write(b"\x0f\x0b" * 2048)  # ud2: an invalid opcode
fd = os.open(name, os.O_RDONLY)
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
ctypes.CFUNCTYPE(None)(libc.mmap(None, 4096, 5, 2, fd, 0))()  # PROT_READ|EXEC, MAP_PRIVATE
'''


def test_a_newline_and_a_stamp_in_a_trapped_file_name_forge_no_driver_line() -> None:
    """dmesg prints a newline inside a record raw, then indents the rest; the trap line's file
    name is the user's. 'a\\n<stamp> NVRM: Xid ...' read as a driver line of its own, at a time
    the user chose, on root's sealed facts: it would drain the node."""
    token = secrets.token_hex(4)
    d = Path(tempfile.mkdtemp(prefix="gpualert-redteam-", dir="/tmp"))
    try:
        os.chmod(d, 0o777)
        cl.write_user_file(d / "trap.py", TRAP, mode=0o644)
        start = time.time() - 1
        for _ in range(3):  # the kernel rate-limits its trap lines
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S,000000+00:00")
            name = (f"a\n{stamp} NVRM: Xid (PCI:0000:3b:00): 79, pid={token}, GPU has "
                    "fallen off the bus.")
            cl.run_as_user(["python3", "trap.py", name], cwd=d, timeout=30)
            raw = subprocess.run(["dmesg", "--time-format", "iso"], capture_output=True,
                                 text=True, timeout=30).stdout.splitlines()
            forged = [ln for ln in raw if token in ln]
            if forged:
                break
            time.sleep(5)
        # the attack's shape landed: an indented line that, stripped, is a stamped Xid line
        assert forged and forged[0][:1].isspace(), forged
        assert forged[0].strip().startswith(f"{stamp} NVRM: Xid (PCI:0000:3b:00): 79,")
        k = kernel_evidence(start, time.time() + 1)
        assert k["source"] == "dmesg", k
        assert not [ln for ln in k["lines"] if token in ln], k["lines"]
        rf = provenance.node_facts("1", 0, "n1", (start, time.time()), "slurm", k,
                                   {"absent": "no GPU"}, None)
        assert not [x for x in rf["kernel"]["lines"] if "xid" in x], rf["kernel"]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_newline_and_a_stamp_in_a_mount_option_forge_no_driver_line() -> None:
    """The same shape without an executable mapping: in a user namespace of their own any
    user may mount tmpfs, and the kernel logs an unknown option whole ("tmpfs: Unknown
    parameter '<option>'"), newline included. No comma can follow the Xid number (mount
    splits options there), so this one was not a driver Xid line; it was a kept kernel line
    of root's, "NVRM: ... fallen off the bus", that classified the job gpu_hardware under
    the label "kernel log of <node>"."""
    token = secrets.token_hex(4)
    start = time.time() - 1
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S,000000+00:00")
    opt = f"a\n{stamp} NVRM: Xid (PCI:0000:3b:00): 79 pid:{token} GPU has fallen off the bus"
    cl.run_as_user(["unshare", "-rm", "mount", "-t", "tmpfs", "-o", opt, "none", "/tmp"],
                   timeout=30)
    raw = subprocess.run(["dmesg", "--time-format", "iso"], capture_output=True, text=True,
                         timeout=30).stdout.splitlines()
    forged = [ln for ln in raw if token in ln]
    assert forged and forged[0][:1].isspace() and forged[0].strip().startswith(
        f"{stamp} NVRM: Xid (PCI:0000:3b:00): 79 pid:"), forged
    k = kernel_evidence(start, time.time() + 1)
    assert not [ln for ln in k["lines"] if token in ln], k["lines"]


# ---- a sealed node record with lines of the user's beside the sealed ones ------------------

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S,%f+00:00")


def test_lines_added_beside_a_sealed_record_are_not_labelled_roots() -> None:
    """The seal covers root_facts; the record's own "kernel" and "nvml", which the job epilog
    gave the classifier, lie beside it in the user's nodes/ dir. A user who rewrites the record
    keeping the sealed part got a verified node whose every kernel line, theirs too, read
    "kernel log of n1" (origin root) in the report and verdict.json."""
    now = time.time()
    real = f"{_iso(now - 20)} Out of memory: Killed process 999 (python3) total-vm:1kB"
    k = {"source": "dmesg", "absent": None, "lines": [real]}
    rf = provenance.node_facts("7", 0, "n1", (now - 60, now), "slurm", k,
                               {"absent": "no GPU"}, None)
    with private_munged() as sock:
        rec = {"job_id": "7", "node": "n1", "attempt": 0, "kernel": k,
               "nvml": {"absent": "no GPU"}, "root_facts": rf,
               "seal": provenance.seal(rf, sock)}
        assert rec["seal"]["method"] == "munge", rec["seal"]
        # the user's rewrite, as the user, in a nodes/ dir of theirs
        d = Path(tempfile.mkdtemp(prefix="gpualert-redteam-", dir="/tmp"))
        try:
            os.chmod(d, 0o755)
            nodes = d / "nodes"
            nodes.mkdir()
            cl.chown_to_user(nodes)
            forged = json.loads(json.dumps(rec))
            forged["kernel"]["lines"].append(f"{_iso(now - 10)} {XID}")
            forged["nvml"]["changed"] = [{"gpu": 0, "counter": "ecc.dbe", "before": 0,
                                          "after": 3}]
            src = d / "forged.json"
            src.write_text(json.dumps(forged))
            os.chmod(src, 0o644)
            cl.run_as_user(["cp", str(src), str(nodes / "n1.verdict.json")], check=True)
            fd = os.open(nodes, os.O_RDONLY | os.O_DIRECTORY)
            try:
                got = read_node_record("n1.verdict.json", fd)
            finally:
                os.close(fd)
            assert got["_file"].st_uid == 1001
            checked = provenance.verify(got, got["_file"], "7", 0, "n1", sock)
            assert checked.verified, checked  # the sealed part is root's: the premise
        finally:
            shutil.rmtree(d, ignore_errors=True)
    view = sealed_view(got, checked.verified)
    assert view["kernel"]["lines"] == [real], view["kernel"]
    assert view["nvml"]["changed"] == [], view["nvml"]
    assert got["kernel"]["lines"][-1].endswith(XID)  # the record itself is left as it was
    # an unverified record is the job's and stays so (labelled "not verified")
    assert sealed_view(got, False) is got


# ---- syslog forwarded into the kernel log ---------------------------------------------------

def test_a_node_that_forwards_syslog_to_kmsg_lets_no_driver_line_act(tmp_path: Path) -> None:
    """journald's ForwardToKMsg= (and rsyslog's omkmsg) write any user's `logger` line into
    /dev/kmsg as root, its tag first: `logger -t 'NVRM: Xid (PCI:0000:3b:00): 79, ...'` gives
    the kernel log 'NVRM: Xid (PCI:0000:3b:00): 79, ...[pid]: x', a driver line by its first
    character. On such a node no driver line may act, as where /dev/kmsg is writable."""
    j = tmp_path / "journald.conf"
    r = tmp_path / "rsyslog.conf"
    j.write_text("[Journal]\n#ForwardToKMsg=yes\nStorage=auto\n")
    r.write_text("module(load=\"imuxsock\")\n# module(load=\"omkmsg\")\n")
    assert provenance.kmsg_forwarded(str(j), str(r)) is None
    (tmp_path / "journald.conf.d").mkdir()
    (tmp_path / "journald.conf.d" / "50-kmsg.conf").write_text("[Journal]\nForwardToKMsg=yes\n")
    why = provenance.kmsg_forwarded(str(j), str(r))
    assert why and "ForwardToKMsg" in why, why
    (tmp_path / "journald.conf.d" / "90-off.conf").write_text("[Journal]\nForwardToKMsg=no\n")
    assert provenance.kmsg_forwarded(str(j), str(r)) is None  # the last drop-in decides
    (tmp_path / "rsyslog.d").mkdir()
    (tmp_path / "rsyslog.d" / "kmsg.conf").write_text("module(load=\"omkmsg\")\n"
                                                      "user.* :omkmsg:\n")
    why = provenance.kmsg_forwarded(str(j), str(r))
    assert why and "omkmsg" in why, why
    # the forwarded line is a driver line by its text: only the node's setting can refuse it
    forwarded = f"{XID}[31337]: x"
    assert provenance.driver_xid(forwarded) == ("0000:3b:00", 79)
    now = time.time()
    rf: dict[str, Any] = provenance.node_facts(
        "7", 0, "n1", (now - 60, now), "slurm",
        {"source": "dmesg", "lines": [f"{_iso(now - 5)} {forwarded}"]}, {}, None)
    rf["kmsg_writable"] = why  # what node_facts records on such a node
    n = node_trust({"root_facts": rf}, provenance.Checked(True, "munge", None),
                              now - 60, now)
    assert n["driver"] and n["driver"][0]["ignored"] == why and not n["driver"][0]["classes"]
    assert provenance.backing({"nodes": {"n1": n}}, "n1", "gpu_hardware") is None
    # and this machine, as set up, forwards nothing (the default)
    assert provenance.kmsg_forwarded() is None


# ---- a process name in a real driver line ---------------------------------------------------

def _node(line: str) -> dict[str, Any]:
    now = time.time()
    rf = provenance.node_facts("7", 0, "n1", (now - 60, now), "slurm",
                               {"source": "dmesg", "lines": [f"{_iso(now - 5)} {line}"]}, {},
                               None)
    return node_trust({"root_facts": rf}, provenance.Checked(True, "munge", None),
                                 now - 60, now)


def test_a_process_name_in_a_real_application_xid_backs_no_hardware_drain() -> None:
    """The driver quotes the faulting process's name in its Xid line; a user's own program
    causes application Xids (13, 31, 43) at will, and names itself. 'NVLink fatal' (12 bytes)
    made a real Xid 13 match the hardware rule 'NVLink.*fatal': root's verified fact, in the
    window, on the job's GPU, so a drain on the first run. The name is left out of the
    kernel rules' match; the Xid number and the driver's own words still decide."""
    for comm in ("NVLink fatal", "x, NVLink fatal", "NVLinkfatal"):
        n = _node(f"NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name={comm}, Graphics SM Warp "
                  "Exception on (GPC 0, TPC 0, SM 0): Illegal Instruction Encoding")
        assert n["driver"][0]["classes"] == ["cuda_error"], (comm, n["driver"])
        assert provenance.backing({"nodes": {"n1": n}}, "n1", "gpu_hardware") is None, comm
        assert provenance.backing({"nodes": {"n1": n}}, "n1", "cuda_error"), comm
    # the hardware Xids still back their drain, with the name in them or not
    for line in ("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has "
                 "fallen off the bus.",
                 "NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=python3, An uncorrectable "
                 "double bit error (DBE) has been detected on GPU in the framebuffer at "
                 "partition 1, subpartition 0."):
        n = _node(line)
        assert "gpu_hardware" in n["driver"][0]["classes"], n["driver"]
        assert provenance.backing({"nodes": {"n1": n}}, "n1", "gpu_hardware"), line
    # the mask: at most 15 bytes of the name, an escaped byte counting as one
    assert without_comm("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python3, Ch "
                                   "00000010") == "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, "\
        "name=?00010"
    esc = "\\x01" * 9 + "NVLink"
    assert without_comm(f"NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name={esc}, "
                                   "fatal").endswith("name=?, fatal")


# ---- netfilter's LOG target in a network namespace of the user's ---------------------------

NFLOG = r'''set -e
ip link set lo up
iptables -w -A OUTPUT -j LOG --log-prefix "$1"
python3 -c 'import socket as s; s.socket(2, 2).sendto(b"x", ("127.0.0.1", 9))'
iptables -w -L OUTPUT -n
'''


def test_a_log_rule_in_the_users_own_network_namespace_writes_no_driver_line(
        tmp_path: Path) -> None:
    """A user makes a user and network namespace (unshare -rn: root there) and adds an
    iptables LOG rule whose prefix is a driver Xid line ('PCI:' is optional; 27 characters fit
    LOG's 29). With net.netfilter.nf_log_all_netns=0 (the default, as here) the kernel drops
    logs from namespaces but the first; where a site turns it on, every driver line of the
    node is refused, as for a syslog forwarder."""
    if shutil.which("iptables") is None or shutil.which("unshare") is None:
        raise AssertionError("iptables and unshare are needed (the cluster's provisioning)")
    prefix = f"NVRM: Xid (0000:3b:00): 79,{secrets.token_hex(1)}"
    assert provenance.driver_xid(prefix + "IN= OUT=lo SRC=127.0.0.1") == ("0000:3b:00", 79)
    d = Path(tempfile.mkdtemp(prefix="gpualert-redteam-", dir="/tmp"))
    try:
        os.chmod(d, 0o755)
        cl.write_user_file(d / "nflog.sh", NFLOG, mode=0o644)
        p = cl.run_as_user(["unshare", "-rn", "bash", str(d / "nflog.sh"), prefix], timeout=30,
                           env={"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"})
        assert p.returncode == 0 and "LOG" in p.stdout, p.stdout + p.stderr  # the rule was made
    finally:
        shutil.rmtree(d, ignore_errors=True)
    time.sleep(0.5)
    raw = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=30).stdout
    nf = Path("/proc/sys/net/netfilter/nf_log_all_netns").read_text().strip()
    assert nf == "0" and prefix not in raw, (nf, [ln for ln in raw.splitlines() if prefix in ln])
    assert provenance.kmsg_forwarded() is None
    # a node where it is on
    (tmp_path / "net/netfilter").mkdir(parents=True)
    (tmp_path / "user").mkdir()
    (tmp_path / "net/netfilter/nf_log_all_netns").write_text("1\n")
    (tmp_path / "user/max_user_namespaces").write_text("96365\n")
    why = provenance.kmsg_forwarded(sysctl=str(tmp_path))
    assert why and "nf_log_all_netns=1" in why, why
    (tmp_path / "user/max_user_namespaces").write_text("0\n")  # no user may make one
    assert provenance.kmsg_forwarded(sysctl=str(tmp_path)) is None


# ---- the output handoff: another user connects first ---------------------------------------

FIND_COPIER = r'''import os, sys
# this task's stdout is a pipe to its copier; the copier holds the handoff socket
pipe = os.readlink(f"/proc/{sys.argv[1]}/fd/1")
me = {int(sys.argv[1]), os.getpid(), os.getppid()}
socks = set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) in me:
        continue
    try:
        fds = [os.readlink(f"/proc/{pid}/fd/{f}") for f in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        continue
    if pipe in fds:
        socks |= {f[8:-1] for f in fds if f.startswith("socket:[")}
for line in open("/proc/net/unix").read().splitlines()[1:]:
    f = line.split()
    if len(f) >= 8 and f[6] in socks and f[7].startswith("@gpualert-tap/"):
        print(f[7])
'''

NEIGHBOUR = r'''import os, socket, sys, time
path = sys.argv[1]
while not os.path.exists(path) or not open(path).read().strip():
    time.sleep(0.05)
name = "\0" + open(path).read().split()[0][1:]
held = []
for _ in range(16):  # more than the copier's 8 slots
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(name)
        held.append(s)
    except OSError as e:
        print("connect:", e)
print("connected", len(held), flush=True)
time.sleep(float(sys.argv[2]))
'''


@pytest.mark.cluster
def test_another_users_connections_to_a_copier_leave_its_output_handoff_alone(
        cluster: cl.ClusterFacts) -> None:
    """The handoff socket's name is random, but once bound it is in /proc/net/unix for every
    user to read. Another user connected to root's task's copier before the task ended and
    held 16 connections: the copier kept them in its 8 slots and closed task_exit's ask (or
    answered them and left first), so the task's exit record said log_flushed null. The
    copier now listens only to root (task_exit) and the job's own user."""
    d = cl.make_workdir(cluster, "redteam-handoff", user="root")
    cl.write_user_file(d / "find.py", FIND_COPIER, mode=0o644, user="root")
    cl.write_user_file(d / "neighbour.py", NEIGHBOUR, mode=0o644)
    job = cl.submit("#!/bin/bash\n#SBATCH --gpualert\n#SBATCH -o slurm-%j.out\n"
                    "srun -n1 bash -c 'python3 find.py $$ > copier.tmp; mv copier.tmp "
                    "copier.name; while [ ! -e go ]; do sleep 0.1; done; echo rank done'\n",
                    workdir=d, user="root")
    pw = subprocess.Popen(["runuser", "-u", cl.TEST_USER, "--", "python3",
                           str(d / "neighbour.py"), str(d / "copier.name"), "30"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        cl.wait_until(lambda: (d / "copier.name").exists(), 90, "the task's copier name")
        name = (d / "copier.name").read_text().split()
        assert name and name[0].startswith("@gpualert-tap/0/"), name
        assert pw.stdout is not None
        got = pw.stdout.readline()
        assert got.startswith("connected "), got  # the kernel took the connections
        (d / "go").write_text("")
        cl.wait_final(job, 90)
        ex = cluster.spool / str(job) / "tasks" / "0.0.exit"
        rec = cl.wait_until(lambda: ex.exists() and json.loads(ex.read_text()), 30,
                            "exit record 0.0")
        assert rec.get("log_flushed") is True, rec
    finally:
        pw.kill()
        pw.wait(10)
        cancel(job)


# ---- a burst of ending jobs outlives the seal ----------------------------------------------

def test_the_seal_outlives_the_job_epilogs_wait_for_a_slot() -> None:
    """The job epilog's worker waits up to gate.WAIT_S (900 s) for a slot behind a burst of
    ending jobs (a user's array), and only then unmunges the node records' seals. With MUNGE's
    default TTL (300 s) a user's burst made every other job's seals expire meanwhile: on a
    spool that squashes root (seal only) a real Xid then drained nothing. The seal now asks
    munged for 3600 s, its default cap."""
    from gpualert_slurm.core.config import Config
    from gpualert_slurm.hooks import gate

    with private_munged() as sock:
        rec = {"root_facts": provenance.node_facts("7", 0, "n1", (0.0, 1.0), "slurm",
                                                   {"lines": []}, {}, None)}
        rec["seal"] = provenance.seal(rec["root_facts"], sock)
        assert rec["seal"]["method"] == "munge", rec["seal"]
        p = subprocess.run(["unmunge", "-N", "-S", sock], input=rec["seal"]["credential"],
                           capture_output=True, text=True, timeout=10, check=True)
        ttl = int(next(ln.split()[1] for ln in p.stdout.splitlines()
                       if ln.startswith("TTL:")))
    cfg = Config()
    assert ttl >= gate.WAIT_S + cfg.epilog_wait_s + 60, (ttl, gate.WAIT_S, cfg.epilog_wait_s)


# ---- on the action-mode recovery cluster: last, since its module-scoped fixture points
# SLURM_CONF at that cluster until the module ends (the shared cluster's tests come first) --

@pytest.mark.cluster
def test_the_stamped_file_name_trap_drains_nothing_in_action_mode(rc: cl.ClusterFacts,
                                                                  audit: Path) -> None:
    """The same attack from a job of the test user on the action-mode cluster, the breaker's
    share raised so that it hides nothing: before the fix n2 was drained for gpu_hardware on
    root's own (verified) facts."""
    write_config(rc, audit, mode="action", breaker={"share": 1.0})
    token = secrets.token_hex(4)
    d = cl.make_workdir(rc, "redteam-trap")
    cl.write_user_file(d / "trap.py", TRAP, mode=0o644)
    body = ('stamp=$(date -u +%Y-%m-%dT%H:%M:%S,000000+00:00)\n'
            f'python3 trap.py "$(printf \'a\\n%s NVRM: Xid (PCI:0000:3b:00): 79, pid={token}, '
            'GPU has fallen off the bus.\' "$stamp")"\nexit 1')
    job = cl.submit(job_script(body), "-w", "n2", workdir=d)
    try:
        dec = wait_decision(audit, job)
        raw = subprocess.run(["dmesg", "--time-format", "iso"], capture_output=True,
                             text=True, timeout=30).stdout
        assert f"pid={token}" in raw, "the trap line did not reach the kernel log"
        assert_harmless(rc, audit)
        v = verdict_of(rc, job)
        # bash's "Illegal instruction  python3 trap.py 'a\n... NVRM: Xid ...'" is the job's
        # own output: it may classify, labelled so, and backs nothing
        labels = {e["provenance"]["label"] for e in v["verdict"]["evidence"]}
        assert labels <= {"printed by the job"}, v["verdict"]["evidence"]
        assert not dec["backing"] and not dec["trusted_suspects"], dec
        n2 = v["trusted"]["nodes"]["n2"]
        assert not [x for x in n2.get("driver") or [] if token in str(x.get("text"))], n2
        assert not [ln for k in v["nodes"].values()
                    for ln in (k.get("kernel") or {}).get("lines") or [] if token in ln]
    finally:
        cancel(job)
