"""What the user did in one edit event, as next-edit search reads it: a token-level change.

nextedit.py finds them (from an event and the lines as they were before it); sites.py
follows each to the places it recurs. Both import this module and not each other.

Plain data: knows nothing of documents, trees, LSP or the engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Intent:
    kind: str  # "replace" (a token run replaced, removed or inserted) | "append_param"
    old: str  # replaced text ("" for an insertion)
    new: str  # its replacement ("" for a deletion)
    row: int  # row of the edit in the current text
    col: int  # its column
    first_row: int  # rows the event touched, current text
    last_row: int
    name: str = ""  # append_param: the function's name
    after_dot: bool = False  # the replaced identifier was an attribute (x.old)
    left: str = ""  # the tokens on either side of the change on its row ("" at the line's ends)
    right: str = ""
    gap: str = ""  # the text between them now (the change with the user's spacing)
    context: str = ""  # the kind of syntax node that held the change and its neighbours before it
    ops: int = 1  # token runs the event changed (this intent is one of them)
    right_space: str = ""  # the spacing after the right neighbour now (`x: int = None`: " ")
