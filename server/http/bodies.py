"""Request bodies of every HTTP route: read within a size and a time limit, JSON only, decoded
within bounds that the standard decoder does not keep.

  application/json only (415): a web page can send text/plain, form data or a typeless Blob
                     cross-origin without asking the browser's permission first; a JSON body
                     it cannot send without a preflight, which the API refuses (access.py)
  max_body (413), arrival within `timeout` (408)
  nesting at most MAX_DEPTH (400): deep nesting costs the decoder its recursion, not bytes
  no lone UTF-16 surrogate (400): "\\ud800" decodes to a str that no encoder takes later
  no NaN / Infinity, no number beyond a float's range (400): Python's decoder reads them

Each refusal is a BodyError with its status and a message for the client; the routes answer it
in their own shape (api.py, engine_routes.py). A client that leaves raises Starlette's
ClientDisconnect. It knows Starlette's Request and nothing of the routes.
"""

from __future__ import annotations

import asyncio
import json
import math
import operator
import re
from itertools import accumulate
from typing import Any

from starlette.requests import Request

MAX_DEPTH = 64  # real bodies nest 4 deep (a chat message's text parts)
JSON_TYPE = "application/json"
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF][0-9a-fA-F]{2}")  # the only way one gets in
_STRING = re.compile(rb'"(?:[^"\\\\]|\\\\.)*"', re.S)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


class BodyError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def check_type(request: Request) -> None:
    """415 unless the body says it is JSON (`application/json`, parameters allowed)."""
    given = request.headers.get("content-type", "")
    if given.split(";", 1)[0].strip().lower() != JSON_TYPE:
        got = f"got {given[:60]!r}" if given else "none was sent"
        raise BodyError(415, f"the body must be JSON sent with 'Content-Type: {JSON_TYPE}' ({got})")


async def read(request: Request, max_body: int, timeout: float) -> bytes:
    """The body's bytes: 413 past `max_body` (said or counted), 408 when it takes over `timeout`
    seconds to arrive (a client that trickles its body holds nothing up)."""
    size = request.headers.get("content-length", "")
    too_big = BodyError(413, f"the body is over {max_body} bytes")
    if size.isdigit() and int(size) > max_body:
        raise too_big
    chunks, total = [], 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                total += len(chunk)
                if total > max_body:
                    raise too_big
                chunks.append(chunk)
    except TimeoutError:
        raise BodyError(408, f"the body took over {timeout:g} s to arrive") from None
    return b"".join(chunks)


def parse(data: bytes) -> Any:
    """The JSON value of `data`, or BodyError(400) saying what is wrong with it."""
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH and _too_deep(data):
        # Refused before the decoder recurses: a RecursionError is caught, but it leaves this
        # CPython's recursion bookkeeping off (ast.parse fails later in the process).
        raise BodyError(400, f"the body is not valid JSON: nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(data, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise BodyError(400, f"the body is not valid JSON: nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise BodyError(400, f"the body is not valid JSON: {e}") from None
    deep = data.count(b"[") + data.count(b"{") > MAX_DEPTH  # (brackets in strings too: never fewer)
    strings = _SURROGATE_ESCAPE.search(data) is not None
    if deep or strings:
        _check(value, strings)
    return value


def _too_deep(data: bytes) -> bool:
    """Whether brackets outside strings nest deeper than MAX_DEPTH (a running sum, iterated in C)."""
    steps = _NOT_BRACKET.sub(b"", _STRING.sub(b"", data)).translate(_STEP)  # 2 opens, 0 closes
    return bool(steps) and max(map(operator.sub, accumulate(steps), range(1, len(steps) + 1))) > MAX_DEPTH


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    x = float(text)
    if x in (math.inf, -math.inf):
        raise ValueError(f"the number {text[:40]} is out of range")
    return x


def _check(value: Any, strings: bool) -> None:
    """Depth at most MAX_DEPTH and, when `strings`, no lone surrogate in a string or a key
    (iterative: the walk has no recursion to exhaust either)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > MAX_DEPTH:
                raise BodyError(400, f"the body is not valid JSON: nested deeper than {MAX_DEPTH} levels")
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, item in items:
                if strings and isinstance(k, str):
                    _text(k)
                if isinstance(item, (dict, list)) or (strings and isinstance(item, str)):
                    stack.append((item, depth + 1))
        elif strings and isinstance(v, str):
            _text(v)


def _text(s: str) -> None:
    m = _SURROGATE.search(s)
    if m is not None:
        raise BodyError(400, f"the body holds a lone UTF-16 surrogate (\\u{ord(m.group()):04x}) in a string: "
                             f"text must be valid Unicode")
