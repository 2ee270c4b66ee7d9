"""A vision-language model behind one streaming call: transformers ``AutoModelForImageTextToText`` +
``AutoProcessor`` (SmolVLM / Idefics3, LLaVA, Qwen2-VL, … any model whose processor has a chat
template).

Shapes: ``input_ids [1, T]`` (the processor expands each image placeholder to the model's image
tokens); ``pixel_values`` is model-specific (Idefics3: ``[1, N_tiles, 3, S, S]``, LLaVA:
``[1, 3, S, S]``). Generation runs ``model.generate`` on a worker thread; a streamer hands each new
token id back, and ``stream`` yields ``VLMStep(token_ids, text)`` as tokens arrive (``text`` is the
newly decodable suffix, possibly empty while a multi-byte character is incomplete).

Messages: ``[{"role": "user" | "system" | "assistant", "content": str | [part, …]}]`` with parts
``{"type": "text", "text": str}`` and ``{"type": "image", "image": PIL.Image}`` (decode and
validate untrusted bytes with ``processors.image`` first).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

_END = object()


class VLMLoadError(Exception):
    """The configured VLM cannot be loaded; one line for the operator."""


@dataclass(frozen=True)
class VLMConfig:
    model: str = "HuggingFaceTB/SmolVLM-256M-Instruct"  # HF hub id or local folder (model + processor)
    dtype: str = "bfloat16"  # bfloat16 | float32 | float16
    device: str = "cpu"  # cpu | cuda | cuda:N
    threads: int | None = None  # torch intra-op threads to set at load (None: leave as is)
    attn_implementation: str | None = None  # e.g. "sdpa" | "eager"; None: transformers' default


@dataclass(frozen=True)
class VLMStep:
    token_ids: tuple[int, ...]  # ids generated in this step (usually one)
    text: str  # newly decodable text (may be "")


def to_template_messages(
    messages: Sequence[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[Image.Image]]:
    """Split images out of the messages: (chat-template messages with ``{"type": "image"}``
    placeholders, the images in order)."""
    out: list[dict[str, Any]] = []
    images: list[Image.Image] = []
    for msg in messages:
        content = msg.get("content", "")
        if isinstance(content, str):
            parts: list[dict[str, Any]] = [{"type": "text", "text": content}]
        else:
            parts = []
            for part in content:
                kind = part.get("type")
                if kind == "text":
                    parts.append({"type": "text", "text": str(part.get("text", ""))})
                elif kind == "image":
                    img = part.get("image")
                    if not isinstance(img, Image.Image):
                        raise TypeError("an image part needs a decoded PIL image under 'image'")
                    images.append(img.convert("RGB") if img.mode != "RGB" else img)
                    parts.append({"type": "image"})
                else:
                    raise ValueError(f"unknown content part type {kind!r} (text | image)")
        out.append({"role": msg["role"], "content": parts})
    return out, images


class _IdStreamer:
    """transformers streamer protocol (``put`` / ``end``) → a queue of token-id lists."""

    def __init__(self) -> None:
        self.q: queue.Queue[Any] = queue.Queue()
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        if not self._prompt_seen:  # generate() first puts the whole prompt
            self._prompt_seen = True
            return
        self.q.put([int(v) for v in value.reshape(-1).tolist()])

    def end(self) -> None:
        self.q.put(_END)


class VisionLanguageModel:
    def __init__(self, cfg: VLMConfig):
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self._torch = torch
        self.cfg = cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[cfg.dtype]
        kw: dict[str, Any] = {"attn_implementation": cfg.attn_implementation} if cfg.attn_implementation else {}
        try:
            self.processor = AutoProcessor.from_pretrained(cfg.model)
            model = AutoModelForImageTextToText.from_pretrained(cfg.model, dtype=self.dtype, **kw)
        except Exception as exc:  # one clear line for the operator
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise VLMLoadError(f"cannot load VLM {cfg.model!r}: {first[:300]}") from None
        if not getattr(self.processor, "chat_template", None):
            raise VLMLoadError(f"VLM {cfg.model!r}: its processor has no chat template")
        self.model = model.to(cfg.device).eval()
        self.device = self.model.device
        self.tokenizer = self.processor.tokenizer
        self._lock = threading.Lock()  # one generate() at a time; a second stream waits its turn

    def prepare(self, messages: Sequence[dict[str, Any]]) -> Any:
        """Messages → the processor's ``BatchFeature`` on the model's device (floats in model dtype)."""
        template_msgs, images = to_template_messages(messages)
        prompt = self.processor.apply_chat_template(template_msgs, add_generation_prompt=True, tokenize=False)
        inputs = self.processor(text=[prompt], images=images or None, return_tensors="pt")
        return inputs.to(self.device, dtype=self.dtype) if images else inputs.to(self.device)

    def stream(
        self,
        messages: Sequence[dict[str, Any]],
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        cancel: threading.Event | None = None,
    ) -> Iterator[VLMStep]:
        """Yield ``VLMStep`` per generated token. Closing the iterator or setting ``cancel`` stops
        generation at the next token (the worker thread is joined before this returns)."""
        from transformers import StoppingCriteria, StoppingCriteriaList

        torch = self._torch
        inputs = self.prepare(messages)
        stop = threading.Event()
        streamer = _IdStreamer()
        failure: list[BaseException] = []

        class _StopGenerating(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                flag = stop.is_set() or (cancel is not None and cancel.is_set())
                return torch.full((input_ids.shape[0],), flag, dtype=torch.bool, device=input_ids.device)

        gen_kw: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": temperature > 0}
        if temperature > 0:
            gen_kw.update(temperature=temperature, top_p=top_p)

        def work() -> None:
            try:
                with self._lock, torch.inference_mode():
                    self.model.generate(
                        **inputs,
                        streamer=streamer,
                        stopping_criteria=StoppingCriteriaList([_StopGenerating()]),
                        **gen_kw,
                    )
            except BaseException as exc:  # surfaced in the consumer
                failure.append(exc)
            finally:
                streamer.end()

        thread = threading.Thread(target=work, name="vlm-generate", daemon=True)
        thread.start()
        ids: list[int] = []
        shown = ""
        try:
            while True:
                item = streamer.q.get()
                if item is _END:
                    break
                ids.extend(item)
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                delta = ""
                if not text.endswith("\ufffd"):  # hold back an incomplete multi-byte character
                    delta, shown = text[len(shown) :], text
                yield VLMStep(token_ids=tuple(item), text=delta)
        finally:
            stop.set()
            thread.join()
        if failure:
            raise failure[0]

    def generate(self, messages: Sequence[dict[str, Any]], max_new_tokens: int = 256, **kw: Any) -> str:
        """The whole reply as one string."""
        return "".join(step.text for step in self.stream(messages, max_new_tokens, **kw))
