"""The confinement rules' building blocks: the reach command and the kernel check."""

from __future__ import annotations

import subprocess

import pytest
from dsh_contract_tests.failures import KitSkipped
from dsh_contract_tests.reach import ATTEMPTED, attempt, command_line, find_command
from dsh_contract_tests.rules import confinement


def test_the_attempt_marker_is_computed_by_the_shell_never_in_the_command() -> None:
    command = attempt("cat /nonexistent/dsh-contract")
    assert ATTEMPTED not in command  # the task (and every request echoing it) lacks it
    ran = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=False)
    # stderr joined to stdout, messages in English: the refusal text is readable.
    assert ran.stdout.splitlines()[-2:] == [
        "cat: /nonexistent/dsh-contract: No such file or directory",
        ATTEMPTED,
    ]
    assert find_command(command_line(command)) == command


@pytest.mark.parametrize(("abi", "needed", "skips"), [(0, 1, True), (3, 4, True), (3, 1, False)])
def test_a_kernel_without_the_landlock_a_rule_needs_is_a_kit_skip_never_a_pass(
    monkeypatch: pytest.MonkeyPatch, abi: int, needed: int, skips: bool
) -> None:
    monkeypatch.setattr(confinement, "landlock_abi", lambda: abi)
    if not skips:
        confinement._kernel_or_skip(needed)
        return
    with pytest.raises(KitSkipped, match=f"needs ABI {needed} or later") as skipped:
        confinement._kernel_or_skip(needed)
    assert ("no Landlock" if abi == 0 else f"Landlock ABI {abi}") in str(skipped.value)
