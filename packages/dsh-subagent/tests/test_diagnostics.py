"""The 4096-byte diagnostic bound and the safe product failure line (seed 000)."""

from __future__ import annotations

import pytest
from dsh_subagent import (
    DIAGNOSTIC_TRUNCATED_SUFFIX,
    MAX_SUBAGENT_DIAGNOSTIC_BYTES,
    ProductFailure,
    format_product_failure,
    limit_diagnostic,
)
from hypothesis import example, given
from hypothesis import strategies as st

MAX = MAX_SUBAGENT_DIAGNOSTIC_BYTES


def test_bound_and_suffix_are_the_seed_values() -> None:
    assert MAX == 4096
    assert DIAGNOSTIC_TRUNCATED_SUFFIX == "\n[diagnostic truncated]"
    assert len(DIAGNOSTIC_TRUNCATED_SUFFIX.encode()) == 23


def test_exactly_4096_bytes_is_kept_verbatim() -> None:
    text = "é" * 2048  # 2 bytes each
    assert len(text.encode()) == MAX
    assert limit_diagnostic(text) == text


def test_4097_bytes_is_truncated_with_suffix() -> None:
    text = "a" * (MAX + 1)
    limited = limit_diagnostic(text)
    assert limited == "a" * (MAX - 23) + DIAGNOSTIC_TRUNCATED_SUFFIX
    assert len(limited.encode()) == MAX


@pytest.mark.parametrize("char", ["é", "€", "😀"])
@pytest.mark.parametrize("shift", [0, 1, 2, 3])
def test_multibyte_character_straddling_the_cut_is_dropped_whole(char: str, shift: int) -> None:
    # ASCII padding moves the multi-byte character across the 4073-byte cut point.
    text = "a" * (MAX - 23 - shift) + char * 40
    limited = limit_diagnostic(text)
    body = limited.removesuffix(DIAGNOSTIC_TRUNCATED_SUFFIX)
    assert limited.endswith(DIAGNOSTIC_TRUNCATED_SUFFIX)
    assert "\ufffd" not in limited
    assert text.startswith(body)
    encoded = body.encode()
    assert len(encoded) <= MAX - 23
    # Longest prefix: one more whole character would not fit.
    assert len(encoded) + len(char.encode()) > MAX - 23


_texts = st.text(
    alphabet=st.sampled_from(["a", "é", "€", "😀", "\n", "中"]), min_size=0, max_size=5000
) | st.text(max_size=3000)


@given(_texts)
@example("😀" * 1024)  # exactly 4096 bytes of 4-byte characters
@example("😀" * 1025)
@example("a" + "😀" * 1024)
def test_limit_property(text: str) -> None:
    limited = limit_diagnostic(text)
    encoded = limited.encode("utf-8")  # always encodable
    assert len(encoded) <= MAX
    if len(text.encode()) <= MAX:
        assert limited == text
    else:
        assert limited.endswith(DIAGNOSTIC_TRUNCATED_SUFFIX)
        body = limited.removesuffix(DIAGNOSTIC_TRUNCATED_SUFFIX)
        assert text.startswith(body)
        assert "\ufffd" not in body or "\ufffd" in text
        # Maximal: adding the next character of the original would overflow the budget.
        next_char = text[len(body)]
        assert len(body.encode()) + len(next_char.encode()) > MAX - 23
    assert limit_diagnostic(limited) == limited  # idempotent


def test_lone_surrogate_never_raises() -> None:
    limited = limit_diagnostic("bad \udc80 text")
    assert limited == "bad ? text"


def test_full_failure_line_has_fixed_order() -> None:
    failure = ProductFailure(
        product="Codex",
        stage="turn",
        category="httpConnectionFailed",
        http_status=503,
        exit_code=1,
        signal="SIGKILL",
    )
    assert format_product_failure(failure) == (
        "Product subagent failure (product: Codex; stage: turn; category: httpConnectionFailed; "
        "HTTP status: 503; exit code: 1; signal: SIGKILL)"
    )


def test_absent_optional_fields_are_omitted() -> None:
    assert (
        format_product_failure(ProductFailure(product="Claude Code", stage="query-start"))
        == "Product subagent failure (product: Claude Code; stage: query-start)"
    )
    assert format_product_failure(
        ProductFailure(product="Codex", stage="process", category="process-exit", signal="SIGTERM")
    ) == (
        "Product subagent failure (product: Codex; stage: process; category: process-exit; "
        "signal: SIGTERM)"
    )


def test_exit_code_zero_is_an_observed_fact_not_absence() -> None:
    line = format_product_failure(
        ProductFailure(product="Codex", stage="process", exit_code=0, http_status=None)
    )
    assert line.endswith("exit code: 0)")


def test_permission_fact_follows_on_the_next_line() -> None:
    text = format_product_failure(
        ProductFailure(product="Claude Code", stage="query-run", category="error_during_execution"),
        "Claude Code denied a tool request",
    )
    assert text.splitlines() == [
        "Product subagent failure (product: Claude Code; stage: query-run; "
        "category: error_during_execution)",
        "Claude Code denied a tool request",
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"product": "", "stage": "turn"},
        {"product": "Codex", "stage": "turn", "category": "boom: /home/user/.secret\nTOKEN=x"},
        {"product": "Codex", "stage": "turn; category: forged"},
        {"product": "Codex", "stage": "turn", "category": "x" * 65},
        {"product": "Codex", "stage": "turn", "http_status": True},
    ],
)
def test_raw_text_is_refused_as_a_fact(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="ProductFailure"):
        ProductFailure(**kwargs)  # type: ignore[arg-type]


def test_product_failure_is_frozen() -> None:
    failure = ProductFailure(product="Codex", stage="turn")
    with pytest.raises(AttributeError):
        failure.stage = "other"  # type: ignore[misc]
