"""The verify run of a provider that needs a model and configuration, from wheels.

A third-party provider whose product talks to a Chat Completions model and whose
``Config`` requires ``model_url`` and ``model_key`` (``MODEL_AGENT`` below, added to the
scaffold as ``acme_agent/model_agent.py`` with the entry point ``acme-model``) is built
as a wheel and installed with the kit's wheels in a fresh venv. The guide's verify
profile and command (``docs/providers.md``, "The verdict") run as written: the kit
starts the loopback Chat Completions fixture in each rule's process and the whole kit
passes, with no conftest of the author's. The same provider with one breakage (it keeps
the product's raw error in the diagnostic) gets a failed verdict naming that rule.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from dsh_contract_tests.manifest import REQUIREMENTS
from fresh_venv import KIT_README, ROOT, install_problems, readme_commands, run_bash

_GUIDE = ROOT / "docs" / "providers.md"
_KIT_IDS = sorted(i for i, r in REQUIREMENTS.items() if r.tier != "credentialed")
_FROM_WHEELS = {"dsh-subprocess", "dsh-subagent", "dsh-contract-tests", "acme-agent"}

# The product: a child that sends the task to the configured model and answers what the
# model says; an HTTP error's body is its raw error. ModelAgentLeaks keeps that raw
# error in the diagnostic (the breakage). The URL travels as ACME_BASE_URL: under the
# default confinement a product connects only to the ports of *_BASE_URL variables
# (docs/security.md), which an author meets first in exactly this run.
MODEL_AGENT = '''
import sys

from dsh_subagent import Launch
from pydantic import Field

from acme_agent import AcmeAgentConfig, AcmeAgentProvider

_CHILD = r"""
import base64, json, os, re, subprocess, sys, urllib.error, urllib.request
print(json.dumps({"type": "ready"}), flush=True)
task = json.loads(sys.stdin.readline())["task"]
request = urllib.request.Request(
    os.environ["ACME_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "m", "messages": [{"role": "user", "content": task}]}).encode(),
    headers={
        "Authorization": "Bearer " + os.environ["ACME_MODEL_KEY"],
        "Content-Type": "application/json",
    },
)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    with opener.open(request) as answer:
        text = json.load(answer)["choices"][0]["message"]["content"]
except urllib.error.HTTPError as error:
    message = error.read().decode("utf-8", "replace")
    print(json.dumps({"type": "error", "message": message}), flush=True)
    sys.exit(3)
# The product's shell tool, for the kit's reach directive (the confinement rules): the
# Chat Completions fixture answers such a task with its token, and the product runs the
# command the task names, as a coding product's shell tool would, answering its output.
found = re.search(r"dsh-contract/1 command ([A-Za-z0-9_-]+={0,2})", task)
if found:
    command = base64.urlsafe_b64decode(found.group(1)).decode()
    ran = subprocess.run(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text += "\\n" + ran.stdout[-2000:]
print(json.dumps({"type": "final", "text": text}), flush=True)
"""


class ModelAgentConfig(AcmeAgentConfig):
    provider_name: str = "acme-model"
    model_url: str = Field(min_length=1)
    model_key: str = Field(min_length=1)


class ModelAgent(AcmeAgentProvider):
    Config = ModelAgentConfig

    def launch(self, cwd):
        env = {"ACME_BASE_URL": self.config.model_url, "ACME_MODEL_KEY": self.config.model_key}
        return Launch(argv=(sys.executable, "-c", _CHILD), env=env)


class ModelAgentLeaks(ModelAgent):
    async def run(self, child):
        await child.send_json({"task": child.task})
        while True:
            message = await child.receive_json()
            if message.get("type") == "final":
                return str(message.get("text", ""))
            if message.get("type") == "error":
                raise child.fail("child-error", detail=str(message.get("message", "")))
'''

_ENTRY_POINT = 'acme-agent = "acme_agent:AcmeAgentProvider"\n'


def _guide_block(name: str, language: str) -> str:
    text = _GUIDE.read_text(encoding="utf-8")
    found = re.search(rf"<!-- ci: {re.escape(name)} -->\n```{language}\n(.*?)```", text, re.DOTALL)
    assert found is not None, f"no {language} block marked <!-- ci: {name} --> in {_GUIDE}"
    return found.group(1)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, kit_wheels: Path) -> Path:
    """The scaffold plus the model agent and its entry point, installed from wheels."""
    work = tmp_path_factory.mktemp("verify-configured")
    env = {"WHEELS": str(kit_wheels)}
    made = run_bash(readme_commands(KIT_README.read_text("utf-8"), "scaffold"), work, env)
    assert made.returncode == 0, made.stdout + made.stderr
    root = work / "acme-agent"
    (root / "src" / "acme_agent" / "model_agent.py").write_text(MODEL_AGENT, encoding="utf-8")
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text("utf-8")
    assert _ENTRY_POINT in text, text
    extra = 'acme-model = "acme_agent.model_agent:ModelAgent"\n'
    pyproject.write_text(text.replace(_ENTRY_POINT, _ENTRY_POINT + extra), encoding="utf-8")
    install = readme_commands((root / "README.md").read_text("utf-8"), "install-and-run")
    setup = "\n".join(ln for ln in install.splitlines() if "-m pytest" not in ln)
    done = run_bash(setup, root, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert install_problems(root / ".venv" / "bin" / "python", _FROM_WHEELS) == []
    (root / "verify.toml").write_text(_guide_block("verify-profile", "toml"), encoding="utf-8")
    return root


def _report(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "verify-report.json").read_text("utf-8"))
    return data


@pytest.mark.timeout(1800)  # the whole kit, each rule in a process of its own
def test_the_guides_profile_and_command_verify_a_configured_provider(project: Path) -> None:
    (project / "verify-report.json").unlink(missing_ok=True)
    hostile = {"PYTEST_ADDOPTS": "-p no:dsh_contract_tests -k nothing"}
    done = run_bash(_guide_block("verify-configured", "bash"), project, hostile)
    lines = (done.stdout + done.stderr).splitlines()
    out = "\n".join(lines)
    assert done.returncode == 0, out
    assert lines[-1] == (
        "dsh-contract verify PASSED acme-model (acme-agent 0.1.0, dsh-contract-tests 0.1.0): "
        "all 39 rules ran, 9 skipped by the kit"
    ), out
    report = _report(project)
    assert sorted(r["id"] for r in report["rules"]) == _KIT_IDS
    assert {r["outcome"] for r in report["rules"]} == {"passed", "skipped"}
    assert report["profile"] == {
        "model": {"wire": "chat-completions"},
        "config": {"model_url": "{model_url}", "model_key": "fake-key"},
    }
    assert report["verdict"] == "passed"


@pytest.mark.timeout(1200)
def test_a_broken_configured_provider_fails_naming_the_rule(project: Path) -> None:
    (project / "verify-report.json").unlink(missing_ok=True)
    rules = ("diagnostic:no-planted-secret", "settlement:completed", "env:overlay-reaches-child")
    argv = " ".join(f"--rule {rule}" for rule in rules)
    done = run_bash(
        ".venv/bin/python -m dsh_contract_tests verify acme_agent.model_agent:ModelAgentLeaks "
        f"--config verify.toml --report verify-report.json {argv}",
        project,
    )
    lines = (done.stdout + done.stderr).splitlines()
    out = "\n".join(lines)
    assert done.returncode == 1, out
    assert lines[-1].endswith(": 1 of 3 rules failed: diagnostic:no-planted-secret"), out
    verdicts = {r["id"]: r for r in _report(project)["rules"]}
    assert verdicts["diagnostic:no-planted-secret"]["outcome"] == "failed", out
    assert "the planted raw error" in verdicts["diagnostic:no-planted-secret"]["detail"], out
    assert verdicts["settlement:completed"]["outcome"] == "passed", out
    assert verdicts["env:overlay-reaches-child"]["outcome"] == "passed", out


def test_the_guides_plain_verify_command_is_the_kit_readmes() -> None:
    # The kit README's block is the one test_verify_run runs against the scaffold.
    readme = readme_commands(KIT_README.read_text("utf-8"), "verify")
    assert _guide_block("verify", "bash") == readme


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("profile", "refusal"),
    [
        (None, "ModelAgentConfig refuses config.model_url: Field required"),
        (
            '[model]\nwire = "chat-completions"\n'
            '[config]\nmodel_url = "{model_url}"\nmodel_key = ""\n',
            "ModelAgentConfig refuses config.model_key: String should have at least 1 character",
        ),
    ],
    ids=["no profile", "an empty key"],
)
def test_a_value_the_config_refuses_stops_the_run_naming_the_field(
    project: Path, profile: str | None, refusal: str
) -> None:
    (project / "verify-report.json").unlink(missing_ok=True)
    config = ""
    if profile is not None:
        (project / "wrong.toml").write_text(profile, encoding="utf-8")
        config = "--config wrong.toml"
    done = run_bash(
        f".venv/bin/python -m dsh_contract_tests verify acme-model {config} "
        "--report verify-report.json",
        project,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"dsh_contract_tests verify: {refusal} (a value the provider needs goes under "
        "[config] or [env] of a verify profile, --config FILE)"
    ]
    assert not (project / "verify-report.json").exists()
