"""OutOfProcessProvider: the shared skeleton of out-of-process providers.

The typing half of these tests is checked by ``mypy --strict`` (``./dev lint``):
``assert_type`` pins the generic ``config`` type, and the ``type: ignore[type-var]``
below becomes an "unused ignore" error if a config without ``provider_name`` were ever
accepted.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, assert_type

import anyio
import pytest
from dsh_subagent import (
    NO_START_CAPABILITIES,
    AgentOptions,
    OutOfProcessProvider,
    ParentContext,
    ResolvedSubagentStartRequest,
    SubagentError,
    SubagentErrorCode,
    SubagentProvider,
    SubagentRun,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from pydantic import BaseModel, ConfigDict, Field


class WidgetConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    provider_name: Annotated[str, Field(min_length=1)] = "widget"
    colour: str = "blue"


class WidgetProvider(OutOfProcessProvider[WidgetConfig]):
    Config: ClassVar[type[WidgetConfig]] = WidgetConfig

    def __init__(self, config: WidgetConfig) -> None:
        super().__init__(config)
        self.starts = 0

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        self.starts += 1
        raise AssertionError("the service must refuse before start()")


class NamelessConfig(BaseModel):
    colour: str = "red"


class NamelessProvider(OutOfProcessProvider[NamelessConfig]):  # type: ignore[type-var]
    """Never instantiated: its only job is the type-var error above."""


def test_the_skeleton_keeps_config_name_and_out_of_process_facts() -> None:
    config = WidgetConfig(provider_name="widget-a", colour="green")
    provider = WidgetProvider(config)
    assert_type(provider.config, WidgetConfig)
    assert provider.config is config
    assert provider.config.colour == "green"
    assert provider.name == "widget-a"
    assert provider.capabilities == NO_START_CAPABILITIES
    assert provider.inherits_parent_context is False
    assert isinstance(provider, SubagentProvider)
    assert provider.starts == 0  # constructing starts nothing


def test_named_instances_keep_their_own_configuration() -> None:
    a = WidgetProvider(WidgetConfig(provider_name="a", colour="green"))
    b = WidgetProvider(WidgetConfig(provider_name="b"))
    assert (a.name, a.config.colour) == ("a", "green")
    assert (b.name, b.config.colour) == ("b", "blue")


def test_the_loader_shape_validates_with_config_and_constructs_with_it() -> None:
    # What the Loader does with an entry-point class: cls.Config → cls(config).
    provider_cls: type[WidgetProvider] = WidgetProvider
    config = provider_cls.Config.model_validate({"provider_name": "loaded"})
    assert provider_cls(config).name == "loaded"


def test_start_stays_abstract() -> None:
    class NoStart(OutOfProcessProvider[WidgetConfig]):
        Config: ClassVar[type[WidgetConfig]] = WidgetConfig

    with pytest.raises(TypeError, match="start"):
        NoStart(WidgetConfig())  # type: ignore[abstract]


@pytest.mark.anyio
async def test_the_service_refuses_every_start_capability_before_start() -> None:
    provider = WidgetProvider(WidgetConfig())
    async with SubagentService() as service:
        service.register_provider(provider)
        assert service.get_provider("widget") is provider
        with anyio.fail_after(10), pytest.raises(SubagentError) as caught:
            await service.start(
                "widget",
                SubagentStartRequest(
                    prompt=(TextBlock(text="task"),),
                    parent=ParentContext(session_id="s", cwd="/"),
                    agent_options=AgentOptions(model="m"),
                ),
            )
    assert caught.value.code == SubagentErrorCode.UNSUPPORTED_CAPABILITY
    assert provider.starts == 0
