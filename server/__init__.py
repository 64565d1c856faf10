"""redraft.server: the front ends over the engine.

The LSP server (`redraft serve`: lsp.py over session.py, with documents and their
tree-sitter trees in document.py, edit history in history.py, the context builder in
context.py, post-processing in postprocess.py, scheduling in scheduler.py, the engine's
executor in inference.py, settings in settings.py, counters in stats.py) and the command
line (`redraft serve`, `redraft complete`, `redraft eval infill`, `redraft pull`) with the
offline infill evaluation behind `eval` (samples.py, metrics.py, syntax.py, evaluation.py).
The HTTP server lands here too. Imports the engine, never the other way round; the engine
must import without anything this package needs.
"""
