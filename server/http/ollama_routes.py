"""Ollama's routes: POST /api/generate (a FIM prompt in a family's template, or prompt +
suffix; options.num_predict, temperature, stop; streamed as newline-delimited JSON unless
`stream: false`, Ollama's default being to stream), GET /api/tags and POST /api/show (the
model listing and details Zed's provider asks for).

Each is `route(api, request)`, inside Api.route's boundary (api.py).
"""

from __future__ import annotations

import json
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from redraft.engine import Stats

from . import templates
from .api import Api, now, timing
from .engine import ApiChoice


async def generate(api: Api, request: Request) -> Response:
    body = await api.json(request)
    model = api.models.pick(body)
    fim, p = templates.ollama_params(body)
    job = api.fim_job(model, fim, p)

    def line(text: str, done: bool, choice: ApiChoice | None = None) -> dict:
        out = {"model": model, "created_at": now(), "response": text, "done": done}
        if choice is not None:
            st = choice.stats or Stats()
            out.update(done_reason=choice.finish, total_duration=int(st.total_ms * 1e6),
                       prompt_eval_count=st.context_tokens, eval_count=st.span_tokens)
        return out

    if not fim.prefix and not fim.suffix:  # Ollama's way to load a model: nothing to complete
        return JSONResponse({**line("", True), "done_reason": "load"})
    if not (p.stream or p.diffusing):
        c = (await api.run(request, job))[0]
        return JSONResponse(line(c.text, True, c), headers=timing([c]))

    async def ndjson() -> AsyncIterator[str]:
        async for kind, item in api.events(job, p.diffusing):
            if kind == "preview":
                yield json.dumps(line(item[1], False)) + "\n"
            elif kind == "error":
                yield json.dumps({"error": item.message}) + "\n"
            else:
                c = item[0]
                if not p.diffusing:
                    yield json.dumps(line(c.text, False)) + "\n"
                yield json.dumps(line(c.text if p.diffusing else "", True, c)) + "\n"
    return StreamingResponse(ndjson(), media_type="application/x-ndjson")


async def tags(api: Api, request: Request) -> Response:
    return JSONResponse({"models": [{"name": name, "model": name, **api.models.describe(name)}
                                    for name in api.models.names()]})


async def show(api: Api, request: Request) -> Response:
    body = await api.json(request)
    name = api.models.pick(body)
    info = api.models.describe(name)
    return JSONResponse({"modelfile": "", "parameters": "", "template": "", "details": info["details"],
                         "model_info": {}, "capabilities": ["completion", "insert"],
                         "modified_at": info["modified_at"]})
