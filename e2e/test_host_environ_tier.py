"""A product cannot read its host's environment through /proc (Linux, no confinement).

The host (``dsh run``, ``dsh batch``, ``dsh mcp``, or a library host) holds two planted
secrets in its own environment, under the names a user's shell has them
(``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``): dsh scrubs them from the product's
environment. The loopback model then scripts one shell tool call in the REAL product
(Codex app-server, Claude Code CLI, codex-acp) that scans every readable
``/proc/*/environ`` and ``/proc/*/cmdline`` for them; its output is the next model
request. The products run in the modes people choose for unattended work (Codex
``danger-full-access``, Claude Code ``bypassPermissions``), so nothing but the host's own
setting stands between the scan and the host.

Every host and product runs without capabilities (``unprivileged``): root's
``CAP_SYS_PTRACE`` reads a not-dumpable process anyway, and an ordinary user has none.
The library host without :func:`dsh_subprocess.protect_host_process` is the twin that
shows the leak (so every clean scan here can fail), and it logs dsh's warning.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types as types
import pytest
from acp_agent import codex_acp_or_skip
from dsh_contract_tests.fixtures import messages, responses
from dsh_contract_tests.fixtures.keyless_profile import AMBIENT_MODEL_VARIABLES
from dsh_subprocess.testing import ProcessWatch
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from unprivileged import unprivileged

pytestmark = [
    pytest.mark.keyless,
    pytest.mark.skipif(sys.platform != "linux", reason="Linux: /proc and not dumpable"),
]

DSH = Path(sys.executable).with_name("dsh")
HOST = str(Path(__file__).with_name("host_environ_host.py"))
TASK = "Run the scan, then answer."
ANSWER = "HOST-ENVIRON-ANSWER"
TOOL = "subagent"
PLANTED = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
# This tier is the half of the promise that holds without confinement (a kernel without
# Landlock, or confinement switched off): the confined half is e2e/test_confinement_tier.py.
UNCONFINED = {"mode": "off"}
# Every readable environ and cmdline, searched for any planted value (the pattern never
# matches its own text); then how many environ files the scan could read at all.
SCAN = (
    "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done "
    "2>/dev/null | grep -o 'dsh-planted-[0-9a-f]\\{32\\}' | sort -u; "
    "n=0; for f in /proc/[0-9]*/environ; do cat $f >/dev/null 2>&1 && n=$((n+1)); done; "
    "echo SCAN-DONE readable=$n"
)
SCANNED = re.compile(rb"SCAN-DONE readable=(\d+)")
ACP_MODEL = "gpt-5.4-mini"  # a slug codex-acp knows
DEADLINE = 240.0  # a generous failure deadline, never a timing

Product = Literal["codex", "claude-code", "acp"]
PRODUCTS: tuple[Product, ...] = ("codex", "claude-code", "acp")


def _codex_shell(command: str) -> responses.FunctionCall:
    # Versions advertise different shell tools; the fixture calls whichever is offered.
    return responses.FunctionCall(
        (
            ("exec_command", {"cmd": command}),
            ("shell_command", {"command": command}),
            ("shell", {"command": ["/bin/sh", "-c", command]}),
        )
    )


@dataclass
class Setup:
    """One real product wired to its loopback model, with the scan and answer scripted."""

    product: Product
    root: Path
    workspace: Path
    config: dict[str, Any]
    bodies: Callable[[], list[bytes]]
    secret: str = field(default_factory=lambda: f"dsh-planted-{uuid.uuid4().hex}")

    def host_env(self) -> dict[str, str]:
        """This process's environment, the planted secrets added (a user's shell)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
        for name in AMBIENT_MODEL_VARIABLES:
            env.pop(name, None)
        env.update(dict.fromkeys(PLANTED, self.secret))
        env.update(HOME=str(self.root / "user-home"), TMPDIR=str(self.root / "user-tmp"))
        return env

    def profile(self) -> Path:
        """A profile with one instance of the product behind the tool ``subagent``."""
        lines = ["[[providers]]", f'type = "{self.product}"', 'provider_name = "p"']
        lines.append("[providers.config]")
        for key, value in self.config.items():
            if isinstance(value, dict):
                pairs = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items())
                lines.append(f"{key} = {{ {pairs} }}")
            else:
                lines.append(f"{key} = {json.dumps(value)}")
        lines += [
            "",
            "[[tools]]",
            f'name = "{TOOL}"',
            'provider = "p"',
            'background_mode = "disabled"',
        ]
        path = self.root / "profile.toml"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    def check_scan(self) -> bool:
        """Whether the scan's output reached the model holding the secret; fails if it never ran."""
        bodies = self.bodies()
        counts = [int(m.group(1)) for body in bodies for m in SCANNED.finditer(body)]
        assert counts, f"the scan's output never reached the model: {bodies!r}"
        assert max(counts) > 0, "the scan read no environ at all (not even its own)"
        return any(self.secret.encode() in body for body in bodies)


