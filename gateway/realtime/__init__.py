"""realtime."""
