"""What an ``ek_`` key's session fixed, and what a browser may still change (pure).

A session opened with an ephemeral key (``gateway.core.ephemeral_keys``) starts with the config fixed at
minting; every top-level field that config set, and the model, is *locked*. A ``session.update``
that names a locked field has that field ignored (the rest applies, and ``session.updated`` shows
what holds): SDKs resend their whole config on connect, and refusing the whole update would break
them. A ``response.create`` that overrides a locked field for one response is refused
(``session_field_locked``), so a browser cannot widen the instructions or tools per response.
"""

from __future__ import annotations

from . import protocol as p

# response.create fields that stand in for the session's field of the same name for one response
_RESPONSE_OVERRIDES = ("instructions", "tools", "tool_choice", "output_modalities", "max_output_tokens", "audio")


def unlocked(ev: p.SessionUpdate, locked: frozenset[str]) -> p.SessionUpdate:
    """``ev`` without the locked fields (``ev`` itself when it names none)."""
    named = ev.session.model_fields_set & locked
    if not named:
        return ev
    keep = ev.session.model_dump(exclude_unset=True, exclude=set(named))
    return ev.model_copy(update={"session": p.SessionOptions.model_validate(keep)})


def overridden(ev: p.ResponseCreate, locked: frozenset[str]) -> str | None:
    """The ``param`` of the first locked field ``ev`` overrides for its response, or None."""
    if ev.response is None or not locked:
        return None
    for name in _RESPONSE_OVERRIDES:
        if name in locked and name in ev.response.model_fields_set:
            return f"response.{name}"
    return None
