"""Frozen configuration objects, built at the edges (CLI, LSP options) and passed down.

ModelConfig comes from a checkpoint's config.json (see checkpoint.py); SamplerConfig and
EngineConfig are chosen by the caller. Nothing in the engine reads environment variables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

# How context tokens attend (the span/active block always attends to everything):
#   "full"            bidirectional everywhere (Dream, LLaDA, Open-dCoder)
#   "context_causal"  context tokens attend causally among themselves, so their keys/values
#                     never depend on the span or on later context and can be reused exactly
#   "causal"          autoregressive; the span is decoded token by token
#   "block_causal"    causal like "causal", and the span decoded in blocks of `block_size`
#                     positions that attend to each other both ways; a finished block joins the
#                     keys/values as causal tokens (engine/training/blockrows.py)
ATTENTION_PATTERNS = ("full", "context_causal", "causal", "block_causal")
MAX_BLOCK = 64  # the largest block a "block_causal" checkpoint may declare

# Segments a layout may order. The span is always computed last physically (it is the
# only part recomputed per step); its place in the list sets the position ids.
SEGMENTS = ("extra", "prefix", "suffix", "span")
NATURAL_LAYOUT = ("extra", "prefix", "span", "suffix")


# The largest shapes a checkpoint may declare: generous next to the families the engine knows
# (LLaDA 8B: 32 layers, hidden 4096, intermediate 12288, vocabulary 126464; Dream 7B: 28 layers,
# vocabulary 152064), but small enough that a config.json cannot make the loader build millions
# of layers or a table of 2^80 entries before a weight file is read. The files then bound the
# rest: every tensor the config implies must be in them, of its shape (weights.py).
LIMITS = {"vocab_size": 1 << 20, "hidden_size": 1 << 16, "intermediate_size": 1 << 18, "num_hidden_layers": 512,
          "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 1024,
          "max_position_embeddings": 1 << 24}
MAX_ROPE_THETA = 1e12  # real ones: 1e4 .. 1e7
ROPE_TYPES = ("default", "linear", "llama3")  # what model.Rotary computes


def _positive(name: str, value, most: float, least: float = 0.0) -> None:
    """A finite number in (least, most] (or [least, most] when least > 0)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and (value >= least if least > 0 else value > 0) and value <= most
    if not ok:
        low = "(0" if least <= 0 else f"[{least:g}"
        raise ValueError(f"{name}={value!r} must be a finite number in {low}, {most:g}]")


def _check_rope(rope: dict) -> None:
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"rope_scaling type {str(kind)[:40]!r} is not supported (known: {', '.join(ROPE_TYPES)})")
    if kind == "default":
        return
    _positive("rope_scaling factor", rope.get("factor"), 1e6)
    if "attention_factor" in rope:
        _positive("rope_scaling attention_factor", rope["attention_factor"], 1e3)
    if kind == "llama3":
        lo, hi = rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
        _positive("rope_scaling low_freq_factor", lo, 1e6)
        _positive("rope_scaling high_freq_factor", hi, 1e6)
        _positive("rope_scaling original_max_position_embeddings", rope.get("original_max_position_embeddings", 8192),
                  LIMITS["max_position_embeddings"])
        if hi <= lo:
            raise ValueError("rope_scaling high_freq_factor must be larger than low_freq_factor")


