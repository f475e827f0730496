"""The in-repo run refuses to lose its account silently, and refuses an unbounded wait.

Each case is a real ``pytest`` process (pytester's subprocess run: the switch under test
is pytest's own plugin loading) against the healthy example provider, with the account
lost in a way an author could configure: the kit's plugin blocked while its base classes
still run (on the command line, in ``addopts``, in ``PYTEST_ADDOPTS``): the run must fail
with the one line that says why. Under pytest-xdist, which splits the rules over workers,
the controller merges the workers' shares into one account.
"""

from __future__ import annotations

import pytest
from dsh_contract_tests.failures import NO_PLUGIN

pytest_plugins = ["pytester"]

_MODULE = """
import pytest
from dsh_contract_tests import ProviderContract
from dsh_example_provider import ExampleConfig, ExampleProvider


@pytest.fixture
def anyio_backend():
    return "asyncio"


class TestRefused(ProviderContract):
    entry_point_name = "example"
    {attributes}

    @pytest.fixture
    def provider_factory(self):
        return lambda setup: ExampleProvider(
            ExampleConfig(env=dict(setup.env), cwd=setup.cwd_override)
        )
"""


def _project(pytester: pytest.Pytester, attributes: str = "secret_examples = 1") -> None:
    pytester.makepyfile(test_refused=_MODULE.format(attributes=attributes))


def _lines(result: pytest.RunResult) -> list[str]:
    return [*result.outlines, *result.errlines]


@pytest.mark.parametrize(
    ("where", "args", "ini"),
    [
        ("command line", ("-p", "no:dsh_contract_tests"), ""),
        ("addopts", (), "[pytest]\naddopts = -p no:dsh_contract_tests\n"),
    ],
)
def test_kit_rules_without_the_plugin_fail_the_run_with_one_line(
    pytester: pytest.Pytester, where: str, args: tuple[str, ...], ini: str
) -> None:
    _project(pytester)
    if ini:
        pytester.makeini(ini)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "-k", "test_completed_run", *args
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, "\n".join(_lines(result))
    found = [ln for ln in _lines(result) if NO_PLUGIN in ln]
    assert len(found) == 1, "\n".join(_lines(result))


def test_the_plugin_blocked_in_pytest_addopts_fails_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(pytester)
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:dsh_contract_tests -k test_completed_run")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, "\n".join(_lines(result))
    assert any(NO_PLUGIN in ln for ln in _lines(result)), "\n".join(_lines(result))


def test_under_xdist_the_workers_accounts_are_merged_on_the_controller(
    pytester: pytest.Pytester,
) -> None:
    # A class skip mark: each worker skips its share; the merged account names them all.
    _project(pytester, "pytestmark = pytest.mark.skip('later')")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2")
    out = "\n".join(_lines(result))
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    expected = (
        "dsh-contract FAILED test_refused.py::TestRefused: 39 of 39 rules did not run. "
        "skipped before it ran: later: kit:no-silent-opt-out, "
    )
    first = next(ln for ln in _lines(result) if ln.startswith("dsh-contract "))
    assert first.startswith(expected), out


def test_under_xdist_a_whole_kit_run_split_over_two_workers_is_one_full_account(
    pytester: pytest.Pytester,
) -> None:
    _project(pytester)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2")
    out = "\n".join(_lines(result))
    assert result.ret == pytest.ExitCode.OK, out
    lines = [ln for ln in _lines(result) if ln.startswith("dsh-contract ")]
    assert lines == ["dsh-contract test_refused.py::TestRefused: every one of its 39 rules ran"]
    assert "2 workers [47 items]" in out, out  # the rules were split over two workers


def test_a_settle_timeout_above_the_cap_is_refused_naming_it(pytester: pytest.Pytester) -> None:
    _project(pytester, "settle_timeout = 1e9")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.INTERRUPTED, "\n".join(_lines(result))
    expected = "TestRefused.settle_timeout = 1000000000.0: the kit accepts a number of seconds"
    assert any(expected in ln for ln in _lines(result)), "\n".join(_lines(result))


def test_an_opt_out_that_runs_the_rule_without_the_kits_contract_fails(
    pytester: pytest.Pytester,
) -> None:
    # The provider meets the rule: an opt-out that really ran it would be a strict XPASS.
    _project(
        pytester,
        "@pytest.mark.xfail(strict=True, reason='later')\n"
        "    async def test_cancel_mid_run(self, contract):\n"
        "        await super().test_cancel_mid_run(None)",
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "-k", "test_cancel_mid_run", "--dsh-partial"
    )
    out = "\n".join(_lines(result))
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes()["deselected"])
    assert "kit:no-silent-opt-out — " in out, out
    assert (
        "test_cancel_mid_run is overridden, but the override never ran the kit's rule "
        "settlement:cancel-mid-run with the kit's own contract object" in out
    ), out
    assert "XFAIL" not in out, out
    assert "OPTED OUT" not in out, out


def test_the_kits_own_skip_called_by_the_factory_is_no_kit_skip(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_refused=_MODULE.format(attributes="secret_examples = 1").replace(
            "return lambda setup: ExampleProvider(",
            "from dsh_contract_tests.failures import kit_skip\n"
            "        return lambda setup: kit_skip('declared') or ExampleProvider(",
        )
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "-k", "test_completed_run", "--dsh-partial"
    )
    out = "\n".join(_lines(result))
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    expected = (
        "dsh-contract FAILED test_refused.py::TestRefused: 1 of 39 rules did not run. skipped "
        "from inside the rule by code that is not the kit's: declared: settlement:completed"
    )
    assert expected in _lines(result), out
