"""The LSP front (`redraft serve`): protocol.py (the wire), server.py (thin handlers behind
one error boundary), session.py (all mutable state, the keystroke path), scheduler.py
(latest request wins), stats.py (`redraft/stats`)."""
