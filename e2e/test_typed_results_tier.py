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

import pytest
from dsh_contract_tests.fixtures import messages, responses
from dsh_contract_tests.fixtures.keyless_profile import (
    AMBIENT_MODEL_VARIABLES,
    KeylessProducts,
    keyless_products,
)
from dsh_subprocess.testing import ProcessWatch

pytestmark = pytest.mark.keyless

DSH = Path(sys.executable).with_name("dsh")
SECRET = "TYPED-SECRET-0e4a"
VERDICT = {"verdict": "approve", "findings": 2}
SCHEMA = {
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
