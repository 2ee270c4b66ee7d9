"""Batched decode for the generic transformers path (any HF causal LM, ``fast_path: false``).

Each conversation owns a ``DynamicCache`` of its own length. One engine step's items are grouped
by how many new tokens they carry (decode steps: 1; verify blocks: k; prefill pieces: their
length); every group of two or more runs as **one** model forward:

* each conversation's past K/V is left-padded with zeros to the group's longest past and stacked
  into one ``[B, KVH, P_max, D]`` cache per layer (a fresh ``DynamicCache``: the conversations'
  own caches are never written, so a raising forward leaves every state as it was);
* a 2-D ``attention_mask [B, P_max + T]`` is 0 on the padding, and ``position_ids [B, T]`` carry
  each row's own positions (RoPE and absolute position embeddings both read them), so the
  padding is invisible to every real query;
* the new K/V are split back per conversation without the padding.

Grouping by token count (instead of right-padding the new tokens too) keeps a prefill piece of
128 tokens from making 15 one-token decode rows pay for 128 rows each.

Only caches made of plain ``DynamicLayer``s batch (``batchable``): sliding-window, static or
recurrent layers keep their own update rules, so such models fall back to one forward per
conversation. Rows are not bitwise their alone values (other GEMM shapes, a padded softmax):
the divergence is measured in tests/engine/test_hf_batch.py and documented in docs/BATCHING.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

Group = list[tuple[Any, list[int], int]]  # (DynamicCache, tokens, n_logits), all len(tokens) equal


def batchable(model: Any) -> bool:
    """True when a fresh ``DynamicCache`` for ``model`` has only plain full-attention layers."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    try:
        layers = DynamicCache(config=model.config).layers
    except Exception:  # an exotic config: do not batch rather than guess
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _past(cache: Any) -> int:
    return int(cache.get_seq_length())


def forward_group(model: Any, group: Group) -> tuple[list[np.ndarray], list[Any]]:
    """One forward for ``group`` (≥ 1 items, the same token count each). Returns per item the
    logits ``[n_logits, V]`` float32 and its new ``DynamicCache`` (past + new tokens); the items'
    own caches are left untouched."""
    with torch.inference_mode():
        return _forward_group(model, group)


def _forward_group(model: Any, group: Group) -> tuple[list[np.ndarray], list[Any]]:
    from transformers import DynamicCache

    device = model.device
    t = len(group[0][1])
    pasts = [_past(c) for c, _, _ in group]
    p_max = max(pasts)
    n_layers = len(group[0][0].layers)
    ref = next((c for c, _, _ in group if _past(c) > 0), None)  # a filled cache gives K/V's [KVH, D] and dtype
    data = []
    for layer in range(n_layers):
        ks, vs = [], []
        for (cache, _, _), p in zip(group, pasts, strict=True):
            if p_max == 0:
                break
            assert ref is not None
            rk, rv = ref.layers[layer].keys, ref.layers[layer].values  # [1, KVH, P_ref, D]
            pad_k = rk.new_zeros((1, rk.shape[1], p_max - p, rk.shape[3]))  # [1, KVH, P_max - p, D]
            pad_v = rv.new_zeros((1, rv.shape[1], p_max - p, rv.shape[3]))
            if p == 0:
                ks.append(pad_k)
                vs.append(pad_v)
            else:
                ks.append(torch.cat([pad_k, cache.layers[layer].keys], dim=2))  # [1, KVH, P_max, D]
                vs.append(torch.cat([pad_v, cache.layers[layer].values], dim=2))
        if ks:
            data.append((torch.cat(ks), torch.cat(vs)))  # [B, KVH, P_max, D]
    batch_cache = DynamicCache(ddp_cache_data=data or None, config=model.config)
    ids = torch.tensor([toks for _, toks, _ in group], dtype=torch.long, device=device)  # [B, T]
    past_len = torch.tensor(pasts, dtype=torch.long, device=device)  # [B]
    keys = torch.arange(p_max + t, device=device)  # [P_max + T]
    # 0 on each row's left padding (key index < P_max - p), 1 on its real past and the new tokens
    mask = (keys[None, :] >= (p_max - past_len)[:, None]).long()  # [B, P_max + T]
    pos = past_len[:, None] + torch.arange(t, device=device)[None, :]  # [B, T]
    n_max = max(n for _, _, n in group)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=pos,
        past_key_values=batch_cache,
        use_cache=True,
        logits_to_keep=n_max,
    )
    logits = out.logits  # [B, n_max, V]
    rows = [logits[i, n_max - n :].float().cpu().numpy() for i, (_, _, n) in enumerate(group)]  # [n_i, V]
    caches = []
    for i, p in enumerate(pasts):
        # row i's real keys are its last p + t positions of [P_max + T]
        per_layer = [
            (layer.keys[i : i + 1, :, p_max - p :], layer.values[i : i + 1, :, p_max - p :])
            for layer in batch_cache.layers
        ]
        caches.append(DynamicCache(ddp_cache_data=per_layer, config=model.config))  # each [1, KVH, p + T, D]
    return rows, caches
