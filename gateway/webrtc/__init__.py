"""WebRTC transport for the Realtime API: GA signalling, Opus tracks, the ``oai-events`` data channel."""
