"""Released-API snapshots: the names and signatures each distribution exports.

``python scripts/api_snapshot.py`` rewrites ``scripts/api_snapshots/<distribution>.txt``;
``tests/test_public_api.py`` (under ``scripts/``) fails when the live API differs, so an
accidental breaking change shows up in review as a snapshot diff.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import os
import re
import sys
from pathlib import Path

SNAPSHOT_DIR = Path(__file__).resolve().parent / "api_snapshots"

DISTRIBUTIONS = {
    "dsh-subprocess": "dsh_subprocess",
    # A second public module of dsh-subprocess: the process watch the kit builds on.
    "dsh-subprocess.testing": "dsh_subprocess.testing",
    "dsh-subagent": "dsh_subagent",
    "dsh-tool-jobs": "dsh_tool_jobs",
    "dsh-subagent-codex": "dsh_subagent_codex",
    "dsh-subagent-claude-code": "dsh_subagent_claude_code",
    "dsh-subagent-acp": "dsh_subagent_acp",
    "dsh-profiles": "dsh_profiles",
    "dsh-batch": "dsh_batch",
    "dsh-cli": "dsh_cli",
    "dsh-pydantic-ai": "dsh_pydantic_ai",
    "dsh-openai-agents": "dsh_openai_agents",
    "dsh-mcp": "dsh_mcp",
    "dsh-otel": "dsh_otel",
    "dsh-worktree": "dsh_worktree",
    # Test helpers for hosts: a private git home and a scratch repository.
    "dsh-worktree.testing": "dsh_worktree.testing",
    "dsh-contract-tests": "dsh_contract_tests",
}


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _signature(obj: object) -> str:
    try:
        text = str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "(...)"
    return _ADDRESS.sub("", text)  # default values that are objects print their address


def _annotation(annotation: object) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return _ADDRESS.sub("", repr(annotation))  # a validator function in Annotated[...]


def _value(value: object) -> str:
    if isinstance(value, str) and os.path.isabs(value):
        return "<absolute path>"  # where the package is installed is not API
    if isinstance(value, (frozenset, set)):
        return "{" + ", ".join(sorted(repr(v) for v in value)) + "}"
    text = repr(value)
    return text if len(text) <= 120 and " at 0x" not in text else type(value).__name__


def _class_lines(name: str, cls: type) -> list[str]:
    bases = ", ".join(b.__name__ for b in cls.__bases__ if b is not object)
    lines = [f"class {name}({bases})"]
    if issubclass(cls, enum.Enum):
        lines += [f"    {member.name} = {member.value!r}" for member in cls]
        return lines
    fields = getattr(cls, "model_fields", None)
    if isinstance(fields, dict):
        for field_name, info in fields.items():
            default = "required" if info.is_required() else _value(info.get_default())
            lines.append(f"    field {field_name}: {_annotation(info.annotation)} = {default}")
    elif dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            lines.append(f"    field {f.name}: {f.type}")
    for attr, member in sorted(vars(cls).items()):
        if attr.startswith("_") and attr != "__init__":
            continue
        if isinstance(member, property):
            lines.append(f"    property {attr}")
        elif isinstance(member, (staticmethod, classmethod)):
            lines.append(f"    {type(member).__name__} {attr}{_signature(member.__func__)}")
        elif inspect.isfunction(member):
            kind = "async def" if inspect.iscoroutinefunction(member) else "def"
            lines.append(f"    {kind} {attr}{_signature(member)}")
    return lines


def snapshot(module_name: str) -> str:
    """Render the public API of ``module_name`` (its ``__all__``) as stable text."""
    module = importlib.import_module(module_name)
    names = sorted(getattr(module, "__all__", []))
    lines = [f"# public API of {module_name}"]
    for name in names:
        obj = getattr(module, name)
        if inspect.isclass(obj):
            lines += _class_lines(name, obj)
        elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
            kind = "async def" if inspect.iscoroutinefunction(obj) else "def"
            lines.append(f"{kind} {name}{_signature(obj)}")
        else:
            lines.append(f"{name} = {_value(obj)}")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Rewrite every snapshot file from the live API."""
    SNAPSHOT_DIR.mkdir(exist_ok=True)
    for distribution, module_name in DISTRIBUTIONS.items():
        (SNAPSHOT_DIR / f"{distribution}.txt").write_text(snapshot(module_name), encoding="utf-8")
        print(f"api_snapshot: wrote {distribution}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
