"""dsh shows products' stderr records only with -v, and the libraries' errors always."""

from __future__ import annotations

import io
import logging

import pytest
from dsh_profiles.logs import PRODUCT_LOGGERS, cli_logging

PRODUCT_NAMES = ("dsh.product.codex", "dsh.product.claude-code", "dsh_subprocess.stderr")


def _emit_everything() -> None:
    for name in PRODUCT_NAMES:
        for level in (logging.INFO, logging.WARNING, logging.ERROR):
            logging.getLogger(name).log(level, "product line %s %s", name, level)
    logging.getLogger("dsh_subagent").warning("library warning")
    logging.getLogger("dsh_subagent").error("library error")


def test_without_verbose_no_product_record_is_shown_at_any_level() -> None:
    stream = io.StringIO()
    with cli_logging(verbose=False, stream=stream):
        _emit_everything()
    assert stream.getvalue() == "dsh_subagent: library error\n"


def test_with_verbose_product_lines_and_library_warnings_are_shown() -> None:
    stream = io.StringIO()
    with cli_logging(verbose=True, stream=stream):
        _emit_everything()
    lines = stream.getvalue().splitlines()
    for name in PRODUCT_NAMES:
        assert f"{name}: product line {name} {logging.INFO}" in lines
    assert "dsh_subagent: library warning" in lines
    assert "dsh_subagent: library error" in lines


def test_nothing_is_shown_once_the_command_is_over(capsys: pytest.CaptureFixture[str]) -> None:
    stream = io.StringIO()
    with cli_logging(verbose=True, stream=stream):
        pass
    _emit_everything()
    assert stream.getvalue() == ""
    assert [logging.getLogger(name).propagate for name in PRODUCT_LOGGERS] == [True, True]
    capsys.readouterr()
