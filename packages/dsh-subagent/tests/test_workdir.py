"""Positive-number config checks and the child's working directory (seed 002)."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import pytest
from dsh_subagent import (
    NO_START_CAPABILITIES,
    SubagentCapabilities,
    SubagentError,
    SubagentErrorCode,
    assert_positive_finite,
    assert_usable_cwd,
    resolve_child_cwd,
    validate_configured_cwd,
)


def test_no_start_capabilities_is_all_false_and_immutable() -> None:
    assert dataclasses.astuple(NO_START_CAPABILITIES) == (False,) * 6
    assert [f.name for f in dataclasses.fields(SubagentCapabilities)] == [
        "agent_options",
        "output_schema",
        "depth_limit",
        "tool_filter",
        "persona",
        "continuation",
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        NO_START_CAPABILITIES.persona = True  # type: ignore[misc]


def test_positive_finite_accepts_positive_numbers() -> None:
    assert assert_positive_finite("p", "graceMs", 1) == 1
    assert assert_positive_finite("p", "grace", 0.5, maximum=30) == 0.5
    assert assert_positive_finite("p", "grace", 30, maximum=30) == 30


@pytest.mark.parametrize("value", [0, -5, math.nan, math.inf, -math.inf, True, "3"])
def test_positive_finite_rejects(value: float) -> None:
    with pytest.raises(SubagentError) as caught:
        assert_positive_finite("p", "graceMs", value)
    assert caught.value.message == "p: graceMs must be a positive finite number"
    assert caught.value.code is SubagentErrorCode.INVALID_CONFIG


def test_positive_finite_enforces_maximum() -> None:
    with pytest.raises(
        SubagentError, match=r"^subagent-codex: disposeGraceMs must be no greater than 2147483647$"
    ):
        assert_positive_finite("subagent-codex", "disposeGraceMs", 2147483648, maximum=2147483647)


def test_usable_cwd_accepts_an_absolute_directory_unchanged(tmp_path: Path) -> None:
    path = str(tmp_path) + "/."  # not normalised on purpose
    assert assert_usable_cwd("p", "parent session cwd", path) == path


def test_usable_cwd_rejects_relative() -> None:
    with pytest.raises(
        SubagentError, match=r"^p: parent session cwd must be an absolute path: rel/dir$"
    ):
        assert_usable_cwd("p", "parent session cwd", "rel/dir")


def test_usable_cwd_rejects_missing_path_and_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    with pytest.raises(SubagentError, match="is not an accessible directory: " + missing):
        assert_usable_cwd("p", "parent session cwd", missing)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(SubagentError, match="is not an accessible directory") as caught:
        assert_usable_cwd("p", "parent session cwd", str(a_file))
    assert caught.value.code is SubagentErrorCode.NO_WORKING_DIRECTORY


def test_a_path_with_a_newline_or_an_escape_is_named_on_one_line(tmp_path: Path) -> None:
    forged = str(tmp_path / "a\nb\x1b[2J")
    with pytest.raises(SubagentError) as caught:
        assert_usable_cwd("p", "config cwd", forged)
    assert caught.value.message == f"p: config cwd is not an accessible directory: {forged!r}"
    assert "\n" not in caught.value.message
    assert "\x1b" not in caught.value.message


def test_usable_cwd_rejects_a_directory_without_execute_permission(tmp_path: Path) -> None:
    # Holds for root too: the probe requires an execute bit, not only access(X_OK).
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o600)
    try:
        with pytest.raises(SubagentError, match="is not an accessible directory"):
            assert_usable_cwd("p", "parent session cwd", str(locked))
    finally:
        locked.chmod(0o700)


def test_validate_configured_cwd_none_is_no_override() -> None:
    assert validate_configured_cwd("p", None) is None


def test_validate_configured_cwd_refuses_empty() -> None:
    with pytest.raises(SubagentError) as caught:
        validate_configured_cwd("p", "")
    assert caught.value.message == (
        "p: config cwd must not be empty — omit the key to inherit the parent session cwd"
    )
    assert caught.value.code is SubagentErrorCode.INVALID_CONFIG


def test_validate_configured_cwd_resolves_relative_against_launch_dir(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    assert validate_configured_cwd("p", "work/../work", launch_dir=str(tmp_path)) == str(
        tmp_path / "work"
    )


def test_validate_configured_cwd_defaults_to_process_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    assert validate_configured_cwd("p", "sub") == os.path.join(str(tmp_path), "sub")


def test_validate_configured_cwd_probes_with_config_label(tmp_path: Path) -> None:
    with pytest.raises(
        SubagentError, match=r"^p: config cwd is not an accessible directory"
    ) as caught:
        validate_configured_cwd("p", str(tmp_path / "missing"))
    assert caught.value.code is SubagentErrorCode.INVALID_CONFIG


def test_resolve_child_cwd_override_wins_without_reprobe(tmp_path: Path) -> None:
    # The override was validated at load; it is not probed again (pinned: a deleted
    # directory surfaces at spawn, not here).
    assert resolve_child_cwd("p", "/configured/gone", str(tmp_path)) == "/configured/gone"


def test_resolve_child_cwd_uses_the_parent_cwd(tmp_path: Path) -> None:
    assert resolve_child_cwd("p", None, str(tmp_path)) == str(tmp_path)


def test_resolve_child_cwd_without_any_cwd_fails_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a perfectly usable process cwd is never a fallback
    with pytest.raises(SubagentError) as caught:
        resolve_child_cwd("p", None, None)
    assert caught.value.code is SubagentErrorCode.NO_WORKING_DIRECTORY
    assert caught.value.message == (
        "p: no working directory for the child — configure `cwd` or delegate from a parent "
        "session that has one"
    )


def test_resolve_child_cwd_probes_the_parent_cwd_and_keeps_the_path_off_the_message() -> None:
    with pytest.raises(SubagentError) as caught:
        resolve_child_cwd("p", None, "rel")
    assert caught.value.code is SubagentErrorCode.NO_WORKING_DIRECTORY
    assert caught.value.message == (
        "p: the parent session cwd is not an absolute, accessible directory"
    )
    # The path is kept for the host's own debugging, on the cause only.
    assert isinstance(caught.value.__cause__, SubagentError)
    assert caught.value.__cause__.message == "p: parent session cwd must be an absolute path: rel"


def test_usable_cwd_rejects_a_path_with_nul_as_inaccessible(tmp_path: Path) -> None:
    # The spawn's probe answers "missing" for such a path; here it is not accessible.
    with pytest.raises(SubagentError, match="is not an accessible directory") as caught:
        assert_usable_cwd("p", "parent session cwd", str(tmp_path) + "/a\0b")
    assert caught.value.code is SubagentErrorCode.NO_WORKING_DIRECTORY
