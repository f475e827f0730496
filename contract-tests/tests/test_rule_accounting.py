"""No rule is switched off silently: the end-of-run account of every provider test class.

Each case is a provider test class (the healthy example provider, or a broken one of
``broken_providers.py``) that keeps some rule from running in a way a determined author
might try: a skip or xfail mark on the class, a collection hook, ``-k``, a skip raised by
the factory. The kit must fail the run (exit status 1) with one summary line for the
class naming the rule ids that did not run and why; an honest opt-out is listed by id;
``--dsh-partial`` reports a subset as partial and still never exits 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

_MODULE = """
import pytest
from broken_providers import BROKEN, config
from dsh_contract_tests import ProviderContract
from dsh_example_provider import ExampleProvider

PROVIDERS = {{**BROKEN, "Healthy": ExampleProvider}}


@pytest.fixture
def anyio_backend():
    return "asyncio"  # one backend: each rule's tests are its parameters only
{prelude}

class TestAccounted(ProviderContract):
    secret_examples = 1

    @pytest.fixture
    def provider_factory(self):
        cls = PROVIDERS[{provider!r}]
        return lambda setup: cls(config(dict(setup.env), setup.cwd_override))
{body}
"""


def _run(
    pytester: pytest.Pytester,
    *args: str,
    provider: str = "Healthy",
    body: str = "",
    prelude: str = "",
    conftest: str = "",
) -> tuple[pytest.RunResult, list[str]]:
    pytester.syspathinsert(Path(__file__).parent)
    pytester.makepyfile(
        test_accounted=_MODULE.format(provider=provider, body=body, prelude=prelude)
    )
    if conftest:
        pytester.makeconftest(conftest)
    result = pytester.runpytest_inprocess("-p", "anyio", "-p", "no:cacheprovider", *args)
    lines = [ln for ln in result.stdout.lines if ln.startswith("dsh-contract ")]
    return result, lines


_ONE_RULE = ("-k", "test_completed_run_carries_answer_and_no_diagnostic ")


def test_a_skip_mark_on_the_class_fails_the_run_naming_every_rule(
    pytester: pytest.Pytester,
) -> None:
    result, lines = _run(pytester, prelude="\npytestmark = pytest.mark.skip('not today')\n")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (line,) = lines
    assert line.startswith(
        "dsh-contract FAILED test_accounted.py::TestAccounted: 39 of 39 rules did not run. "
        "skipped before it ran: not today: kit:no-silent-opt-out, "
        "capability:refused-before-start, "
    ), line
    assert line.endswith(", loader:entry-point-starts-nothing"), line


def test_an_xfail_mark_on_the_class_cannot_hide_a_broken_rule(
    pytester: pytest.Pytester,
) -> None:
    # The leak is real: without the account, the class-level xfail turns it into exit 0.
    result, lines = _run(
        pytester,
        "-k",
        "test_no_planted_secret_leaks ",
        "--dsh-partial",
        provider="LeaksRawError",
        body="    pytestmark = pytest.mark.xfail(reason='flaky')\n",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes().get("xfailed") == 1, result.stdout.str()
    failed = [ln for ln in lines if ln.startswith("dsh-contract FAILED")]
    (line,) = failed
    assert line.startswith(
        "dsh-contract FAILED test_accounted.py::TestAccounted: 1 of 39 rules did not run. "
        "its failure was hidden by an xfail that is not the documented opt-out: flaky: "
        "diagnostic:no-planted-secret"
    ), line


def test_a_hook_that_removes_a_rules_test_fails_the_run(pytester: pytest.Pytester) -> None:
    conftest = (
        "def pytest_collection_modifyitems(items):\n"
        "    items[:] = [i for i in items if 'test_completed_run' not in i.name]\n"
    )
    selected = "(test_completed_run or test_cancel_before_start) "
    result, lines = _run(pytester, "-k", selected, "--dsh-partial", conftest=conftest)
    result.assert_outcomes(passed=1)  # not even counted as deselected
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (failed,) = [ln for ln in lines if ln.startswith("dsh-contract FAILED")]
    assert failed == (
        "dsh-contract FAILED test_accounted.py::TestAccounted: 1 of 39 rules did not run. "
        "removed from the run by a collection hook: settlement:completed"
    )


def test_a_selection_without_the_partial_option_fails_the_run(pytester: pytest.Pytester) -> None:
    result, lines = _run(pytester, *_ONE_RULE)
    assert result.parseoutcomes().get("passed") == 1, result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (line,) = lines
    assert line.startswith(
        "dsh-contract FAILED test_accounted.py::TestAccounted: 38 of 39 rules did not run. "
        "deselected (-k, -m or a hook): kit:no-silent-opt-out, "
        "capability:refused-before-start, "
    ), line
    assert "settlement:completed" not in line


def test_a_partial_run_on_purpose_says_so_and_is_not_a_pass(pytester: pytest.Pytester) -> None:
    result, lines = _run(pytester, *_ONE_RULE, "--dsh-partial")
    assert result.parseoutcomes().get("passed") == 1, result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (line,) = lines
    assert line.startswith(
        "dsh-contract PARTIAL test_accounted.py::TestAccounted: 38 of 39 rules not selected "
        "(--dsh-partial), not a full pass. deselected (-k, -m or a hook): "
    ), line


def test_a_skip_raised_by_the_factory_is_no_kit_skip(pytester: pytest.Pytester) -> None:
    body = (
        "    @pytest.fixture\n"
        "    def provider_factory(self):\n"
        "        def make(setup):\n"
        "            pytest.skip('the product is not installed')\n"
        "        return make\n"
    )
    result, lines = _run(pytester, *_ONE_RULE, "--dsh-partial", body=body)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (failed,) = [ln for ln in lines if ln.startswith("dsh-contract FAILED")]
    assert failed.endswith(
        "skipped from inside the rule by code that is not the kit's: "
        "the product is not installed: settlement:completed"
    ), failed


def test_an_honest_opt_out_is_listed_by_id(pytester: pytest.Pytester) -> None:
    body = (
        "    @pytest.mark.xfail(strict=True, reason='a grandchild outlives dispose')\n"
        "    async def test_dispose_leaves_no_process(self, contract):\n"
        "        await super().test_dispose_leaves_no_process(contract)\n"
    )
    result, lines = _run(
        pytester,
        "-k",
        "test_dispose_leaves_no_process ",
        "--dsh-partial",
        provider="LeavesGrandchild",
        body=body,
    )
    assert result.parseoutcomes().get("xfailed") == 1, result.stdout.str()
    assert not [ln for ln in lines if ln.startswith("dsh-contract FAILED")], lines
    assert (
        "dsh-contract OPTED OUT test_accounted.py::TestAccounted: quiescence:after-dispose "
        "(a grandchild outlives dispose)"
    ) in lines
