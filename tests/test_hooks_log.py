"""The hooks' own log in the spool is bounded: past HOOKS_LOG_MAX it moves to .1."""

from pathlib import Path

import pytest

from gpualert_slurm.hooks import common


def test_hooks_log_rotates_past_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "HOOKS_LOG_MAX", 4096)
    log = common.HookLog("test")
    log.set_spool(str(tmp_path))
    for i in range(200):
        log.info(f"line {i} " + "x" * 40)
    current = tmp_path / "gpualert-hooks.log"
    older = tmp_path / "gpualert-hooks.log.1"
    assert older.exists(), "the log never rotated"
    assert older.stat().st_size <= 4096 + 200
    assert current.stat().st_size <= 4096 + 200
    # The newest line is in the current file, nothing is duplicated across the two.
    text = current.read_text()
    assert "line 199 " in text
    both = older.read_text() + text
    assert both.count("line 199 ") == 1