@dataclass(frozen=True)
class ModelConfig:
    """Shape and conventions of one checkpoint, in Hugging Face terms."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: tuple[tuple[str, float | str], ...] = ()  # frozen dict, e.g. (("rope_type","linear"),("factor",2.0))
    max_position_embeddings: int = 32768
    attention_bias: bool = False  # q/k/v projections carry a bias (Qwen2)
    tie_word_embeddings: bool = False
    family: str = "redraft"  # dream | llada | open-dcoder | redraft
    shifted: bool = False  # position i-1 predicts token i
    attention: str = "full"
    mask_token_id: int | None = None
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    end_token_ids: tuple[int, ...] = ()  # any of these ends the span (eos, pad, ...)
    layout: tuple[str, ...] = NATURAL_LAYOUT
    # Sentinel token id written before a segment (e.g. FIM markers); segment -> id.
    segment_tokens: tuple[tuple[str, int], ...] = ()
    # How a seeded draft token is judged: "visible" reads the probability of the token as
    # shown (models trained to repair visible drafts, like redraft's own); "masked" masks each
    # draft token in turn and reads its probability (any masked-diffusion checkpoint).
    draft_scoring: str = "masked"
    # The languages the model was trained on (config.json `redraft_languages`, LSP language ids);
    # empty = not said (any language). The server lets drafts answer alone elsewhere.
    languages: tuple[str, ...] = ()
    block_size: int = 0  # "block_causal": span positions decoded together (config.json `redraft_block_size`)

    def __post_init__(self) -> None:
        self._check_bounds()
        if self.draft_scoring not in ("visible", "masked"):
            raise ValueError(f"draft_scoring must be 'visible' or 'masked', got {self.draft_scoring!r}")
        if self.attention not in ATTENTION_PATTERNS:
            raise ValueError(f"attention must be one of {ATTENTION_PATTERNS}, got {self.attention!r}")
        if self.attention == "block_causal" and (isinstance(self.block_size, bool) or not isinstance(self.block_size, int)
                                                 or not 1 <= self.block_size <= MAX_BLOCK):
            raise ValueError(f"block_causal attention needs a block size in 1..{MAX_BLOCK} "
                             f"(config.json redraft_block_size), got {self.block_size!r}")
        if sorted(self.layout) != sorted(SEGMENTS):
            raise ValueError(f"layout must order exactly {SEGMENTS}, got {self.layout}")

    def _check_bounds(self) -> None:
        """Shapes within LIMITS, heads that divide, finite positive constants, special ids inside
        the vocabulary: checked before anything is built from a config (a checkpoint's is untrusted)."""
        for name, most in LIMITS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise ValueError(f"{name}={value!r} must be a whole number in 1..{most} "
                                 f"(the largest this loader builds)")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even (rotary embeddings rotate pairs)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                             f"num_key_value_heads={self.num_key_value_heads}")
        _positive("rms_norm_eps", self.rms_norm_eps, 1.0)
        _positive("rope_theta", self.rope_theta, MAX_ROPE_THETA, least=1.0)
        _check_rope(self.rope)
        ids = [("mask_token_id", self.mask_token_id), ("pad_token_id", self.pad_token_id),
               ("bos_token_id", self.bos_token_id)]
        ids += [("eos_token_id", i) for i in self.end_token_ids]
        ids += [(f"segment token for {s!r}", i) for s, i in self.segment_tokens]
        for name, i in ids:
            if i is not None and (isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.vocab_size):
                raise ValueError(f"{name}={i!r} is outside the vocabulary (0..{self.vocab_size - 1})")

    @property
    def rope(self) -> dict:
        return dict(self.rope_scaling)

    @property
    def sentinels(self) -> dict[str, int]:
        return dict(self.segment_tokens)

    @property
    def is_causal(self) -> bool:
        """Decoded left to right against causal keys/values (a token at a time, or a block)."""
        return self.attention in ("causal", "block_causal")

    @property
    def is_blockwise(self) -> bool:
        return self.attention == "block_causal"


