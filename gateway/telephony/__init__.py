"""Phone calls: telephony media streams over WebSocket and OpenAI-style call control (docs/TELEPHONY.md)."""
