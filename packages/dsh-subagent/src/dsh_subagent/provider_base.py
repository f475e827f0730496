"""The shared skeleton of an out-of-process provider (the plugin contract's boilerplate).

Every provider whose child runs in another process has the same shape: the class
carries its pydantic configuration model as ``Config``, is constructed as
``Provider(config)`` (which starts nothing), is named by ``config.provider_name``,
advertises no start capability and never shows the child the parent's conversation.
:class:`OutOfProcessProvider` holds exactly that; a subclass adds ``start()``.
"""

from __future__ import annotations

from typing import ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel

from dsh_subagent.types import NO_START_CAPABILITIES, SubagentCapabilities, SubagentProvider

__all__ = ["NamedProviderConfig", "OutOfProcessProvider"]


class NamedProviderConfig(Protocol):
    """What the base needs of a configuration: its registry name.

    Any pydantic model with a ``provider_name: str`` field satisfies it (frozen or not).
    """

    @property
    def provider_name(self) -> str:
        """Registry name of the configured instance."""
        ...


ConfigT = TypeVar("ConfigT", bound=NamedProviderConfig)


class OutOfProcessProvider(SubagentProvider, Generic[ConfigT]):
    """Base of providers whose child agent runs in another process.

    Subclass it with the configuration type and set ``Config`` to the same model (the
    Loader validates a profile entry with ``Config`` and constructs ``cls(config)``)::

        class MyProvider(OutOfProcessProvider[MyConfig]):
            Config: ClassVar[type[MyConfig]] = MyConfig

            async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun: ...

    Construction keeps the configuration and starts nothing; a subclass with extra
    constructor arguments calls ``super().__init__(config)``.

    Args:
        config: This instance's validated configuration.
    """

    Config: ClassVar[type[BaseModel]]
    """The pydantic configuration model (frozen, ``extra="forbid"``); set by the subclass."""

    def __init__(self, config: ConfigT) -> None:
        self._config = config

    @property
    def config(self) -> ConfigT:
        """This instance's configuration."""
        return self._config

    @property
    def name(self) -> str:
        """The registry name: the configuration's ``provider_name``."""
        return self._config.provider_name

    @property
    def capabilities(self) -> SubagentCapabilities:
        """None: a child in another process cannot honour parent-enforced start features."""
        return NO_START_CAPABILITIES

    @property
    def inherits_parent_context(self) -> bool:
        """``False``: the child sees the task and the workspace, never the conversation."""
        return False
