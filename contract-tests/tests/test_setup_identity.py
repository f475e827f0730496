"""Nothing the kit hands a provider is a constant it could tell a kit run by.

The child protocol's variable names are fixed (a child reads them by name); everything
else a provider sees of a setup is new for each test or setup: the credential-shaped
overlay variable's name and value, the failure texts, the ready and scratch directories'
names, and every directory above them (never the test's or the rule's name). What the
protocol's names reveal, the directive in the task text reveals too; the README's child
protocol says why that cannot matter.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dsh_contract_tests import ENV_ERROR_TEXT, ENV_READY_DIR, ENV_STDERR_TEXT, ContractHarness
from dsh_contract_tests.scenario import ChildSetup
from dsh_subagent import SubagentProvider
from dsh_subprocess import is_scrubbed_name

pytest_plugins = ["pytester"]

_PROTOCOL = {ENV_READY_DIR, ENV_ERROR_TEXT, ENV_STDERR_TEXT}


def _harness(root: Path, monkeypatch: pytest.MonkeyPatch) -> ContractHarness:
    def factory(setup: ChildSetup) -> SubagentProvider:
        raise AssertionError("no provider is built here")

    async def holding(setup: ChildSetup, token: str) -> None:
        raise AssertionError("no run is held here")

    root.mkdir()
    return ContractHarness(
        factory=factory,
        root=root,
        monkeypatch=monkeypatch,
        hold_timeout=1.0,
        settle_timeout=1.0,
        wait_until_holding=holding,
    )


def _kit_names(setup: ChildSetup) -> set[str]:
    return set(setup.env) - set(setup.home.env())


def test_each_harness_layers_a_credential_of_its_own_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _harness(tmp_path / "a", monkeypatch)
    second = _harness(tmp_path / "b", monkeypatch)
    names = []
    for harness in (first, second):
        setup = harness.setup()
        (name,) = _kit_names(setup) - _PROTOCOL
        assert name == harness.overlay_credential_name
        assert is_scrubbed_name(name), name  # credential-shaped: the rule's point
        names.append(name)
    assert names[0] != names[1]


def test_each_setup_has_failure_texts_and_directories_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = _harness(tmp_path / "a", monkeypatch)
    one, other = harness.setup(), harness.setup()
    assert one.error_text != other.error_text
    assert one.stderr_text != other.stderr_text
    assert one.ready_dir.name != other.ready_dir.name
    assert one.scratch.name != other.scratch.name
    # The raw error stays longer than the diagnostic bound, in multi-byte characters.
    assert len(one.error_text.encode()) > 4096
    assert len(one.error_text.encode()) > 2 * len(one.error_text)


def test_a_setup_without_the_kit_variables_carries_none_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = _harness(tmp_path / "a", monkeypatch)
    plain = harness.setup(kit_variables=False)
    assert _kit_names(plain) == set()
    assert not _PROTOCOL & set(plain.env)
    assert harness.overlay_credential_name not in plain.env


_WHERE = """
import json
import os

import pytest
from dsh_contract_tests import ProviderContract


class TestWhereTheKitWorks(ProviderContract):
    @pytest.fixture
    def provider_factory(self):
        return lambda setup: None

    def test_where(self, contract):
        setup = contract.setup()
        paths = [str(contract.root), str(contract.workspace()), *map(str, setup.env.values())]
        with open(os.environ["WHERE_OUT"], "w", encoding="utf-8") as out:
            json.dump(paths, out)
"""


def test_no_path_a_provider_sees_names_the_test_or_the_kit(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A test's own tmp_path names it (and a probe's named its rule): a provider reading
    # its HOME or cwd could tell which rule runs. The harness roots are random instead.
    out = tmp_path / "where.json"
    pytester.makepyfile(test_where_it_works=_WHERE)
    monkeypatch.setenv("WHERE_OUT", str(out))
    pytester.runpytest_subprocess(
        "-p", "dsh_contract_tests", "-p", "no:cacheprovider", "--dsh-partial", "-k", "test_where"
    )  # fmt: skip
    paths = json.loads(out.read_text("utf-8"))
    assert paths
    for path in paths:
        for word in ("test_where", "where_it_works", "contract", "probe", "setup", "workspace"):
            assert word not in path.lower(), (word, path)
