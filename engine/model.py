"""The one model: a Qwen2/LLaMA-family transformer run bidirectionally or causally.

RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, optional q/k/v bias, optional
tied embeddings. Parameter names are Hugging Face's (`model.layers.N.self_attn.q_proj`...),
so Qwen2/Dream/Open-dCoder weights load as they are; other families are renamed in
checkpoint.py only.

Attention is decided per call, not per model: a call attends to the keys/values already in
the cache plus its own block, either fully or causally, so the same module serves masked
diffusion (full), exact-context diffusion (causal context, full span) and autoregression.
The output head is separate (`logits`) so callers pay for it only at the rows they read.

Shapes: B batch, T tokens in this call, S keys attended, H heads, K kv heads, D head dim,
E hidden size, V vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import int8
from .cache import KVCache
from .config import ModelConfig


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 as the reference implementations do; cast back before the weight.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class Rotary(nn.Module):
    """cos/sin tables indexed by position id; grown on demand, never recomputed per call."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        # Computed on the CPU and moved: on the meta device (a checkpoint's skeleton) this
        # arithmetic would run through torch._refs, whose first call imports torch._dynamo.
        self.register_buffer("inv_freq", _inv_freq(cfg).to(torch.get_default_device()), persistent=False)
        self.attention_scaling = float(cfg.rope.get("attention_factor", 1.0))
        self._cos = self._sin = None

    def tables(self, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos is None or self._cos.shape[0] < n or self._cos.dtype != dtype \
                or self._cos.device != self.inv_freq.device:
            size = max(n, 256 if self._cos is None else 2 * self._cos.shape[0])
            t = torch.arange(size, device=self.inv_freq.device, dtype=torch.float32)
            freqs = torch.outer(t, self.inv_freq.float())
            emb = torch.cat((freqs, freqs), dim=-1)
            self._cos = (emb.cos() * self.attention_scaling).to(dtype)
            self._sin = (emb.sin() * self.attention_scaling).to(dtype)
        return self._cos, self._sin

    def forward(self, pos: torch.Tensor, dtype: torch.dtype, limit: int | None = None):
        """cos/sin at `pos`, [B, 1, T, D]. `limit` (> every position, known to the caller) saves
        reading the largest position back from the device: a host sync, and not capturable."""
        cos, sin = self.tables(int(pos.max()) + 1 if limit is None else limit, dtype)
        return cos[pos].unsqueeze(1), sin[pos].unsqueeze(1)


def _inv_freq(cfg: ModelConfig) -> torch.Tensor:
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device="cpu") / d))
    rope = cfg.rope
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return inv
    if kind == "linear":
        return inv / float(rope["factor"])
    if kind == "llama3":
        factor = float(rope["factor"])
        lo, hi = float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
        old = float(rope.get("original_max_position_embeddings", 8192))
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        mid = (1 - smooth) * inv / factor + smooth * inv
        is_mid = (wavelen <= old / lo) & (wavelen >= old / hi)
        return torch.where(is_mid, mid, scaled)
    raise ValueError(f"unsupported rope_type {kind!r}")


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.h, self.k, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        e = cfg.hidden_size
        self.q_proj = nn.Linear(e, self.h * self.d, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(e, self.k * self.d, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(e, self.k * self.d, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.h * self.d, e, bias=False)
        self.int8: bool | str = False  # run the projections in int8: True, or "rows" (DiffusionLM.use_int8)

    def forward(self, x, cos, sin, cache: KVCache | None, start: int, mask, fast=None, key_valid=None) -> torch.Tensor:
        q, k, v = self.project(x)
        y = self.attend(q, k, v, cos, sin, cache, start, mask, fast, key_valid)
        return self.out(y)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v for tokens [..., E]: [..., H * D], [..., K * D], [..., K * D]."""
        if _fuse(x):  # one matmul instead of three
            return _linear(self, (self.q_proj, self.k_proj, self.v_proj), x).split(
                [self.h * self.d, self.k * self.d, self.k * self.d], dim=-1)
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def out(self, y: torch.Tensor) -> torch.Tensor:
        """The output projection of `attend`'s result."""
        return _linear(self, (self.o_proj,), y) if _fuse(y) else self.o_proj(y)

    def attend(self, q, k, v, cos, sin, cache: KVCache | None, start: int, mask, fast=None,
               key_valid=None) -> torch.Tensor:
        """Rotary, cache write and attention for one block of B rows x T tokens (q, k, v as
        `project` gives them, shaped [B, T, ...]); [B, T, H * D] before the output projection."""
        B, T = q.shape[:2]
        q = q.reshape(B, T, self.h, self.d).transpose(1, 2)
        k = k.reshape(B, T, self.k, self.d).transpose(1, 2)
        v = v.reshape(B, T, self.k, self.d).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        if cache is not None:
            k, v = cache.write(self.layer, start, k, v)  # all keys [0, start + T)
        if fast is not None:  # the span attention kernel: same function, masks as key_valid
            y = fast(q, k, v, key_valid)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.h != self.k)
        return y.transpose(1, 2).reshape(B, T, self.h * self.d)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.int8: bool | str = False  # run the projections in int8: True, or "rows" (DiffusionLM.use_int8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _fuse(x):
            gate, up = _linear(self, (self.gate_proj, self.up_proj), x).chunk(2, dim=-1)
            return _linear(self, (self.down_proj,), F.silu(gate) * up)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def _fuse(x: torch.Tensor) -> bool:
    """Fused projections for inference on CPU, where a denoising step is a few dozen small
    matmuls and their count matters (3.9 vs 4.5 ms per step for the default model). Not on
    GPUs: the fused copy would double those weights' memory for a multi-GB model. Nor under
    torch.compile, which cannot trace the check (and fuses on its own)."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling() and torch.is_inference_mode_enabled()


def _linear(owner: nn.Module, linears: tuple[nn.Linear, ...], x: torch.Tensor) -> torch.Tensor:
    """`x` through `linears` side by side, in one matmul (CPU inference): in int8 when the
    owner runs so (int8.py), else in the weights' own dtype."""
    if getattr(owner, "int8", False):
        return int8.linear(x, _cached(owner, linears, "int8-rows" if owner.int8 == "rows" else "int8"))
    if len(linears) == 1:
        return F.linear(x, linears[0].weight, linears[0].bias)
    w, bias = _cached(owner, linears, "fused")
    return F.linear(x, w, bias)


def _cached(owner: nn.Module, linears: tuple[nn.Linear, ...], form: str):
    """The linears' weights (and biases) concatenated ("fused": a (weight, bias) pair) or
    packed as int8 ("int8", or "int8-rows": each row quantized alone), kept on `owner` per set
    of linears and rebuilt whenever a weight was replaced or changed in place (training,
    loading), so inference reads one matrix.
    Costs one extra copy of those weights in memory (a quarter of it in int8)."""
    key = tuple((m.weight.data_ptr(), m.weight._version) for m in linears)
    store = owner.__dict__.setdefault("_weights_cache", {})
    slot = (form, tuple(id(m) for m in linears))
    cached = store.get(slot)
    if cached is None or cached[0] != key:
        w = torch.cat([m.weight for m in linears]) if len(linears) > 1 else linears[0].weight
        bias = None if linears[0].bias is None else torch.cat([m.bias for m in linears])
        cached = (key, int8.pack(w, bias, rows_alone=form == "int8-rows") if form.startswith("int8") else (w, bias))
        store[slot] = cached
    return cached[1]


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.self_attn = Attention(cfg, layer)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, cache, start, mask, fast=None, key_valid=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, start, mask, fast, key_valid)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary_emb = Rotary(cfg)


