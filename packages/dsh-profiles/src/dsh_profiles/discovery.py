"""Where provider classes come from: the ``dsh.subagent.providers`` entry-point group.

Only the names a profile mentions are looked up and imported (never "everything
installed"), so an unrelated broken plugin cannot break a profile that does not use it.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "PROVIDER_GROUP",
    "EntryPointDiscovery",
    "ProviderCandidate",
    "ProviderDiscovery",
    "StaticDiscovery",
]

PROVIDER_GROUP = "dsh.subagent.providers"


@dataclass(frozen=True)
class ProviderCandidate:
    """One advertised provider class, not yet imported.

    Attributes:
        name: The entry-point name (the profile's ``type``).
        value: ``module:attribute`` of the class.
        distribution: The distribution advertising it, when known.
        load: Imports and returns the advertised object.
    """

    name: str
    value: str
    distribution: str | None
    load: Callable[[], object] = field(compare=False, repr=False)

    def describe(self) -> str:
        """``module:attr`` plus the distribution, for error messages."""
        return f"{self.value} (from {self.distribution})" if self.distribution else self.value


class ProviderDiscovery(Protocol):
    """Answers "which classes are advertised under this name?" without importing them."""

    def candidates(self, name: str) -> Sequence[ProviderCandidate]:
        """Every candidate advertised under ``name`` (several means ambiguous)."""
        ...

    def names(self) -> Sequence[str]:
        """Every advertised name, for "did you mean" hints."""
        ...


class EntryPointDiscovery:
    """Discovery through installed distributions' entry points."""

    def __init__(self, group: str = PROVIDER_GROUP) -> None:
        self.group = group

    def candidates(self, name: str) -> Sequence[ProviderCandidate]:
        """Entry points named ``name``; one distribution installed twice counts once."""
        found: dict[str, ProviderCandidate] = {}
        for ep in importlib.metadata.entry_points(group=self.group, name=name):
            dist = ep.dist.name if ep.dist is not None else None
            found.setdefault(ep.value, ProviderCandidate(name, ep.value, dist, ep.load))
        return tuple(found.values())

    def names(self) -> Sequence[str]:
        """Sorted advertised names."""
        return sorted({ep.name for ep in importlib.metadata.entry_points(group=self.group)})


def _returner(obj: object) -> Callable[[], object]:
    def load() -> object:
        return obj

    return load


class StaticDiscovery:
    """In-memory discovery for tests and embedders: name → classes (several = ambiguous)."""

    def __init__(self, providers: Mapping[str, Sequence[type]]) -> None:
        self._providers = {name: tuple(classes) for name, classes in providers.items()}

    def candidates(self, name: str) -> Sequence[ProviderCandidate]:
        """One candidate per registered class."""
        return tuple(
            ProviderCandidate(name, f"{cls.__module__}:{cls.__qualname__}", None, _returner(cls))
            for cls in self._providers.get(name, ())
        )

    def names(self) -> Sequence[str]:
        """Sorted registered names."""
        return sorted(self._providers)
