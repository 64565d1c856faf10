"""A checkpoint's tokenizer (tokenizer.json via `tokenizers`), plus what infill needs of it.

Knows special tokens by id and the text of every token, so token healing can ask which
tokens start with a given string. Knows nothing of models.
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from .config import LIMITS
from .errors import CorruptFileError, MissingFileError
from .folder import SIDE_BYTES, TOKENIZER_BYTES, Folder

MAX_VOCAB = LIMITS["vocab_size"]  # token ids past it could have no embedding in any model loaded


class Tokenizer:
    def __init__(self, tok: HFTokenizer, config: dict | None = None):
        self.tok = tok
        self.config = config or {}  # tokenizer_config.json (+ special_tokens_map.json)
        self.special_ids = frozenset(
            i for i, t in tok.get_added_tokens_decoder().items() if t.special
        )
        self._strings: list[str] | None = None
        self._max_id: int | None = None
        self._sorted: list[tuple[str, int]] | None = None
        self._by_string: dict[str, int] | None = None

    @classmethod
    def from_folder(cls, folder: Path) -> "Tokenizer":
        """The folder's tokenizer.json (+ tokenizer_config.json, special_tokens_map.json), each
        read as an untrusted file (folder.py: regular, inside the folder, size-capped) and
        parsed from those bytes."""
        place = Folder(folder)
        path = folder / "tokenizer.json"
        if not os.path.lexists(path):
            raise MissingFileError(f"{folder}: no tokenizer.json (needed to encode text)")
        config: dict = {}
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            f = folder / name
            if os.path.lexists(f):
                value = place.read_json(f, SIDE_BYTES)
                if not isinstance(value, dict):
                    raise CorruptFileError(f"{f}: must hold a JSON object, not {type(value).__name__}")
                config.update(value)
        text = place.read_text(path, TOKENIZER_BYTES)
        try:
            tok = HFTokenizer.from_str(text)
        except Exception as e:  # the tokenizers library raises plain Exception for a file it cannot read
            raise CorruptFileError(f"{path}: not a tokenizer the tokenizers library can read "
                                   f"({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})") from None
        out = cls(tok, config)
        if out.max_id >= MAX_VOCAB:
            raise CorruptFileError(f"{path}: token ids up to {out.max_id}, past the {MAX_VOCAB} the loader accepts")
        return out

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    @property
    def max_id(self) -> int:
        """The largest id the tokenizer can produce (an added token may sit far past the count)."""
        if self._max_id is None:
            self._max_id = max(self.tok.get_vocab(with_added_tokens=True).values(), default=-1)
        return self._max_id

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids if text else []

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False) if ids else ""

    def token_id(self, token: str | None) -> int | None:
        return None if token is None else self.tok.token_to_id(token)

    def declared(self, role: str) -> int | None:
        """Id of the token tokenizer_config declares for a role (mask_token, eos_token...)."""
        value = self.config.get(role)
        if isinstance(value, dict):  # AddedToken serialised as {"content": ...}
            value = value.get("content")
        return self.token_id(value) if isinstance(value, str) else None

    # -- token healing -------------------------------------------------------------------

    def strings(self) -> list[str]:
        """The text of every token id (built once, on first use)."""
        if self._strings is None:
            ids = [[i] for i in range(self.vocab_size)]
            self._strings = self.tok.decode_batch(ids, skip_special_tokens=False)
        return self._strings

    def ids_starting_with(self, text: str) -> list[int]:
        """Ids of non-special tokens whose text starts with `text` (a contiguous run when sorted)."""
        if self._sorted is None:
            self._sorted = sorted((s, i) for i, s in enumerate(self.strings())
                                  if i not in self.special_ids and s)
        lo = bisect.bisect_left(self._sorted, (text, -1))
        out = []
        for s, i in self._sorted[lo:]:
            if not s.startswith(text):
                break
            out.append(i)
        return out

    def encode_healed(self, healed: str, text: str) -> list[int] | None:
        """`healed + text` encoded so that the first token starts with `healed` (what token
        healing allows at the span's first position); None when no token can."""
        full = healed + text
        ids = self.encode(full)
        if not healed or (ids and self.strings()[ids[0]].startswith(healed)):
            return ids
        if self._by_string is None:
            self._by_string = {s: i for i, s in enumerate(self.strings()) if i not in self.special_ids and s}
        for n in range(min(len(full), 64), len(healed) - 1, -1):  # the longest allowed first token
            first = self._by_string.get(full[:n])
            if first is not None:
                return [first] + self.encode(full[n:])
        return None
