"""Helpers for tests of isolated delegations: a private git home and a scratch repository.

For a host's own tests (and ours): :class:`EditingProvider` is a provider double that
edits its run's cwd, :func:`private_git_env` gives the environment that
keeps git's global configuration and the default worktree root inside a temporary
directory, :func:`scratch_repository` makes a committed repository there, and
:func:`git_out` runs git for a test's setup or inspection. Nothing here touches the real
home.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import anyio
from dsh_subagent import ResolvedSubagentStartRequest, SubprocessRunHandle, TextBlock
from dsh_subagent.testing import Script, ScriptedProvider
from pydantic import BaseModel, ConfigDict

__all__ = [
    "EditingConfig",
    "EditingProvider",
    "git_out",
    "private_git_env",
    "scratch_repository",
]


def git_out(cwd: Path | str, *args: str) -> str:
    """Run ``git <args>`` in ``cwd``; its stdout, stripped.

    Raises:
        subprocess.CalledProcessError: git failed.
    """
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def private_git_env(home: Path) -> dict[str, str]:
    """Variables that keep git and dsh-worktree inside ``home`` (created if missing).

    Writes ``home/.gitconfig`` (a test identity; ``main`` as the initial branch) and
    returns ``HOME``, ``XDG_CACHE_HOME`` (so the default worktree root is below
    ``home``), ``GIT_CONFIG_GLOBAL`` and ``GIT_CONFIG_NOSYSTEM`` to set, e.g. with
    ``monkeypatch.setenv``.
    """
    home.mkdir(parents=True, exist_ok=True)
    config = home / ".gitconfig"
    config.write_text(
        "[user]\n\tname = Test User\n\temail = test@example.invalid\n"
        "[init]\n\tdefaultBranch = main\n",
        encoding="utf-8",
    )
    return {
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "GIT_CONFIG_GLOBAL": str(config),
        "GIT_CONFIG_NOSYSTEM": "1",
    }


def scratch_repository(
    root: Path, files: Mapping[str, str] | None = None, *, message: str = "initial"
) -> Path:
    """A new repository at ``root`` holding ``files`` (path → text) in one commit.

    Default files: ``readme.txt``. Run it with :func:`private_git_env` in effect, or
    with a git identity configured otherwise.
    """
    root.mkdir(parents=True, exist_ok=True)
    git_out(root, "init", "--quiet")
    for name, text in (files if files is not None else {"readme.txt": "hello\n"}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    git_out(root, "add", "--all")
    git_out(root, "commit", "--quiet", "-m", message)
    return root


class EditingConfig(BaseModel):
    """:class:`EditingProvider`'s configuration (a profile row: ``type = "editing"``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    provider_name: str = "editing"
    cwd: str | None = None


class EditingProvider(ScriptedProvider):
    """Writes ``edited.txt`` (the task's text) into its run's cwd, then answers ``done``.

    Register it for profiles with ``StaticDiscovery({"editing": [EditingProvider]})``.
    """

    Config: ClassVar[type[EditingConfig]] = EditingConfig

    def __init__(self, config: EditingConfig | None = None) -> None:
        self.config = config if config is not None else EditingConfig()
        super().__init__(self.config.provider_name, [Script(output=(TextBlock(text="done"),))])

    async def start(self, request: ResolvedSubagentStartRequest) -> SubprocessRunHandle:
        """Edit the run's cwd, then run the scripted answer."""
        assert request.parent.cwd is not None
        await anyio.Path(request.parent.cwd, "edited.txt").write_text(
            f"{request.prompt[0].text}\n", encoding="utf-8"
        )
        return await super().start(request)
