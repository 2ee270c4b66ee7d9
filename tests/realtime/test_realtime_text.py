"""Text chat over /v1/realtime against a real uvicorn, with a tiny random-init Llama."""

from __future__ import annotations

import asyncio

from tests.wsclient import RealtimeClient

# for tests that act while a response is still decoding: drafting on the tiny model's repetitive
# text can finish hundreds of tokens before the test acts
STEADY = {"speculative.drafter": "none"}


async def test_session_created_then_response_streams_deltas(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        created = await c.recv()
        assert created["type"] == "session.created"
        assert created["seq"] == 0
        done = await c.ask("hello there", max_output_tokens=24)
        r = done["response"]
        assert r["status"] in ("completed", "incomplete")
        deltas = [e for e in c.events if e["type"] == "response.output_text.delta"]
        assert deltas, "no text streamed"
        text = c.text_of(r["id"])
        final = next(e for e in c.events if e["type"] == "response.output_text.done")
        assert final["text"] == text
        assert r["usage"]["output_tokens"] >= len(deltas)
        assert r["metrics"]["chunks"] == len(deltas)
        seqs = [e["seq"] for e in c.events]
        assert seqs == list(range(len(seqs)))
        await c.close()


async def test_invalid_event_gets_error_and_socket_stays_open(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.ws.send('{"type": "no.such.event", "event_id": "ev-1"}')
        err = await c.until("error")
        assert err["error"]["code"] == "invalid_event_type"
        assert err["error"]["event_id"] == "ev-1"
        await c.ws.send("{not json")
        err = await c.until("error")
        assert err["error"]["code"] == "invalid_json"
        await c.send({"type": "response.create", "event_id": "ev-2", "response": {"temperature": 9}})
        err = await c.until("error")
        assert err["error"]["code"] == "invalid_value" and err["error"]["event_id"] == "ev-2"
        done = await c.ask("still there?", max_output_tokens=4)
        assert done["response"]["status"] in ("completed", "incomplete")
        await c.close()


async def test_cancel_stops_and_no_delta_follows_done(tiny_backend, server_factory):
    with server_factory(tiny_backend, **STEADY) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.say("write a long story")
        await c.send(
            {"type": "response.create", "response": {"max_output_tokens": 400, "scheduler": {"strategy": "fast"}}}
        )
        await c.until("response.output_text.delta")
        await c.send({"type": "response.cancel"})
        done = await c.until("response.done")
        assert done["response"]["status"] == "cancelled"
        rid = done["response"]["id"]
        # whatever arrives in the next half second must not be a delta of that response
        try:
            while True:
                ev = await c.recv(timeout=0.5)
                assert not (ev["type"] == "response.output_text.delta" and ev["response_id"] == rid)
        except TimeoutError:
            pass
        delivered = c.text_of(rid)
        # the conversation keeps exactly what was delivered: the assistant item in response.done
        out = done["response"]["output"]
        assert out and out[0]["content"][0]["text"] == delivered
        # cancelling again: nothing active
        await c.send({"type": "response.cancel", "event_id": "again"})
        err = await c.until("error")
        assert err["error"]["code"] == "response_cancel_not_active"
        await c.close()


async def test_two_sessions_do_not_mix(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        a = await RealtimeClient.connect(addr)
        b = await RealtimeClient.connect(addr)
        await a.until("session.created")
        await b.until("session.created")
        solo = await RealtimeClient.connect(addr)
        await solo.until("session.created")
        ref = await solo.ask("alpha beta gamma", max_output_tokens=16)
        ref_text = solo.text_of(ref["response"]["id"])
        await solo.close()
        da, db = await asyncio.gather(
            a.ask("alpha beta gamma", max_output_tokens=16), b.ask("zeta eta theta iota", max_output_tokens=16)
        )
        # greedy: session A's answer equals the same prompt answered alone, unaffected by B
        assert a.text_of(da["response"]["id"]) == ref_text
        assert all(e.get("response_id") in (None, da["response"]["id"]) for e in a.events)
        assert all(e.get("response_id") in (None, db["response"]["id"]) for e in b.events)
        await a.close()
        await b.close()


async def test_second_response_while_active_is_refused(tiny_backend, server_factory):
    with server_factory(tiny_backend, **STEADY) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.say("go on")
        await c.send({"type": "response.create", "response": {"max_output_tokens": 200}})
        await c.send({"type": "response.create", "event_id": "dup"})
        err = await c.until("error")
        assert err["error"]["code"] == "conversation_already_has_active_response"
        done = await c.until("response.done")
        assert done["response"]["status"] in ("completed", "incomplete")
        await c.close()


async def test_server_busy_past_queue_depth(tiny_backend, server_factory):
    conf = {"engine.max_running": 1, "engine.max_waiting": 0, **STEADY}
    with server_factory(tiny_backend, **conf) as addr:
        a = await RealtimeClient.connect(addr)
        b = await RealtimeClient.connect(addr)
        await a.until("session.created")
        await b.until("session.created")
        await a.say("long one")
        await a.send({"type": "response.create", "response": {"max_output_tokens": 400}})
        await a.until("response.created")
        await b.say("me too")
        await b.send({"type": "response.create", "event_id": "b1"})
        err = await b.until("error", timeout=30)
        assert err["error"]["code"] == "server_busy"
        assert not any(e["type"] == "response.created" for e in b.events)
        await a.send({"type": "response.cancel"})
        await a.until("response.done")
        await a.close()
        await b.close()


async def test_session_update_is_answered(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        upd = await c.update_session(
            {"type": "realtime", "instructions": "Be terse.", "scheduler": {"strategy": "fast"}}
        )
        assert upd["session"]["instructions"] == "Be terse."
        assert upd["session"]["scheduler"]["strategy"] == "fast"
        await c.close()
