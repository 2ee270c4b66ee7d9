"""A lean forward pass for Llama-architecture models (SmolLM2, Llama 2/3, …) on the weights transformers loaded.

transformers' generic forward spends most of a CPU decode step in Python-level work (mask
building, cache bookkeeping, many small ops). This path does the same math with fewer ops:
fused QKV and gate|up projections, a pre-allocated KV cache per conversation (crop = set the
length), RoPE from precomputed tables, and ``scaled_dot_product_attention`` with GQA.

**Batch invariance (bf16 greedy identity).** A verify block of k tokens must give each row
bit-for-bit the logits a one-token step would give, or speculative greedy output parts from
plain greedy at near-ties. On CPU two things break that: oneDNN computes an ``M = 1`` matmul
with a GEMV kernel whose rounding differs from the ``M ≥ 2`` GEMM, past 32 rows the GEMM changes
kernels again (measured on the embedded model's five projection shapes: every row's result is
the same for 2 ≤ M ≤ 32, and differs for some rows from M = 33), and the attention kernel's
reductions depend on the key length. So a one-token step runs as a 2-row batch (the row
duplicated), logits always come from at least 2 rows, every projection runs over blocks of
2–32 rows (``_rows``: a 48-token prompt piece beside seven decode rows must not move their
results), and short blocks attend over a key length rounded up to a bucket of ``_KEY_BUCKET``
positions (masked, zero-initialised cache beyond) — rows of one block in different buckets
attend in separate calls. Long prefills keep one plain attention call per conversation.

**Warm spare caches.** A new conversation's first forward needs ``2 × layers`` cache blocks
(SmolLM2-135M: 60 × 196 KB at 256 positions), and fresh blocks are fresh pages: measured here,
2,400–2,900 page faults and 10–20 ms of the first response's TTFT in the server, whose closed
conversations stay alive for resume and so leave no freed memory to reuse. ``warm()`` (the
engine calls it when idle) zero-fills ``spares`` caches ahead of time; a new conversation takes
one instead of allocating (SmolLM2-135M: prefill TTFT back to what an in-process loop gets).

**Batched decode.** ``forward_many`` runs several conversations' steps as one pass: every
projection and the MLP run once over all their rows (one GEMM instead of one per conversation),
attention runs per conversation over its own cache exactly as alone, so each row keeps the
logits it gets alone wherever the GEMM's row results do not depend on the row count.

Shapes: hidden ``x [T, hidden]``; per layer ``q [1, H, T, D]``, cache ``k, v [1, KVH, cap, D]``;
logits ``[n_logits, V]``. Correctness is pinned by tests against transformers' own forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

_GROW = 256  # cache capacity grows in steps of this many positions
_KEY_BUCKET = 32  # short blocks attend over key lengths rounded up to this (see module doc)
_SHORT = 32  # blocks up to this many tokens take the batch-invariant path (decode steps, verify blocks)
_GEMM_ROWS = 32  # a projection over more rows runs as blocks of at most this many (see module doc)


def _rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``F.linear`` over ``x [R, in]`` in balanced blocks of 2–32 rows (R ≥ 2): each row's result is
    then the one it gets in any other such block, whatever else shares the forward. → ``[R, out]``"""
    r = x.shape[0]
    if r <= _GEMM_ROWS:
        return F.linear(x, w)
    n = -(-r // _GEMM_ROWS)
    sizes = [r // n + (1 if i < r % n else 0) for i in range(n)]  # each ≥ 16 and ≤ 32
    return torch.cat([F.linear(part, w) for part in torch.split(x, sizes)])


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
    def __init__(self, model: Any, max_context: int, spares: int = 1):
        cfg = model.config
        self.spares = spares  # zero-filled first-allocation caches kept ready by warm()
        self._spare: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []  # ready (K, V) block lists
        self._building: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])  # the next one, in progress
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
        # K/V are stored (exactly) in float32 and attention runs in float32: on CPU the small
        # attention matmuls are ~3× faster in float32 than in bf16 (oneDNN's bf16 set-up cost)
        self.kv_dtype = torch.float32 if self.dtype in (torch.bfloat16, torch.float16) else self.dtype
        self._first_cap = min(max_context, _GROW)  # a new conversation's capacity (and a spare's)

    def new_cache(self) -> FastCache:
        return FastCache(k=[], v=[], length=0)

    @property
    def spare_count(self) -> int:
        return len(self._spare)

    def warm(self) -> bool:
        """One piece of topping the spare caches up to ``spares``: one layer's zero-filled K and V
        blocks (≈ 0.4 MB here), so whoever calls it between responses can stop at any layer.
        Returns whether more is left to do."""
        if len(self._spare) >= self.spares:
            return False
        building = self._building
        building[0].append(self._block(self._first_cap))
        building[1].append(self._block(self._first_cap))
        if len(building[0]) == len(self.layers):
            self._spare.append(building)
            self._building = ([], [])
        return len(self._spare) < self.spares

    def _block(self, cap: int) -> torch.Tensor:
        """One layer's K or V block; zeros: masked padding keys must be finite."""
        return torch.zeros((1, self.n_kv, cap, self.head_dim), dtype=self.kv_dtype, device=self.device)

    def _blocks(self, cap: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        n = len(self.layers)
        return [self._block(cap) for _ in range(n)], [self._block(cap) for _ in range(n)]

    def _ensure(self, cache: FastCache, need: int) -> None:
        cap = cache.k[0].shape[2] if cache.k else 0
        if need <= cap:
            return
        if not cap and self._spare and need <= self._first_cap:
            cache.k, cache.v = self._spare.pop()
            return
        ks, vs = self._blocks(min(self.max_context, max(need, cap + _GROW)))
        for old, new in ((cache.k, ks), (cache.v, vs)):
            for a, b in zip(old, new, strict=False):  # nothing to copy on a first allocation
                b[:, :, : cache.length] = a[:, :, : cache.length]
        cache.k, cache.v = ks, vs

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """RMSNorm as one fused op (transformers' takes seven; in bf16 they round a little differently)."""
        return F.rms_norm(x, (x.shape[-1],), w, self.eps)

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
        return x * cos + rotated * sin

    def _bucket(self, pos: int) -> int:
        """Key length a query at ``pos`` attends over on the short path (same for every caller)."""
        return min(-(-(pos + 1) // _KEY_BUCKET) * _KEY_BUCKET, self.max_context)

    def _plan(self, start: int, t: int) -> tuple[list[int], list[tuple[int, list[int], torch.Tensor]]]:
        """Row positions and attention groups ``(key length, row indices, mask)`` for one forward: a
        bool ``[t, L]`` mask for a long prefill, else an additive ``[g·rows, L]`` bias (see ``_group``)."""
        if t > _SHORT:  # prefill: one call over exactly the keys so far
            mask = torch.ones(t, start + t, dtype=torch.bool, device=self.device).tril(start)
            return list(range(start, start + t)), [(start + t, list(range(t)), mask)]
        pos = list(range(start, start + t)) if t > 1 else [start, start]
        groups = []
        for length in sorted({self._bucket(p) for p in pos}):
            idx = [i for i, p in enumerate(pos) if self._bucket(p) == length]
            rows = idx if len(idx) > 1 else idx * 2  # a lone row still goes through the 2-row kernels
            keys = torch.arange(length, device=self.device)
            qpos = torch.tensor([pos[i] for i in rows], device=self.device)
            bias = torch.zeros(len(rows), length, dtype=self.kv_dtype, device=self.device)
            bias.masked_fill_(keys[None, :] > qpos[:, None], float("-inf"))
            groups.append((length, rows, bias.repeat(self.n_heads // self.n_kv, 1)))  # [g·rows, L], head-major
        return pos, groups

    @torch.inference_mode()
    def forward(self, cache: FastCache, tokens: list[int], n_logits: int) -> torch.Tensor:
        """Append ``tokens`` at ``cache.length``; return logits ``[n_logits, V]`` (model dtype)."""
        return self.forward_many([(cache, tokens, n_logits)])[0]

    @torch.inference_mode()
    def forward_many(self, items: list[tuple[FastCache, list[int], int]]) -> list[torch.Tensor]:
        """Several conversations in one pass: every projection and MLP runs once over all their
        rows ``[R, hidden]`` (in blocks of 2–32 rows, whose row results do not depend on the row count, see
        the module doc), attention per conversation over its own cache exactly as alone. A lone
        one-token item still runs as 2 rows. Returns per item ``[n_logits, V]`` (model dtype)."""
        plans = []
        for cache, tokens, _ in items:
            t, start = len(tokens), cache.length
            if start + t > self.max_context:
                raise ValueError(f"context full: {start + t} > {self.max_context}")
            pos, groups = self._plan(start, t)
            plans.append((start, t, pos, groups))
        for (cache, _, _), (_, _, _, groups) in zip(items, plans, strict=True):
            self._ensure(cache, max(g[0] for g in groups))
        lone = len(items) == 1 and len(items[0][1]) == 1  # the only way R could be 1: duplicate the row
        ids_l = [tok for _, tokens, _ in items for tok in tokens] * (2 if lone else 1)
        pos_l = [p for _, t, pos, _ in plans for p in pos[:t]] * (2 if lone else 1)
        r = len(ids_l)
        x = F.embedding(torch.tensor(ids_l, dtype=torch.long, device=self.device), self.embed)  # [R, hidden]
        cos = self.cos[pos_l]  # [R, D], broadcast over heads
        sin = self.sin[pos_l]
        H, KVH, D = self.n_heads, self.n_kv, self.head_dim
        for i, (ln1, wqkv, wo, ln2, wgu, wdown) in enumerate(self.layers):
            h = self._norm(x, ln1)
            qkv = _rows(h, wqkv)  # [R, (H + 2 KVH) D]
            # RoPE on q and k together: [H + KVH, R, D]
            qk = self._rope(qkv[:, : self.q_size + self.kv_size].view(r, H + KVH, D).transpose(0, 1), cos, sin)
            parts = []
            o = 0
            for (cache, _, _), (start, t, pos, groups) in zip(items, plans, strict=True):
                rows = len(pos)  # t, or 2 for a one-token step (its attention runs as 2 rows)
                q = qk[:H, o : o + t] if rows == t else qk[:H, o : o + 1].expand(H, 2, D)
                v = qkv[o : o + t, self.q_size + self.kv_size :].view(t, KVH, D).transpose(0, 1).unsqueeze(0)
                kc, vc = cache.k[i], cache.v[i]
                kc[0, :, start : start + t] = qk[H:, o : o + t]
                vc[:, :, start : start + t] = v
                att = self._attend(q.unsqueeze(0), kc, vc, groups, rows)  # [1, H, rows, D]
                parts.append(att[0, :, :t].transpose(0, 1).reshape(t, H * D))
                o += t
            att_all = torch.cat(parts) if len(parts) > 1 else parts[0]
            if lone:
                att_all = att_all.expand(2, -1)
            x = x + _rows(att_all, wo)
            h = self._norm(x, ln2)
            gu = _rows(h, wgu)  # [R, 2 * inter]
            x = x + _rows(F.silu(gu[:, : self.inter]) * gu[:, self.inter :], wdown)
        picks, o = [], 0
        for (cache, _, n_logits), (start, t, _, _) in zip(items, plans, strict=True):
            cache.length = start + t
            picks.append(x[o + t - n_logits : o + t])
            o += t
        last = torch.cat(picks) if len(picks) > 1 else picks[0]
        if last.shape[0] == 1:
            last = last.expand(2, -1)  # logits always from ≥ 2 rows
        logits = _rows(self._norm(last, self.final_norm), self.lm_head)  # [Σ n_logits, V]
        out, o = [], 0
        for _, _, n_logits in items:
            out.append(logits[o : o + n_logits])
            o += n_logits
        return out

    def _attend(self, q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, groups: list, r: int) -> torch.Tensor:
        """Attention for the planned groups. Short blocks use plain batched matmuls (row results
        independent of the row count, unlike the fused CPU kernel)."""
        q = q.to(self.kv_dtype)
        if r > _SHORT:  # a long prefill: one group, a bool mask (see _plan)
            length, _, mask = groups[0]
            return F.scaled_dot_product_attention(
                q, kc[:, :, :length], vc[:, :, :length], attn_mask=mask, scale=self.scale, enable_gqa=True
            ).to(self.dtype)
        H, KVH, D = self.n_heads, self.n_kv, self.head_dim
        g = H // KVH
        if len(groups) == 1 and len(groups[0][1]) == r:  # the usual case: one group, rows in order
            length, _, bias = groups[0]
            out = self._group(q[0].reshape(KVH, g * r, D), kc, vc, length, bias).view(1, H, r, D)
            return out.to(self.dtype)
        out = q.new_empty(q.shape)
        for length, rows, bias in groups:
            part = self._group(q[0, :, rows].reshape(KVH, g * len(rows), D), kc, vc, length, bias)
            out[0, :, rows] = part.view(H, len(rows), D)
        return out.to(self.dtype)

    def _group(self, qg: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, length: int, bias: torch.Tensor):
        """``qg [KVH, g·n, D]`` (the query heads sharing one KV head, stacked) → ``[KVH, g·n, D]``;
        ``bias [g·n, L]`` is 0 where a row may attend and -inf elsewhere."""
        s = torch.baddbmm(bias, qg, kc[0, :, :length].transpose(1, 2), alpha=self.scale)  # [KVH, g n, L]
        return torch.bmm(torch.softmax(s, -1), vc[0, :, :length])
