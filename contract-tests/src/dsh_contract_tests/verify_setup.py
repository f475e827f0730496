"""What a verify child sets up for the provider: its factory and its loopback model fixture.

The verify run's generated test module builds the provider with
:func:`provider_factory_for` from the verify profile
(:mod:`dsh_contract_tests.verify_profile`) and, when the profile has a ``[model]``,
starts :func:`running_model` in each rule's process; the author's own test code is not
involved. The fixture answers by the kit directive in each
request (:mod:`dsh_contract_tests.routes`), answers ``fail`` with the run's planted raw
error, and tells the kit when a ``hold`` run is working: once it holds a request that
carries the run's token. Before any rule, the verify parent runs :func:`check_config` in
a process of its own (``python -m dsh_contract_tests.verify_setup``).
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Protocol

import anyio
from dsh_subagent import SubagentProvider
from pydantic import ValidationError

from dsh_contract_tests.fixtures.chat_completions import ChatCompletionsFixture
from dsh_contract_tests.fixtures.messages import MessagesFixture, keyless_claude_home
from dsh_contract_tests.fixtures.responses import (
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_contract_tests.routes import (
    LoopbackDirectiveRoute,
    MessagesDirectiveRoute,
    ResponsesDirectiveRoute,
)
from dsh_contract_tests.scenario import ChildSetup, ProductHome, ProviderFactory
from dsh_contract_tests.verify_profile import ModelNeed, VerifyProfile, substitute

__all__ = [
    "RunningModel",
    "check_config",
    "config_values",
    "provider_factory_for",
    "running_model",
]

_KEPT_REQUESTS = 512
"""Requests the Responses and Messages fixtures keep (one rule's runs send far fewer). The
Chat Completions fixture has no such bound; it lives only as long as one rule's process."""


class _Route(Protocol):
    error_text: str


class RunningModel:
    """One started fixture: its URL, the product home it needs, whether a run holds."""

    def __init__(
        self,
        need: ModelNeed,
        fixture: ResponsesFixture | MessagesFixture | ChatCompletionsFixture,
        route: _Route,
    ) -> None:
        self.need = need
        self._fixture = fixture
        self._route = route

    @property
    def base_url(self) -> str:
        """The fixture's base URL (what ``{model_url}`` stands for)."""
        return self._fixture.base_url

    def _bodies(self) -> list[bytes]:
        fixture = self._fixture
        requests = fixture.requests() if isinstance(fixture, MessagesFixture) else fixture.requests
        return [request.raw_body for request in requests]

    def holds(self, token: str) -> bool:
        """Whether a request carrying ``token`` is being held right now."""
        return bool(self._fixture.holding) and any(token.encode() in b for b in self._bodies())

    async def wait_holding(self, token: str) -> None:
        """Return once a request carrying ``token`` is held (the kit bounds the wait)."""
        # Polling: the fixture serves from threads and cannot set an anyio event.
        while not self.holds(token):  # noqa: ASYNC110
            await anyio.sleep(0.02)

    def describe(self, token: str) -> str:
        """The wait of :meth:`wait_holding`, in words."""
        return f"the loopback {self.need.wire} model fixture to hold a request carrying {token}"

    def prepare(self, setup: ChildSetup, overlay: dict[str, str | None]) -> dict[str, str | None]:
        """Point this run at the fixture: its planted error text, and ``overlay`` laid
        over the product home's variables (when the profile names a home) the way the
        in-repo kit runs of Codex and Claude Code do."""
        self._route.error_text = setup.error_text
        if self.need.home == "codex":
            env = codex_keyless_env(setup.scratch, codex_home=setup.home.codex_home)
            write_codex_config(setup.home.codex_home, self.base_url)
            return {**env, **overlay}
        if self.need.home == "claude-code":
            home = keyless_claude_home(setup.scratch, self.base_url)
            merged: dict[str, str | None] = {**home.env, **overlay}
            merged["CLAUDE_CONFIG_DIR"] = str(home.config_dir)  # settings.json lives there
            return merged
        return overlay


@contextmanager
def running_model(need: ModelNeed | None) -> Iterator[RunningModel | None]:
    """Start the fixture ``need`` asks for (nothing for ``None``); closed on exit."""
    if need is None:
        yield None
        return
    with ExitStack() as stack:
        if need.wire == "responses":
            responses_route = ResponsesDirectiveRoute()
            fixture: ResponsesFixture | MessagesFixture | ChatCompletionsFixture = (
                stack.enter_context(
                    ResponsesFixture(route=responses_route, keep_requests=_KEPT_REQUESTS)
                )
            )
            route: _Route = responses_route
        elif need.wire == "messages":
            messages_route = MessagesDirectiveRoute()
            fixture = stack.enter_context(
                MessagesFixture(route=messages_route, keep_requests=_KEPT_REQUESTS)
            )
            route = messages_route
        else:
            loopback_route = LoopbackDirectiveRoute()
            fixture = stack.enter_context(ChatCompletionsFixture(route=loopback_route))
            route = loopback_route
        yield RunningModel(need, fixture, route)


def _load(spec: str) -> type[SubagentProvider]:
    module_name, _, attr = spec.partition(":")
    loaded: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        loaded = getattr(loaded, part)
    if not isinstance(loaded, type) or not issubclass(loaded, SubagentProvider):
        raise TypeError(f"{spec} is {loaded!r}, not a SubagentProvider subclass")
    return loaded


def config_values(
    profile: VerifyProfile, model: RunningModel | None, setup: ChildSetup
) -> dict[str, Any]:
    """The profile's ``[config]`` values with ``env``: its ``[env]`` under the kit's overlay
    (what the factory builds from, and what the loader rule validates)."""
    url = None if model is None else model.base_url
    values: dict[str, Any] = {k: substitute(v, url) for k, v in profile.config.items()}
    extra = {k: str(substitute(v, url)) for k, v in profile.env.items()}
    values["env"] = {**extra, **setup.env}
    return values


def provider_factory_for(
    spec: str, profile: VerifyProfile | None = None, model: RunningModel | None = None
) -> ProviderFactory:
    """The factory of a verify run: the provider ``module:Class`` built from its ``Config``
    with :func:`config_values`, the model fixture's product home under the env overlay,
    and the cwd override when the kit sets one.

    The provider's module is imported on the first call, inside a rule, never earlier.
    """
    need = profile or VerifyProfile()

    def make(setup: ChildSetup) -> SubagentProvider:
        cls: Any = _load(spec)
        config = config_values(need, model, setup)
        if model is not None:
            config["env"] = model.prepare(setup, config["env"])
        if setup.cwd_override is not None:
            config["cwd"] = setup.cwd_override
        provider: SubagentProvider = cls(cls.Config.model_validate(config))
        return provider

    return make


def _check_setup(root: Path) -> ChildSetup:
    """A setup like a rule's (temporary product homes under ``root``) for the check."""
    home = ProductHome(root / "home", root / "codex-home", root / "claude", root / "tmp")
    for path in (home.home, home.codex_home, home.claude_config_dir, home.tmpdir):
        path.mkdir(parents=True, exist_ok=True)
    (root / "scratch").mkdir(exist_ok=True)
    return ChildSetup(home.env(), None, home, root / "ready", root / "scratch", "check", "check")


def check_config(spec: str, profile: VerifyProfile, root: Path) -> str | None:
    """Why the provider's ``Config`` refuses the profile's values, in one line naming the
    field (``None`` when it accepts them): run once before any rule, in a process of its
    own, so a wrong or missing value stops the verify run instead of failing every rule.
    The values are the ones a rule's factory builds (the model fixture runs, the product
    home is written under ``root``).

    A provider that cannot be loaded here gets ``None``: the rules run and each fails
    under its own id, as without this check (a module may load only under pytest)."""
    try:
        cls: Any = _load(spec)
        config_class: Any = cls.Config
    except Exception:
        return None  # a module that loads only under pytest is judged by the rules alone
    setup = _check_setup(root)
    with running_model(profile.model) as model:
        values = config_values(profile, model, setup)
        if model is not None:
            values["env"] = model.prepare(setup, values["env"])
        try:
            config_class.model_validate(values)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            table = "" if where.startswith("env") else "config."
            return f"{config_class.__name__} refuses {table}{where}: {error['msg']}"
        except Exception:
            return None
    return None


def _check_main(argv: list[str]) -> int:
    """``python -m dsh_contract_tests.verify_setup SPEC PROFILE RESULT``: :func:`check_config`
    of the verify parent (homes next to ``RESULT``), its answer written there as JSON."""
    spec, profile_path, result_path = argv
    with open(profile_path, encoding="utf-8") as profile_file:
        profile = VerifyProfile.model_validate_json(profile_file.read())
    refusal = check_config(spec, profile, Path(result_path).parent / "config-check")
    with open(result_path, "w", encoding="utf-8") as result:
        json.dump({"refusal": refusal}, result)
    return 0


if __name__ == "__main__":
    sys.exit(_check_main(sys.argv[1:]))
