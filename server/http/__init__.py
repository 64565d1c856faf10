"""The HTTP front (`redraft serve --http`): app.py (the Starlette app and its server),
ollama_routes.py and openai_routes.py (the routes), api.py (streaming, auth, the one error
boundary), models.py (the models served by name), engine.py (requests to snapshots, through
the core's completion pipeline), templates.py (FIM prompt families and request parameters),
stats.py (the counters behind GET /v1/redraft/stats), access.py (the Hosts and web origins
answered), bodies.py (JSON bodies within bounds), engine_routes.py and engine_limits.py (the
engine protocol and the bounds of its calls)."""

# Not Ollama's 11434: redraft beside a running Ollama must not clash with it.
DEFAULT_PORT = 7355
