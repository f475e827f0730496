"""Each deliberately broken provider is caught by the one rule it breaks.

The kit runs in a nested pytest session (pytester) against each provider in
``broken_providers.py``; the named rule's test must fail and a control rule must pass,
so a failure cannot come from a kit that fails everything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

_MODULE = """
import pytest
from broken_providers import BROKEN, config
from dsh_contract_tests import ProviderContract

class TestBroken(ProviderContract):
    secret_examples = 2

    @pytest.fixture
    def provider_factory(self):
        cls = BROKEN[{name!r}]
        return lambda setup: cls(config(dict(setup.env), setup.cwd_override))
"""

_CONTROL = "test_completed_run_carries_answer_and_no_diagnostic"


@pytest.mark.parametrize(
    ("broken", "rule_test"),
    [
        ("IgnoresPersona", "test_out_of_process_declares_no_capability"),
        ("LeaksRawError", "test_no_planted_secret_leaks"),
        ("LeavesGrandchild", "test_dispose_leaves_no_process"),
        ("ResultRaises", "test_failing_child_settles_as_a_result"),
    ],
)
def test_broken_provider_is_caught_by_its_rule(
    pytester: pytest.Pytester, broken: str, rule_test: str
) -> None:
    pytester.syspathinsert(Path(__file__).parent)
    pytester.makepyfile(test_broken=_MODULE.format(name=broken))
    result = pytester.runpytest_inprocess(
        "-p", "anyio", "-k", f"({rule_test} or {_CONTROL}) and asyncio", "-p", "no:cacheprovider"
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1, result.stdout.str()
    assert outcomes.get("passed") == 1, result.stdout.str()
    failed = [ln for ln in result.stdout.lines if ln.startswith("FAILED")]
    assert len(failed) == 1
    assert f"::TestBroken::{rule_test}[" in failed[0]
