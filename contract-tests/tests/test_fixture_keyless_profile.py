"""keyless_products(): the shared setup of both real products behind one Loader profile."""

from __future__ import annotations

import http.client
import json
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from dsh_contract_tests.fixtures import messages, responses
from dsh_contract_tests.fixtures.keyless_profile import AMBIENT_MODEL_VARIABLES, keyless_products


def test_it_refuses_to_start_with_an_ambient_model_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TOML cannot unset a variable, so a present one would silently override the home."""
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("ANTHROPIC_MODEL", "from-the-host")
    with (
        pytest.raises(RuntimeError, match="remove ANTHROPIC_MODEL from the environment"),
        keyless_products(tmp_path, claude_answer="x"),
    ):
        pass
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("jobs", [True, False])
def test_the_profile_binds_both_products_to_the_loopback_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: bool
) -> None:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    with keyless_products(tmp_path, claude_answer="x", jobs=jobs) as products:
        profile = tomllib.loads(products.profile.read_text(encoding="utf-8"))
        codex, claude = profile["providers"]
        assert (codex["type"], codex["provider_name"]) == ("codex", "codex-keyless")
        assert (claude["type"], claude["provider_name"]) == ("claude-code", "claude-keyless")
        assert claude["config"]["env"]["ANTHROPIC_BASE_URL"] == products.claude_model.base_url
        assert claude["config"]["env"]["ANTHROPIC_API_KEY"] == products.claude_key
        assert codex["config"]["env"]["HOME"].startswith(str(tmp_path))
        assert products.codex_key in codex["config"]["env"].values()
        assert products.workspace.is_dir()
        tools = {row["name"]: row for row in profile["tools"]}
        assert {row["provider"] for row in tools.values()} == {"codex-keyless", "claude-keyless"}
        assert ("jobs" in profile) is jobs
        assert {row.get("background_mode", "one-shot") for row in tools.values()} == (
            {"one-shot"} if jobs else {"disabled"}
        )


def _post(base_url: str, path: str) -> int:
    conn = http.client.HTTPConnection(urlsplit(base_url).netloc, timeout=10)
    try:
        conn.request("POST", path, body=json.dumps({"model": "m", "input": []}).encode())
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_the_routes_reach_their_fixtures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    codex_seen: list[responses.RecordedRequest] = []
    claude_seen: list[messages.RecordedRequest] = []

    def codex_route(request: responses.RecordedRequest) -> responses.Behaviour | None:
        codex_seen.append(request)
        return responses.PlainAnswer("routed", "final_answer")

    def claude_route(request: messages.RecordedRequest) -> messages.Behaviour | None:
        claude_seen.append(request)
        return None  # falls back to claude_answer

    with keyless_products(
        tmp_path, claude_answer="x", codex_route=codex_route, claude_route=claude_route
    ) as products:
        assert _post(products.codex_model.base_url, "/v1/responses") == 200
        assert _post(products.claude_model.base_url, "/v1/messages") == 200
    assert (len(codex_seen), len(claude_seen)) == (1, 1)