class DiffusionLM(nn.Module):
    """`model.*` + `lm_head`, as in Hugging Face's *ForCausalLM classes."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # Set by the engine when the Triton kernels run: the span attention of a denoising step.
        self.span_attention = None
        self.int8: bool | str = False  # the output head in int8: True, or "rows" (use_int8)

    def use_int8(self, on: bool = True, rows_alone: bool | None = None) -> None:
        """Run every linear layer and the output head in int8 during CPU inference (int8.py);
        training and other devices are unaffected. The float weights stay (the tied
        embedding reads them). Causal models quantize each row alone ("rows"), so a verified
        block gives each token what a one-token forward gives it; the others per call, the
        faster way (`rows_alone` overrides that choice: benchmarks)."""
        why = int8.unavailable() if on else None
        if why is not None:
            raise RuntimeError(why)
        if on and self.lm_head.weight.dtype != torch.float32:
            raise RuntimeError(f"int8 linears quantize float32 weights, not {self.lm_head.weight.dtype}")
        alone = self.config.is_causal if rows_alone is None else rows_alone
        mode = ("rows" if alone else True) if on else False
        self.int8 = mode
        for m in self.modules():
            if isinstance(m, (Attention, MLP)):
                m.int8 = mode

    def forward(
        self,
        ids: torch.Tensor,  # [B, T]
        pos: torch.Tensor,  # [B, T] position ids
        cache: KVCache | None = None,
        start: int = 0,  # where this block's keys/values go in the cache
        causal: bool = False,  # causal within this block (earlier cached keys always visible)
        key_valid: torch.Tensor | None = None,  # [B, start + T] False for padding keys
        mask: torch.Tensor | None = None,  # explicit [B, 1, T, start + T] bool mask (training patterns)
        pos_limit: int | None = None,  # > every position in `pos`, when the caller knows it
    ) -> torch.Tensor:
        """Hidden states [B, T, E] after the final norm; writes this block into `cache`."""
        B, T = ids.shape
        x = self.model.embed_tokens(ids)
        cos, sin = self.model.rotary_emb(pos, x.dtype, pos_limit)
        fast = self.span_attention if cache is not None and not causal and mask is None else None
        if mask is None and fast is None:
            mask = attention_mask(B, T, start if cache is not None else 0, causal, key_valid, ids.device)
        for layer in self.model.layers:
            x = layer(x, cos, sin, cache, start, mask, fast, key_valid)
        return self.model.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if _fuse(hidden):
            return _linear(self, (self.lm_head,), hidden).float()
        return self.lm_head(hidden).float()


def attention_mask(B: int, T: int, start: int, causal: bool, key_valid, device) -> torch.Tensor | None:
    """Boolean [B, 1, T, start + T] (True = may attend), or None when everything is visible."""
    if not causal and key_valid is None:
        return None
    S = start + T
    if causal:
        q = torch.arange(T, device=device).unsqueeze(1) + start
        allowed = (torch.arange(S, device=device).unsqueeze(0) <= q).expand(B, T, S)
    else:
        allowed = torch.ones(B, T, S, dtype=torch.bool, device=device)
    if key_valid is not None:
        assert key_valid.shape == (B, S), (key_valid.shape, B, S)
        allowed = allowed & key_valid.unsqueeze(1)
        # A padded query may see no valid key at all; let it see itself so SDPA never
        # produces NaN rows (its output is never read).
        diag = torch.zeros(T, S, dtype=torch.bool, device=device)
        rows = torch.arange(T, device=device)
        diag[rows, rows + start] = True
        allowed = allowed | (diag & ~allowed.any(-1, keepdim=True))
    return allowed.unsqueeze(1)
