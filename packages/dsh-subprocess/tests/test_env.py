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
    is_scrubbed_value,
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

# -- generated URLs, for the value rule ---------------------------------------------------
# Whitespace (what ``\s`` matches) and "/" end a URL's authority; control characters are
# left out altogether (NUL cannot be in an environment value anyway).
_NO_CONTROL = st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"))
_scheme = st.from_regex(r"[A-Za-z][A-Za-z0-9+.\-]{0,8}", fullmatch=True)
_in_authority = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="/"
    ),
    max_size=12,
)
_user = _in_authority.filter(lambda u: ":" not in u and "@" not in u)
_host = st.one_of(
    _in_authority.filter(lambda h: "@" not in h),
    st.from_regex(r"\[[0-9a-fA-F:]{2,20}\](:[0-9]{1,5})?", fullmatch=True),  # IPv6
)
_path = st.text(alphabet=_NO_CONTROL, max_size=12).map(lambda p: "/" + p)  # "@", ":" too
_anything = st.text(max_size=20).filter(lambda v: "\0" not in v)


@st.composite
def _url_with_password(draw: st.DrawFn) -> str:
    # Any user (even with ":" or "@") and any non-empty password (even with "@" or ":"):
    # the text after the first ":" of what precedes the last "@" is never empty.
    user = draw(_in_authority)
    password = draw(_in_authority.filter(bool))
    return f"{draw(_scheme)}://{user}:{password}@{draw(_host)}{draw(st.just('') | _path)}"


@st.composite
def _url_without_password(draw: st.DrawFn) -> str:
    userinfo = draw(
        st.one_of(
            st.just(""),  # no userinfo at all
            _user.map(lambda u: u + "@"),  # a user without a password (a bare token, say)
            _user.map(lambda u: u + ":@"),  # an empty password: nothing secret in it
        )
    )
    return f"{draw(_scheme)}://{userinfo}{draw(_host)}{draw(st.just('') | _path)}"


# Free text never forms a URL of its own. Pieces are joined by whitespace, which ends any
# authority, so one piece's text cannot become another's userinfo.
_free_text = st.text(alphabet=_NO_CONTROL, max_size=12).filter(lambda t: "://" not in t)
_separator = st.sampled_from([" ", "\n", "\t", "  "])


@st.composite
def _value_without_url_password(draw: st.DrawFn) -> str:
    pieces = draw(st.lists(st.one_of(_free_text, _url_without_password()), max_size=4))
    return draw(_separator).join(pieces)


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
    expected = (
        any(m in upper for m in ("KEY", "PASSWORD", "SECRET", "TOKEN"))
        or upper.startswith("DSH_")
        or re.fullmatch(r"OTEL_EXPORTER_OTLP_([A-Z]+_)?HEADERS", upper) is not None
    )
    assert is_scrubbed_name(name) is expected


@pytest.mark.parametrize(
    "name",
    [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
        "otel_exporter_otlp_logs_headers",
    ],
)
def test_telemetry_exporter_headers_are_withheld(name: str) -> None:
    # Their values carry the collector's credentials ("authorization=Bearer ...").
    assert is_scrubbed_name(name)
    assert not is_scrubbed_name("OTEL_EXPORTER_OTLP_ENDPOINT")


@given(environ=st.dictionaries(_names, _values | _url_with_password()))
def test_scrubbed_copy_keeps_exactly_the_unscrubbed_variables(environ: dict[str, str]) -> None:
    scrubbed = scrubbed_parent_env(environ)
    assert scrubbed == {
        k: v for k, v in environ.items() if not is_scrubbed_name(k) and not is_scrubbed_value(v)
    }


@given(name=_names, prefix=_anything, url=_url_with_password(), suffix=_anything)
def test_a_value_carrying_a_url_password_is_withheld_whatever_its_name(
    name: str, prefix: str, url: str, suffix: str
) -> None:
    value = prefix + url + suffix
    assert is_scrubbed_value(value)
    assert scrubbed_parent_env({name: value, "PATH": "/bin"}) == {"PATH": "/bin"}


@given(environ=st.dictionaries(_names, _value_without_url_password()))
def test_values_without_a_url_password_are_kept_unless_the_name_rule_hits(
    environ: dict[str, str],
) -> None:
    assert not any(is_scrubbed_value(value) for value in environ.values())
    assert scrubbed_parent_env(environ) == {
        k: v for k, v in environ.items() if not is_scrubbed_name(k)
    }