@dataclass(frozen=True)
class SamplerConfig:
    """How the masked span is denoised (diffusion) or decoded (causal models)."""

    span: int = 32  # span budget in tokens (the longest candidate length)
    lengths: tuple[int, ...] = ()  # candidate span lengths tried in one batch; () = (span,)
    length_choice: str = "final"  # "final": best mean log-prob at the end; "first_step": prune after step 1
    threshold: float = 0.9  # unmask every position whose score clears it (at least one)
    score: str = "maxprob"  # maxprob | margin | entropy  (entropy scored as exp(-H), in (0, 1])
    tokens_per_step: int = 0  # > 0: fixed number unmasked per step instead of the threshold
    max_steps: int = 0  # step cap; 0 = as many as the span has tokens
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    refresh_every: int = 0  # recompute the context keys/values every R steps ("full" attention); 0 = never
    end_fills_rest: bool = True  # once an end token is committed, positions after it become padding
    end_in_order: bool = True  # an end token is committed only after every position before it
    block_size: int = 0  # > 0: semi-autoregressive blocks of this many tokens, left to right
    # Span windows ("context_causal" models; sampler.py, `_window`): after a forward over the
    # whole span, a step runs only the positions from the first one whose input changed since
    # it last ran to the open block's end, attending to the context, the span before them and
    # each other (semi-autoregressive blocks). `window_refresh` R > 0: every R-th step runs the
    # whole span again; 0 = only the first.
    span_window: bool = False
    window_refresh: int = 0
    # Span windows, greedy, no cache model: prompt lookup inside the window (sampler.py,
    # `_probes`). Before a window's forward, each row's next masked positions take the tokens
    # that followed the latest earlier occurrence of its last `lookup_ngram`..3 tokens (context
    # or span, as the twin's lookup: speculative.Proposer), up to `lookup_tokens`, shown to the
    # model; it keeps the run of them its own picks agree with and its own pick after that run
    # (verified decoding). The twin's path has had these drafts all along.
    window_lookup: bool = False
    # Span windows, greedy, no cache model: the model's own parallel guesses, verified. Where
    # lookup proposes nothing, a row's next masked positions take up to `window_guesses` of the
    # picks its last forward made there (with masks before them: what a masked-diffusion model
    # predicts and an autoregressive one cannot), judged as lookup's proposals are; each window
    # also runs that many masked positions past what it judges, to guess anew. 0 = off.
    window_guesses: int = 0
    heal: bool = True  # token healing when the prefix ends inside a token
    # Judging a seeded draft token: "keep" keeps it when the model gives it at least `draft_keep`;
    # "override" keeps it unless the model gives another token at least `draft_keep` (the draft
    # is evidence: a model that is unsure of a token leaves it as drafted).
    draft_rule: str = "keep"
    draft_keep: float = 0.5
    draft_bonus: float = 0.0  # added to a seeded row's mean log-prob when candidates are compared
    accept_whole_drafts: bool = True  # a draft kept whole answers at once; the other candidates stop
    # Rows without a draft stop once a finished draft row of their request leads them by this
    # much (mean log-prob, its bonus counted): such a row scores at most 0, so it could only win
    # if the draft's final rescoring fell by more than the margin (sampler.py, `_drop_beaten`).
    # inf = never.
    beaten_margin: float = 2.0
    # Abstain (empty text) when the winner's mean log-prob is below this: a wrong suggestion
    # costs the user more than none. -inf = always answer.
    min_score: float = float("-inf")
    # Abstain early: a request whose first step shows it will end this far below min_score stops
    # there (sampler.py, `_give_up_hopeless`); inf = never. The first step's estimate is
    # pessimistic for the model alone (later steps see more of the span): on the validation
    # packages 1.0 lost 1 of 34 shown answers (none right) with drafts off, and ran 3.2x fewer
    # forwards on blocks; 0 lost 25 of 34 with drafts off.
    abstain_margin: float = 1.0
    # The same estimate after every later step, with this margin (inf = after the first step
    # only): it sharpens as more of the span is committed. On the validation packages (200 line
    # cursors, drafts seeding the model) 0.3 ran 0.49x the forwards, gave up 4 shown answers,
    # none right; 0.0 gave up 8 (docs/language-server.md).
    recheck_margin: float = 0.3
    # Abstain once a request has denoised this many steps with positions still masked (0 =
    # never). The threshold sampler commits at least one token a step, so a short unit the model
    # still writes after many steps is one it is unsure of nearly everywhere; the server sets it
    # for lines (inference.LINE_STEPS).
    give_up_after: int = 0
    # What a request out of those steps answers: "abstain", or "prefix" — the text it committed
    # before its first masked position, as a request out of time does (a row with nothing
    # committed still abstains). Judged by min_score like any answer, over what it wrote.
    out_of_steps: str = "abstain"
    # Causal models (the autoregressive twin), greedy only: prompt-lookup speculative decoding.
    # Each forward verifies up to `lookup_tokens` drafted tokens (the request's drafts, else what
    # followed the latest earlier occurrence of the last 3..1 tokens) and keeps the prefix greedy
    # decoding agrees with: the same output in fewer forwards (speculative.py). Not with a
    # temperature: that decodes token by token.
    lookup: bool = True
    lookup_tokens: int = 8
    # The shortest match (of the last 3..1 tokens) that proposes: shorter ones are weak evidence
    # (in float32 on the 2-core AVX2 CPU, 1-token matches proposed nothing right 71% of the time,
    # 2-token 52%, 3-token 10%, while a 9-token block cost ~1.7-3x a one-token forward). 1 suits
    # hardware where a block costs about one forward.
    lookup_ngram: int = 3
    # Block-causal models, greedy, one row: every committed block is checked by the clean
    # stream in the forward that caches it (blockwise.py); from the first disagreement the
    # clean stream's own token stands and the block opens again there, so the text is the
    # clean stream's greedy decoding and the block's parallel commits are its drafts. Off by
    # default: with the block-causal checkpoints so far the clean stream disagrees with the
    # block's commits often (block decoding of 50 validation cursors: +7% forwards on blocks,
    # +42% on rest of line, quality within a point; docs/training-log.md, 2026-12-06).
    verify_blocks: bool = False
    # Block-causal models, greedy: self-drafting (drafting.py, TiDAR's single forward). Each
    # forward verifies drafts with the clean stream, as the twin verifies prompt-lookup drafts,
    # and its noisy blocks write the next drafts behind them, one per way the check can end; the
    # text is the clean stream's greedy decoding. Prompt-lookup drafts go first where `lookup`
    # finds one. Overrides `verify_blocks` and the threshold.
    self_draft: bool = False
    # The pre-draft block a self-drafting forward runs, in positions (its first input clean, so
    # it drafts one fewer token); 0 = the model's trained block. A shorter one leaves the trained
    # block's tail out: fewer positions a forward, fewer drafts; 1 drafts nothing (the clean
    # stream verifies prompt-lookup drafts only, as the twin does).
    draft_block: int = 0
    # Self-drafting: a block's drafts stop before the first token it gives less than this
    # probability (0 = never): fewer positions in the forward that checks them.
    draft_floor: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.span < 1:
            raise ValueError("span must be >= 1")
        if self.score not in ("maxprob", "margin", "entropy"):
            raise ValueError(f"unknown score {self.score!r}")
        if self.length_choice not in ("final", "first_step"):
            raise ValueError(f"unknown length_choice {self.length_choice!r}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError("threshold must be in [0, 1]")
        if self.give_up_after < 0:
            raise ValueError("give_up_after must be >= 0")
        if self.out_of_steps not in ("abstain", "prefix"):
            raise ValueError(f"out_of_steps must be 'abstain' or 'prefix', got {self.out_of_steps!r}")
        if self.draft_rule not in ("keep", "override"):
            raise ValueError(f"unknown draft_rule {self.draft_rule!r}")
        if not 0.0 <= self.draft_keep <= 1.0:
            raise ValueError("draft_keep must be in [0, 1]")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError("temperature must be a finite number >= 0")
        if any(n < 1 for n in self.lengths):
            raise ValueError("span lengths must be >= 1")
        if isinstance(self.draft_block, bool) or not isinstance(self.draft_block, int) \
                or not 0 <= self.draft_block <= 64:
            raise ValueError("draft_block must be 0 (the model's block) or 1..64")
        if not 0.0 <= self.draft_floor <= 1.0:
            raise ValueError("draft_floor must be in [0, 1]")
        if not isinstance(self.self_draft, bool):
            raise ValueError(f"self_draft must be true or false, got {self.self_draft!r}")
        if not isinstance(self.span_window, bool):
            raise ValueError(f"span_window must be true or false, got {self.span_window!r}")
        if self.window_refresh < 0:
            raise ValueError("window_refresh must be >= 0")
        if not isinstance(self.window_lookup, bool):
            raise ValueError(f"window_lookup must be true or false, got {self.window_lookup!r}")
        if self.lookup_tokens < 1:
            raise ValueError("lookup_tokens must be >= 1")
        if isinstance(self.window_guesses, bool) or not isinstance(self.window_guesses, int) \
                or not 0 <= self.window_guesses <= 16:
            raise ValueError(f"window_guesses must be 0..16, got {self.window_guesses!r}")
        if not 1 <= self.lookup_ngram <= 3:
            raise ValueError("lookup_ngram must be 1, 2 or 3")

    @property
    def candidate_lengths(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.lengths))) if self.lengths else (self.span,)

    def with_(self, **changes) -> "SamplerConfig":
        return replace(self, **changes)