@pytest.fixture
def setup_for(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[Product], Setup]]:
    fixtures: list[responses.ResponsesFixture | messages.MessagesFixture] = []

    def make(product: Product) -> Setup:
        root = tmp_path / "run"
        workspace = root / "workspace"
        for directory in (workspace, root / "user-home", root / "user-tmp"):
            directory.mkdir(parents=True)
        if product == "claude-code":
            claude = messages.MessagesFixture(default=messages.TextAnswer(ANSWER))
            claude.start()
            fixtures.append(claude)
            claude.enqueue(messages.ToolUse("Bash", {"command": SCAN}), messages.TextAnswer(ANSWER))
            home = messages.keyless_claude_home(root / "claude", claude.base_url)
            env = {k: v for k, v in home.env.items() if v is not None}
            env["IS_SANDBOX"] = "1"  # the CLI refuses the bypass as root outside a sandbox
            return Setup(
                product,
                root,
                workspace,
                {"env": env, "permission_mode": "bypassPermissions", "confinement": UNCONFINED},
                lambda: [r.raw_body for r in claude.message_requests()],
            )
        codex = responses.ResponsesFixture()
        codex.start()
        fixtures.append(codex)
        codex.enqueue(_codex_shell(SCAN), responses.PlainAnswer(ANSWER, "final_answer"))
        codex_env = responses.codex_keyless_env(root / "codex")
        # The bypass mode unattended work uses: only the host's own setting is tested.
        model = ACP_MODEL if product == "acp" else responses.DEFAULT_FIXTURE_MODEL
        responses.write_codex_config(
            codex_env["CODEX_HOME"], codex.base_url, model=model, sandbox_mode="danger-full-access"
        )
        config: dict[str, Any] = {"env": codex_env, "confinement": UNCONFINED}
        if product == "acp":
            codex_env["RUST_LOG"] = "warn"
            config.update(
                command=request.getfixturevalue("codex_acp"),
                args=["-c", "features.shell_snapshot=false"],
            )
        return Setup(product, root, workspace, config, lambda: [r.raw_body for r in codex.requests])

    try:
        yield make
    finally:
        for fixture in fixtures:
            fixture.close()


@pytest.fixture(scope="module")
def codex_acp() -> str:
    return codex_acp_or_skip()


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        unprivileged(argv), env=env, cwd=cwd, capture_output=True, text=True, timeout=DEADLINE
    )


@pytest.mark.parametrize("product", PRODUCTS)
def test_dsh_run_keeps_its_environment_from_the_product(
    product: Product, setup_for: Callable[[Product], Setup]
) -> None:
    setup = setup_for(product)
    with ProcessWatch() as watch:
        done = _run(
            [str(DSH), "run", str(setup.profile()), TOOL, TASK, "--cwd", str(setup.workspace)],
            setup.host_env(),
            setup.root,
        )
    assert (done.returncode, done.stdout) == (0, ANSWER + "\n"), done.stderr
    assert not setup.check_scan(), "the product read dsh's environment"
    assert "can read its environment" not in done.stderr  # dsh protects itself: no warning
    assert watch.alive() == []


def test_dsh_keep_dumpable_gives_the_debugger_back_and_the_product_the_environment(
    setup_for: Callable[[Product], Setup],
) -> None:
    """``DSH_KEEP_DUMPABLE=1`` (docs/cli.md) is the twin of the test above: it can fail."""
    setup = setup_for("codex")
    done = _run(
        [str(DSH), "run", str(setup.profile()), TOOL, TASK, "--cwd", str(setup.workspace)],
        {**setup.host_env(), "DSH_KEEP_DUMPABLE": "1"},
        setup.root,
    )
    assert (done.returncode, done.stdout) == (0, ANSWER + "\n"), done.stderr
    assert setup.check_scan(), "dsh kept dumpable, yet its secret never reached the model"


def test_dsh_batch_keeps_its_environment_from_the_product(
    setup_for: Callable[[Product], Setup],
) -> None:
    setup = setup_for("codex")
    tasks = setup.root / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t1", "task": TASK}) + "\n", encoding="utf-8")
    out = setup.root / "results.jsonl"
    argv = [str(DSH), "batch", str(setup.profile()), TOOL, str(tasks), "--out", str(out)]
    with ProcessWatch() as watch:
        done = _run([*argv, "--cwd", str(setup.workspace)], setup.host_env(), setup.root)
    assert done.returncode == 0, done.stderr
    (record,) = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert (record["stop_reason"], record["answer"]) == ("completed", ANSWER), record
    assert not setup.check_scan(), "the product read dsh batch's environment"
    assert watch.alive() == []


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_dsh_mcp_keeps_its_environment_from_the_product(
    setup_for: Callable[[Product], Setup],
) -> None:
    setup = setup_for("codex")
    argv = unprivileged(
        [str(DSH), "mcp", str(setup.profile()), "--workspace", str(setup.workspace)]
    )
    params = StdioServerParameters(
        command=argv[0], args=argv[1:], env=setup.host_env(), cwd=str(setup.root)
    )
    with ProcessWatch() as watch:
        with anyio.fail_after(DEADLINE):
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                result = await session.call_tool(TOOL, {"description": "scan", "prompt": TASK})
        alive = watch.wait_gone(10.0)
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    assert (block.text, result.is_error) == (ANSWER, False)
    assert not setup.check_scan(), "the product read dsh mcp's environment"
    assert alive == []


@pytest.mark.parametrize("protect", [True, False], ids=["opt-in", "no-opt-in"])
@pytest.mark.parametrize("product", PRODUCTS)
def test_a_library_host_is_read_unless_it_opts_in(
    product: Product, protect: bool, setup_for: Callable[[Product], Setup]
) -> None:
    setup = setup_for(product)
    spec = setup.root / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "type": product,
                "config": setup.config,
                "workspace": str(setup.workspace),
                "task": TASK,
                "protect": protect,
            }
        ),
        encoding="utf-8",
    )
    with ProcessWatch() as watch:
        done = _run([sys.executable, HOST, str(spec)], setup.host_env(), setup.root)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"stop_reason": "completed", "text": ANSWER}
    warned = [line for line in done.stderr.splitlines() if "can read its environment" in line]
    if protect:
        assert not setup.check_scan(), "the product read the protected host's environment"
        assert warned == []
    else:
        assert setup.check_scan(), "the unprotected host's secret never reached the model"
        assert len(warned) == 1, done.stderr
        assert "dsh_subprocess.protect_host_process()" in warned[0]
    assert watch.alive() == []
