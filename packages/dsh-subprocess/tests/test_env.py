"""The credential scrub and the overlay, as a rule and as seen by a real child."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from dsh_subprocess import (
    SpawnSpec,
    check_env_overlay,
    child_env,
    is_scrubbed_name,
    scrubbed_parent_env,
    spawn,
)
from hypothesis import given
from hypothesis import strategies as st

_names = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="="),
    min_size=1,
    max_size=24,
)
_values = st.text(max_size=16).filter(lambda v: "\0" not in v)
_marker = st.sampled_from(["KEY", "key", "Password", "SECRET", "tOkEn"])


@given(prefix=st.text(max_size=6), marker=_marker, suffix=st.text(max_size=6))
def test_any_name_containing_a_credential_marker_is_scrubbed(
    prefix: str, marker: str, suffix: str
) -> None:
    assert is_scrubbed_name(prefix + marker + suffix)


@given(rest=_names, prefix=st.sampled_from(["DSH_", "dsh_", "Dsh_", "dSH_"]))
def test_any_name_with_the_own_prefix_in_any_case_is_scrubbed(prefix: str, rest: str) -> None:
    assert is_scrubbed_name(prefix + rest)


@given(name=_names)
def test_the_rule_is_exactly_marker_substring_or_dsh_prefix(name: str) -> None:
    upper = name.upper()
    expected = any(m in upper for m in ("KEY", "PASSWORD", "SECRET", "TOKEN")) or upper.startswith(
        "DSH_"
    )
    assert is_scrubbed_name(name) is expected


@given(environ=st.dictionaries(_names, _values))
def test_scrubbed_copy_keeps_exactly_the_unscrubbed_names(environ: dict[str, str]) -> None:
    scrubbed = scrubbed_parent_env(environ)
    assert scrubbed == {k: v for k, v in environ.items() if not is_scrubbed_name(k)}


@given(
    environ=st.dictionaries(_names, _values),
    overlay=st.dictionaries(_names, st.none() | _values),
)
def test_overlay_always_wins_and_none_deletes(
    environ: dict[str, str], overlay: dict[str, str | None]
) -> None:
    before = dict(environ)
    env = child_env(overlay, environ)
    assert environ == before  # the parent mapping is never modified
    for name, value in overlay.items():
        if value is None:
            assert name not in env
        else:
            assert env[name] == value
    for name, value in environ.items():
        if name not in overlay:
            assert (name in env) is not is_scrubbed_name(name)
            if name in env:
                assert env[name] == value
    assert set(env) <= set(environ) | set(overlay)


def test_reference_cases() -> None:
    environ = {
        "DSH_TEST_API_KEY": "a",
        "DSH_TEST_TOKEN": "b",
        "SUBPROCESS_TEST_PASSWORD": "c",
        "DSH_TEST_PLAIN": "d",
        "dsh_lower": "e",
        "DSH_STALE": "f",
        "TOKENIZERS_PARALLELISM": "g",  # a substring match: dropped on purpose (reference rule)
        "PATH": "/usr/bin",
        "HOME": "/home/x",
        "LANG": "C.UTF-8",
        "HTTPS_PROXY": "http://127.0.0.1:1",
        "TERM": "xterm",
    }
    env = child_env(
        {"DSH_SHELL": "1", "DSH_SESSION_ID": "2", "EXPLICIT_OVERRIDE_PASSWORD": "3", "HOME": None},
        environ,
    )
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "HTTPS_PROXY": "http://127.0.0.1:1",
        "TERM": "xterm",
        "DSH_SHELL": "1",
        "DSH_SESSION_ID": "2",
        "EXPLICIT_OVERRIDE_PASSWORD": "3",
    }


@pytest.mark.anyio
@pytest.mark.parametrize("guard", [True, False], ids=["guard", "direct"])
async def test_a_real_child_sees_the_scrubbed_environment_plus_overlay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guard: bool
) -> None:
    monkeypatch.setenv("DSH_TEST_API_KEY", "leak")
    monkeypatch.setenv("SUBPROCESS_TEST_PASSWORD", "leak")
    monkeypatch.setenv("DSH_STALE", "leak")
    monkeypatch.setenv("PLAIN_AMBIENT", "kept")
    monkeypatch.setenv("GONE_BY_OVERLAY", "x")
    spec = SpawnSpec(
        argv=(sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"),
        cwd=str(tmp_path),
        env={"DSH_SESSION_ID": "s1", "EXPLICIT_OVERRIDE_PASSWORD": "p", "GONE_BY_OVERLAY": None},
        stdin="devnull",
        host_death_guard=guard,
    )
    async with await spawn(spec) as proc:
        assert proc.stdout is not None
        out = b""
        async for chunk in proc.stdout:
            out += chunk
        facts = await proc.wait()
    seen = json.loads(out)
    assert facts.exit_code == 0
    assert "DSH_TEST_API_KEY" not in seen
    assert "SUBPROCESS_TEST_PASSWORD" not in seen
    assert "DSH_STALE" not in seen
    assert "GONE_BY_OVERLAY" not in seen
    assert seen["PLAIN_AMBIENT"] == "kept"
    assert seen["DSH_SESSION_ID"] == "s1"
    assert seen["EXPLICIT_OVERRIDE_PASSWORD"] == "p"
    assert seen["PATH"] == os.environ["PATH"]


@pytest.mark.anyio
@pytest.mark.parametrize("guard", [True, False], ids=["guard", "direct"])
async def test_the_guard_adds_nothing_to_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guard: bool
) -> None:
    # Python coerces a C locale by exporting LC_CTYPE; the guard must undo that for the product.
    for name in ("LC_ALL", "LC_CTYPE"):
        monkeypatch.delenv(name, raising=False)
    spec = SpawnSpec(
        argv=("/usr/bin/env",), cwd=str(tmp_path), env={"LANG": "C"}, host_death_guard=guard
    )
    async with await spawn(spec) as proc:
        assert proc.stdout is not None
        out = b""
        async for chunk in proc.stdout:
            out += chunk
    names = {line.split("=", 1)[0] for line in out.decode().splitlines()}
    assert names == set(child_env({"LANG": "C"}))


@pytest.mark.parametrize(
    ("overlay", "message"),
    [
        ({"": "x"}, "env names must be non-empty without '=' or NUL"),
        ({"A=B": "x"}, "env names must be non-empty without '=' or NUL"),
        ({"A\0": None}, "env names must be non-empty without '=' or NUL"),
        ({"A": "x\0y"}, "env values must not contain NUL characters"),
    ],
)
def test_check_env_overlay_refuses_what_the_os_cannot_apply(
    overlay: dict[str, str | None], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        check_env_overlay(overlay)


def test_check_env_overlay_accepts_deletions_and_unusual_but_legal_names() -> None:
    check_env_overlay({"GONE": None, "lower.dotted-name": "", "X": "a=b"})
