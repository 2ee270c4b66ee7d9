"""Gateway replicas sharing sessions through Redis (``sessions.store``): docs/REPLICAS.md."""
