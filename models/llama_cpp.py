"""The llama.cpp backend: a GGUF model behind ``Backend``, through llama-cpp-python's C API.

One llama context serves every conversation. It holds ``n_seq`` llama.cpp sequences (slots),
each with its own ``n_ctx``-token KV stream (``kv_unified`` off, so a step of one conversation
attends over its own cache only). A ``KVState`` is bound to a slot on use:

* while bound, a step only decodes the new tokens (the fast path);
* a new or evicted state takes a free slot (one whose state was garbage-collected), else an
  idle one, chosen by ``pick_slot``: next to the sequences it decodes with (llama.cpp computes
  one ubatch per run of consecutive ids), then by the longest cached prefix. If another slot
  (even one in use) caches a longer prefix — the system prompt and chat template every
  conversation shares — that sequence is copied in first (``llama_memory_seq_cp``). The slot is
  then re-synced: cropped to the common prefix and the rest of ``state.tokens`` re-prefilled.
  That costs one prefill of the divergent tail, so keep ``n_seq`` at least the number of
  conversations that decode concurrently.

Numerics: with flash attention (the default here) a row's logits do not depend on how many
tokens share its ``llama_decode`` call — measured on SmolLM2 Q4_1, blocks of 1–17 tokens give
bitwise the logits of one-token steps — so verifying drafts in one batch keeps greedy output
exactly plain greedy's. Without it (``flash_attn=False``, llama-cpp-python's default) the
attention kernels of a one-token step round differently from a batch's (max ≈ 1.4 on logits of
scale ≈ 30) and drafting can flip near-ties. A cold prompt decoded token by token matches
``Llama.generate`` with the same ``flash_attn`` token for token. ``reset()`` empties every sequence.

``forward_batch`` (continuous batching) puts every item's tokens into one ``llama_batch``, each
token tagged with its conversation's ``seq_id``, and returns per item a float32 ``[n_logits, V]``
copy of the logits of its last ``n_logits`` positions (``logits`` flags set only there);
``forward`` is the batch of one. Entries go in ascending ``seq_id`` order: with per-sequence KV
streams llama.cpp computes one ubatch per run of consecutive ids, so ``pick_slot`` places a new
conversation next to the ones it decodes with and ``plan_moves`` closes the hole a finished one
leaves (one stream copy); ``park`` lets a new one take a dropped client's slot. A call longer
than ``n_batch`` tokens is split into several ``llama_decode`` calls. ``crop`` is
``llama_memory_seq_rm``. ``state.tokens`` must only change through the backend
(``forward``/``forward_batch``/``crop``).

Tokens: the GGUF's embedded chat template rendered with jinja2 exactly as llama-cpp-python's
``create_chat_completion`` does, tokenized by llama.cpp with special tokens parsed (the same ids
as the transformers tokenizer loaded from this GGUF; tests/test_llama_cpp_backend.py checks).
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import chat_template
from .backend import BatchItem, KVState, common_prefix
from .cores import CORES
from .llama_cpp_load import import_llama_cpp, quiet_llama_log, resolve_gguf
from .llama_slots import SeqHandle, Slot, open_slots, pick_slot, plan_moves
from .llm import ModelLoadError, generation_defaults

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LlamaCppConfig:
    model: str = "embedded"  # "embedded" | path to a .gguf file
    threads: int = 2  # llama.cpp threads, decode and prefill
    n_ctx: int = 4096  # tokens one conversation's cache may hold (one sequence)
    n_batch: int = 512  # most tokens per llama_decode call; longer prefills are split
    n_seq: int = 4  # conversations resident at once (llama.cpp sequences); more re-prefill
    # flash attention makes llama.cpp batch-invariant (a verify block's rows are bitwise the
    # one-token logits, so drafting keeps greedy output exact) and is faster here; llama-cpp-python
    # defaults to off, so compare with Llama(..., flash_attn=True)
    flash_attn: bool = True
    served_name: str | None = None  # the id shown in /v1/models


_MIN_BORROW = 8  # copy another slot's cached prefix when it is at least this many tokens longer


class LlamaCppBackend:
    def __init__(self, cfg: LlamaCppConfig):
        lc = import_llama_cpp()
        self._lc = lc
        self.cfg = cfg
        path, self.name = resolve_gguf(cfg.model, cfg.served_name)
        if cfg.n_seq < 1 or cfg.n_batch < 1 or cfg.n_ctx < 16:
            raise ModelLoadError(f"bad llama.cpp settings: n_seq={cfg.n_seq} n_batch={cfg.n_batch}")
        quiet_llama_log(lc)
        lc.llama_backend_init()
        mparams = lc.llama_model_default_params()
        # no extra weight buffers (AMX, repacking): where the CPU reports AMX but the sandbox faults
        # on its tile instructions (ldtilecfg → SIGSEGV on every batch of 2+ tokens, seen on this
        # project's machines) llama.cpp would put the Q4_1 weights there; Q4_1 has no CPU repack
        mparams.use_extra_bufts = False
        self._model = lc.llama_model_load_from_file(str(path).encode(), mparams)
        if not self._model:
            raise ModelLoadError(f"llama.cpp cannot load {path}")
        self._vocab = lc.llama_model_get_vocab(self._model)
        n_train = int(lc.llama_model_n_ctx_train(self._model))
        per_seq = min(cfg.n_ctx, n_train) if n_train > 0 else cfg.n_ctx
        self.n_batch = min(cfg.n_batch, per_seq)

        cparams = lc.llama_context_default_params()
        cparams.n_ctx = per_seq * cfg.n_seq
        cparams.n_batch = self.n_batch
        cparams.n_ubatch = self.n_batch
        cparams.n_seq_max = cfg.n_seq
        cparams.kv_unified = False
        cparams.n_threads = cparams.n_threads_batch = self._cfg_threads = self._threads = cfg.threads
        cparams.flash_attn_type = (
            lc.LLAMA_FLASH_ATTN_TYPE_ENABLED if cfg.flash_attn else lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        cparams.no_perf = True
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            lc.llama_model_free(self._model)
            raise ModelLoadError(f"llama.cpp cannot create a context (n_ctx={cparams.n_ctx}, n_seq={cfg.n_seq})")
        self._mem = lc.llama_get_memory(self._ctx)
        self.max_context = min(per_seq, int(lc.llama_n_ctx_seq(self._ctx)))
        self.vocab_size = int(lc.llama_vocab_n_tokens(self._vocab))
        self.eos_ids = frozenset(t for t in range(self.vocab_size) if lc.llama_vocab_is_eog(self._vocab, t))

        # one batch, reused: numpy arrays own the memory, the struct points into them
        n = self.n_batch
        self._tok = np.zeros(n, dtype=np.int32)
        self._pos = np.zeros(n, dtype=np.int32)
        self._nseq = np.ones(n, dtype=np.int32)
        self._want = np.zeros(n, dtype=np.int8)
        self._seqp = np.zeros(n, dtype=np.uint64)  # batch.seq_id: per token, the address of its slot's seq id
        self._batch = lc.llama_batch()
        self._batch.token = self._tok.ctypes.data_as(ctypes.POINTER(lc.llama_token))
        self._batch.embd = None
        self._batch.pos = self._pos.ctypes.data_as(ctypes.POINTER(lc.llama_pos))
        self._batch.n_seq_id = self._nseq.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        self._batch.logits = self._want.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self._batch.seq_id = ctypes.cast(self._seqp.ctypes.data, ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)))
        self._text_buf = ctypes.create_string_buffer(1 << 14)  # decode's output, grown on demand
        self._slots = [Slot(i) for i in range(cfg.n_seq)]
        self._clock = itertools.count(1)

        self._template = self._meta("tokenizer.chat_template")
        self.sampling_defaults = generation_defaults(cfg.model) or self._gguf_sampling()
        self.has_chat_template = bool(self._template)
        self._formatters: dict[bool, Any] = {}
        self._closed = False

    # ---------------------------------------------------------------- Backend

    def new_state(self) -> KVState:
        return KVState(tokens=[], cache=SeqHandle())

    def forward(self, state: KVState, tokens: list[int], n_logits: int = 1) -> np.ndarray:
        return self.forward_batch([(state, tokens, n_logits)])[0]

    def forward_batch(self, items: list[BatchItem]) -> list[np.ndarray]:
        """Every item's tokens in one ``llama_batch`` (its own ``seq_id``), split into ``n_batch``
        token ``llama_decode`` calls only when longer; item j → float32 ``[n_logits_j, V]``.

        All-or-nothing: on a failed decode every sequence of the call is cut back and no
        ``state.tokens`` changes. More items than ``n_seq`` go in groups of ``n_seq`` (a
        conversation's slot must not be evicted by another item of the same call)."""
        for state, tokens, n_logits in items:
            if not tokens:
                raise ValueError("forward needs at least one token")
            full_len = len(state.tokens) + len(tokens)
            if not 1 <= n_logits <= full_len:
                raise ValueError(f"n_logits={n_logits} outside 1..{full_len}")
            if full_len > self.max_context:
                raise ValueError(f"{full_len} tokens exceed the context of {self.max_context}")
        if len({id(s) for s, _, _ in items}) != len(items):
            raise ValueError("forward_batch: a state appears twice in one batch")
        out: list[np.ndarray] = []
        n_seq = len(self._slots)
        for lo in range(0, len(items), n_seq):
            group = items[lo : lo + n_seq]
            work = []
            running = {h.slot for h in (s.cache for s, _, _ in group) if self._owns(h)}
            fresh_ones = [self._bind(state, tokens, running)[1] for state, tokens, _ in group]
            for src, dst in plan_moves(open_slots(self._slots, running), running):
                self._move(self._slots[src], self._slots[dst])
            for (state, tokens, n_logits), fresh in zip(group, fresh_ones, strict=True):
                slot = self._slots[state.cache.slot]
                if not fresh and len(slot.tokens) == len(state.tokens) and n_logits <= len(tokens):
                    start, todo = len(state.tokens), tokens  # fast path: the slot mirrors the state
                else:
                    full = state.tokens + tokens
                    start = min(common_prefix(slot.tokens, full), len(full) - n_logits)
                    todo = full[start:]
                self._crop_slot(slot, start)
                work.append((slot, todo, n_logits))
            out.extend(self._decode(work))
            for state, tokens, _ in group:
                state.tokens.extend(tokens)
        return out

    def park(self, state: KVState) -> None:
        """``models.backend.Parking``: its slot goes to a new conversation before a free one that
        would decode apart from the running ones; it stays cached until then."""
        handle = state.cache
        if self._owns(handle):
            self._slots[handle.slot].parked = True

    def crop(self, state: KVState, length: int) -> None:
        if length >= len(state.tokens):
            return
        length = max(length, 0)
        handle = state.cache
        if self._owns(handle):
            slot = self._slots[handle.slot]
            self._crop_slot(slot, min(length, len(slot.tokens)))
        del state.tokens[length:]

    def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        if self.has_chat_template:
            # role markers in a content are text, never special tokens (models.chat_template)
            return chat_template.safe_chat_ids(
                messages,
                lambda msgs: self._formatter(add_generation_prompt)(messages=msgs).prompt,
                self._special_texts(),
                lambda text: self.tokenize(text, special=True),
                lambda text: self.tokenize(text, special=False),
            )
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)  # same fallback as llm.py
        if add_generation_prompt:
            text += "assistant:"
        return self.tokenize(text, special=False, add_bos=True)  # all text: the fallback has no markers

    def _special_texts(self) -> frozenset[str]:
        """Texts that ``llama_tokenize(special=True)`` turns into one token: control and user-defined ones."""
        self._special_ids()
        return self._specials

    def decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        arr = np.asarray(ids, dtype=np.int32)
        ptr = arr.ctypes.data_as(ctypes.POINTER(self._lc.llama_token))
        for _ in range(2):
            buf = self._text_buf
            # remove_special: drop a leading BOS / trailing EOS; unparse_special=False: no control text
            n = self._lc.llama_detokenize(self._vocab, ptr, len(arr), buf, len(buf), True, False)
            if n >= 0:
                return buf.raw[:n].decode("utf-8", errors="replace")
            self._text_buf = ctypes.create_string_buffer(max(-n, 2 * len(buf)))
        raise RuntimeError("llama_detokenize failed")

    # ---------------------------------------------------------------- extras

    def encode(self, text: str) -> list[int]:
        """Raw text as a prompt (models.backend.PromptEncoder): the vocab's BOS if it has one, and
        special-token texts as their tokens. The split is ours (``chat_template.split_specials``,
        linear): llama.cpp's own takes time growing with the square of the number of markers."""
        specials = self._special_ids()
        pieces = chat_template.split_specials(text, self._specials)
        if all(not special for _, special in pieces):
            return self.tokenize(text, special=False, add_bos=True)
        ids = self.tokenize("", special=False, add_bos=True)
        for piece, special in pieces:
            ids += [specials[piece]] if special else self.tokenize(piece, special=False)
        return ids

    def _special_ids(self) -> dict[str, int]:
        """``_special_texts`` → the (first) token id of each; once, lazily (≈ one vocabulary scan)."""
        found: dict[str, int] | None = getattr(self, "_special_id_map", None)
        if found is None:
            lc, flags = self._lc, self._lc.LLAMA_TOKEN_ATTR_CONTROL | self._lc.LLAMA_TOKEN_ATTR_USER_DEFINED
            found = {}
            for t in range(lc.llama_vocab_n_tokens(self._vocab)):
                if lc.llama_vocab_get_attr(self._vocab, t) & flags:
                    found.setdefault(self._token_text(t), t)
            self._special_id_map, self._specials = found, frozenset(found)
        return found

    def tokenize(self, text: str, special: bool = False, add_bos: bool = False) -> list[int]:
        lc = self._lc
        data = text.encode("utf-8")
        cap = len(data) + 8
        for _ in range(2):
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
            if n >= 0:
                return list(buf[:n])
            cap = -n
        raise RuntimeError("llama_tokenize failed")

    def reset(self) -> None:
        """Empty every sequence. Live states stay valid: their next step re-prefills them."""
        self._lc.llama_memory_clear(self._mem, True)
        for slot in self._slots:
            slot.tokens.clear()
            slot.owner = None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._lc.llama_free(self._ctx)
        self._lc.llama_model_free(self._model)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

    def cached_prefix(self, tokens: list[int]) -> int:
        """The longest prefix of ``tokens`` some sequence holds (a new state borrows it)."""
        return max((common_prefix(s.tokens, tokens) for s in self._slots), default=0)

    # ---------------------------------------------------------------- internals

    def _bind(self, state: KVState, tokens: list[int], running: set[int]) -> tuple[Slot, bool]:
        """The slot of ``state`` and whether it was just (re)bound, i.e. may hold other tokens.
        ``running``: the sequences of this call so far; a fresh slot joins them (``pick_slot``)."""
        handle = state.cache
        if not isinstance(handle, SeqHandle):
            handle = state.cache = SeqHandle()
        fresh = False
        if self._owns(handle):
            slot = self._slots[handle.slot]
        else:
            fresh = True
            slot = self._slots[pick_slot(self._slots, running, state.tokens + tokens)]
            if not slot.takeable():
                log.debug("llama.cpp: slot %d evicted (%d tokens); raise n_seq", slot.seq, len(slot.tokens))
            slot.owner = weakref.ref(handle)
            handle.slot = slot.seq
            self._borrow_prefix(slot, state.tokens + tokens)
        slot.used = next(self._clock)
        slot.parked = False
        running.add(slot.seq)
        return slot, fresh

    def _move(self, src: Slot, dst: Slot) -> None:
        """Hand ``src``'s conversation to ``dst``: llama.cpp copies the stream (the next decode
        applies it), bitwise; ``src`` stays free with the same cache as a prefix donor."""
        self._crop_slot(dst, 0)
        self._lc.llama_memory_seq_cp(self._mem, src.seq, dst.seq, -1, -1)
        dst.tokens[:] = src.tokens
        dst.owner, src.owner = src.owner, None
        dst.used, dst.parked, src.parked = src.used, False, False
        handle = dst.owner() if dst.owner is not None else None
        if handle is not None:
            handle.slot = dst.seq

    def _owns(self, handle: object) -> bool:
        return isinstance(handle, SeqHandle) and handle.slot is not None and self._slots[handle.slot].owned_by(handle)

    def _borrow_prefix(self, slot: Slot, target: list[int]) -> None:
        """Give a newly bound slot the longest cached prefix of ``target`` held by any slot.

        A conversation still resident elsewhere (a live or resumable session) may hold the
        shared system prompt and chat template while this slot holds less: copying that
        sequence (llama.cpp copies whole sequences between streams) and cutting it at the
        common prefix costs far less than prefilling it again; the logits are the same.
        """
        own = common_prefix(slot.tokens, target)
        donor, best = None, own + _MIN_BORROW
        for other in self._slots:
            if other is not slot:
                n = common_prefix(other.tokens, target)
                if n > best:
                    donor, best = other, n
        if donor is None:
            return
        self._crop_slot(slot, 0)
        self._lc.llama_memory_seq_cp(self._mem, donor.seq, slot.seq, -1, -1)
        slot.tokens[:] = donor.tokens
        self._crop_slot(slot, best)

    def _crop_slot(self, slot: Slot, length: int) -> None:
        if length < len(slot.tokens):
            if not self._lc.llama_memory_seq_rm(self._mem, slot.seq, length, -1):
                raise RuntimeError(f"llama.cpp could not remove positions {length}.. of sequence {slot.seq}")
            del slot.tokens[length:]

    def _decode(self, work: list[tuple[Slot, list[int], int]]) -> list[np.ndarray]:
        """Decode each ``todo`` after its ``slot.tokens`` in shared batches; logits of the last
        ``n_logits`` positions of each.

        Entries go in ascending ``seq_id`` order: with per-sequence KV streams llama.cpp splits
        a batch into one compute per run of consecutive sequence ids (``split_equal``)."""
        lc, batch = self._lc, self._batch
        order = sorted(range(len(work)), key=lambda j: work[j][0].seq)
        outs = [np.empty((n, self.vocab_size), dtype=np.float32) for _, _, n in work]
        # flattened entries of the whole call: token, position, seq_id address, row to fill (-1: none)
        toks = np.concatenate([np.asarray(work[j][1], dtype=np.int32) for j in order])
        pos = np.concatenate(
            [
                np.arange(len(w[0].tokens), len(w[0].tokens) + len(w[1]), dtype=np.int32)
                for w in (work[j] for j in order)
            ]
        )
        seqp = np.concatenate([np.full(len(work[j][1]), work[j][0].seq_addr, dtype=np.uint64) for j in order])
        item = np.concatenate([np.full(len(work[j][1]), j, dtype=np.int64) for j in order])
        row = np.concatenate(
            [np.arange(len(work[j][1]), dtype=np.int64) - (len(work[j][1]) - work[j][2]) for j in order]
        )  # row of the item's output; negative: no logits
        bases = [(w[0], len(w[0].tokens)) for w in work]
        total = len(toks)
        for lo in range(0, total, self.n_batch):
            n = min(self.n_batch, total - lo)
            sl = slice(lo, lo + n)
            self._tok[:n] = toks[sl]
            self._pos[:n] = pos[sl]
            self._seqp[:n] = seqp[sl]
            want = row[sl] >= 0
            self._want[:n] = want
            batch.n_tokens = n
            if (threads := CORES.threads(self._cfg_threads)) != self._threads:  # a Whisper pass holds a core
                lc.llama_set_n_threads(self._ctx, threads, threads)
                self._threads = threads
            rc = lc.llama_decode(self._ctx, batch)
            if rc != 0:
                for slot, base in bases:  # leave every sequence of the call as it was
                    lc.llama_memory_seq_rm(self._mem, slot.seq, base, -1)
                    del slot.tokens[base:]
                raise RuntimeError(f"llama_decode returned {rc} ({len(work)} sequences, {total} tokens)")
            for i in np.flatnonzero(want):
                ptr = lc.llama_get_logits_ith(self._ctx, int(i))
                outs[item[lo + i]][row[lo + i]] = np.ctypeslib.as_array(ptr, shape=(self.vocab_size,))
            for j in np.unique(item[sl]):  # the decoded tokens are cached now
                w_slot, w_todo, _ = work[j]
                k = int(np.count_nonzero(item[sl] == j))
                done = len(w_slot.tokens) - bases[j][1]
                w_slot.tokens.extend(w_todo[done : done + k])
        return outs

    def _meta(self, key: str) -> str:
        lc = self._lc
        size = 1 << 16
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = lc.llama_model_meta_val_str(self._model, key.encode(), buf, size)
            if n < 0:
                return ""
            if n < size:
                return buf.value.decode("utf-8", errors="replace")
            size = n + 1
        return ""

    def _gguf_sampling(self) -> dict[str, float]:
        """A GGUF's own recommended sampling (``general.sampling.*``, where the converter wrote it)."""
        out: dict[str, float] = {}
        for key, field in (("temp", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"), ("min_p", "min_p")):
            text = self._meta(f"general.sampling.{key}")
            try:
                out[field] = int(text) if field == "top_k" else float(text)
            except ValueError:
                continue
        return out

    def _token_text(self, tid: int) -> str:
        if tid < 0:
            return ""
        return self._lc.llama_vocab_get_text(self._vocab, tid).decode("utf-8", errors="replace")

    def _formatter(self, add_generation_prompt: bool) -> Any:
        fmt = self._formatters.get(add_generation_prompt)
        if fmt is None:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            fmt = Jinja2ChatFormatter(
                template=self._template,
                eos_token=self._token_text(self._lc.llama_vocab_eos(self._vocab)),
                bos_token=self._token_text(self._lc.llama_vocab_bos(self._vocab)),
                add_generation_prompt=add_generation_prompt,
            )
            self._formatters[add_generation_prompt] = fmt
        return fmt


def load_llama_backend(cfg: LlamaCppConfig) -> LlamaCppBackend:
    return LlamaCppBackend(cfg)
