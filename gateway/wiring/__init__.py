"""Wiring: the ASGI app, startup and model loading, the in-process API, the CLI and the server runner. It
may import every room of the gateway; nothing imports it back (but ``gateway.StreamOmni``)."""
