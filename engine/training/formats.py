"""The token-level format of redraft's own models: special tokens, layout, edit history.

Both shipped models (diffusion and its autoregressive twin) read the same sequence:

    [extra] <|fim_suffix|> suffix <|fim_prefix|> prefix <|fim_middle|> span

Stable parts first: typing at the cursor only appends to the prefix, so every key/value
before it survives a keystroke. Extra context (edit history, definitions from other files)
changes rarely and comes first; the suffix's positions do not move while the user types.
The span is the masked region (diffusion) or the continuation (autoregressive); it ends
with <|endoftext|>, which also pads variable-length spans.

Edit history, oldest event first, each event a removed/added line pair block:

    <|history|>-old line
    +new line
    <|history|>-...
    <|file_sep|>

Definitions from other files: `<|file_sep|>path\n` followed by the text.
"""

from __future__ import annotations

END = "<|endoftext|>"  # end of span and padding after it
MASK = "<|mask|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_SUFFIX = "<|fim_suffix|>"
FIM_MIDDLE = "<|fim_middle|>"
FILE_SEP = "<|file_sep|>"
HISTORY = "<|history|>"
SPECIAL_TOKENS = [END, MASK, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, FILE_SEP, HISTORY]

LAYOUT = ["extra", "suffix", "prefix", "span"]
SEGMENT_TOKENS = {"suffix": FIM_SUFFIX, "prefix": FIM_PREFIX, "span": FIM_MIDDLE}


def render_history(events: list[tuple[str, str]]) -> str:
    """Edit events as (old text, new text), oldest first -> the extra segment's history block."""
    if not events:
        return ""
    out = []
    for old, new in events:
        removed = "".join(f"-{line}\n" for line in old.splitlines()) if old else ""
        added = "".join(f"+{line}\n" for line in new.splitlines()) if new else ""
        out.append(f"{HISTORY}{removed}{added}")
    return "".join(out) + FILE_SEP


def model_config(shape: dict, tokenizer, *, causal: bool) -> dict:
    """config.json for a redraft-format checkpoint of the given shape."""
    tid = tokenizer.token_to_id
    return {
        "model_type": "redraft",
        "architectures": ["RedraftForMaskedDiffusion" if not causal else "RedraftForCausalLM"],
        **shape,
        "attention_bias": False,
        "tie_word_embeddings": True,
        "shifted": True,
        "attention_pattern": "causal" if causal else "context_causal",
        "layout": LAYOUT,
        "segment_tokens": SEGMENT_TOKENS,
        "mask_token_id": tid(MASK),
        "pad_token_id": tid(END),
        "eos_token_id": tid(END),
        "bos_token_id": tid(END),
    }
