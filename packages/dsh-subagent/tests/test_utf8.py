"""Text a product cannot read is refused where it enters: the start request and the config.

A lone surrogate (what an undecodable byte becomes in a Python ``str``) cannot be encoded
as UTF-8, so no product wire can carry it; a product that receives it may never answer.
The service refuses such a request before the provider is called, naming the field and
never repeating the text; a provider configuration refuses such a value at load.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh_subagent import (
    AgentOptions,
    ParentContext,
    ProductConfig,
    SubagentCapabilities,
    SubagentError,
    SubagentErrorCode,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    ToolFilter,
    check_request_text,
    delegate,
    is_utf8_text,
)
from dsh_subagent.testing import ScriptedProvider
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

ALL = SubagentCapabilities(
    agent_options=True, output_schema=True, depth_limit=True, tool_filter=True, persona=True
)
BAD = "fix \udcff this"  # what `dsh run ... "$(printf 'fix \xff this')"` hands Python
SECRET_PART = "fix "


def _request(tmp_path: Path, **fields: object) -> SubagentStartRequest:
    base: dict[str, object] = {
        "prompt": (TextBlock(text="task"),),
        "parent": ParentContext(session_id="s", cwd=str(tmp_path)),
    }
    return SubagentStartRequest.model_validate({**base, **fields})


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"prompt": (TextBlock(text="ok "), TextBlock(text=BAD))}, "prompt"),
        ({"persona": BAD}, "persona"),
        ({"label": BAD}, "label"),
        ({"agent_options": AgentOptions(model=BAD)}, "agent_options.model"),
        ({"tool_filter": ToolFilter(allow=("read", BAD))}, "tool_filter.allow[1]"),
        ({"output_schema": {"type": "object", "description": BAD}}, "output_schema.description"),
    ],
)
def test_the_refusal_names_the_field_and_never_the_text(
    tmp_path: Path, fields: dict[str, object], named: str
) -> None:
    with pytest.raises(SubagentError) as caught:
        check_request_text(_request(tmp_path, **fields))
    assert caught.value.code is SubagentErrorCode.INVALID_REQUEST
    message = caught.value.message
    assert f'request field "{named}" is not valid UTF-8 text' in message
    assert SECRET_PART not in message
    assert is_utf8_text(message)


def test_a_parent_cwd_with_an_undecodable_byte_is_refused(tmp_path: Path) -> None:
    parent = ParentContext(session_id="s", cwd=str(tmp_path) + "/\udcff")
    with pytest.raises(SubagentError, match=r'request field "parent\.cwd"'):
        check_request_text(_request(tmp_path, parent=parent))


@given(st.text(alphabet=st.characters(exclude_categories=())))
def test_any_string_is_refused_exactly_when_utf8_cannot_encode_it(text: str) -> None:
    request = SubagentStartRequest(
        prompt=(TextBlock(text=text),), parent=ParentContext(session_id="s"), persona=text
    )
    encodable = not any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)
    assert is_utf8_text(text) is encodable
    if encodable:
        check_request_text(request)
    else:
        with pytest.raises(SubagentError, match='request field "prompt"'):
            check_request_text(request)


@pytest.mark.anyio
async def test_the_service_refuses_before_the_provider_is_called(tmp_path: Path) -> None:
    provider = ScriptedProvider("p", capabilities=ALL)
    events: list[object] = []
    async with SubagentService() as service:
        service.add_listener(events.append)
        service.register_provider(provider)
        events.clear()
        for fields in ({"prompt": (TextBlock(text=BAD),)}, {"persona": BAD}):
            with pytest.raises(SubagentError) as caught:
                await service.start("p", _request(tmp_path, **fields))
            assert caught.value.code is SubagentErrorCode.INVALID_REQUEST
            assert SECRET_PART not in caught.value.message
    assert provider.start_count == 0
    assert events == []


@pytest.mark.anyio
async def test_delegate_gives_a_library_caller_the_same_refusal(tmp_path: Path) -> None:
    provider = ScriptedProvider("p")
    with pytest.raises(SubagentError) as caught:
        await delegate(provider, BAD, cwd=tmp_path)
    assert caught.value.code is SubagentErrorCode.INVALID_REQUEST
    assert 'request field "prompt"' in caught.value.message
    assert SECRET_PART not in caught.value.message
    assert provider.start_count == 0


class _Config(ProductConfig):
    provider_name: str = "p"
    model: str | None = None
    args: tuple[str, ...] = ()


@pytest.mark.parametrize(
    ("values", "loc"),
    [
        ({"model": BAD}, ("model",)),
        ({"args": ("--x", BAD)}, ("args",)),
        ({"provider_name": BAD}, ("provider_name",)),
    ],
)
def test_a_config_value_utf8_cannot_encode_is_refused_at_load(
    values: dict[str, object], loc: tuple[str, ...]
) -> None:
    with pytest.raises(ValidationError) as caught:
        _Config.model_validate(values)
    (error,) = caught.value.errors(include_input=False)
    assert error["loc"] == loc
    assert "is not valid UTF-8 text" in error["msg"]
    assert SECRET_PART not in error["msg"]


def test_the_env_overlay_is_bytes_for_the_os_and_keeps_an_undecodable_byte() -> None:
    # An inherited variable passed on (pass_env) may hold any byte: os.environ decodes it
    # with surrogateescape and the spawn encodes it back exactly, on no product wire.
    assert _Config(env={"LEGACY": "caf\udce9"}).env == {"LEGACY": "caf\udce9"}
