"""The Python parser and the C plugin (spank/options.c) give the same verdict and the same
message for every --gpualert value: the plugin checks at submit time, the hooks re-parse
SPANK_GPUALERT, and a user must never see two different rules."""

import subprocess
from pathlib import Path

import pytest

from gpualert_slurm.core.options import OptionError, parse_options

REPO = Path(__file__).resolve().parent.parent

CASES = [
    "on", "off", "mail=a@b.org", "mail=a@b.org:c.d+e@x-y.lab.org", "mail=me", "mail=a@",
    "mail=@b.org", "mail=a@b..org", "mail=a@b.org:", "mail=a b@c.org", "mail=a@b.org\n",
    "notify=fail", "notify=always", "notify=never", "notify=sometimes", "notify=",
    "artifacts=ckpt/*.pt:logs/*.txt", "artifacts=a::b", "artifacts=a\tb", "artifacts=",
    "hang=90s", "hang=30m", "hang=2h", "hang=1d", "hang=0s", "hang=30", "hang=30M", "hang=-1m",
    "hang=123456789s", "hang=1234567890s", "hang= 30m", "hang=1.5h",
    "budget=500K", "budget=20M", "budget=1G", "budget=3k", "budget=1T", "budget=0M",
    "budget=999999999999K", "budget=1000000000000K", "budget=1 G",
    "checkpoint=ckpt/last.pt", "checkpoint=a\x7fb", "checkpoint=",
    "recover=on", "recover=off", "recover=yes",
    "mail", "bogus=1", "Mail=a@b.org", " mail=a@b.org", "mail =a@b.org", "yes",
    "off,mail=a@b.org", "mail=a@b.org,off", "on,hang=1h", "off=1",
    "notify=never,notify=always", "mail=a@b.org,", ",hang=1h", "hang=1h,,notify=fail",
    "mail=a@b.org,notify=always,artifacts=x/*.pt,hang=30m,budget=1G,checkpoint=c.pt,recover=on",
    "artifacts=" + "a" * 1014, "artifacts=" + "a" * 1015,
]


@pytest.fixture(scope="module")
def c_validate(tmp_path_factory):
    d = tmp_path_factory.mktemp("parity")
    src = d / "harness.c"
    src.write_text(
        f'#include "{REPO / "spank" / "options.c"}"\n'
        "int main(int argc, char **argv) {\n"
        "    char err[8192];\n"
        "    for (int i = 1; i < argc; i++) {\n"
        "        err[0] = 0;\n"
        "        int rc = validate_opts(argv[i], err, sizeof err);\n"
        "        fwrite(&rc, sizeof rc, 1, stdout);\n"
        "        fwrite(err, 1, sizeof err, stdout);\n"
        "    }\n"
        "    return 0;\n"
        "}\n")
    exe = d / "harness"
    # Only validate_opts() runs: the Slurm symbols the plugin uses elsewhere stay unresolved.
    subprocess.run(["gcc", "-no-pie", "-o", str(exe), str(src),
                    "-Wl,--unresolved-symbols=ignore-all"], check=True)

    def run(values):
        out = subprocess.run([str(exe), *values], capture_output=True, check=True).stdout
        size = 4 + 8192
        res = []
        for i in range(len(values)):
            chunk = out[i * size:(i + 1) * size]
            rc = int.from_bytes(chunk[:4], "little", signed=True)
            res.append((rc, chunk[4:].split(b"\0", 1)[0].decode()))
        return res
    return run


def test_same_verdicts_and_messages(c_validate):
    mismatches = []
    for value, (rc, c_err) in zip(CASES, c_validate(CASES), strict=True):
        try:
            parse_options(value)
            py = (0, "")
        except OptionError as e:
            py = (-1, str(e))
        if py != (rc, c_err):
            mismatches.append((value, (rc, c_err), py))
    assert mismatches == []
