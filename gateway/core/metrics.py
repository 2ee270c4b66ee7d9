"""Prometheus metrics, named like vLLM's where they overlap (``stream_omni:…``). One registry per app."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.ttft = Histogram(
            "stream_omni:time_to_first_token_seconds",
            "Time to first text chunk",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.e2e = Histogram(
            "stream_omni:e2e_request_latency_seconds",
            "Response start to end",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.inter_chunk = Histogram(
            "stream_omni:inter_chunk_latency_seconds",
            "Mean time between chunks of a response",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.prompt_tokens = Counter("stream_omni:prompt_tokens", "Prompt tokens prefilled", registry=r)
        self.cached_tokens = Counter("stream_omni:prompt_tokens_cached", "Prompt tokens reused from cache", registry=r)
        self.generation_tokens = Counter("stream_omni:generation_tokens", "Tokens generated", registry=r)
        self.draft_tokens = Counter("stream_omni:spec_decode_num_draft_tokens", "Draft tokens verified", registry=r)
        self.accepted_tokens = Counter(
            "stream_omni:spec_decode_num_accepted_tokens", "Draft tokens accepted", registry=r
        )
        # per draft kind (prompt_lookup_<n>gram, draft_model): tokens verified and accepted, and the
        # chances the drafting policy declined because a verify would not have paid
        self.kind_drafted = Counter(
            "stream_omni:spec_decode_kind_draft_tokens", "Draft tokens verified, by draft kind", ["kind"], registry=r
        )
        self.kind_accepted = Counter(
            "stream_omni:spec_decode_kind_accepted_tokens", "Draft tokens accepted, by draft kind", ["kind"], registry=r
        )
        self.kind_skipped = Counter(
            "stream_omni:spec_decode_kind_skipped",
            "Proposals not verified because drafting would not have paid, by draft kind",
            ["kind"],
            registry=r,
        )
        self.sessions = Gauge("stream_omni:active_sessions", "Open realtime sessions", registry=r)
        self.mcp_connections = Gauge("stream_omni:mcp_connections", "MCP server connections sessions hold", registry=r)
        # the soak (bench/soak.py) watches this return to its baseline after load: a leak shows here first
        self.loop_tasks = Gauge("stream_omni:event_loop_tasks", "asyncio tasks alive on the server loop", registry=r)
        self.running = Gauge("stream_omni:num_requests_running", "Responses decoding", registry=r)
        self.waiting = Gauge("stream_omni:num_requests_waiting", "Responses queued", registry=r)
        self.cancels = Counter("stream_omni:cancels", "Responses cancelled", registry=r)
        self.resumes = Counter("stream_omni:resumes", "Sessions resumed", registry=r)
        self.errors = Counter("stream_omni:errors", "Error events and responses by code", ["code"], registry=r)
        self.speculation = Counter(
            "stream_omni:voice_speculation",
            "Replies prepared at a pause in speech (prepared), and what became of them (committed: sent when "
            "the turn ended; "
            "discarded: speech resumed; mismatched: the committed turn asked for another generation)",
            ["outcome"],
            registry=r,
        )
        self.transcripts = Counter(
            "stream_omni:voice_transcripts",
            "Final transcripts of VAD turns (inconsistent: the words shown while speaking were not a prefix)",
            ["consistent"],
            registry=r,
        )
        self.webrtc_calls = Counter("stream_omni:webrtc_calls", "WebRTC calls answered (resumes included)", registry=r)
        self.webrtc_active = Gauge("stream_omni:webrtc_calls_active", "WebRTC peer connections up", registry=r)
        self.webrtc_packets_lost = Counter(
            "stream_omni:webrtc_packets_lost", "Inbound RTP audio packets lost (RTCP receiver view)", registry=r
        )
        self.webrtc_jitter = Histogram(
            "stream_omni:webrtc_jitter_seconds",
            "Inbound RTP interarrival jitter, sampled per call every webrtc.stats_interval_s",
            registry=r,
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
        )
        self.responses = Counter("stream_omni:responses", "Responses finished by status", ["status"], registry=r)
        # voice input shared by every session (gateway.voice.asr_worker): queue, stages, seats
        self.voice_queue = Gauge(
            "stream_omni:voice_asr_queue_depth", "Whisper passes waiting for the worker", registry=r
        )
        self.voice_seats = Gauge("stream_omni:voice_sessions", "Voice sessions holding a seat", registry=r)
        self.voice_capacity = Gauge(
            "stream_omni:voice_capacity", "Voice sessions served at once (audio.max_concurrent_turns)", registry=r
        )
        self.voice_stage = Histogram(
            "stream_omni:voice_stage_seconds",
            "Voice pipeline stages: vad (one frame through the VAD), asr_wait (a pass queued → started), "
            "asr_run (one Whisper call, all passes batched in it), end_of_turn (one end-of-turn model call), "
            "tts_first_chunk (a reply's first chunk, queued for synthesis → made); the LLM's first token is "
            "stream_omni:time_to_first_token_seconds",
            ["stage"],
            registry=r,
            buckets=(0.001, 0.002, *_LATENCY_BUCKETS),
        )
        self.voice_batch = Histogram(
            "stream_omni:voice_asr_batch_passes", "Passes per Whisper call", registry=r, buckets=(1, 2, 3, 4, 6, 8)
        )
        self.voice_shed = Counter(
            "stream_omni:voice_partials_shed", "Partial transcript passes dropped under load", registry=r
        )
        # the end-of-turn model (gateway.voice.endpointing) and speech over replies (backchannels)
        self.turn_model_seconds = Counter(
            "stream_omni:voice_turn_model_seconds", "Compute time of the end-of-turn model (every call)", registry=r
        )
        self.turn_model_cost = Gauge(
            "stream_omni:voice_turn_model_cost",
            "End-of-turn model compute seconds per second of voice input heard (all sessions, since start)",
            registry=r,
        )
        self.turns_reopened = Counter(
            "stream_omni:voice_turns_reopened",
            "Spoken turns continued by speech that resumed before their reply was heard (turn_detection.reopen_ms)",
            registry=r,
        )
        self.voice_overlaps = Counter(
            "stream_omni:voice_overlaps",
            "Speech over a reply by outcome: backchannel and false_start keep the reply, interruption cancels it",
            ["outcome"],
            registry=r,
        )

    def observe_response(self, m: dict[str, Any]) -> None:
        if m.get("ttft_ms") is not None:
            self.ttft.observe(m["ttft_ms"] / 1000)
        if m.get("e2e_s") is not None:
            self.e2e.observe(m["e2e_s"])
        if m.get("chunks", 0) > 1 and m.get("e2e_s") is not None and m.get("ttft_ms") is not None:
            self.inter_chunk.observe(max(m["e2e_s"] - m["ttft_ms"] / 1000, 0.0) / (m["chunks"] - 1))
        self.prompt_tokens.inc(m.get("prompt_tokens", 0))
        self.cached_tokens.inc(m.get("cached_tokens", 0))
        self.generation_tokens.inc(m.get("tokens", 0))
        self.draft_tokens.inc(m.get("draft_tokens", 0))
        if m.get("draft_acceptance") is not None:
            self.accepted_tokens.inc(round(m["draft_acceptance"] * m.get("draft_tokens", 0)))
        for kind, c in (m.get("draft_kinds") or {}).items():
            self.kind_drafted.labels(kind=kind).inc(c.get("drafted", 0))
            self.kind_accepted.labels(kind=kind).inc(c.get("accepted", 0))
            self.kind_skipped.labels(kind=kind).inc(c.get("skipped", 0))

    def render(self, running: int, waiting: int) -> bytes:
        self.running.set(running)
        self.waiting.set(waiting)
        return generate_latest(self.registry)
