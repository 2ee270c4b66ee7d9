"""turn_detection.idle_timeout_ms over a real server: silence after a response prompts a response (GA)."""

from __future__ import annotations

import asyncio

from tests.wsclient import RealtimeClient

VAD = {"type": "server_vad", "idle_timeout_ms": 5000, "create_response": True}


async def test_silence_after_a_response_triggers_a_timeout_and_a_response(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        updated = await c.update_session({"audio": {"input": {"turn_detection": VAD}}})
        assert updated["session"]["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == 5000
        loop = asyncio.get_running_loop()
        await c.ask("hello", max_output_tokens=4)
        done_at = loop.time()
        timeout = await c.until("input_audio_buffer.timeout_triggered", timeout=20)
        waited = loop.time() - done_at
        assert 4.5 <= waited <= 12, waited  # the timeout ran from response.done
        assert timeout["item_id"].startswith("item_") and timeout["audio_end_ms"] >= timeout["audio_start_ms"]
        assert (await c.until("response.done", timeout=30))["response"]["status"] in ("completed", "incomplete")

        bad = {"type": "server_vad", "idle_timeout_ms": 100}
        session = {"audio": {"input": {"turn_detection": bad}}}
        await c.send({"type": "session.update", "event_id": "u2", "session": session})
        err = (await c.until("error"))["error"]
        assert (err["code"], err["event_id"]) == ("invalid_value", "u2") and "idle_timeout_ms" in err["message"]
        await c.close()


async def test_no_timeout_without_idle_timeout_ms(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.ask("hello", max_output_tokens=4)
        try:
            ev = await c.until("input_audio_buffer.timeout_triggered", timeout=6)
        except TimeoutError:
            ev = None
        assert ev is None
        await c.close()
