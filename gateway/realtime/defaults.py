"""A new Realtime session's defaults: the server's config, and what it loaded (model ids, voices, tokenizer, ASR)."""

from __future__ import annotations

from models.backend import PromptEncoder

from ..core.services import Services
from ..core.tokenize import count_tokens
from ..tools.state import McpPolicy
from .session import SessionDefaults


def session_defaults(svc: Services) -> SessionDefaults:
    c = svc.config
    backend = svc.backend
    # truncation estimates: with a tokenizer here only (a remote engine's is not ours to count with)
    encoder = backend if svc.engine.tokenizes and isinstance(backend, PromptEncoder) else None
    return SessionDefaults(
        model=backend.name,
        aliases=tuple(svc.model_ids[1:]),
        instructions=c.session.instructions,
        temperature=svc.sampling_defaults.temperature,
        top_p=svc.sampling_defaults.top_p,
        sampling=svc.sampling_defaults,
        max_output_tokens=c.session.max_output_tokens,
        output_modalities=tuple(c.session.output_modalities),
        scheduler=svc.chunking,
        speech=svc.speech.default if svc.speech is not None else None,
        voices=svc.speech.names if svc.speech is not None else (),
        max_context=getattr(backend, "max_context", 0) if encoder is not None else 0,
        count_tokens=(lambda text: count_tokens(encoder, text)) if encoder is not None else None,
        context_tokens=c.session.context_tokens,
        mcp=McpPolicy(
            allowed_urls=c.tools.mcp_allowed_urls,
            servers=tuple(c.tools.mcp_servers),
            list_ttl_s=c.tools.mcp_list_ttl_s,
            max_calls_per_response=c.tools.mcp_max_calls_per_response,
            max_tools=c.tools.mcp_max_tools,
        ),
        turn_detection=svc.default_turn_detection,
        transcribes=svc.asr is not None,
        has_room=svc.engine_has_room,
    )
