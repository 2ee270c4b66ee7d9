"""Unknown keys in ``session.update`` / ``response.create``: the first one found, as OpenAI's ``unknown_parameter``.

Pure. The option models (``gateway.realtime.protocol``) ignore fields they do not declare, so a
misspelt or unimplemented option would otherwise be accepted and do nothing, and the user would
believe it works. OpenAI's Realtime API answers such a key with an ``error`` event
(``invalid_request_error``, code ``unknown_parameter``, ``param`` naming the key); this does the
same. The walk follows the *validated* model next to the raw JSON, so a union (a tool, a voice, a
truncation) is checked against the member the value actually parsed as.

The few GA keys a published client passes through that this server does not act on are accepted
and ignored (``ACCEPTED_IGNORED``, listed in docs/API.md's request-keys table): refusing them
would break those unmodified clients.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel

from processors.vad import ServerVadConfig

# (model class name, key): taken and not acted on. The beta API's ``modalities`` (protocol._legacy_modalities
# maps it to output_modalities); GA's ``prompt`` (templates live on OpenAI's platform) and ``reasoning`` (the
# served models do not reason in a separate channel), which the Agents SDKs and Pipecat pass through
# (docs/PROTOCOL.md, "GA session fields accepted for strict clients")
ACCEPTED_IGNORED = frozenset(
    (model, key) for model in ("SessionOptions", "ResponseOptions") for key in ("modalities", "prompt", "reasoning")
)

# fields typed as plain objects whose keys are still known: a turn detection's are ServerVadConfig's
_DICT_KEYS: dict[tuple[str, str], frozenset[str]] = {
    ("AudioInput", "turn_detection"): frozenset(f.name for f in dataclasses.fields(ServerVadConfig)),
}

# fields whose values are not walked: their own rules apply
_NOT_WALKED = {
    # the out-of-band items follow conversation.item.create's item rules
    ("ResponseOptions", "input"),
}


def _keys(cls: type[BaseModel]) -> set[str]:
    out: set[str] = set()
    for name, field in cls.model_fields.items():
        out.add(name)
        for alias in (field.alias, field.validation_alias):
            if isinstance(alias, str):
                out.add(alias)
    return out


def unknown_key(model: BaseModel, raw: Any, path: str) -> str | None:
    """The dotted path (``session.audio.output.foo``, ``response.tools[1].bar``; ``path`` "" at the
    event itself) of the first key in ``raw`` (the JSON ``model`` was validated from) that ``model``'s
    type neither declares nor accepts as ignored; None when every key is known."""
    if not isinstance(raw, dict):
        return None
    cls = type(model)
    known = _keys(cls)
    for key in raw:
        if key not in known and (cls.__name__, key) not in ACCEPTED_IGNORED:
            return f"{path}.{key}" if path else key
    for name in cls.model_fields:
        if name not in raw or (cls.__name__, name) in _NOT_WALKED:
            continue
        where = f"{path}.{name}" if path else name
        keys = _DICT_KEYS.get((cls.__name__, name))
        if keys is not None and isinstance(raw[name], dict):
            extra = next((k for k in raw[name] if k not in keys), None)
            if extra is not None:
                return f"{where}.{extra}"
            continue
        found = _walk(getattr(model, name), raw[name], where)
        if found is not None:
            return found
    return None


def _walk(value: Any, raw: Any, path: str) -> str | None:
    if isinstance(value, BaseModel):
        return unknown_key(value, raw, path)
    if isinstance(value, list) and isinstance(raw, list):
        for i, (v, r) in enumerate(zip(value, raw, strict=False)):
            found = _walk(v, r, f"{path}[{i}]")
            if found is not None:
                return found
    return None
