"""The error-info mapping and the typed wire shapes against the pinned generated schema."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from codex_harness import (
    SCHEMA_DIR,
    SECRET,
    FakeCodex,
    agent_message,
    delegate,
    failed,
    handshake,
    turn_start,
)
from dsh_subagent_codex.binary import codex_app_server_argv
from dsh_subagent_codex.config import PERMISSION_MODES
from dsh_subagent_codex.error_info import (
    HTTP_STATUS_VARIANTS,
    OBJECT_VARIANTS,
    STRING_VARIANTS,
    ErrorCategory,
    map_error_info,
)
from dsh_subagent_codex.permissions import (
    COMMAND_APPROVAL,
    ELICITATION,
    FILE_APPROVAL,
    PERMISSIONS_APPROVAL,
    USER_INPUT,
    answer_request,
    mode_thread_fields,
)
from dsh_subagent_codex.protocol import (
    InitializeParams,
    TextInput,
    ThreadStartParams,
    TurnInterruptParams,
    TurnStartParams,
)

SEED_STRINGS = {
    "contextWindowExceeded",
    "sessionBudgetExceeded",
    "usageLimitExceeded",
    "serverOverloaded",
    "cyberPolicy",
    "internalServerError",
    "unauthorized",
    "badRequest",
    "threadRollbackFailed",
    "sandboxError",
    "other",
}
SEED_OBJECTS = {
    "httpConnectionFailed",
    "responseStreamConnectionFailed",
    "responseStreamDisconnected",
    "responseTooManyFailedAttempts",
    "activeTurnNotSteerable",
}


def _schema(relative: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMA_DIR / relative).read_text())
    return loaded


def _schema_union() -> tuple[set[str], set[str], set[str]]:
    """Strings, object variants and HTTP-status-carrying variants of ``CodexErrorInfo``."""
    info = _schema("ServerNotification.json")["definitions"]["CodexErrorInfo"]
    strings: set[str] = set()
    objects: set[str] = set()
    with_status: set[str] = set()
    for entry in info["anyOf"]:
        if "enum" in entry:
            strings.update(entry["enum"])
        elif entry.get("type") == "object" and len(entry.get("required", [])) == 1:
            (name,) = entry["required"]
            objects.add(name)
            if "httpStatusCode" in entry["properties"][name].get("properties", {}):
                with_status.add(name)
        else:
            # The forward-compatible catch-all (any other string or object) → unknown.
            assert entry == {"type": ["string", "object"]}
    return strings, objects, with_status


def test_mapping_equals_the_pinned_schema_union() -> None:
    strings, objects, with_status = _schema_union()
    assert strings == set(STRING_VARIANTS)
    assert objects == set(OBJECT_VARIANTS)
    assert with_status == set(HTTP_STATUS_VARIANTS)


def test_the_pinned_union_contains_the_seed_sixteen() -> None:
    assert SEED_STRINGS <= STRING_VARIANTS
    assert SEED_OBJECTS == OBJECT_VARIANTS
    assert len(SEED_STRINGS) + len(SEED_OBJECTS) == 16
    # What 0.163.0 adds beyond the seed's 0.147.0 union is preserved deliberately.
    assert {
        "rateLimitExceeded",
        "flexUnavailable",
        "misalignmentPolicyViolation",
        "tooManyDenials",
    } == STRING_VARIANTS - SEED_STRINGS


@pytest.mark.parametrize("name", sorted(STRING_VARIANTS))
def test_every_string_variant_is_kept_verbatim(name: str) -> None:
    assert map_error_info(name) == ErrorCategory(name)


@pytest.mark.parametrize("name", sorted(HTTP_STATUS_VARIANTS))
@pytest.mark.parametrize(
    ("detail", "status"),
    [
        ({"httpStatusCode": 503}, 503),
        ({"httpStatusCode": 0}, 0),
        ({"httpStatusCode": 65535}, 65535),
        ({"httpStatusCode": None}, None),
        ({}, None),
        ({"httpStatusCode": "503"}, None),
        ({"httpStatusCode": 503.0}, None),
        ({"httpStatusCode": True}, None),
        ({"httpStatusCode": 65536}, None),
        ({"httpStatusCode": -1}, None),
    ],
)
def test_connection_variants_keep_only_integer_http_status(
    name: str, detail: dict[str, object], status: int | None
) -> None:
    assert map_error_info({name: detail}) == ErrorCategory(name, status)


def test_active_turn_not_steerable_hides_its_turn_kind() -> None:
    mapped = map_error_info({"activeTurnNotSteerable": {"turnKind": "review", "httpStatusCode": 1}})
    assert mapped == ErrorCategory("activeTurnNotSteerable")


@pytest.mark.parametrize(
    "value",
    [
        "futureError",
        SECRET,
        "",
        None,
        42,
        ["other"],
        {},
        {"httpConnectionFailed": None},
        {"httpConnectionFailed": [503]},
        {"futureVariant": {}},
        {"httpConnectionFailed": {}, "other": {}},
    ],
)
def test_everything_else_is_unknown(value: object) -> None:
    assert map_error_info(value) == ErrorCategory("unknown")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("info", "tail"),
    [
        *[
            (name, f"category: {name})")
            for name in sorted(STRING_VARIANTS - {"contextWindowExceeded"})
        ],
        *[
            ({name: {"httpStatusCode": 503}}, f"category: {name}; HTTP status: 503)")
            for name in sorted(HTTP_STATUS_VARIANTS)
        ],
        *[
            ({name: {"httpStatusCode": None}}, f"category: {name})")
            for name in sorted(HTTP_STATUS_VARIANTS)
        ],
        ({"activeTurnNotSteerable": {"turnKind": "compact"}}, "category: activeTurnNotSteerable)"),
        ("futureError", "category: unknown)"),
    ],
)
async def test_each_variant_reaches_the_result_diagnostic(
    fake: FakeCodex, info: object, tail: str
) -> None:
    steps = [*handshake(), *turn_start(), agent_message("kept", "final_answer"), failed(info)]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    # cyberPolicy and every other category stay "error" (never "refusal").
    assert result.stop_reason == "error"
    assert result.text == "kept"
    assert result.diagnostic is not None
    line, *rest = result.diagnostic.split("\n")
    assert line == f"Product subagent failure (product: Codex; stage: turn; {tail}"
    # Only a sandboxError terminal adds a (structured) permission fact.
    assert rest == (
        [
            "Codex unattended decision (mode: never; request: sandbox execution; "
            "decision: failed): Codex reported a sandbox failure"
        ]
        if info == "sandboxError"
        else []
    )


# -- typed wire shapes versus the generated schema ---------------------------------------


def _validate(instance: object, relative: str) -> None:
    jsonschema.validate(instance, _schema(relative))


def test_initialize_params_match_the_schema() -> None:
    _validate(InitializeParams().model_dump(mode="json"), "v1/InitializeParams.json")


@pytest.mark.parametrize("mode", PERMISSION_MODES)
@pytest.mark.parametrize("model", [None, "some-model"])
def test_thread_start_params_match_the_schema(mode: str, model: str | None) -> None:
    params = ThreadStartParams(cwd="/w", model=model, **mode_thread_fields(mode))  # type: ignore[arg-type]
    dumped = params.model_dump(mode="json", exclude_none=True)
    _validate(dumped, "v2/ThreadStartParams.json")
    assert set(dumped) <= set(_schema("v2/ThreadStartParams.json")["properties"])


def test_turn_params_match_the_schema() -> None:
    turn = TurnStartParams(threadId="t", input=(TextInput(text="a"), TextInput(text="b")))
    _validate(turn.model_dump(mode="json"), "v2/TurnStartParams.json")
    _validate(
        TurnInterruptParams(threadId="t", turnId="u").model_dump(mode="json"),
        "v2/TurnInterruptParams.json",
    )


@pytest.mark.parametrize(
    ("method", "offered", "response_schema"),
    [
        (COMMAND_APPROVAL, ["accept", "cancel"], "CommandExecutionRequestApprovalResponse.json"),
        (COMMAND_APPROVAL, None, "CommandExecutionRequestApprovalResponse.json"),
        (FILE_APPROVAL, ["decline"], "FileChangeRequestApprovalResponse.json"),
        (PERMISSIONS_APPROVAL, None, "PermissionsRequestApprovalResponse.json"),
        (USER_INPUT, None, "ToolRequestUserInputResponse.json"),
        (ELICITATION, None, "McpServerElicitationRequestResponse.json"),
    ],
)
def test_unattended_answers_match_the_schema(
    method: str, offered: object, response_schema: str
) -> None:
    _validate(answer_request(method, offered).result, response_schema)


def test_the_answered_methods_are_declared_server_requests() -> None:
    declared = {
        entry["properties"]["method"]["enum"][0] for entry in _schema("ServerRequest.json")["oneOf"]
    }
    assert {
        COMMAND_APPROVAL,
        FILE_APPROVAL,
        PERMISSIONS_APPROVAL,
        USER_INPUT,
        ELICITATION,
    } <= declared


def test_consumed_notification_fields_exist_in_the_schema() -> None:
    completed = _schema("v2/TurnCompletedNotification.json")
    assert {"threadId", "turn"} <= set(completed["required"])
    turn = completed["definitions"]["Turn"]
    assert {"id", "status", "error"} <= set(turn["properties"])
    statuses = set(completed["definitions"]["TurnStatus"]["enum"])
    assert statuses == {"completed", "interrupted", "failed", "inProgress"}
    item = _schema("v2/ItemCompletedNotification.json")
    assert {"threadId", "turnId", "item"} <= set(item["required"])
    agent = next(
        v
        for v in item["definitions"]["ThreadItem"]["oneOf"]
        if v["properties"]["type"].get("enum") == ["agentMessage"]
    )
    assert {"text"} <= set(agent["required"])
    phase = json.dumps(agent["properties"]["phase"])
    assert "MessagePhase" in phase
    phases = {v["enum"][0] for v in item["definitions"]["MessagePhase"]["oneOf"]}
    assert phases == {"commentary", "partial_answer", "final_answer"}


def test_the_kept_schema_is_what_the_pinned_binary_generates(tmp_path: Path) -> None:
    """Fails on a pin change until the kept schema (and so the mapping) is refreshed."""
    import subprocess

    out = tmp_path / "schema"
    home = tmp_path / "home"
    home.mkdir()
    binary = codex_app_server_argv()[0]
    env = {"PATH": os.defpath, "HOME": str(home), "CODEX_HOME": str(home), "TMPDIR": str(tmp_path)}
    subprocess.run(
        [binary, "app-server", "generate-json-schema", "--out", str(out)],
        check=True,
        env=env,
        capture_output=True,
        timeout=60,
    )
    kept = sorted(p.relative_to(SCHEMA_DIR) for p in SCHEMA_DIR.rglob("*.json"))
    assert len(kept) >= 20
    for relative in kept:
        assert json.loads((out / relative).read_text()) == json.loads(
            (SCHEMA_DIR / relative).read_text()
        ), relative