@dataclass(frozen=True)
class CacheConfig:
    """The decode-time cache model (cachemodel.py): how much copied text weighs."""

    enabled: bool = True
    max_alpha: float = 0.97  # the cache's largest share: the model can still overrule a weak copy
    length_scale: float = 10.0  # characters of match past min_matched at which alpha reaches 63% of max_alpha
    min_matched: int = 8  # a match this short weighs nothing (6-11 characters continue a line ~8% of the time)
    max_tokens: int = 96  # tokens of each continuation followed
    max_queries: int = 64  # lookups per request (each costs ~0.1-1 ms): the walk stops asking after


@dataclass(frozen=True)
class EngineConfig:
    """Where and how the model runs."""

    device: str = "cpu"
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16 | int8 (CPU: float32 weights, int8 linears)
    threads: int = 0  # torch intra-op threads on CPU; 0 = leave torch's default
    reuse_cache: bool = True  # keep context keys/values across requests where that is exact
    max_context_tokens: int = 4096  # hard cap; callers should trim before this
    # Context keys/values kept across requests, per document, least recently used out first
    # once they hold more tokens than this (~2 MB per 1k tokens for the default model).
    context_cache_tokens: int = 65536
    kernels: str = "auto"  # auto: Triton kernels on CUDA when installed | torch | triton (forced)
    # Static-shape denoising steps: auto = on CUDA, captured as CUDA graphs | on (also on a
    # CPU, run eagerly: tests) | off (the dynamic step everywhere).
    step_graphs: str = "auto"
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
