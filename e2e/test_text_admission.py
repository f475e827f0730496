"""Text no product can read is refused at admission, the same for every provider.

For any ``str`` (surrogates included), each shipped provider behind a
:class:`~dsh_subagent.SubagentService` either refuses the task before anything is
spawned (``INVALID_REQUEST`` naming ``prompt``, the text never repeated) or goes on to
spawn its product. The spawn is a double here (it records the call and fails), so the
property covers many examples without starting a product. The real Codex, which never
answered such a request (the run waited forever), is driven through the real ``dsh``
executable at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from dsh_contract_tests.fixtures.keyless_profile import (
    AMBIENT_MODEL_VARIABLES,
    KeylessProducts,
    keyless_products,
)
from dsh_example_provider import ExampleConfig, ExampleProvider
from dsh_subagent import (
    ParentContext,
    ProductConfig,
    ProductProvider,
    ProductStartError,
    SubagentError,
    SubagentErrorCode,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    is_utf8_text,
)
from dsh_subagent_acp import AcpConfig, AcpProvider
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess import ManagedProcess, SpawnSpec, StderrObserver
from dsh_subprocess.testing import ProcessWatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

DSH = Path(sys.executable).with_name("dsh")
ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=40)


class _SpawnRefused(OSError):
    """The double's spawn: recorded, then failed (the runtime reports spawn-failed)."""


def _counting(cls: type[ProductProvider[ProductConfig]], spawns: list[str]) -> type:
    async def spawn(
        self: ProductProvider[ProductConfig], spec: SpawnSpec, stderr_observer: StderrObserver
    ) -> ManagedProcess:
        spawns.append(self.name)
        raise _SpawnRefused("spawn double")

    return type(f"Counting{cls.__name__}", (cls,), {"spawn": spawn})


def _providers(home: Path, spawns: list[str]) -> list[ProductProvider[ProductConfig]]:
    made: list[tuple[type[ProductProvider[ProductConfig]], Callable[[], ProductConfig]]] = [
        (CodexProvider, lambda: CodexConfig(env={"CODEX_HOME": str(home)})),  # type: ignore[list-item]
        (ClaudeCodeProvider, lambda: ClaudeCodeConfig(env={"CLAUDE_CONFIG_DIR": str(home)})),  # type: ignore[list-item]
        (AcpProvider, lambda: AcpConfig(command=sys.executable)),  # type: ignore[list-item]
        (ExampleProvider, lambda: ExampleConfig()),  # type: ignore[list-item]
    ]
    return [_counting(cls, spawns)(config()) for cls, config in made]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("home")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=ANY_TEXT)
def test_every_provider_refuses_text_utf8_cannot_encode_before_anything_spawns(
    text: str, home: Path
) -> None:
    spawns: list[str] = []
    providers = _providers(home, spawns)
    encodable = is_utf8_text(text)
    outcomes: dict[str, BaseException] = {}

    async def main() -> None:
        async with SubagentService() as service:
            for provider in providers:
                service.register_provider(provider)
            for provider in providers:
                request = SubagentStartRequest(
                    prompt=(TextBlock(text=text),),
                    parent=ParentContext(session_id="s", cwd=str(home)),
                )
                try:
                    run = await service.start(provider.name, request)
                except SubagentError as exc:
                    outcomes[provider.name] = exc
                else:  # pragma: no cover - the spawn double never lets a run publish
                    await run.dispose()
                    pytest.fail(f"{provider.name}: a run was published")

    anyio.run(main)
    names = [provider.name for provider in providers]
    assert sorted(outcomes) == sorted(names)
    for name, error in outcomes.items():
        assert isinstance(error, SubagentError)
        if not encodable:
            assert error.code is SubagentErrorCode.INVALID_REQUEST, name
            assert 'request field "prompt" is not valid UTF-8 text' in error.message, name
            assert is_utf8_text(error.message)
            assert text not in error.message or not text.strip()
        elif text.strip():
            assert isinstance(error, ProductStartError), name  # admitted: the spawn was tried
            assert "spawn-failed" in error.message, name
        else:
            assert error.code is SubagentErrorCode.INVALID_REQUEST, name  # blank task
    assert spawns == (names if encodable and text.strip() else [])


# -- the real Codex, through the real dsh executable -------------------------------------


@pytest.fixture
def products(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KeylessProducts]:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    with keyless_products(tmp_path, claude_answer="UNUSED") as running:
        yield running


def _dsh_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("HOME", "TMPDIR"):
        path = root / f"dsh-{name.lower()}"
        path.mkdir(exist_ok=True)
        env[name] = str(path)
    return env


@pytest.mark.keyless
@pytest.mark.parametrize("via", ["argument", "stdin"])
def test_dsh_run_refuses_an_undecodable_byte_for_the_real_codex_instead_of_hanging(
    products: KeylessProducts, tmp_path: Path, via: str
) -> None:
    # Before the refusal, Codex logged "lone leading surrogate" and never answered: the
    # run waited forever. The bound on this call is what would catch a hang here again.
    task = b"fix \xff this"
    argv: list[str | bytes] = [str(DSH), "run", str(products.profile), "subagent_codex"]
    argv += [task if via == "argument" else "-", "--cwd", str(products.workspace)]
    watch = ProcessWatch()
    done = subprocess.run(
        argv,
        input=task if via == "stdin" else b"",
        env={**_dsh_env(tmp_path), "LC_ALL": "C.UTF-8"},
        capture_output=True,
        timeout=120,
        check=False,
    )
    stderr = done.stderr.decode("utf-8")
    assert done.returncode == 2, stderr
    assert stderr.splitlines() == [
        "dsh: error: the task is not valid UTF-8 text (it holds an undecodable byte); "
        "a product cannot read it, so nothing was started"
    ]
    assert done.stdout == b""
    assert products.codex_model.requests == ()
    assert watch.kill_leftovers() == []
