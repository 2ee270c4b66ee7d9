"""Server-side tools: remote and configured MCP servers that the gateway calls itself (docs/TOOLS.md)."""
