"""Who may reach the HTTP API: the Host a request names, the web page (Origin) it comes from.

A web page can reach a loopback port two ways. By DNS rebinding: its own name starts to
resolve to 127.0.0.1, and the browser, thinking it talks to the page's own site, sends the
page's name as Host and lets it read the answers. Or as a drive-by: it posts to
http://127.0.0.1:PORT directly (the answers stay unreadable, but the work is done). So, on a
server bound to loopback, only a loopback Host (localhost, 127.0.0.1 or any 127.x address,
[::1], with the served port or none) or one the user allows (`Access.hosts`; "NAME:PORT" for
that port alone, "*" for any) is answered: 421 otherwise. A server bound beyond loopback is
reached by names it cannot know and holds a token (the CLI insists), which no web page has:
there any Host is answered. A request from a web page (an Origin header, or Sec-Fetch-Site
naming another site) is answered only when the user allows that origin (`Access.origins`):
403 otherwise, before any route runs, and without CORS headers, so a browser's preflight
fails. Editors and scripts send no Origin. Bodies must be JSON (bodies.py): a page cannot post
JSON cross-origin without that preflight.

`Guard` is the ASGI middleware that applies an Access; refusals are JSON in the shape of the
route's family and counted (`on_refusal(status)`). It knows ASGI and nothing of the routes.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Callable

LOOPBACK_NAMES = ("localhost",)
ENGINE_PREFIX = "/v1/redraft/engine/"


@dataclass(frozen=True)
class Access:
    """What the user allows beyond loopback callers without a web page (the CLI's options)."""

    hosts: tuple[str, ...] = ()  # more Host names answered: "name", "name:port", or "*" (any)
    origins: tuple[str, ...] = ()  # web origins answered, as browsers send them ("https://a.example:8443")
    engine_routes: bool = False  # serve the engine protocol (/v1/redraft/engine/...) without a token

    def __post_init__(self) -> None:
        object.__setattr__(self, "hosts", tuple(h.strip().lower().rstrip(".") for h in self.hosts if h.strip()))
        object.__setattr__(self, "origins", tuple(o.strip().lower().rstrip("/") for o in self.origins if o.strip()))


def split_host(value: str) -> tuple[str, str]:
    """(name, port) of a Host header ("" when absent); the name lower-case, without the
    brackets of an IPv6 literal or a final dot."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else rest
    else:
        name, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    return name.rstrip("."), port


def is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_allowed(header: str, access: Access, served_port: int | None) -> bool:
    name, port = split_host(header)
    if not name or (port and not port.isdigit()):
        return False
    if "*" in access.hosts or (port and f"{name}:{port}" in access.hosts):
        return True
    on_port = not port or served_port is None or int(port) == served_port
    return on_port and (is_loopback(name) or name in access.hosts)


class Guard:
    """ASGI middleware: refuses a request whose Host or web origin `access` does not allow."""

    def __init__(self, app, access: Access, on_refusal: Callable[[int], None] | None = None):
        self.app, self.access, self.on_refusal = app, access, on_refusal

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refusal = self.refusal(scope)
        if refusal is None:
            return await self.app(scope, receive, send)
        status, message = refusal
        if self.on_refusal is not None:
            self.on_refusal(status)
        body = json.dumps(_shape(scope.get("path", ""), status, message)).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"vary", b"Origin")]})
        await send({"type": "http.response.body", "body": body})

    def refusal(self, scope) -> tuple[int, str] | None:
        """(status, message) when the request is refused, else None."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        bound, port = (scope.get("server") or (None, None))[:2]
        if bound is None or is_loopback(str(bound)):  # (in-process callers give no server)
            host = headers.get("host", "")
            if not host_allowed(host, self.access, port):
                what = f"the Host {host[:80]!r}" if host else "a request without a Host header"
                return 421, (f"{what} is not served here: this server answers localhost, 127.0.0.1 and [::1] "
                             f"(start it with --allow-host NAME to answer another name)")
        origin = headers.get("origin")
        if origin is not None and origin.strip().lower().rstrip("/") not in self.access.origins:
            return 403, (f"requests from web pages are refused (Origin {origin[:80]!r}); start the server with "
                         f"--allow-origin ORIGIN to answer that page")
        site = headers.get("sec-fetch-site", "").lower()
        if origin is None and site in ("cross-site", "same-site"):
            return 403, f"requests from web pages are refused (Sec-Fetch-Site: {site})"
        return None


def _shape(path: str, status: int, message: str) -> dict:
    """The refusal in the family's shape: Ollama's, the engine protocol's, OpenAI's."""
    if path.startswith("/api/"):
        return {"error": message}
    if path.startswith(ENGINE_PREFIX):
        return {"status": status, "message": message}
    kind = "permission_error" if status == 403 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}
