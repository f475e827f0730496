"""Typed results from outside: the real ``dsh run --output-schema`` executable, against the
REAL Codex app-server and the REAL Claude Code CLI of the keyless profile.

Products are required (never skipped); loopback only; every test proves the product
trees are gone (and the root conftest fails any leftover).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from dsh_contract_tests.fixtures import messages, responses
from dsh_contract_tests.fixtures.keyless_profile import (
    AMBIENT_MODEL_VARIABLES,
    KeylessProducts,
    keyless_products,
)
from dsh_subprocess.testing import ProcessWatch
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from pydantic import JsonValue

pytestmark = pytest.mark.keyless

DSH = Path(sys.executable).with_name("dsh")
SECRET = "TYPED-SECRET-0e4a"
VERDICT = {"verdict": "approve", "findings": 2}
SCHEMA: dict[str, JsonValue] = {
    "type": "object",
    "properties": {"verdict": {"type": "string"}, "findings": {"type": "integer"}},
    "required": ["verdict", "findings"],
    "additionalProperties": False,
}


@pytest.fixture
def products(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KeylessProducts]:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    with keyless_products(tmp_path, claude_answer="unused") as running:
        yield running


def _dsh(products: KeylessProducts, tool: str, *flags: str) -> subprocess.CompletedProcess[str]:
    schema = products.workspace.parent / "schema.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    argv = [str(DSH), "run", str(products.profile), tool, "Review the change."]
    argv += ["--cwd", str(products.workspace), "--output-schema", str(schema), *flags]
    with ProcessWatch() as watch:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert watch.alive() == [], "a product process outlived dsh run"
    assert "Traceback" not in done.stderr
    return done


def test_codex_prints_the_validated_object(products: KeylessProducts) -> None:
    products.codex_model.enqueue(responses.PlainAnswer(json.dumps(VERDICT), "final_answer"))
    done = _dsh(products, "subagent_codex")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == VERDICT
    (request,) = products.codex_model.requests
    assert request.body["text"]["format"]["schema"] == SCHEMA


def test_codex_nonconforming_answer_is_one_failure_without_the_answer(
    products: KeylessProducts,
) -> None:
    answer = json.dumps({"verdict": SECRET})
    products.codex_model.enqueue(responses.PlainAnswer(answer, "final_answer"))
    done = _dsh(products, "subagent_codex", "--json")
    assert done.returncode == 1, done.stderr
    record = json.loads(done.stdout)
    assert record["structured"] is None
    assert record["diagnostic"].splitlines() == [
        "Structured output failure (category: output-invalid)",
        "$: missing field 'findings'",
    ]
    assert SECRET not in done.stderr


def test_claude_code_prints_the_validated_object(products: KeylessProducts) -> None:
    products.claude_model.enqueue(
        messages.ToolUse("StructuredOutput", VERDICT), messages.TextAnswer("Done.")
    )
    done = _dsh(products, "subagent_claude_code", "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["structured"] == VERDICT
    assert json.loads(record["answer"]) == VERDICT


def _typed_profile(products: KeylessProducts) -> Path:
    """The keyless profile with Codex's tool row typed (its schema as a TOML table)."""
    text = products.profile.read_text(encoding="utf-8")
    row = 'name = "subagent_codex"\nprovider = "codex-keyless"'
    assert row in text
    table = (
        '\n[tools.output_schema]\ntype = "object"\nrequired = ["verdict", "findings"]\n'
        "additionalProperties = false\n"
        '[tools.output_schema.properties.verdict]\ntype = "string"\n'
        '[tools.output_schema.properties.findings]\ntype = "integer"\n'
    )
    typed = products.profile.with_name("typed.toml")
    typed.write_text(text.replace(row, row + table), encoding="utf-8")
    return typed


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_declares_the_output_schema_and_returns_structured_content(
    products: KeylessProducts, tmp_path: Path
) -> None:
    products.codex_model.enqueue(
        responses.PlainAnswer(json.dumps(VERDICT), "final_answer"),
        responses.PlainAnswer(json.dumps({"verdict": SECRET}), "final_answer"),
    )
    params = StdioServerParameters(
        command=str(DSH),
        args=["mcp", str(_typed_profile(products)), "--workspace", str(products.workspace)],
        env={"HOME": str(tmp_path), "TMPDIR": str(tmp_path), "NO_PROXY": "127.0.0.1"},
        cwd=str(tmp_path),
    )
    with ProcessWatch() as watch:
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            with anyio.fail_after(120):
                good = await session.call_tool(
                    "subagent_codex", {"description": "review", "prompt": "Review."}
                )
                bad = await session.call_tool(
                    "subagent_codex", {"description": "review", "prompt": "Review."}
                )
        assert watch.alive() == [] or all(
            any(a.endswith("_guard.py") for a in p.argv) for p in watch.alive()
        )
    declared = listed["subagent_codex"].output_schema
    assert declared is not None
    assert declared["properties"]["structured"]["required"] == ["verdict", "findings"]
    assert listed["subagent_claude_code"].output_schema is None  # untyped rows unchanged
    # The official client validated the structured content against the declared schema.
    assert good.is_error is False
    assert good.structured_content is not None
    assert good.structured_content["structured"] == VERDICT
    assert bad.is_error is True
    assert bad.structured_content is not None
    assert "structured" not in bad.structured_content
    (block,) = bad.content
    assert isinstance(block, types.TextContent)
    diagnostic, _, partial = block.text.partition("\nPartial output before the run ended:\n")
    assert "category: output-invalid" in diagnostic
    assert SECRET not in diagnostic
    # Deliberate: like any failed run's partial output, the answer itself follows apart from
    # the diagnostic, so the calling model can see what it got back.
    assert SECRET in partial


def test_ray_data_rows_carry_the_validated_object(products: KeylessProducts) -> None:
    from dsh_batch.ray_data import STRUCTURED_COLUMN, Delegate

    products.codex_model.enqueue(
        responses.PlainAnswer(json.dumps(VERDICT), "final_answer"),
        responses.PlainAnswer(json.dumps({"verdict": SECRET}), "final_answer"),
    )
    batch = {"id": ["good", "bad"], "task": ["Review one.", "Review two."]}
    with (
        ProcessWatch() as watch,
        Delegate(
            str(products.profile),
            "subagent_codex",
            cwd=str(products.workspace),
            output_schema=SCHEMA,
        ) as step,
    ):
        out = step(batch)
        columns = out.to_pydict() if hasattr(out, "to_pydict") else dict(out)
    assert not [p for p in watch.alive() if not any(a.endswith("_guard.py") for a in p.argv)]
    assert columns["stop_reason"] == ["completed", "error"]
    assert json.loads(columns[STRUCTURED_COLUMN][0]) == VERDICT
    assert columns[STRUCTURED_COLUMN][1] is None
    assert "category: output-invalid" in columns["diagnostic"][1]
    assert SECRET not in columns["diagnostic"][1]
