"""The auto-loaded plugin is harmless: markers and options only, no tests of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


def test_plugin_collects_nothing(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_markers_registered_once_even_when_the_project_registers_them(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nmarkers =\n    keyless: the project's own wording\n")
    result = pytester.runpytest_inprocess("--markers", "-p", "no:cacheprovider")
    lines = result.stdout.lines
    assert sum(ln.startswith("@pytest.mark.keyless:") for ln in lines) == 1
    assert any("the project's own wording" in ln for ln in lines)
    for name in ("loader", "credentialed", "dsh_requirement"):
        assert sum(ln.startswith(f"@pytest.mark.{name}") for ln in lines) == 1, name


def test_strict_markers_accept_kit_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        "import pytest\n"
        "@pytest.mark.keyless\n@pytest.mark.loader\n@pytest.mark.credentialed\n"
        "@pytest.mark.dsh_requirement('x')\ndef test_marked():\n    pass\n"
    )
    result = pytester.runpytest_inprocess("--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_options_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--help", "-p", "no:cacheprovider")
    assert any("--dsh-secret-examples" in ln for ln in result.stdout.lines)


_COUNTING = """
from pathlib import Path

import pytest
from broken_providers import config
from dsh_contract_tests import ProviderContract
from dsh_example_provider import ExampleProvider


class TestCounted(ProviderContract):
    secret_examples = 5

    @pytest.fixture
    def provider_factory(self):
        def make(setup):
            with Path("{calls}").open("a") as calls:
                calls.write("x")
            return ExampleProvider(config(dict(setup.env), setup.cwd_override))

        return make
"""


def _counting_module(pytester: pytest.Pytester) -> Path:
    pytester.syspathinsert(Path(__file__).parent)
    calls = pytester.path / "factory-calls"
    pytester.makepyfile(test_counted=_COUNTING.format(calls=calls))
    return calls


def test_the_secret_examples_option_sets_how_many_secret_runs_there_are(
    pytester: pytest.Pytester,
) -> None:
    calls = _counting_module(pytester)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-k", "test_no_planted_secret_leaks and not trio",
        "--dsh-secret-examples", "2", "--dsh-partial",
    )  # fmt: skip
    assert result.parseoutcomes().get("passed") == 1, result.stdout.str()
    # One provider per planted-secret run: the option's 2, not the class's 5.
    assert calls.read_text() == "xx"


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_bad_count_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--dsh-concurrency", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is not a whole number of at least 1" in result.stderr.str()


def test_with_autoload_disabled_the_kit_plugin_brings_anyio(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the kit README tells a user who disables plugin autoload: -p dsh_contract_tests.
    _counting_module(pytester)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    result = pytester.runpytest_subprocess(
        "-p", "dsh_contract_tests", "-p", "no:cacheprovider", "--dsh-partial",
        "-k", "(test_completed_run or test_cancel_mid_run) and not trio",
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 2, result.stdout.str()
    assert "not natively supported" not in result.stdout.str()
