"""``python -m dsh_contract_tests new NAME DIR``: a complete provider distribution to start from.

The distribution is a provider on :class:`dsh_subagent.ProductProvider` around a scripted
stand-in child that follows the kit's directives, with its pydantic ``Config``, the
``dsh.subagent.providers`` entry point, the kit's test class and a README. Unmodified,
it passes every keyless and loader rule of the kit; the author then replaces the
stand-in child with their product, keeping the kit green.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from string import Template
from typing import Final

__all__ = ["Scaffold", "ScaffoldError", "write_scaffold"]

_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


class ScaffoldError(ValueError):
    """The name or directory cannot be used; nothing was written."""


def _version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:  # a source checkout without metadata
        return "0.1.0"


@dataclass(frozen=True, slots=True)
class Scaffold:
    """The names one provider distribution is generated with.

    Attributes:
        name: The provider's name: the distribution, the entry point and the default
            ``provider_name`` (lowercase words joined by hyphens, e.g. ``acme-agent``).
        module: The import package (``acme_agent``).
        camel: The class-name stem (``AcmeAgent``).
        product: The product's display name in diagnostics (``Acme Agent``).
    """

    name: str
    module: str
    camel: str
    product: str

    @classmethod
    def named(cls, name: str) -> Scaffold:
        """Derive every name from ``name``.

        Raises:
            ScaffoldError: ``name`` is not lowercase words joined by hyphens, or its
                package would shadow a module that is already importable.
        """
        if not _NAME.fullmatch(name):
            raise ScaffoldError(
                f"invalid provider name {name!r}: use lowercase letters and digits, words "
                "joined by single hyphens, starting with a letter (e.g. acme-agent)"
            )
        module = name.replace("-", "_")
        if keyword.iskeyword(module):
            raise ScaffoldError(f"invalid provider name {name!r}: {module} is a Python keyword")
        if importlib.util.find_spec(module) is not None:
            raise ScaffoldError(
                f"invalid provider name {name!r}: its package {module} would shadow the "
                "importable module of the same name; choose another name"
            )
        words = name.split("-")
        return cls(
            name=name,
            module=module,
            camel="".join(w.capitalize() for w in words),
            product=" ".join(w.capitalize() for w in words),
        )

    def files(self) -> dict[str, str]:
        """``{relative path: text}`` of the whole distribution."""
        values = {
            "name": self.name,
            "module": self.module,
            "camel": self.camel,
            "product": self.product,
            "subagent_version": _version("dsh-subagent"),
            "kit_version": _version("dsh-contract-tests"),
        }
        src = f"src/{self.module}"
        return {
            path.replace("$module", self.module): Template(text).substitute(values)
            for path, text in {
                "pyproject.toml": _PYPROJECT,
                "README.md": _README,
                ".gitignore": _GITIGNORE,
                f"{src}/__init__.py": _INIT,
                f"{src}/config.py": _CONFIG,
                f"{src}/provider.py": _PROVIDER,
                f"{src}/child.py": _CHILD,
                f"{src}/py.typed": "",
                "tests/test_contract.py": _TEST,
            }.items()
        }


def write_scaffold(name: str, directory: Path) -> list[Path]:
    """Write the distribution of provider ``name`` into ``directory``; the paths written.

    Raises:
        ScaffoldError: Bad name, or ``directory`` exists and is not an empty directory.
            Nothing is written then.
    """
    scaffold = Scaffold.named(name)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ScaffoldError(f"{directory} already exists and is not an empty directory")
    written: list[Path] = []
    for relative, text in scaffold.files().items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


_PYPROJECT: Final = """\
[project]
name = "$name"
version = "0.1.0"
description = "A dsh subagent provider for $product."
readme = "README.md"
requires-python = ">=3.11"
dependencies = [
    "dsh-subagent~=$subagent_version",
    "pydantic>=2.9",
]

[project.optional-dependencies]
test = ["dsh-contract-tests~=$kit_version"]

# How the dsh Loader and the contract kit find the provider: name = "module:Class".
[project.entry-points."dsh.subagent.providers"]
$name = "$module:${camel}Provider"

