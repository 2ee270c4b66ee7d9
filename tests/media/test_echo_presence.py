"""The echo presence rule on made-up estimates (when the canceller may touch the microphone), and when the
server cancels echo by default."""

from __future__ import annotations

from processors.echo_presence import Estimate, Presence, PresenceConfig, acting, observe, probing, sighting

CFG = PresenceConfig()
W = 1_600  # a probe's window (100 ms at 16 kHz): the chance bar is 9 / 40 = 0.225


def est(end: int, delay: int = 1_920, peak: float = 0.1, gain2: float = 0.25, rho: float = 0.98, **kw) -> Estimate:
    return Estimate(delay, peak, gain2, rho, kw.get("playing", 1.0), kw.get("window", W), end)


def run(*estimates: Estimate) -> Presence:
    s = Presence()
    for e in estimates:
        s = observe(s, e, CFG)
    return s


def test_a_sighting_needs_a_peak_a_loud_enough_echo_and_either_likeness_or_a_peak_above_chance():
    assert sighting(est(0), CFG)  # the microphone is the reply, delayed: a speakerphone's echo alone
    assert not sighting(est(0, peak=0.05), CFG)  # no peak at all
    assert not sighting(est(0, gain2=1e-3), CFG)  # a faint echo (-30 dB) the VAD does not take for speech
    assert not sighting(est(0, rho=0.45, peak=0.2), CFG)  # a user's word like one of the reply's, under the bar
    assert sighting(est(0, rho=0.45, peak=0.3), CFG)  # above what chance gives on 100 ms
    assert not sighting(est(0, rho=0.45, peak=0.3, window=640), CFG)  # … but not on 40 ms (bar 0.36)


def test_an_echo_mostly_filling_the_microphone_is_acted_on_at_once_and_found_over_the_span():
    first = run(est(100))
    assert acting(first) and not first.found and probing(first)
    s = run(est(100), est(260), est(420))  # 20 ms later: the same delay, not yet 30 ms of audio apart
    assert not s.found
    s = run(est(100), est(260), est(420), est(600))
    assert s.found and s.delay == 1_920 and s.gain2 == 0.25 and acting(s) and not probing(s)


def test_a_chance_match_is_not_acted_on_and_a_changing_delay_is_no_echo():
    lookalike = dict(rho=0.45, peak=0.3)  # above the bar, but the microphone is not the reply
    s = run(est(100, **lookalike))
    assert not acting(s) and not s.found
    s = run(*(est(100 + 160 * k, delay=500 + 100 * k, **lookalike) for k in range(10)))  # it wanders: no streak
    assert not s.found and s.streak == 1
    # a sighting that is not repeated is dropped: the microphone goes back to untouched
    s = run(est(100), est(260, peak=0.02, rho=0.0))
    assert not acting(s) and s.streak == 0


def test_nothing_is_known_from_a_window_the_reply_only_began_in():
    s = run(est(100), est(260, peak=0.02, rho=0.0, playing=0.3))
    assert not acting(s)  # a sighting not seen again is dropped, but…
    found = run(est(100), est(600))
    assert observe(found, est(800, peak=0.02, rho=0.0, playing=0.3), CFG) == found  # … a found echo stays as it is


def test_a_found_echo_that_is_lost_is_probed_for_and_forgotten_after_two_seconds_of_reply():
    s = run(est(100), est(600))
    quiet = dict(peak=0.02, rho=0.0)
    s = observe(s, est(4_600, **quiet), CFG)
    assert s.found and s.lost_at == 4_600 and probing(s) and acting(s)  # it moved, or the user talks over it
    s = observe(s, est(20_000, **quiet), CFG)
    assert s.found  # 1 s: not yet
    s = observe(s, est(36_600, **quiet), CFG)
    assert s == Presence() and not acting(s)  # 2 s of reply with no echo: the headset went on
    # found again at a new delay: it follows it, and stops probing
    moved = observe(observe(run(est(100), est(600)), est(4_600, **quiet), CFG), est(4_800, delay=1_600), CFG)
    assert moved.found and moved.delay == 1_600 and moved.lost_at is None and not probing(moved)


def test_the_server_cancels_echo_by_default_except_on_webrtc_or_when_the_client_cancels_its_own():
    from gateway.realtime import protocol as p
    from gateway.realtime.audio_settings import cleaning

    def opts(audio_in: dict | None) -> p.SessionOptions:
        return p.SessionOptions.model_validate({"audio": {"input": audio_in}} if audio_in is not None else {})

    assert cleaning(opts(None), webrtc=False) == (None, True)  # a WebSocket or phone client: on
    assert cleaning(opts({"format": {"type": "audio/pcm", "rate": 24000}}), webrtc=False) == (None, True)
    assert cleaning(opts(None), webrtc=True) == (None, False)  # the browser cancels its own
    assert cleaning(opts({"echo_cancellation": {"type": "client"}}), webrtc=False) == (None, False)
    assert cleaning(opts({"echo_cancellation": None}), webrtc=False) == (None, False)
    assert cleaning(opts({"echo_cancellation": {"type": "server"}}), webrtc=True) == (None, True)
    assert cleaning(opts({"noise_reduction": {"type": "far_field"}}), webrtc=True) == ("far_field", False)
