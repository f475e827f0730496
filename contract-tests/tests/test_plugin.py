"""The auto-loaded plugin is harmless: markers and options only, no tests of its own."""

from __future__ import annotations

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
