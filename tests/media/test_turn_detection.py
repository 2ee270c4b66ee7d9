"""turn_detection settings over a real server: reported with every field in session.created / .updated."""

from __future__ import annotations

from tests.wsclient import RealtimeClient


async def test_session_created_and_updated_report_the_effective_turn_detection(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        created = await c.until("session.created")
        td = created["session"]["audio"]["input"]["turn_detection"]
        assert td["type"] == "server_vad" and td["silence_duration_ms"] == 500 and td["threshold"] == 0.5
        assert td["create_response"] is True and td["interrupt_response"] is True
        updated = await c.update_session(
            {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}}}
        )
        td = updated["session"]["audio"]["input"]["turn_detection"]
        assert td["type"] == "semantic_vad" and td["eagerness"] == "high"
        updated = await c.update_session({"audio": {"input": {"turn_detection": None}}})
        assert updated["session"]["audio"]["input"]["turn_detection"] is None
        await c.send(
            {
                "type": "session.update",
                "session": {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "now"}}}},
            }
        )
        assert (await c.until("error"))["error"]["code"] == "invalid_value"
        await c.close()
