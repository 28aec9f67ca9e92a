"""The rule cache (gpualert_slurm/classify/rulecache.py): a hit gives the very rule set the files
give, a miss, a stale, corrupt or foreign file builds it from the files, a site rule edited in
rules.d takes effect at once, only root writes it, users read root's. Real files, real owners
(the unprivileged test user gpatest), real `gpualert classify` processes."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpualert_slurm.classify import JobFacts, TaskInput, classify, load_rules, rulecache, ruleset
from gpualert_slurm.classify import rules as rules_mod

REPO = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures" / "classify"
SITE_RULE = ("rules:\n  - id: site_quota\n    class: {cls}\n    role: root\n    priority: 90\n"
             "    patterns: ['LABQUOTA-\\d+ exhausted']\n")


@pytest.fixture
def dirs(monkeypatch):
    """A cache directory and an (empty) rules.d, both root's, mode 0755, where gpatest can
    reach them (pytest's tmp_path is not)."""
    base = Path(tempfile.mkdtemp(prefix="gpualert-rulecache-test-"))
    os.chmod(base, 0o755)
    cache, site = base / "cache", base / "rules.d"
    cache.mkdir(mode=0o755)
    site.mkdir(mode=0o755)
    monkeypatch.setenv("GPUALERT_RULES_CACHE_DIR", str(cache))
    monkeypatch.setenv("GPUALERT_RULES_DIR", str(site))
    yield cache, site
    shutil.rmtree(base)


def cache_path(cache: Path) -> Path:
    return cache / rulecache._name(rulecache.key(rules_mod._rule_files(True, None)))


def verdicts(rs) -> list[dict]:
    out = []
    for log in sorted(FIX.glob("*.log")):
        out.append(classify([TaskInput(str(log))], JobFacts(exit_code=1), rs).to_json())
    return out


def gpualert_json(*args: str, env: dict | None = None, user: str | None = None) -> dict:
    p = subprocess.run([sys.executable, "-m", "gpualert_slurm", *args], capture_output=True,
                       text=True, timeout=120, cwd="/",
                       env=dict(os.environ, PYTHONPATH=str(REPO), **(env or {})), user=user)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_a_miss_writes_the_cache_and_a_hit_gives_the_same_rule_set(dirs):
    cache, _ = dirs
    built = load_rules(use_cache=False)
    assert built.cached is None
    f = cache_path(cache)
    st = f.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o644)
    hit = load_rules(use_cache=False)
    assert hit.cached == str(f)
    assert rulecache.canonical(hit) == rulecache.canonical(built)
    # the literal regexes come from their kept programs and equal re's own
    for src in ("log", "kernel"):
        a, b = hit.literal_regex(src), built.literal_regex(src)
        assert (a.pattern, a.flags, a.groups) == (b.pattern, b.flags, b.groups)
        assert f"s:{a.pattern}" in hit.programs
    assert verdicts(hit) == verdicts(built)
    assert rulecache.shipped_yaml("precedence.yaml", "p") == rules_mod.parse_yaml(
        "p", rules_mod.shipped_bytes("precedence.yaml").decode())


