"""The MCP parts of the Realtime wire (GA shapes): the ``mcp`` session tool, an ``mcp`` tool_choice, and the
``mcp_approval_response`` item a client sends. Pure pydantic; ``gateway.realtime.protocol`` unions them in.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

LABEL = r"^[A-Za-z0-9_-]+$"


class _LenientWire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class McpTool(_LenientWire):
    """``{type: "mcp", server_label, server_url?, …}``: without ``server_url`` the label names a server of
    the gateway's own configuration (``tools.mcp_servers``)."""

    type: Literal["mcp"]
    server_label: str = Field(min_length=1, max_length=64, pattern=LABEL)
    server_url: str | None = Field(default=None, max_length=2048)
    server_description: str | None = Field(default=None, max_length=4096)
    allowed_tools: list[str] | dict[str, Any] | None = None
    require_approval: Literal["always", "never"] | dict[str, Any] | None = None
    # secrets: taken out of the options as soon as they are parsed (gateway.tools.state.take_secrets),
    # so session.updated, logs and snapshots never see them
    headers: dict[str, str] | None = None
    authorization: str | None = Field(default=None, max_length=8192)
    connector_id: str | None = None  # OpenAI's hosted connectors: not served here (a clear error)


class NamedMcpTool(_LenientWire):
    """``tool_choice: {type: "mcp", server_label, name?}``: a call to that tool (or any of that server's)."""

    type: Literal["mcp"]
    server_label: str
    name: str | None = None


class McpApprovalResponseItem(_LenientWire):
    type: Literal["mcp_approval_response"]
    id: str | None = Field(default=None, max_length=64)
    approval_request_id: str = Field(min_length=1, max_length=64)
    approve: bool
    reason: str | None = Field(default=None, max_length=4096)
