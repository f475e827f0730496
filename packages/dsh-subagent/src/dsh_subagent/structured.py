"""Typed results: an answer that must match an output schema (rules ``output:*``).

A request's ``output_schema`` is a pydantic model class or an object-rooted JSON
Schema. A provider declares the ``output_schema`` capability only when its product
constrains the answer itself (``output:flag-honest``); whatever the product promises,
the host validates the final answer here in every case:

* a conforming answer settles ``completed`` with ``structured`` set: an instance of the
  model when a model was given, the parsed JSON otherwise; the text stays in ``output``
  (``output:conforming-yields-object``);
* any other answer settles ``error`` with the fixed category :data:`OUTPUT_INVALID`
  (``output:nonconforming-fails``). The diagnostic names where (a JSON path) and how (a
  kind of violation) it failed, never the answer's text or values: a path segment that
  is not a property name of the schema reads ``*``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, TypeAlias

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.exceptions import ValidationError as SchemaViolation
from pydantic import AfterValidator, BaseModel, JsonValue
from pydantic import ValidationError as ModelViolation

from dsh_subagent.diagnostics import limit_diagnostic
from dsh_subagent.errors import SubagentError, SubagentErrorCode
from dsh_subagent.types import COMPLETED, ERROR, SubagentResult, SubagentRun

__all__ = [
    "MAX_REPORTED_VIOLATIONS",
    "OUTPUT_INVALID",
    "JsonOutputSchema",
    "OutputSchema",
    "OutputViolation",
    "StructuredRun",
    "check_output_schema",
    "output_failure_line",
    "output_json_schema",
    "settle_structured",
    "validate_answer",
]

OUTPUT_INVALID: Final = "output-invalid"
"""The failure category of an answer that does not match the requested output schema."""

MAX_REPORTED_VIOLATIONS: Final = 8
"""At most this many violations are named; the rest are counted."""

OutputSchema: TypeAlias = Mapping[str, JsonValue] | type[BaseModel]
"""What a request's ``output_schema`` holds: a JSON Schema or a pydantic model class."""

_ROOT_MESSAGE: Final = (
    'subagent output_schema must be an object-rooted JSON Schema ({"type": "object"})'
)
_SAFE_SEGMENT = re.compile(r"[A-Za-z0-9_\-]{1,64}")
_SAFE_KEYWORD = re.compile(r"[A-Za-z]{1,32}")


@dataclass(frozen=True, slots=True)
class OutputViolation:
    """One way an answer failed its schema: where (``$.a[0].b``) and how."""

    path: str
    kind: str

    def line(self) -> str:
        """``<path>: <kind>``."""
        return f"{self.path}: {self.kind}"


def output_json_schema(schema: OutputSchema) -> dict[str, JsonValue]:
    """The JSON Schema a product is given: the model's schema, or the mapping as a dict."""
    if isinstance(schema, type):
        return schema.model_json_schema()
    return dict(schema)


def check_output_schema(schema: object) -> dict[str, JsonValue]:
    """Refuse a schema that is not an object-rooted, valid JSON Schema (before start).

    Raises:
        SubagentError: ``INVALID_REQUEST``, naming the field (never the schema's text).
    """
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            resolved = output_json_schema(schema)
        except Exception as exc:  # e.g. a field type JSON Schema cannot express
            raise SubagentError(
                SubagentErrorCode.INVALID_REQUEST,
                f"subagent output_schema: the model has no JSON Schema ({type(exc).__name__})",
            ) from None
    elif isinstance(schema, Mapping):
        resolved = dict(schema)
    else:
        raise SubagentError(SubagentErrorCode.INVALID_REQUEST, _ROOT_MESSAGE)
    if resolved.get("type") != "object":
        raise SubagentError(SubagentErrorCode.INVALID_REQUEST, _ROOT_MESSAGE)
    refs = list(_refs(resolved))
    if any(not ref.startswith("#") for ref in refs):
        raise SubagentError(
            SubagentErrorCode.INVALID_REQUEST,
            "subagent output_schema: only local references ($ref to #/...) are supported; "
            "nothing is fetched",
        )
    if any(not _resolves(resolved, ref) for ref in refs):
        raise SubagentError(
            SubagentErrorCode.INVALID_REQUEST,
            "subagent output_schema: a local reference ($ref) points at nothing in the schema",
        )
    try:
        Draft202012Validator.check_schema(resolved)
    except SchemaError as exc:
        where = _schema_path(exc)
        raise SubagentError(
            SubagentErrorCode.INVALID_REQUEST,
            f"subagent output_schema is not a valid JSON Schema (at {where}: "
            f"invalid {_keyword(exc.validator)})",
        ) from None
    return resolved


