"""The provider contract kit's rules, run against AcpProvider with the scripted ACP agent."""

from __future__ import annotations

import json
import sys
from typing import Any, ClassVar

import pytest
from acp_harness import AGENT
from dsh_contract_tests import ProviderContract
from dsh_contract_tests.scenario import ChildSetup, ProviderFactory
from dsh_subagent_acp import AcpConfig, AcpProvider


# The acp library's connection is asyncio-only (see test_backend.py for trio).
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _config(setup: ChildSetup) -> dict[str, Any]:
    script = setup.scratch / "contract-script.json"
    script.write_text(json.dumps({"contract": True}), encoding="utf-8")
    values: dict[str, Any] = {
        "command": sys.executable,
        "args": (str(AGENT), str(script)),
        "env": dict(setup.env),
        "dispose_eof_grace": 1.0,
        "dispose_grace": 1.0,
    }
    if setup.cwd_override is not None:
        values["cwd"] = setup.cwd_override
    return values


class TestAcpProviderContract(ProviderContract):
    entry_point_name: ClassVar[str | None] = "acp"

    @pytest.fixture
    def provider_factory(self) -> ProviderFactory:
        return lambda setup: AcpProvider(AcpConfig(**_config(setup)))

    def loader_config(self, setup: ChildSetup) -> dict[str, Any]:
        return _config(setup)
