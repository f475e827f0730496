"""serve_keyless_profile(): the scripted models serving and a profile pointing each product at them.

What ``dsh model serve`` and ``dsh demo`` run (their commands are tested through the real
``dsh`` in packages/dsh-cli/tests); here the library function itself, its file, its
cleanup, its signals, and the real Codex answering through the profile it writes.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from dsh_contract_tests.fixtures.keyless_profile import (
    AMBIENT_MODEL_VARIABLES,
    CLAUDE_TOOL,
    CODEX_ACP_TOOL,
    CODEX_TOOL,
    PROFILE_NAME,
    ServedProfile,
    SetupRefused,
    serve_keyless_profile,
    serve_keyless_profile_until_stopped,
)
from dsh_contract_tests.fixtures.scripted import Served, answer_script, parse_script
from dsh_profiles.loader import load_profile
from dsh_profiles.runtime import delegate, open_runtime
from dsh_subagent import COMPLETED, CancelController, ParentContext
from dsh_subprocess.testing import ProcessWatch

SCRIPT = parse_script(
    {
        "rules": [
            {"task_contains": "wait", "steps": [{"hold": True, "then": "released"}]},
            {"steps": [{"answer": "SCRIPTED-ANSWER"}]},
        ]
    }
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # one real Codex run is enough; the fixture has no async code


@pytest.fixture(autouse=True)
def _no_ambient_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)


def _profile(served: ServedProfile) -> dict[str, Any]:
    return tomllib.loads(served.profile.read_text(encoding="utf-8"))


def _rows(profile: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    providers = {row["provider_name"]: row for row in profile["providers"]}
    tools = {row["name"]: row["provider"] for row in profile["tools"]}
    return providers, tools


def _post(base_url: str, path: str, body: Any) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(urlsplit(base_url).netloc, timeout=60)
    try:
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def _messages_body(task: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": task}], "stream": True}


def test_the_profile_points_each_product_at_its_wire_and_lets_it_run_the_script(
    tmp_path: Path,
) -> None:
    with serve_keyless_profile(SCRIPT, tmp_path) as served:
        assert served.profile == tmp_path / PROFILE_NAME
        profile = _profile(served)
        providers, tools = _rows(profile)
        assert tools == {CODEX_TOOL: "codex", CLAUDE_TOOL: "claude-code"}
        assert profile["jobs"] == {}
        codex, claude = providers["codex"], providers["claude-code"]
        assert (codex["type"], claude["type"]) == ("codex", "claude-code")
        assert codex["config"]["permission_mode"] == "dangerously-bypass-approvals-and-sandbox"
        assert claude["config"]["permission_mode"] == "bypassPermissions"
        assert codex["config"]["continuation"] is claude["config"]["continuation"] is True
        assert claude["config"]["env"]["ANTHROPIC_BASE_URL"] == served.models.messages.base_url
        assert codex["config"]["env"] == dict(served.codex_env)
        codex_home = Path(codex["config"]["env"]["CODEX_HOME"])
        config = tomllib.loads((codex_home / "config.toml").read_text(encoding="utf-8"))
        assert config["model_providers"]["fixture"]["base_url"] == served.models.responses.base_url
        assert config["sandbox_mode"] == "danger-full-access"
        # A held request sends nothing: Codex must wait for its release, not give up.
        assert config["model_providers"]["fixture"]["stream_idle_timeout_ms"] == 3_600_000
        for env in (codex["config"]["env"], claude["config"]["env"]):
            assert Path(env["HOME"]).is_relative_to(tmp_path)
            assert Path(env["TMPDIR"]).is_relative_to(tmp_path)
        assert Path(claude["config"]["env"]["CLAUDE_CONFIG_DIR"]).is_relative_to(tmp_path)
        assert (claude["config"]["env"].get("IS_SANDBOX") == "1") is (os.geteuid() == 0)
        assert not list(tmp_path.glob(".*.partial"))
    # The profile goes once the servers stopped; a given root stays with the homes.
    assert not served.profile.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claude", "codex"]


def test_a_temporary_root_is_named_by_the_prefix_and_removed_with_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with serve_keyless_profile(SCRIPT, temp_prefix="kit-test-") as served:
        assert served.root.parent == tmp_path
        assert served.root.name.startswith("kit-test-")
        assert served.profile.is_file()
    assert not served.root.exists()


@pytest.mark.parametrize("content", ["file", "directory"])
def test_a_root_that_is_not_a_new_or_empty_directory_is_refused_before_anything_listens(
    tmp_path: Path, content: str
) -> None:
    root = tmp_path / "root"
    if content == "file":
        root.write_text("x", encoding="utf-8")
    else:
        (root / "kept").mkdir(parents=True)
    with (
        pytest.raises(SetupRefused, match=r"^root .*: not a new or empty directory; nothing") as e,
        serve_keyless_profile(SCRIPT, root),
    ):
        pass
    assert (e.value.argument, e.value.value, e.value.reason) == (
        "root",
        root,
        "not a new or empty directory",
    )
    expected = {"file": ["root"], "directory": ["kept", "root"]}[content]
    assert sorted(p.name for p in tmp_path.rglob("*")) == expected


def test_a_missing_root_is_made_with_its_parents_and_kept(tmp_path: Path) -> None:
    root = tmp_path / "new" / "root"
    with serve_keyless_profile(SCRIPT, root) as served:
        assert served.root == root
        assert served.profile.is_file()
    assert root.is_dir()
    assert not (root / PROFILE_NAME).exists()


def test_a_root_that_cannot_be_made_is_refused_with_the_systems_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    with (
        pytest.raises(SetupRefused, match=r"^root .*: Not a directory; nothing started$"),
        serve_keyless_profile(SCRIPT, blocker / "root"),
    ):
        pass


def test_codex_acp_is_found_on_path_and_bound_by_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The profile is used from any directory, so it names the executable absolutely."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "codex-acp"
    fake.write_text("#!/bin/sh\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(bin_dir))
    for given in ("codex-acp", "bin/codex-acp"):
        root = tmp_path / f"root-{given.replace('/', '-')}"
        with serve_keyless_profile(SCRIPT, root, codex_acp=given) as served:
            assert served.codex_acp == str(fake)


def test_a_codex_acp_that_is_not_an_executable_is_refused_before_anything_listens(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    with (
        pytest.raises(
            SetupRefused, match=r"^codex_acp bin/codex-acp: not an executable; nothing started$"
        ),
        serve_keyless_profile(SCRIPT, root, codex_acp="bin/codex-acp"),
    ):
        pass
    assert not root.exists()  # checked before the root is made


def test_without_unasked_commands_each_product_keeps_its_keyless_defaults(tmp_path: Path) -> None:
    with serve_keyless_profile(
        SCRIPT, tmp_path, run_commands_unasked=False, continuation=False
    ) as served:
        text = served.profile.read_text(encoding="utf-8")
        providers, _ = _rows(tomllib.loads(text))
        assert set(providers["codex"]["config"]) == {"env"}
        assert set(providers["claude-code"]["config"]) == {"env"}
        assert "IS_SANDBOX" not in providers["claude-code"]["config"]["env"]
        codex_home = Path(served.codex_env["CODEX_HOME"])
        config = tomllib.loads((codex_home / "config.toml").read_text(encoding="utf-8"))
        assert config["sandbox_mode"] == "read-only"
        comments = [line for line in text.splitlines() if line.startswith("#")]
        assert len(comments) == 1
        assert "unasked" not in comments[0]


def test_profile_data_carries_the_removals_and_a_replacement_env_never_reaches_the_file(
    tmp_path: Path,
) -> None:
    """A key given for Claude Code (e.g. a real provider's) stays in memory."""
    with serve_keyless_profile(SCRIPT, tmp_path) as served:
        claude_row = served.profile_data()["providers"][1]
        assert claude_row["config"]["env"]["ANTHROPIC_MODEL"] is None  # removed, in memory
        assert "ANTHROPIC_MODEL" not in served.profile.read_text(encoding="utf-8")
        replaced = served.profile_data(claude_env={"ANTHROPIC_AUTH_TOKEN": "secret-kit-test"})
        assert replaced["providers"][1]["config"]["env"] == {
            "ANTHROPIC_AUTH_TOKEN": "secret-kit-test"
        }
        assert replaced["providers"][0] == served.profile_data()["providers"][0]
        assert "secret-kit-test" not in served.profile.read_text(encoding="utf-8")


def test_codex_acp_is_bound_on_the_responses_wire_with_a_codex_home_of_its_own(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "bin" / "codex-acp"  # only looked up: nothing runs it here
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n", encoding="utf-8")
    fake.chmod(0o755)
    root = tmp_path / "root"
    with serve_keyless_profile(SCRIPT, root, codex_acp=str(fake)) as served:
        providers, tools = _rows(_profile(served))
        assert tools[CODEX_ACP_TOOL] == "codex-acp"
        acp = providers["codex-acp"]
        assert acp["type"] == "acp"
        assert acp["config"]["command"] == str(fake)
        assert acp["config"]["permission"] == "allow"
        assert acp["config"]["env"]["RUST_LOG"] == "warn"
        home = Path(acp["config"]["env"]["CODEX_HOME"])
        assert home.is_relative_to(root / "codex-acp")
        config = tomllib.loads((home / "config.toml").read_text(encoding="utf-8"))
        assert config["model_providers"]["fixture"]["base_url"] == served.models.responses.base_url


def test_claude_script_answers_the_messages_wire_and_script_the_responses_wire(
    tmp_path: Path,
) -> None:
    claude = answer_script("CLAUDE-ONLY")
    with serve_keyless_profile(SCRIPT, tmp_path, claude_script=claude) as served:
        status, body = _post(served.models.messages.base_url, "/v1/messages", _messages_body("hi"))
        assert status == 200
        assert b"CLAUDE-ONLY" in body
        codex_body = {
            "model": "m",
            "input": [{"type": "message", "role": "user", "content": [{"text": "hi"}]}],
            "stream": True,
        }
        status, body = _post(served.models.responses.base_url, "/v1/responses", codex_body)
        assert status == 200
        assert b"SCRIPTED-ANSWER" in body


def test_until_stopped_releases_holds_on_sigusr1_and_cleans_up_on_sigint(tmp_path: Path) -> None:
    """The signals a terminal sends ``dsh model serve``, here sent by the test itself."""
    held = threading.Event()
    replies: list[tuple[int, bytes]] = []
    seen: dict[str, Path] = {}

    def on_served(event: Served) -> None:
        if event.kind == "hold":
            held.set()

    def ask_then_release(base_url: str) -> None:
        waiter = threading.Thread(
            target=lambda: replies.append(
                _post(base_url, "/v1/messages", _messages_body("please wait"))
            )
        )
        waiter.start()
        try:
            if held.wait(60):
                os.kill(os.getpid(), signal.SIGUSR1)
            waiter.join(60)
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # the test ends either way; it asserts below

    def ready(served: ServedProfile) -> None:
        seen["profile"] = served.profile
        assert served.profile.is_file()
        threading.Thread(target=ask_then_release, args=(served.models.messages.base_url,)).start()

    releases: list[bool] = []
    anyio.run(
        lambda: serve_keyless_profile_until_stopped(
            SCRIPT,
            tmp_path,
            ready=ready,
            released=lambda: releases.append(True),
            on_served=on_served,
        )
    )
    assert releases == [True]
    assert [status for status, _ in replies] == [200]
    assert b"released" in replies[0][1]
    assert not seen["profile"].exists()


@pytest.fixture
def served_codex(tmp_path: Path) -> Iterator[ServedProfile]:
    (tmp_path / "root").mkdir()
    with serve_keyless_profile(SCRIPT, tmp_path / "root") as served:
        yield served


@pytest.mark.keyless
@pytest.mark.anyio
async def test_the_real_codex_answers_through_the_written_profile(
    served_codex: ServedProfile, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    parent = ParentContext(session_id="kit-keyless-profile", cwd=str(work))
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(served_codex.profile)) as runtime:
            result = await delegate(
                runtime, "codex", "Say it.", parent=parent, cancel=CancelController().signal
            )
    assert (result.stop_reason, result.text) == (COMPLETED, "SCRIPTED-ANSWER")
    assert any(p.name == "codex" for p in watch.seen), watch.seen
    assert watch.alive() == []
    assert len(served_codex.models.responses.requests) >= 1
