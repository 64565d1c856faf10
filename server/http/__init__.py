"""The HTTP front (`redraft serve --http`): app.py (Starlette routes, streaming, auth),
engine.py (requests to snapshots, through the core's completion pipeline), templates.py
(FIM prompt families and request parameters)."""
