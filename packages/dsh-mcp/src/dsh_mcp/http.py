"""The optional streamable-HTTP transport: loopback only, local Host/Origin, bearer token.

The server binds ``127.0.0.1`` and nothing else. Before the MCP application sees a
request, :class:`LocalGuard` refuses it unless

* its ``Host`` is ``127.0.0.1:<port>`` or ``localhost:<port>`` (421): a DNS-rebinding
  page reaches a loopback port under its own host name;
* its ``Origin``, when present, is ``http://127.0.0.1:<port>`` or
  ``http://localhost:<port>`` (403): a browser page of another origin is refused;
* it carries ``Authorization: Bearer <token>`` with the server's token (401).

A refused request starts nothing: no MCP session, no run, no product process. The token
is the one in ``DSH_MCP_TOKEN`` when set, else a fresh random one generated at start and
shown once on stderr; it is never written anywhere else.
"""

from __future__ import annotations

import hmac
import json
import secrets
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

import anyio
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from dsh_mcp.server import ToolServer
from dsh_mcp.settings import DEFAULT_SESSION_IDLE_SECONDS

__all__ = ["LOOPBACK", "MCP_PATH", "TOKEN_ENV", "LocalGuard", "new_token", "serve_http"]

LOOPBACK: Final = "127.0.0.1"
MCP_PATH: Final = "/mcp"
TOKEN_ENV: Final = "DSH_MCP_TOKEN"
"""Environment variable holding the bearer token to require instead of a generated one."""

_GRACEFUL_SHUTDOWN_SECONDS: Final = 1


def new_token() -> str:
    """A fresh random bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


class LocalGuard:
    """ASGI middleware that admits only local, authenticated requests (see module docs).

    Args:
        app: The MCP application.
        port: The bound port (part of the allowed ``Host`` and ``Origin`` values).
        token: The bearer token every request must carry.
    """

    def __init__(self, app: ASGIApp, *, port: int, token: str) -> None:
        if not token:
            raise ValueError("the bearer token must not be empty")
        self._app = app
        self._hosts = frozenset({f"{LOOPBACK}:{port}", f"localhost:{port}"})
        self._origins = frozenset({f"http://{LOOPBACK}:{port}", f"http://localhost:{port}"})
        self._token = token.encode()

    def refusal(self, headers: Headers) -> tuple[int, str] | None:
        """``(status, reason)`` when the request must be refused, else ``None``."""
        if headers.get("host") not in self._hosts:
            return 421, "Host is not this loopback server"
        origin = headers.get("origin")
        if origin is not None and origin not in self._origins:
            return 403, "Origin is not local"
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            value.strip().encode(), self._token
        ):
            return 401, "missing or wrong bearer token"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)  # lifespan
            return
        refused = self.refusal(Headers(scope=scope))
        if refused is None:
            await self._app(scope, receive, send)
            return
        status, reason = refused
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": reason}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="dsh-mcp"'))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: ``dsh mcp`` owns SIGINT and SIGTERM."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve_http(
    tool_server: ToolServer,
    *,
    port: int,
    token: str,
    stop: anyio.Event,
    on_ready: Callable[[str], None],
    session_idle_seconds: float = DEFAULT_SESSION_IDLE_SECONDS,
) -> None:
    """Serve ``tool_server`` over streamable HTTP on ``127.0.0.1:port`` until ``stop``.

    Args:
        tool_server: The handlers.
        port: The port to bind (``0``: any free port).
        token: The bearer token every request must carry.
        stop: Set to shut down: running calls are cancelled, then the server closes.
        on_ready: Told the endpoint URL once the socket listens.
        session_idle_seconds: A session with no request in flight and no open GET
            stream this long ends as if its client had sent DELETE. Streamable HTTP
            has no connection per session, so this is how the server learns that a
            client went away without its DELETE.

    Raises:
        OSError: the port cannot be bound.
    """
    sock = _bind(port)
    bound = int(sock.getsockname()[1])
    local_hosts = [f"{LOOPBACK}:{bound}", f"localhost:{bound}"]
    app = tool_server.server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        host=LOOPBACK,
        session_idle_timeout=session_idle_seconds,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=local_hosts,
            allowed_origins=[f"http://{host}" for host in local_hosts],
        ),
    )
    config = uvicorn.Config(
        LocalGuard(app, port=bound, token=token),
        lifespan="on",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
    )
    server = _Server(config)

    async def stop_when_asked() -> None:
        await stop.wait()
        tool_server.cancel_calls("the dsh mcp server is stopping")
        await tool_server.wait_calls()
        server.should_exit = True

    async with anyio.create_task_group() as group:
        group.start_soon(stop_when_asked)
        on_ready(f"http://{LOOPBACK}:{bound}{MCP_PATH}")
        try:
            await server.serve(sockets=[sock])
        finally:
            sock.close()
            group.cancel_scope.cancel()