def _checked_field(value: dict[str, JsonValue]) -> dict[str, JsonValue]:
    try:
        check_output_schema(value)
    except SubagentError as exc:
        raise ValueError(exc.message) from None
    return value


JsonOutputSchema: TypeAlias = Annotated[dict[str, JsonValue], AfterValidator(_checked_field)]
"""A configuration field holding an object-rooted JSON Schema, refused at validation as
:func:`check_output_schema` refuses a request's (one check for the tool configuration
and a profile's tool rows)."""


def _refs(schema: object) -> Iterator[str]:
    """Every ``$ref`` string in the schema."""
    if isinstance(schema, Mapping):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            yield ref
        for value in schema.values():
            yield from _refs(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _refs(item)


def _resolves(schema: Mapping[str, JsonValue], ref: str) -> bool:
    """Whether the local JSON pointer ``ref`` (``#/a/b``) names a part of ``schema``."""
    node: object = schema
    for raw in ref[1:].split("/")[1:] if ref != "#" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def _schema_path(exc: SchemaError) -> str:
    parts = [p for p in exc.absolute_path if isinstance(p, int) or _SAFE_SEGMENT.fullmatch(p)]
    return "output_schema" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _keyword(value: object) -> str:
    return value if isinstance(value, str) and _SAFE_KEYWORD.fullmatch(value) else "keyword"


def _property_names(schema: object) -> Iterator[str]:
    """Every property name the schema declares, anywhere (``$defs`` included)."""
    if isinstance(schema, Mapping):
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            yield from (name for name in properties if isinstance(name, str))
        for value in schema.values():
            yield from _property_names(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _property_names(item)


class _Paths:
    """Renders a JSON path that names only what the schema itself declares."""

    def __init__(self, schema: Mapping[str, JsonValue]) -> None:
        self._known = frozenset(n for n in _property_names(schema) if _SAFE_SEGMENT.fullmatch(n))

    def render(self, parts: Iterator[object] | list[object] | tuple[object, ...]) -> str:
        out = "$"
        for part in parts:
            if isinstance(part, int) and not isinstance(part, bool):
                out += f"[{part}]"
            elif isinstance(part, str) and part in self._known:
                out += f".{part}"
            else:
                out += ".*"  # a key the answer chose: its text is not repeated
        return out


def _describe(error: SchemaViolation, paths: _Paths) -> Iterator[OutputViolation]:
    where = paths.render(list(error.absolute_path))
    keyword = error.validator
    if keyword == "type":
        expected = error.validator_value
        names = expected if isinstance(expected, list) else [expected]
        shown = " or ".join(str(n) for n in names if isinstance(n, str) and n.isalpha())
        yield OutputViolation(where, f"wrong type (expected {shown or 'another type'})")
    elif keyword == "required":
        instance = error.instance if isinstance(error.instance, dict) else {}
        required = error.validator_value if isinstance(error.validator_value, list) else []
        missing = [name for name in required if isinstance(name, str) and name not in instance]
        for name in missing:
            if _SAFE_SEGMENT.fullmatch(name):
                yield OutputViolation(where, f"missing field {name!r}")
            else:
                yield OutputViolation(where, "missing field")
    elif keyword in {"additionalProperties", "unevaluatedProperties"}:
        yield OutputViolation(where, "unexpected field")
    elif keyword in {"enum", "const"}:
        yield OutputViolation(where, "not an allowed value")
    elif keyword in {"anyOf", "oneOf"}:
        yield OutputViolation(where, "matches none of the allowed shapes")
    else:
        yield OutputViolation(where, f"violates {_keyword(keyword)}")


def validate_answer(text: str, schema: OutputSchema) -> tuple[Any, tuple[OutputViolation, ...]]:
    """Parse and validate ``text`` against ``schema``.

    Returns:
        ``(value, ())`` for a conforming answer (a model instance when ``schema`` is a
        model class, else the parsed JSON), or ``(None, violations)``.
    """
    json_schema = output_json_schema(schema)
    paths = _Paths(json_schema)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None, (OutputViolation("$", "not JSON"),)
    try:
        errors = sorted(
            Draft202012Validator(json_schema).iter_errors(value),
            key=lambda e: [str(p) for p in e.absolute_path],
        )
    except RecursionError:
        return None, (OutputViolation("$", "nested too deeply to validate"),)
    except Exception as exc:  # a reference that does not resolve: never a raise out of result()
        return None, (OutputViolation("$", f"the schema cannot be applied ({type(exc).__name__})"),)
    violations = tuple(v for error in errors for v in _describe(error, paths))
    if violations:
        return None, violations
    if not isinstance(schema, type):
        return value, ()
    try:
        return schema.model_validate(value), ()
    except ModelViolation as exc:
        # The model's own checks (validators, constraints the schema cannot say). Only the
        # location and the error type are kept: pydantic's message and input may hold
        # the answer's values.
        errors_ = exc.errors(include_url=False, include_input=False, include_context=False)
        found = tuple(
            OutputViolation(paths.render(list(e["loc"])), f"fails {_keyword_type(e['type'])}")
            for e in errors_
        )
        return None, found


def _keyword_type(value: str) -> str:
    return value if re.fullmatch(r"[a-z_]{1,48}", value) else "model validation"


def output_failure_line(violations: tuple[OutputViolation, ...]) -> str:
    """The bounded diagnostic of a non-conforming answer (``diagnostic:bounded``).

    ``Structured output failure (category: output-invalid)`` then one line per
    violation (at most :data:`MAX_REPORTED_VIOLATIONS`, the rest counted).
    """
    lines = [f"Structured output failure (category: {OUTPUT_INVALID})"]
    lines.extend(v.line() for v in violations[:MAX_REPORTED_VIOLATIONS])
    rest = len(violations) - MAX_REPORTED_VIOLATIONS
    if rest > 0:
        lines.append(f"(and {rest} more violations)")
    return limit_diagnostic("\n".join(lines))


def settle_structured(result: SubagentResult, schema: OutputSchema) -> SubagentResult:
    """A completed result validated against ``schema``; other results unchanged."""
    if result.stop_reason != COMPLETED:
        return result
    value, violations = validate_answer(result.text, schema)
    if violations:
        return result.model_copy(
            update={
                "stop_reason": ERROR,
                "structured": None,
                "diagnostic": output_failure_line(violations),
            }
        )
    return result.model_copy(update={"structured": value})


class StructuredRun:
    """A provider's run whose result the host validates against the request's schema.

    The service wraps every run started with an ``output_schema`` in one, whatever the
    provider, so the guarantee is the host's and not only the product's.
    """

    __slots__ = ("_inner", "_schema", "_settled")

    def __init__(self, inner: SubagentRun, schema: OutputSchema) -> None:
        self._inner = inner
        self._schema = schema
        self._settled: SubagentResult | None = None

    @property
    def id(self) -> str:
        """The provider run's id."""
        return self._inner.id

    @property
    def local_agent(self) -> object | None:
        """The provider run's in-process agent."""
        return self._inner.local_agent

    @property
    def progress(self) -> object | None:
        """The provider run's progress stream, if it has one."""
        return getattr(self._inner, "progress", None)

    async def result(self) -> SubagentResult:
        """The provider's result, validated once (every await returns the same value)."""
        result = await self._inner.result()
        if self._settled is None:
            self._settled = settle_structured(result, self._schema)
        return self._settled

    async def dispose(self) -> None:
        """Dispose the provider run."""
        await self._inner.dispose()