def test_a_hit_compiles_only_the_regexes_a_line_needs(dirs, tmp_path):
    load_rules(use_cache=False)
    rs = load_rules(use_cache=False)
    assert rs.cached
    assert not any(p is not None for r in rs.rules for p in r.patterns._rx)
    log = tmp_path / "0.0.log"
    log.write_text("epoch 1 step 10 loss=0.31\n"
                   "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert classify([TaskInput(str(log))], JobFacts(exit_code=1), rs).cls == "cuda_error"
    compiled = sum(p is not None for r in rs.rules for p in r.patterns._rx)
    total = sum(len(r.patterns) for r in rs.rules)
    assert 0 < compiled < total // 10, (compiled, total)


def test_a_site_rule_change_takes_effect_at_once(dirs, tmp_path):
    cache, site = dirs
    log = tmp_path / "0.0.log"
    log.write_text("step 1\nstorage: LABQUOTA-7 exhausted for /proj\n")
    args = ("classify", "--json", "--exit-code", "1", str(log))
    assert gpualert_json(*args)["class"] == "unknown"
    (site / "site.yaml").write_text(SITE_RULE.format(cls="disk_full"))
    assert gpualert_json(*args)["class"] == "disk_full"  # a miss: built and cached
    assert load_rules(use_cache=False).cached  # ... so the next run hits
    assert gpualert_json(*args)["class"] == "disk_full"
    (site / "site.yaml").write_text(SITE_RULE.format(cls="storage_io"))
    assert gpualert_json(*args)["class"] == "storage_io"
    (site / "site.yaml").unlink()
    assert gpualert_json(*args)["class"] == "unknown"  # the first key's file again
    assert len(list(cache.glob("rules-*.json"))) == 3


def test_a_kept_rule_set_is_dropped_when_its_files_change(dirs, monkeypatch):
    """A long-lived queue worker (hooks/queue.py) loads the rules once and forks its children;
    in each child drop_if_stale() makes the files in use now decide: an edited site rule, or another
    GPUALERT_RULES_DIR in the job's environment, takes effect as in a fresh process."""
    _, site = dirs
    monkeypatch.setattr(rules_mod, "_DEFAULT", None)
    first = load_rules()
    rules_mod.drop_if_stale()
    assert load_rules() is first  # nothing changed: the kept set, no rebuild
    (site / "site.yaml").write_text(SITE_RULE.format(cls="disk_full"))
    assert load_rules() is first  # kept: nothing looked at the files
    rules_mod.drop_if_stale()
    second = load_rules()
    assert second is not first and any(r.origin.endswith("site.yaml") for r in second.rules)
    other = site.parent / "other.d"
    other.mkdir(mode=0o755)
    monkeypatch.setenv("GPUALERT_RULES_DIR", str(other))
    rules_mod.drop_if_stale()
    assert not any(r.origin.endswith("site.yaml") for r in load_rules().rules)


def planted(cache: Path) -> Path:
    """The current key's cache file, rewritten to say CUDA OOM is a segfault: whoever reads it
    as trusted classifies a CUDA OOM log as segfault."""
    load_rules(use_cache=False)
    f = cache_path(cache)
    obj = json.loads(f.read_text())
    n, cls = 0, obj["rule_fields"].index("cls")
    for r in obj["rules"]:
        if r[cls] == "cuda_oom":
            r[cls] = "segfault"
            n += 1
    assert n
    f.write_text(json.dumps(obj))
    return f


def oom_class(rs) -> str:
    return classify([TaskInput(str(FIX / "cuda_oom_then_nccl.log"))], JobFacts(exit_code=1),
                    rs).cls


def test_a_planted_file_of_roots_is_read(dirs):
    """The check that keeps others' files out is what the next test is about: a root-owned
    file, mode 0644, is trusted (so the plant works)."""
    cache, _ = dirs
    planted(cache)
    rs = load_rules(use_cache=False)
    assert rs.cached and oom_class(rs) == "segfault"


@pytest.mark.parametrize("how", ["owner", "mode", "symlink", "hardlink", "fifo", "dir_owner",
                                 "dir_mode"])
def test_a_cache_that_is_not_roots_alone_is_ignored(dirs, how):
    cache, _ = dirs
    f = planted(cache)
    user = pwd.getpwnam("gpatest")
    if how == "owner":
        os.chown(f, user.pw_uid, user.pw_gid)
    elif how == "mode":
        os.chmod(f, 0o664)
    elif how in ("symlink", "hardlink"):
        other = cache.parent / "elsewhere.json"
        f.rename(other)
        (os.symlink if how == "symlink" else os.link)(other, f)
    elif how == "fifo":
        f.unlink()
        os.mkfifo(f)
    elif how == "dir_owner":
        os.chown(cache, user.pw_uid, user.pw_gid)
    else:
        os.chmod(cache, 0o777)
    rs = load_rules(use_cache=False)
    assert rs.cached is None and oom_class(rs) == "cuda_oom"
    if how.startswith("dir_"):  # root writes nothing where others may write
        assert "segfault" in f.read_text()
    else:  # root's own good file replaces what was there
        assert f.is_file() and not f.is_symlink() and f.stat().st_nlink == 1
        assert load_rules(use_cache=False).cached == str(f)


@pytest.mark.parametrize("how", ["truncated", "empty", "not_json", "a_list", "other_key",
                                 "other_format", "bad_rules", "bad_program"])
def test_a_stale_or_corrupt_cache_is_ignored_and_rewritten(dirs, how):
    cache, _ = dirs
    built = load_rules(use_cache=False)
    f = cache_path(cache)
    text = f.read_text()
    obj = json.loads(text)
    bad = {
        "truncated": text[: len(text) // 2],
        "empty": "",
        "not_json": "\x00\xff garbage",
        "a_list": "[1, 2, 3]",
        "other_key": json.dumps({**obj, "key": "0" * 64}),
        "other_format": json.dumps({**obj, "format": rulecache.FORMAT + 1}),
        "bad_rules": json.dumps({**obj, "rules": [1, 2]}),
        # a program of another interpreter (or a damaged one): re compiles the regex itself
        "bad_program": json.dumps({**obj, "programs": {
            k: [v[0], v[1], v[2], "AAAAAAAAAAA="] for k, v in obj["programs"].items()}}),
    }[how]
    f.write_text(bad)
    rs = load_rules(use_cache=False)
    assert rulecache.canonical(rs) == rulecache.canonical(built)
    assert verdicts(rs) == verdicts(built)
    if how == "bad_program":  # the rule set itself read fine: used, with re's own regexes
        assert rs.cached == str(f)
        for src in ("log", "kernel"):
            a, b = rs.literal_regex(src), built.literal_regex(src)
            assert (a.pattern, a.flags, a.groups) == (b.pattern, b.flags, b.groups)
    else:
        assert rs.cached is None
        assert json.loads(f.read_text())["key"] == obj["key"]  # rewritten by root


def test_users_read_roots_cache_and_never_write_one(dirs, tmp_path):
    cache, _ = dirs
    probe = ("from gpualert_slurm.classify import load_rules; import sys; "
             "rs = load_rules(); print(rs.cached); print('yaml' in sys.modules)")

    def as_user(cache_dir: Path) -> list[str]:
        p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           cwd="/", timeout=120, user="gpatest",
                           env=dict(os.environ, PYTHONPATH=str(REPO),
                                    GPUALERT_RULES_CACHE_DIR=str(cache_dir)))
        assert p.returncode == 0, p.stderr
        return p.stdout.split()

    assert as_user(cache) == ["None", "True"]  # no cache yet: built (YAML), nothing written
    assert list(cache.iterdir()) == []
    own = cache.parent / "users"  # a directory the user owns: still never written
    own.mkdir()
    user = pwd.getpwnam("gpatest")
    os.chown(own, user.pw_uid, user.pw_gid)
    assert as_user(own) == ["None", "True"]
    assert list(own.iterdir()) == []
    load_rules(use_cache=False)  # root builds it
    assert as_user(cache) == [str(cache_path(cache)), "False"]  # read; no YAML parser needed


def test_the_classify_path_imports_no_yaml_or_jinja_on_a_hit(dirs):
    load_rules(use_cache=False)
    code = ("import sys; from gpualert_slurm.cli import main; "
            f"main(['classify', '--exit-code', '1', {str(FIX / 'device_assert.log')!r}]); "
            "print([m for m in ('yaml', 'jinja2', 'importlib.resources', 'subprocess') "
            "if m in sys.modules])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                       timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode == 0, p.stderr
    assert "cuda_device_assert" in p.stdout
    assert p.stdout.strip().splitlines()[-1] == "[]"


def test_install_step_builds_the_cache(dirs):
    cache, _ = dirs
    p = subprocess.run([sys.executable, "-m", "gpualert_slurm.classify.build_cache"],
                       capture_output=True, text=True, cwd="/", timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode == 0, p.stderr
    f = cache_path(cache)
    assert str(f) in p.stdout and f.is_file()
    assert load_rules(use_cache=False).cached == str(f)


def test_any_match_is_every_rules_match(dirs):
    """_traceback_ends asks whether any rule matches a line; RuleSet.any_match tries only the
    rules whose required literals the line holds: the same answer on every line of the
    fixtures and of a sample of the corpus, and on lines with characters whose case folds to
    ASCII (where literal tests prove nothing)."""
    rs = load_rules(use_cache=False)
    rules = [r for r in rs.rules if r.source in ("log", "kernel")]
    lines = set()
    logs = sorted(FIX.glob("*.log")) + sorted((REPO / "corpus" / "cases").glob("*/*.log"))[::7]
    for log in logs:
        lines.update(log.read_text(errors="replace").splitlines()[:400])
    lines |= {"KeyError: 'x'", "Abort: giving up", "torch.cuda.OutOfMemoryError: CUDA out of "
              "memory", "RuntimeError: NCCL error in: x", "\u212aILLED by signal 9",
              "Segmentation fault (core dumped)", "ValueError: loss is nan"}
    assert len(lines) > 2000
    hits = 0
    for line in lines:
        want = any(r.match(line) for r in rules)
        assert rs.any_match(line, ("log", "kernel")) == want, line
        hits += want
    assert hits > 100


def test_a_program_gives_the_regex_re_compiles():
    rs = load_rules(use_cache=False)
    texts = [(t, False) for t in rs.literal_src.values()] + [
        (t, True) for t in rs.literal_scan_src["log"][:10]]
    line = "runtimeerror: cuda error: out of memory; nccl error 0: unhandled system error\n"
    for text, binary in texts:
        rx = ruleset.compile_program(text, ruleset.program(text, binary), binary)
        want = re.compile(text.encode("utf-8", "replace") if binary else text)
        assert (rx.pattern, rx.flags, rx.groups) == (want.pattern, want.flags, want.groups)
        subject = line.encode() if binary else line
        assert [m.span() for m in rx.finditer(subject)] == [
            m.span() for m in want.finditer(subject)]


def test_a_full_disk_leaves_no_half_file(dirs, monkeypatch):
    """The cache directory on a real tmpfs too small for the file: ENOSPC, the rule set is
    still built and used, and no temporary file is left there."""
    cache, _ = dirs
    small = cache.parent / "small"
    small.mkdir(mode=0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(small)],
                   check=True)
    try:
        monkeypatch.setenv("GPUALERT_RULES_CACHE_DIR", str(small))
        rs = load_rules(use_cache=False)
        assert rs.cached is None and oom_class(rs) == "cuda_oom"
        assert os.listdir(small) == []
        assert load_rules(use_cache=False).cached is None
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_the_key_covers_every_file_and_the_code(dirs):
    """A rule added to rules/NN-<family>.yaml (as its authors do), a class, a site file's
    name or bytes: each gives another key, so no cache outlives the files it was built from;
    the same files give the same key."""
    files = rules_mod._rule_files(True, None)
    k = rulecache.key(files)
    assert rulecache.key(list(files)) == k
    extra = b"\n  - id: new_rule\n    class: disk_full\n    patterns: ['NEWRULE-\\\\d+ full']\n"
    for i, (name, data) in enumerate(files):
        changed = list(files)
        changed[i] = (name, data + extra)
        assert rulecache.key(changed) != k, name
        changed[i] = (name + ".x", data)
        assert rulecache.key(changed) != k, name
    assert rulecache.key([*files, ("/etc/gpualert/rules.d/a.yaml", b"rules: []\n")]) != k
