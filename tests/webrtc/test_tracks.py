"""The call's media shells without a network: the paced track's own Opus packets and the listening jitter buffer."""

from __future__ import annotations

import asyncio

import numpy as np
from aiortc import RTCPeerConnection
from aiortc.codecs.opus import OpusDecoder
from aiortc.jitterbuffer import JitterFrame
from aiortc.rtp import RtpPacket
from av import Packet

from gateway.webrtc.track_pacing import FRAME, RATE, OutboundAudio, TrackStarted, TrackStopped
from gateway.webrtc.tracks import (
    IDLE_FRAMES,
    SETTLE_FRAMES,
    InlineDecoder,
    ListeningBuffer,
    PacedTrack,
    _frame,
    decode_inline,
    opus_encoder,
    silence_packet,
)


def decode(packets: list[Packet]) -> np.ndarray:
    """What a receiver hears: aiortc's own Opus decoder (stereo s16) → mono int16."""
    decoder = OpusDecoder()
    out = []
    for i, pkt in enumerate(packets):
        for frame in decoder.decode(JitterFrame(bytes(pkt), i * FRAME)):
            out.append(frame.to_ndarray().reshape(-1, 2).mean(axis=1))
    return np.concatenate(out)


async def test_the_track_encodes_audio_and_sends_cached_silence_when_idle():
    source = OutboundAudio()
    tone = (np.sin(np.arange(RATE // 2) * 2 * np.pi * 440 / RATE) * 8000).astype(np.int16)  # 500 ms
    source.push(tone, "r1", "i1")
    seen: list[object] = []
    track = PacedTrack(source, seen.extend)  # no response open once the tone is queued: it is all there is
    track._start = -1e9  # every frame due now: the work, not the pacing
    packets = [await track.recv() for _ in range(25 + SETTLE_FRAMES + 10)]
    assert seen == [TrackStarted("r1"), TrackStopped("r1")]
    assert [p.pts for p in packets[:3]] == [0, FRAME, 2 * FRAME]
    assert track.encoded == 25 + SETTLE_FRAMES  # the tone, then silence until the encoder has settled …
    idle = packets[25 + SETTLE_FRAMES :]
    assert all(bytes(p) == silence_packet(IDLE_FRAMES) for p in idle)  # … then the cached 60 ms packet
    assert [p.pts for p in idle[:2]] == [(25 + SETTLE_FRAMES) * FRAME, (25 + SETTLE_FRAMES + IDLE_FRAMES) * FRAME]
    assert len(silence_packet()) < 60  # libopus' own silence frame (35 bytes here), copied, never re-encoded
    assert sum(len(bytes(p)) for p in packets[:25]) / 25 < 120  # ≈ 80 bytes a frame at 32 kbit/s, mono
    heard = decode(packets)
    assert heard.size == (25 + SETTLE_FRAMES + 10 * IDLE_FRAMES) * FRAME  # every packet's duration, played
    assert np.abs(heard[: RATE // 2]).max() > 4000  # the tone came through mono Opus
    assert np.abs(heard[-10 * IDLE_FRAMES * FRAME :]).max() < 50  # and the cached packets are silence


async def test_while_a_response_is_open_silence_goes_out_in_20_ms_packets():
    """Its audio may come any moment: a 60 ms packet would hold its first frame back up to 40 ms."""
    track = PacedTrack(OutboundAudio(), lambda _events: None, open_response=lambda: "r1")
    track._start = -1e9
    packets = [await track.recv() for _ in range(SETTLE_FRAMES + 5)]
    assert [p.pts for p in packets[-2:]] == [(SETTLE_FRAMES + 3) * FRAME, (SETTLE_FRAMES + 4) * FRAME]
    assert all(bytes(p) == silence_packet() for p in packets[-4:])


def test_the_listening_buffer_hands_each_packet_on_at_once_and_skips_a_loss():
    buf = ListeningBuffer(capacity=16)

    def rtp(seq: int) -> RtpPacket:
        p = RtpPacket(payload_type=111, sequence_number=seq, timestamp=seq * FRAME)
        p._data = bytes([seq])  # type: ignore[attr-defined]
        return p

    got = [buf.add(rtp(s))[1] for s in (100, 101, 103, 102, 104)]  # 102 is late: 103 went first
    assert [f.data if f else None for f in got] == [b"\x64", b"\x65", b"\x67", None, b"\x68"]


def tone_packets(n: int) -> list[bytes]:
    codec = opus_encoder()
    t = np.arange(n * FRAME)
    pcm = (np.sin(t * 2 * np.pi * 440 / RATE) * 8000).astype(np.int16)
    return [bytes(p) for i in range(n) for p in codec.encode(_frame(pcm[i * FRAME : (i + 1) * FRAME], i))]


async def test_the_inline_decoder_puts_each_frame_on_the_track_queue_and_survives_a_bad_packet():
    out: asyncio.Queue[object] = asyncio.Queue()
    decoder = InlineDecoder(out)
    packets = tone_packets(10)
    decoder.put((None, JitterFrame(b"\xff\xff\xff", 0)))  # not Opus: counted, no frame, no exception
    for i, data in enumerate(packets):
        decoder.put((None, JitterFrame(data, i * FRAME)))
    frames = [out.get_nowait() for _ in range(out.qsize())]
    assert decoder.failed == 1
    assert len(frames) >= len(packets) - 1  # libopus may hold the first frame back for its look-ahead
    pcm = np.concatenate([f.to_ndarray().reshape(-1) for f in frames])  # type: ignore[attr-defined]
    assert frames[0].layout.name == "mono" and frames[0].sample_rate == RATE  # type: ignore[attr-defined]
    assert np.abs(pcm[-4 * FRAME :]).max() > 4000  # the tone, decoded
    decoder.put(None)  # the receiver stopping: aiortc's waiting thread gets its end
    assert decoder.get() is None


async def test_decode_inline_takes_over_a_real_receivers_decoder_before_it_starts():
    caller, callee = RTCPeerConnection(), RTCPeerConnection()
    try:
        caller.addTransceiver("audio", direction="sendrecv")
        await caller.setLocalDescription(await caller.createOffer())
        await callee.setRemoteDescription(caller.localDescription)
        receiver = callee.getTransceivers()[0].receiver
        decode_inline(receiver)
        assert isinstance(receiver._RTCRtpReceiver__decoder_queue, InlineDecoder)  # type: ignore[attr-defined]
        assert receiver._RTCRtpReceiver__decoder_queue._output is receiver.track._queue  # type: ignore[attr-defined]
    finally:
        await caller.close()
        await callee.close()
