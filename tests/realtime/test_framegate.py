"""``FrameGate``: which client frames a socket reads, decided on a fake clock without sockets."""

from __future__ import annotations

from gateway.core.config import LimitsConfig
from gateway.realtime.framegate import TELL_EVERY, Admit, Close, FrameGate, Refuse
from gateway.realtime.protocol import CLOSE_POLICY, CLOSE_TOO_BIG


def gate(key_over_rate=None, **limits) -> FrameGate:
    return FrameGate(LimitsConfig(**limits), key_over_rate)


def test_frames_within_the_burst_are_admitted_and_the_next_is_refused_and_told():
    g = gate(messages_per_s=10, messages_burst=3)
    assert [g.admit(0.0, 10, binary=False) for _ in range(3)] == [Admit(0.0)] * 3
    assert g.admit(0.0, 10, binary=False) == Refuse(tell=True)
    assert g.admit(0.05, 10, binary=False) == Refuse(tell=False)  # half a token back: still refused, not told
    assert g.admit(0.1, 10, binary=False) == Admit(0.0)  # one token a tenth of a second
    assert g.refused == 0  # an admitted frame ends the run of refusals


def test_a_flood_is_told_on_the_first_and_every_fiftieth_refusal_and_closed_at_the_limit():
    g = gate(messages_per_s=1, messages_burst=1, flood_close_after=120)
    assert g.admit(0.0, 1, binary=True) == Admit(0.0)
    decisions = [g.admit(0.0, 1, binary=True) for _ in range(120)]
    told = [n for n, d in enumerate(decisions, 1) if d == Refuse(tell=True)]
    assert told == [1, TELL_EVERY, 2 * TELL_EVERY]
    assert decisions[-1] == Close(CLOSE_POLICY, "message flood")
    assert all(isinstance(d, Refuse) for d in decisions[:-1])


def test_the_key_rate_is_counted_only_for_frames_the_socket_admits_and_refuses_when_over():
    asked: list[bool] = []
    over = False

    def key_over_rate() -> bool:
        asked.append(over)
        return over

    g = gate(key_over_rate, messages_per_s=1, messages_burst=1)
    assert g.admit(0.0, 1, binary=False) == Admit(0.0)
    assert g.admit(0.0, 1, binary=False) == Refuse(tell=True)  # the socket's own rate: the key is not asked
    assert len(asked) == 1
    assert g.admit(1.0, 1, binary=False) == Admit(0.0)
    over = True
    assert g.admit(2.0, 1, binary=False) == Refuse(tell=True)  # the socket has a token, the key is over
    assert asked == [False, False, True]


def test_a_binary_frame_past_its_limit_closes_1009_and_a_text_frame_is_left_to_the_websocket_layer():
    g = gate(max_binary_frame_bytes=1000)
    assert g.admit(0.0, 1000, binary=True) == Admit(0.0)
    assert g.admit(0.0, 1001, binary=True) == Close(CLOSE_TOO_BIG, "binary frame too large")
    assert isinstance(gate(max_binary_frame_bytes=1000).admit(0.0, 5000, binary=False), Admit)


def test_bytes_past_the_burst_are_admitted_with_the_wait_that_pays_them_back():
    g = gate(inbound_bytes_per_s=1000, max_text_frame_bytes=2000)
    assert g.admit(0.0, 2000, binary=False) == Admit(0.0)  # the burst is one max-size frame
    assert g.admit(0.0, 500, binary=False) == Admit(0.5)  # 500 bytes owed at 1000/s
    assert g.admit(0.5, 100, binary=False) == Admit(0.1)  # paid back by then; 100 more owed
