"""Local counters behind `redraft/stats`: requests, outcomes, user feedback, latency.

Nothing here leaves the machine. Latency is kept for the last LATENCY_WINDOW answered
requests (milliseconds from the request's arrival to its answer) and reported as p50/p95,
for all of them and for those that waited for an engine run (not type-through).

It knows nothing of LSP or the engine.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

LATENCY_WINDOW = 1000


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[k]


@dataclass
class Counters:
    requests: int = 0  # inlineCompletion requests received
    answered: int = 0  # answered with at least one item
    empty: int = 0  # answered with an empty list (nothing worth showing, disabled, bad input)
    cancelled: int = 0  # superseded by a newer request or cancelled by the client
    errors: int = 0  # messages that failed inside the server (logged, answered empty)
    errors_by_method: dict = field(default_factory=dict)  # LSP method -> errors
    model_runs: int = 0  # engine calls that finished
    type_through: int = 0  # answered from the suggestion on screen, no model run
    answered_loading: int = 0  # answered from drafts while the first model loaded (no model yet)
    shown: int = 0  # textDocument/didShowCompletion
    accepted: int = 0  # the accept command
    partially_accepted: int = 0  # textDocument/didPartiallyAcceptCompletion
    peak_in_flight: int = 0  # most engine jobs queued or running for one document at once
    prefetched: int = 0  # completions computed ahead of time after an accept
    abstained: int = 0  # the model judged every candidate too unlikely to show
    # What answered -> count: model, a draft's source (buffer / open / recent / workspace), name.
    sources: dict = field(default_factory=dict)
    draft_tokens_kept: int = 0  # draft tokens the model kept, over all answers from drafts
    edits_proposed: int = 0  # next edits proposed (after the model's judgement)
    edits_dropped: int = 0  # next-edit judgements stopped part-way: the document changed (or a newer ask)
    edits_late: int = 0  # next-edit judgements whose own budget (nextEditTime) ran out first: a busy machine
    edits_shown: int = 0  # textDocument/didShowInlineEdit
    edits_accepted: int = 0  # the accept-edit command
    edits_moved_past: int = 0  # next edits given to the client that its next change left untouched
    edits_withheld: int = 0  # proposals not given again: moved past twice in one edit event (with their whole set)
    edits_reversals: int = 0  # proposals withheld because they would undo one of the user's recent edits
    remote_fallbacks: int = 0  # completions the remote engine failed, answered from drafts (or nothing)
    budget_expired: int = 0  # completions whose time budget (max_time) ran out: stopped early, or never ran
    remote_outages: int = 0  # times the remote engine went away (each told to the client once)
    latencies: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))
    engine_latencies: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))  # those that ran it

    def count_source(self, answer) -> None:
        """Record where a finished engine (or draft-only) job's answer came from."""
        if answer.abstained:
            self.abstained += 1
        elif answer.edit is not None and answer.source:
            self.sources[answer.source] = self.sources.get(answer.source, 0) + 1
            self.draft_tokens_kept += answer.kept

    def count_error(self, method: str) -> None:
        self.errors += 1
        self.errors_by_method[method] = self.errors_by_method.get(method, 0) + 1

    def as_dict(self) -> dict:
        d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.__dict__.items()
             if k not in ("latencies", "engine_latencies")}
        found = self.edits_proposed + self.edits_reversals  # the reversal ratio: of what the rules found
        d["edits_reversal_ratio"] = round(self.edits_reversals / found, 4) if found else 0.0
        for name, values in (("latency_ms", self.latencies), ("engine_latency_ms", self.engine_latencies)):
            lat = list(values)
            d[name] = {"p50": round(percentile(lat, 0.5), 3), "p95": round(percentile(lat, 0.95), 3),
                       "count": len(lat)}
        return d
