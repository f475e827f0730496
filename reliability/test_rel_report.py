"""The report command's table and arguments (the full run is `python -m reliability`)."""

from __future__ import annotations

import pytest

from reliability.profiles import PROFILES
from reliability.report import Row, main, render_table

pytestmark = pytest.mark.reliability


def test_table_has_one_row_per_section_and_a_total() -> None:
    rows = [Row("fault matrix: codex", 3, 2, 1, 0, 0, 1), Row("storm", 5, 5, 0, 2, 1, 0)]
    table = render_table(rows, PROFILES["ci"], 12.0).splitlines()
    assert table[0] == "reliability profile ci: 12 s"
    assert [c.strip() for c in table[1].strip("|").split("|")] == [
        "section",
        "cells tried",
        "settled correctly",
        "survivors",
        "leaks",
        "fd leaks",
        "known findings",
    ]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table[3:]]
    assert cells == [
        ["fault matrix: codex", "3", "2", "1", "0", "0", "1"],
        ["storm", "5", "5", "0", "2", "1", "0"],
        ["TOTAL", "8", "7", "1", "2", "1", "1"],
    ]


def test_unknown_profile_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--profile", "weekly"])
    assert exited.value.code == 2


def test_nightly_profile_floods_at_least_100_mib() -> None:
    assert PROFILES["nightly"].flood_bytes >= 100 * 1024 * 1024
    assert PROFILES["ci"].storm_runs == 200
