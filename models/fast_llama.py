"""A lean forward pass for Llama-architecture models (SmolLM2, Llama 2/3, …) on the weights transformers loaded.

transformers' generic forward spends most of a CPU decode step in Python-level work (mask
building, cache bookkeeping, many small ops). This path does the same math with fewer ops:
fused QKV and gate|up projections, a pre-allocated KV cache per conversation (crop = set the
length), RoPE from precomputed tables, and ``scaled_dot_product_attention`` with GQA.

Shapes: hidden ``x [T, hidden]``; per layer ``q [1, H, T, D]``, cache ``k, v [1, KVH, cap, D]``;
logits ``[n_logits, V]``. Correctness is pinned by tests against transformers' own forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

_GROW = 256  # cache capacity grows in steps of this many positions


def supports(model: Any) -> bool:
    """True when ``model`` is a plain Llama this path reproduces exactly."""
    cfg = model.config
    if getattr(cfg, "model_type", None) != "llama":
        return False
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        return False
    rope = getattr(cfg, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    return rope_type in (None, "default") and getattr(cfg, "hidden_act", "silu") == "silu"


@dataclass
class FastCache:
    k: list[torch.Tensor]  # per layer [1, KVH, cap, D]
    v: list[torch.Tensor]
    length: int = 0


class FastLlama:
    def __init__(self, model: Any, max_context: int):
        cfg = model.config
        self.dtype = model.dtype
        self.device = model.device
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.max_context = max_context
        inner = model.model
        self.embed = inner.embed_tokens.weight  # [V, hidden]
        self.final_norm = inner.norm.weight
        self.lm_head = model.lm_head.weight  # [V, hidden]
        self.layers = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append(
                (
                    layer.input_layernorm.weight,
                    torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight], 0).contiguous(),
                    a.o_proj.weight,
                    layer.post_attention_layernorm.weight,
                    torch.cat([m.gate_proj.weight, m.up_proj.weight], 0).contiguous(),
                    m.down_proj.weight,
                )
            )
        self.q_size = self.n_heads * self.head_dim
        self.kv_size = self.n_kv * self.head_dim
        self.inter = inner.layers[0].mlp.gate_proj.weight.shape[0]
        theta = float(getattr(cfg, "rope_theta", None) or (cfg.rope_parameters or {}).get("rope_theta", 10000.0))
        inv = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        pos = torch.arange(max_context, dtype=torch.float32)
        freqs = torch.outer(pos, inv)
        emb = torch.cat([freqs, freqs], -1)  # [L, D]
        self.cos = emb.cos().to(self.dtype).to(self.device)
        self.sin = emb.sin().to(self.dtype).to(self.device)
        self.scale = self.head_dim**-0.5

    def new_cache(self) -> FastCache:
        return FastCache(k=[], v=[], length=0)

    def _ensure(self, cache: FastCache, need: int) -> None:
        cap = cache.k[0].shape[2] if cache.k else 0
        if need <= cap:
            return
        new_cap = min(self.max_context, max(need, cap + _GROW))
        shape = (1, self.n_kv, new_cap, self.head_dim)
        for i in range(len(self.layers)):
            k = torch.empty(shape, dtype=self.dtype, device=self.device)
            v = torch.empty(shape, dtype=self.dtype, device=self.device)
            if cap:
                k[:, :, : cache.length] = cache.k[i][:, :, : cache.length]
                v[:, :, : cache.length] = cache.v[i][:, :, : cache.length]
                cache.k[i], cache.v[i] = k, v
            else:
                cache.k.append(k)
                cache.v.append(v)

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """RMSNorm as one fused op (transformers' takes seven; in bf16 they round a little differently)."""
        return F.rms_norm(x, (x.shape[-1],), w, self.eps)

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
        return x * cos + rotated * sin

    @torch.inference_mode()
    def forward(self, cache: FastCache, tokens: list[int], n_logits: int) -> torch.Tensor:
        """Append ``tokens`` at ``cache.length``; return logits ``[n_logits, V]`` (model dtype)."""
        t = len(tokens)
        start = cache.length
        end = start + t
        if end > self.max_context:
            raise ValueError(f"context full: {end} > {self.max_context}")
        self._ensure(cache, end)
        ids = torch.tensor(tokens, dtype=torch.long, device=self.device)
        x = F.embedding(ids, self.embed)  # [T, hidden]
        cos = self.cos[start:end]  # [T, D], broadcast over heads
        sin = self.sin[start:end]
        mask = None
        if t > 1:  # query i sees every cached position and new positions ≤ i
            mask = torch.ones(t, end, dtype=torch.bool, device=self.device).tril(start)
        H, KVH, D = self.n_heads, self.n_kv, self.head_dim
        for i, (ln1, wqkv, wo, ln2, wgu, wdown) in enumerate(self.layers):
            h = self._norm(x, ln1)
            qkv = F.linear(h, wqkv)  # [T, (H + 2 KVH) D]
            # RoPE on q and k together: [H + KVH, T, D]
            qk = self._rope(qkv[:, : self.q_size + self.kv_size].view(t, H + KVH, D).transpose(0, 1), cos, sin)
            q = qk[:H].unsqueeze(0)
            v = qkv[:, self.q_size + self.kv_size :].view(t, KVH, D).transpose(0, 1).unsqueeze(0)
            kc, vc = cache.k[i], cache.v[i]
            kc[0, :, start:end] = qk[H:]
            vc[:, :, start:end] = v
            att = F.scaled_dot_product_attention(
                q, kc[:, :, :end], vc[:, :, :end], attn_mask=mask, scale=self.scale, enable_gqa=True
            )  # [1, H, T, D]
            x = x + F.linear(att.squeeze(0).transpose(0, 1).reshape(t, H * D), wo)
            h = self._norm(x, ln2)
            gu = F.linear(h, wgu)  # [T, 2 * inter]
            x = x + F.linear(F.silu(gu[:, : self.inter]) * gu[:, self.inter :], wdown)
        cache.length = end
        h = self._norm(x[-n_logits:], self.final_norm)
        return F.linear(h, self.lm_head)  # [n_logits, V]
