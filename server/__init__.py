"""redraft.server: the front ends over the engine.

Today: the command line (`redraft complete`, `redraft eval infill`, `redraft pull`) and the
offline infill evaluation behind `eval` (samples.py, metrics.py, syntax.py, evaluation.py).
The LSP and HTTP servers, tree-sitter contexts and post-processing land here too. Imports
the engine, never the other way round; the engine must import without anything this
package needs.
"""
