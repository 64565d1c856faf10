"""The evaluation front (`redraft eval`): infill.py (completions at sampled cursors),
nextedit.py (next edits after real-code scenarios), samples.py (drawing cursors),
metrics.py (scores, by the server's own unit-end rule), syntax.py (parse-error checks)."""
