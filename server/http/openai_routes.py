"""OpenAI-style routes: POST /v1/completions (prompt + suffix, or a template prompt;
max_tokens, temperature, stop, n), the same answer at Inception's POST /v1/fim/completions,
Inception's next edit at POST /v1/edit/completions, GET /v1/models, and redraft's own
GET /v1/redraft/stats. Streamed as server-sent events with `stream: true`.

Each is `route(api, request)`, inside Api.route's boundary (api.py).
"""

from __future__ import annotations

import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..core.remote import RemoteEngine
from . import templates
from .api import Api, sse_event, timing, usage


async def completions(api: Api, request: Request) -> Response:
    body = await api.json(request)
    model = api.models.pick(body)
    fim, p = templates.openai_params(body)
    job = api.fim_job(model, fim, p)
    head = {"id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
            "model": model}
    if not (p.stream or p.diffusing):
        choices = await api.run(request, job)
        return JSONResponse({**head, "choices": [{"text": c.text, "index": i, "logprobs": None,
                                                  "finish_reason": c.finish} for i, c in enumerate(choices)],
                             "usage": usage(choices)}, headers=timing(choices))

    def chunk(i: int, text: str, finish: str | None = None) -> str:
        return sse_event({**head, "choices": [{"text": text, "index": i, "logprobs": None, "finish_reason": finish}]})
    return api.sse_response(job, chunk, p.diffusing)


async def edit(api: Api, request: Request) -> Response:
    """Inception's next edit, in the chat-completions shape: `choices[0].message.content` is
    the rewritten code_to_edit region, or null when there is no edit (a string would be
    ambiguous: the region may well read "None"). Streamed, the chunks' `delta.content`
    says the same; with `diffusing` the last one with content holds the final answer."""
    body = await api.json(request)
    model = api.models.pick(body)
    ep, p = templates.edit_prompt(body)
    job = api.edit_job(model, ep, p)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": model}
    if not (p.stream or p.diffusing):
        c = (await api.run(request, job))[0]
        return JSONResponse({**head, "choices": [{"index": 0, "message": {"role": "assistant", "content": c.text},
                                                  "finish_reason": c.finish}], "usage": usage([c])},
                            headers=timing([c]))

    def chunk(i: int, text: str | None, finish: str | None = None) -> str:
        delta = {"role": "assistant", "content": text} if text or text is None or finish is None else {}
        return sse_event({**head, "object": "chat.completion.chunk",
                          "choices": [{"index": i, "delta": delta, "finish_reason": finish}]})
    return api.sse_response(job, chunk, p.diffusing)


async def models(api: Api, request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [
        {"id": name, "object": "model", "created": int(time.time()), "owned_by": "redraft"}
        for name in api.models.names()]})


async def stats(api: Api, request: Request) -> Response:
    engine = api.inference.engine
    return JSONResponse({**api.stats.as_dict(), "model": None if engine is None else engine.name,
                         "model_error": api.inference.load_error,
                         **({"remote": engine.status()} if isinstance(engine, RemoteEngine) else {})})
