"""The shared core: everything between an editor's text and the engine that more than one
front end needs. Knows nothing of LSP messages, HTTP or the evaluation."""
