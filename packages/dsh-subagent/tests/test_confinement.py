"""A provider instance's confinement: the setting, the policy a run gets, and a real run.

The runtime tests at the bottom spawn the Echo product under the default ``auto`` mode on
this kernel, so they fail if confinement is silently not applied.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from dsh_subagent import (
    COMPLETED,
    ConfinementSetting,
    Launch,
    ProductConfig,
    ProductReach,
    SubagentError,
    SubagentErrorCode,
    SubagentService,
    run_policy,
)
from dsh_subagent.confinement import RunScratch
from dsh_subagent.confinement_paths import endpoint_port, env_endpoint_ports, git_paths
from dsh_subprocess import _landlock, landlock_abi, system_read_paths
from pydantic import ValidationError
from subagent_echo import EchoConfig, EchoProvider, assert_gone, request


class _Config(ProductConfig):
    provider_name: str = "p"


# -- the setting ----------------------------------------------------------------------


def test_the_default_is_auto_with_nothing_added() -> None:
    assert _Config().confinement == ConfinementSetting(
        mode="auto", read=(), write=(), connect_ports=()
    )


def test_paths_expand_the_home_and_resolve_against_the_launch_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", "/home/someone")
    setting = ConfinementSetting(read=["~/notes", "data"], write=["/abs/out"])
    assert setting.read == ("/home/someone/notes", str(tmp_path / "data"))
    assert setting.write == ("/abs/out",)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("read", "/one/path", "must be a list of paths, not one string"),
        ("write", [""], "a path must not be empty"),
        ("connect_ports", [0], "0 is not a TCP port (1-65535)"),
        ("connect_ports", [70000], "70000 is not a TCP port (1-65535)"),
        ("connect_ports", [True], "a port must be a number, not true/false"),
        ("mode", "strict", "Input should be 'auto', 'required' or 'off'"),
        ("write", ["/"], "'/' grants the whole file system"),
        ("read", ["/usr/.."], "'/usr/..' grants the whole file system"),
        ("write", ["/tmp/a\nb"], "'/tmp/a\\nb': a path must not contain control characters"),
    ],
)
def test_a_bad_value_is_refused_naming_its_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _Config.model_validate({"confinement": {field: value}})
    [error] = caught.value.errors()
    assert error["loc"][:2] == ("confinement", field)
    assert message in error["msg"]


def test_an_unknown_key_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        ConfinementSetting.model_validate({"paths": ["/x"]})
    assert caught.value.errors()[0]["loc"] == ("paths",)


# -- the policy -----------------------------------------------------------------------


def test_off_gives_no_policy(tmp_path: Path) -> None:
    assert (
        run_policy(ConfinementSetting(mode="off"), ProductReach(), cwd=str(tmp_path), env={})
        is None
    )


def test_the_policy_is_system_product_cwd_private_dirs_and_extras(tmp_path: Path) -> None:
    setting = ConfinementSetting(read=["/opt/extra"], write=["/srv/out"], connect_ports=[8443])
    reach = ProductReach(read=("/opt/product",), write=("/p/home",), connect_ports=(443, 8443))
    env: dict[str, str | None] = {
        "HOME": "/run/h",
        "TMPDIR": "/run/t",
        "CODEX_HOME": "relative/ignored",  # not absolute: not one of the run's directories
        "OTHER": "/not/a/directory/variable",
        "XDG_CACHE_HOME": None,
    }
    policy = run_policy(setting, reach, cwd=str(tmp_path), env=env)
    assert policy is not None
    assert policy.mode == "auto"
    assert policy.read == (*system_read_paths(), "/opt/product", "/opt/extra")
    assert policy.write == (str(tmp_path), "/run/h", "/run/t", "/p/home", "/srv/out")
    assert policy.connect_ports == (443, 8443)


def test_an_inherited_home_is_never_granted(tmp_path: Path) -> None:
    # Only the instance's own env overlay names the run's directories; the host's HOME
    # (the user's real home) is not in the overlay, so it is not in the policy.
    policy = run_policy(ConfinementSetting(), ProductReach(), cwd=str(tmp_path), env={})
    assert policy is not None
    assert os.path.expanduser("~") not in (*policy.read, *policy.write)
    assert policy.write == (str(tmp_path),)


def test_a_read_only_product_reads_its_cwd_without_writing_it(tmp_path: Path) -> None:
    reach = ProductReach(cwd_writable=False)
    policy = run_policy(ConfinementSetting(), reach, cwd=str(tmp_path), env={})
    assert policy is not None
    assert str(tmp_path) in policy.read
    assert str(tmp_path) not in policy.write


def test_a_linked_worktree_writes_its_git_dir_and_reads_the_common_one(tmp_path: Path) -> None:
    common = tmp_path / "repo" / ".git"
    private = common / "worktrees" / "run-1"
    private.mkdir(parents=True)
    (private / "commondir").write_text("../..\n", encoding="utf-8")
    tree = tmp_path / "trees" / "run-1"
    (tree / "pkg").mkdir(parents=True)
    (tree / ".git").write_text(f"gitdir: {private}\n", encoding="utf-8")
    assert git_paths(str(tree)) == ([str(common)], [str(private)])
    # A cwd below the worktree's top also reads the top (git scans the whole tree).
    assert git_paths(str(tree / "pkg")) == ([str(tree), str(common)], [str(private)])


def test_a_cwd_below_a_repository_reads_its_top_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "src").mkdir()
    assert git_paths(str(tmp_path / "repo" / "src")) == ([str(tmp_path / "repo")], [])
    assert git_paths(str(tmp_path / "repo")) == ([], [])


@pytest.mark.parametrize(
    ("url", "port"),
    [
        ("http://127.0.0.1:8123/v1", 8123),
        ("https://api.example.com", 443),
        ("http://localhost/", 80),
        ("not a url", None),
        ("http://host:99999/", None),
    ],
)
def test_an_endpoint_url_names_its_port(url: str, port: int | None) -> None:
    assert endpoint_port(url) == port


def test_base_url_variables_name_the_endpoint_ports() -> None:
    env: dict[str, str | None] = {
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9000",
        "openai_base_url": "https://x.example",
        "UNRELATED_URL": "http://127.0.0.1:1",
        "GONE_BASE_URL": None,
    }
    assert env_endpoint_ports(env) == {9000, 443}


def test_a_private_tmpdir_is_made_only_when_confined_without_one(tmp_path: Path) -> None:
    assert RunScratch.make(ConfinementSetting(mode="off"), {}).path is None
    assert RunScratch.make(ConfinementSetting(), {"TMPDIR": str(tmp_path)}).path is None
    scratch = RunScratch.make(ConfinementSetting(), {"TMPDIR": None})
    assert scratch.path is not None
    assert os.path.isdir(scratch.path)
    assert scratch.env == {"TMPDIR": scratch.path}
    scratch.remove()
    scratch.remove()  # idempotent
    assert not os.path.exists(scratch.path)


def test_the_scratch_of_a_host_killed_outright_is_removed_by_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host killed with SIGKILL cannot remove its run's scratch: the next confined
    start in the same temporary directory does, and never a live host's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal, tempfile, sys\n"
            f"tempfile.tempdir = {str(tmp_path)!r}\n"
            "from dsh_subagent import ConfinementSetting\n"
            "from dsh_subagent.confinement import RunScratch\n"
            "scratch = RunScratch.make(ConfinementSetting(), {})\n"
            "open(os.path.join(scratch.path, 'work.txt'), 'w').write('left')\n"
            "print(scratch.path, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL
    orphan = Path(killed.stdout.strip())
    assert orphan.parent == tmp_path
    assert orphan.is_dir()
    live = RunScratch.make(ConfinementSetting(), {})
    assert live.path is not None
    assert not orphan.exists()
    again = RunScratch.make(ConfinementSetting(), {})  # this host's own scratch stays
    assert again.path is not None
    assert os.path.isdir(live.path)
    live.remove()
    again.remove()


# -- a real run -----------------------------------------------------------------------

needs_landlock = pytest.mark.skipif(
    landlock_abi() == 0, reason="this kernel offers no Landlock (the simulated case is below)"
)


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    key = outside / "id_rsa"
    key.write_text("PLANTED-KEY", encoding="utf-8")
    (tmp_path / "work").mkdir()
    return key


async def _answer(provider: EchoProvider, task: str, cwd: Path) -> str:
    async with SubagentService() as service:
        service.register_provider(provider)
        run = await service.start(provider.name, request(task, str(cwd)))
        result = await run.result()
        await run.dispose()
    assert result.stop_reason == COMPLETED, result.diagnostic
    assert_gone(provider)
    return result.text


@needs_landlock
@pytest.mark.anyio
async def test_by_default_a_product_cannot_read_outside_its_reach(
    planted: Path, tmp_path: Path
) -> None:
    answer = await _answer(EchoProvider(EchoConfig()), f"reach {planted}", tmp_path / "work")
    assert answer == "denied EACCES"


@pytest.mark.anyio
async def test_off_and_an_added_read_path_let_it_read(planted: Path, tmp_path: Path) -> None:
    off = EchoProvider(EchoConfig(confinement=ConfinementSetting(mode="off")))
    assert await _answer(off, f"reach {planted}", tmp_path / "work") == "PLANTED-KEY"
    added = EchoProvider(EchoConfig(confinement=ConfinementSetting(read=[str(planted.parent)])))
    assert await _answer(added, f"reach {planted}", tmp_path / "work") == "PLANTED-KEY"


@needs_landlock
@pytest.mark.anyio
async def test_a_confined_run_gets_a_private_tmpdir_removed_with_its_tree(tmp_path: Path) -> None:
    where = await _answer(EchoProvider(EchoConfig()), "tmpdir", tmp_path)
    assert os.path.basename(where).startswith("dsh-run-")
    assert not Path(where).exists()  # noqa: ASYNC240 - the run is over; one stat


@pytest.mark.anyio
async def test_required_without_landlock_refuses_before_any_spawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_landlock, "abi", lambda: 0)  # a kernel without Landlock
    provider = EchoProvider(EchoConfig(confinement=ConfinementSetting(mode="required")))
    async with SubagentService() as service:
        service.register_provider(provider)
        with pytest.raises(SubagentError) as caught:
            await service.start("echo", request("answer x", str(tmp_path)))
    assert caught.value.code == SubagentErrorCode.UNSUPPORTED_CAPABILITY
    assert caught.value.message == (
        "subagent-echo: confinement is required but this kernel offers no Landlock: "
        "nothing was started"
    )
    assert provider.spawned == []


@pytest.mark.anyio
async def test_auto_without_landlock_runs_unconfined(
    planted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_landlock, "abi", lambda: 0)
    answer = await _answer(EchoProvider(EchoConfig()), f"reach {planted}", tmp_path / "work")
    assert answer == "PLANTED-KEY"


class _HomedConfig(EchoConfig):
    home: str = ""


class _HomedEcho(EchoProvider):
    """A product that keeps state in a home its provider names (as Codex's
    ``CODEX_HOME``, by default ``~/.codex``), which a fresh account does not have yet."""

    Config = _HomedConfig

    def confinement_reach(
        self, launch: Launch, env: Mapping[str, str | None], cwd: str
    ) -> ProductReach:
        home = self.config.home if isinstance(self.config, _HomedConfig) else ""
        base = super().confinement_reach(launch, env, cwd)
        return ProductReach(read=base.read, write=(home,))


@needs_landlock
@pytest.mark.anyio
async def test_a_confined_first_run_gets_its_missing_product_home_made_private(
    tmp_path: Path,
) -> None:
    """A fresh account: the home's parent (the user's home) is not writable when
    confined, so the runtime makes the granted home before the start."""
    home = tmp_path / "account" / ".product"
    (tmp_path / "account").mkdir()
    provider = _HomedEcho(_HomedConfig(home=str(home)))
    assert await _answer(provider, f"home {home}", tmp_path / "account") == "made"
    assert (home / "state").is_dir()
    assert home.stat().st_mode & 0o777 == 0o700


@pytest.mark.anyio
async def test_an_unconfined_run_leaves_its_product_home_to_the_product(tmp_path: Path) -> None:
    home = tmp_path / "account" / ".product"
    (tmp_path / "account").mkdir()
    setting = ConfinementSetting(mode="off")
    provider = _HomedEcho(_HomedConfig(home=str(home), confinement=setting))
    assert await _answer(provider, f"home {home}", tmp_path / "account") == "made"
    assert home.stat().st_mode & 0o777 == 0o777 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