@given(
    environ=st.dictionaries(_names, _values | _url_with_password()),
    overlay=st.dictionaries(_names, _url_with_password()),
)
def test_an_overlay_value_with_a_url_password_always_reaches_the_child(
    environ: dict[str, str], overlay: dict[str, str]
) -> None:
    env = child_env(overlay, environ)
    for name, value in overlay.items():
        assert env[name] == value
    for name, value in environ.items():
        if name not in overlay:
            assert (name in env) is not (is_scrubbed_name(name) or is_scrubbed_value(value))


@pytest.mark.parametrize(
    ("value", "withheld"),
    [
        ("postgres://u:pw@h/db", True),
        ("http://user:pass@proxy", True),
        ("HTTPS://User:Pass@Proxy.Example:3128", True),  # the scheme's case does not matter
        ("http://u:p@[::1]:8080/", True),  # an IPv6 host
        ("http://[::1]:8080/", False),
        ("http://u:p@[::1", True),  # malformed, still a password
        ("https://mirror.test https://u:pw@private.test/simple", True),  # several URLs
        ("http://a.test,http://u:pw@b.test", True),
        ("mongodb://u:pw@h1,h2,h3/db", True),
        ("postgres://u:p#w?x@h/db", True),  # '?'/'#' unencoded in the password: still caught
        ("https://host/@scope/pkg", False),  # '@' in the path is not userinfo
        ("https://host/a:b@c", False),
        ("https://ghp_token@github.com/o/r.git", False),  # a user without a password
        ("https://:pw@host", True),  # an empty user with a password
        ("u:pw@host", False),  # no scheme: not a URL
        ("://u:pw@host", False),
        ("plain text, no URL", False),
    ],
)
def test_value_rule_examples(value: str, withheld: bool) -> None:
    assert is_scrubbed_value(value) is withheld


def test_an_empty_url_password_is_not_a_credential() -> None:
    # Pinned on purpose: "user:@host" names a user and carries no secret, so it is kept,
    # like a user without any password.
    assert not is_scrubbed_value("https://user:@host/path")
    assert scrubbed_parent_env({"REPO": "https://user:@host"}) == {"REPO": "https://user:@host"}


def test_a_slash_in_a_password_must_be_percent_encoded_to_be_recognised() -> None:
    # Pinned on purpose: the authority ends at the first "/", so "@" after it reads as
    # part of a path (e.g. an npm scope); URL parsers require "%2F" in a password anyway.
    assert not is_scrubbed_value("postgres://u:pa/ss@h/db")
    assert is_scrubbed_value("postgres://u:pa%2Fss@h/db")


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
            assert (name in env) is not (is_scrubbed_name(name) or is_scrubbed_value(value))
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
        "DATABASE_URL": "postgres://u:pw@h/db",  # a credential in the value
        "HTTP_PROXY": "http://user:pass@proxy:3128",
        "NO_PROXY": "localhost,127.0.0.1",
        "LAYERED_URL": "postgres://other:pw@h/db",
    }
    env = child_env(
        {
            "DSH_SHELL": "1",
            "DSH_SESSION_ID": "2",
            "EXPLICIT_OVERRIDE_PASSWORD": "3",
            "HOME": None,
            "LAYERED_URL": "postgres://u:layered@h/db",
        },
        environ,
    )
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "HTTPS_PROXY": "http://127.0.0.1:1",
        "TERM": "xterm",
        "NO_PROXY": "localhost,127.0.0.1",
        "DSH_SHELL": "1",
        "DSH_SESSION_ID": "2",
        "EXPLICIT_OVERRIDE_PASSWORD": "3",
        "LAYERED_URL": "postgres://u:layered@h/db",
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
    monkeypatch.setenv("DATABASE_URL", "postgres://u:leak@h/db")
    monkeypatch.setenv("HTTPS_PROXY", "http://user:leak@proxy.invalid:3128")
    monkeypatch.setenv("PLAIN_PROXY", "http://proxy.invalid:3128")
    spec = SpawnSpec(
        argv=(sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"),
        cwd=str(tmp_path),
        env={
            "DSH_SESSION_ID": "s1",
            "EXPLICIT_OVERRIDE_PASSWORD": "p",
            "GONE_BY_OVERLAY": None,
            "LAYERED_URL": "postgres://u:layered@h/db",
        },
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
    assert "DATABASE_URL" not in seen
    assert "HTTPS_PROXY" not in seen
    assert not any("leak" in value for value in seen.values())
    assert seen["PLAIN_PROXY"] == "http://proxy.invalid:3128"
    assert seen["LAYERED_URL"] == "postgres://u:layered@h/db"
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