[build-system]
requires = ["hatchling>=1.26"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["src/$module"]

[tool.pytest.ini_options]
# Explicit, so the kit also runs with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1.
addopts = "-p anyio -p dsh_contract_tests"
testpaths = ["tests"]
"""

_GITIGNORE: Final = """\
.venv/
dist/
__pycache__/
"""

_INIT: Final = '''\
"""$name: a dsh subagent provider for $product."""

from $module.config import ${camel}Config
from $module.provider import ${camel}Provider

__all__ = ["${camel}Config", "${camel}Provider"]
'''

_CONFIG: Final = '''\
"""Configuration of the $product provider, validated once when a profile is loaded."""

from __future__ import annotations

from dsh_subagent import ProductConfig
from pydantic import Field

__all__ = ["${camel}Config"]


class ${camel}Config(ProductConfig):
    """One named instance of the $product provider.

    The shared fields come from :class:`dsh_subagent.ProductConfig` (frozen, unknown keys
    refused): ``env`` (the overlay on the credential-scrubbed parent environment), ``cwd``
    (a working-directory override) and ``dispose_grace``.

    Attributes:
        provider_name: Registry name of this instance.
        command: Your product's command line (an absolute path first); ``None`` runs the
            stand-in child ``$module.child``.
    """

    provider_name: str = "$name"
    command: tuple[str, ...] | None = Field(default=None, min_length=1)
'''

_PROVIDER: Final = '''\
"""The $product provider: one product process per delegation.

Everything around the product's own protocol is the runtime's
(:class:`dsh_subagent.ProductProvider`): the working directory, the spawn with the
configured env overlay, cancellation at every phase, settlement, the bounded diagnostic
and whole-tree teardown. This module only says how to launch the product and how to
talk to it. Until ``command`` is configured it talks to the stand-in child
``$module.child``; replace ``open()`` and ``run()`` with your product's protocol.
"""

from __future__ import annotations

import sys
from typing import ClassVar

from dsh_subagent import Launch, ProductChild, ProductProvider

from $module.config import ${camel}Config

__all__ = ["${camel}Provider"]


class ${camel}Provider(ProductProvider[${camel}Config]):
    """Runs one $product process per delegation.

    Wire protocol of the stand-in child, one JSON object per line: the child says
    ``{"type": "ready"}``, gets ``{"task": ...}`` and answers ``{"type": "final",
    "text": ...}`` or ``{"type": "error", "message": ...}``, whose raw message is never kept.
    """

    Config: ClassVar[type[${camel}Config]] = ${camel}Config
    product: ClassVar[str] = "$product"

    # Follow-up delegations are opt-in (the Follow-up delegations page of dsh-python).
    # When your product keeps a run's session and a later run can continue it, declare
    # it; the kit's continuation:* rules then run against your provider too:
    #
    #     @property
    #     def offers_continuation(self) -> bool:
    #         return self.config.continuation  # a bool field you add to the Config
    #
    # and in open(): continue ``child.resume`` when it is set (raise
    # ``child.fail(CONTINUATION_UNAVAILABLE_CATEGORY)`` when the product does not have
    # that session), and set ``child.session_id`` to the product's session id.

    def launch(self, cwd: str) -> Launch:
        """The product's argv (no I/O here): the configured command or the stand-in."""
        argv = self.config.command or (sys.executable, "-m", "$module.child")
        return Launch(argv=argv)

    async def open(self, child: ProductChild) -> None:
        """The handshake, before the run is published."""
        hello = await child.receive_json()
        if not isinstance(hello, dict) or hello.get("type") != "ready":
            raise child.fail("handshake")  # a safe category, never product text

    async def run(self, child: ProductChild) -> str:
        """The task, to the product's answer."""
        await child.send_json({"task": child.task})
        while True:
            message = await child.receive_json()
            if not isinstance(message, dict):
                continue
            if message.get("type") == "final":
                return str(message.get("text", ""))
            if message.get("type") == "error":
                raise child.fail("child-error")  # the raw message is never kept
'''

_CHILD: Final = '''\
"""A stand-in for your product (``python -m $module.child``): a scripted child.

It speaks the provider's JSON-lines protocol and follows the contract kit's directive, one
line in the task text (the kit README, "The child protocol")::

    dsh-contract/1 <complete|fail|hold|reach> T-<hex>

``complete`` answers exactly the token; ``fail`` writes ``$$DSH_CONTRACT_STDERR_TEXT`` to
stderr, reports ``$$DSH_CONTRACT_ERROR_TEXT`` as its raw error and exits 3; ``hold``
creates the empty file ``$$DSH_CONTRACT_READY_DIR/<token>`` and works until its stdin
closes or it is terminated; ``reach`` runs the task's ``dsh-contract/1 command <base64>``
with ``sh -c``, as a product's shell tool would, and answers the token, then what the
command printed (the kit's confinement rules). Without a directive it answers ``done``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

DIRECTIVE = re.compile(r"dsh-contract/1 (complete|fail|hold|reach) (T-[0-9a-f]{6,32})")
COMMAND = re.compile(r"dsh-contract/1 command ([A-Za-z0-9_-]+={0,2})")


def send(message: dict[str, str]) -> None:
    """Write one JSON line to stdout."""
    sys.stdout.write(json.dumps(message) + "\\n")
    sys.stdout.flush()


def run_command(task: str) -> str:
    """Run the task's command as a shell tool would; what it printed (stdout and stderr)."""
    found = COMMAND.search(task)
    command = base64.urlsafe_b64decode(found.group(1)).decode() if found else "true"
    ran = subprocess.run(
        ["/bin/sh", "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    return ran.stdout[-2000:]


def main() -> int:
    """Run one scripted task."""
    send({"type": "ready"})
    line = sys.stdin.readline()
    if not line:
        return 2
    task = str(json.loads(line).get("task", ""))
    found = DIRECTIVE.search(task)
    if found is None:
        send({"type": "final", "text": "done"})
        return 0
    behaviour, token = found.group(1), found.group(2)
    if behaviour == "complete":
        send({"type": "final", "text": token})
        return 0
    if behaviour == "reach":
        send({"type": "final", "text": token + "\\n" + run_command(task)})
        return 0
    if behaviour == "fail":
        sys.stderr.write(os.environ.get("DSH_CONTRACT_STDERR_TEXT", "failed") + "\\n")
        sys.stderr.flush()
        send({"type": "error", "message": os.environ.get("DSH_CONTRACT_ERROR_TEXT", "failed")})
        return 3
    ready_dir = os.environ.get("DSH_CONTRACT_READY_DIR")
    if ready_dir:
        (Path(ready_dir) / token).touch()
    sys.stdin.read()  # hold until the provider closes stdin or the tree is terminated
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

_TEST: Final = '''\
"""The dsh contract kit against the $product provider: ``python -m pytest``."""

from __future__ import annotations

import pytest
from dsh_contract_tests import ChildSetup, ProviderContract, ProviderFactory

from $module import ${camel}Config, ${camel}Provider


def make_provider(setup: ChildSetup) -> ${camel}Provider:
    """One provider per kit scenario: the kit's env overlay and cwd override, as given."""
    return ${camel}Provider(${camel}Config(env=dict(setup.env), cwd=setup.cwd_override))


class Test${camel}Contract(ProviderContract):
    entry_point_name = "$name"

    @pytest.fixture
    def provider_factory(self) -> ProviderFactory:
        return make_provider
'''

_README: Final = """\
# $name

A dsh subagent provider for $product, generated by
`python -m dsh_contract_tests new $name`. As generated it runs a scripted stand-in
child (`src/$module/child.py`) and passes every keyless and loader rule of the contract
kit; replace the stand-in with your product and keep the kit green.

* `src/$module/provider.py`: `${camel}Provider`, with `launch()`, `open()` (the
  handshake) and `run()` (the task, to the answer) on `dsh_subagent.ProductProvider`,
  which owns the rest of the lifecycle.
* `src/$module/config.py`: `${camel}Config`, the pydantic configuration a profile row
  is validated with.
* `src/$module/child.py`: the stand-in product; it follows the kit's directives.
* `tests/test_contract.py`: the kit's test class, one factory fixture.
* `pyproject.toml`: the entry point `$name = "$module:${camel}Provider"` (`module:Class`)
  in the group `dsh.subagent.providers`, which the dsh Loader and the kit find it by.

## Run the kit

In a fresh venv, from wheels only (never an editable install), with `WHEELS` the
absolute path of a directory holding the wheels of `dsh-subprocess`, `dsh-subagent` and
`dsh-contract-tests`:

<!-- ci: install-and-run -->
```bash
uv build --quiet --wheel --no-sources --out-dir dist .
uv venv --quiet .venv
uv pip install --quiet --no-sources --python .venv/bin/python "$$WHEELS"/*.whl dist/*.whl
.venv/bin/python -m pytest -q
```

Then get the kit's verdict, the run CI trusts: every rule, each in a pytest process the
kit controls (none of this project's conftest or configuration), ending with one summary
line and a JSON report:

<!-- ci: verify -->
```bash
.venv/bin/python -m dsh_contract_tests verify $name --report verify-report.json
```

Once the dsh packages are on PyPI, install `dsh-contract-tests` (it pulls the other two)
instead of `"$$WHEELS"/*.whl`. The kit's README says how to build `WHEELS` from a
dsh-python checkout, how to read a failure (each names its rule id), how the child is
scripted, and how to opt out of a rule.

## Your product

1. Configure `command` (or change `launch()`) to run your product by absolute path.
2. Replace `open()` and `run()` with its protocol: raise `child.fail("<category>")` for
   a product failure, never with product text.
3. Let the kit script it: a product that talks to a model gets the kit's loopback model
   fixture with a directive route (`dsh_contract_tests.ResponsesDirectiveRoute` or
   `MessagesDirectiveRoute`), and the test class overrides `wait_until_holding()` and
   `describe_hold()` to poll that fixture for the held request.
"""
