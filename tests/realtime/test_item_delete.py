"""conversation.item.delete over a real server: the item leaves the next prompt, and the KV cache follows
(reused up to the deleted item only, never past it)."""

from __future__ import annotations

from testkit.recording import Recording
from tests.wsclient import RealtimeClient


async def test_a_deleted_item_leaves_the_prompt_and_the_cache(tiny_backend, server_factory):
    model = Recording(tiny_backend)
    cfg = {"audio.enabled": False, "speculative.drafter": "none", "session.instructions": "Be brief."}
    with server_factory(model, **cfg) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        first = await c.ask("alpha alpha alpha", max_output_tokens=4, temperature=0)
        second = (await c.ask("bravo bravo bravo", max_output_tokens=4, temperature=0))["response"]
        assert second["usage"]["input_token_details"]["cached_tokens"] > 0  # the cache follows the conversation
        first_user = next(e for e in c.events if e["type"] == "conversation.item.added")["item"]["id"]
        await c.send({"type": "conversation.item.delete", "item_id": first_user, "event_id": "d1"})
        assert (await c.until("conversation.item.deleted"))["item_id"] == first_user
        third = (await c.ask("charlie", max_output_tokens=4, temperature=0))["response"]
        prompt = model.prompts[-1]
        assert not any("alpha" in m["content"] for m in prompt) and any("bravo" in m["content"] for m in prompt)
        # the prompt now differs right after the instructions: only they can come from the cache
        assert third["usage"]["input_token_details"]["cached_tokens"] < first["response"]["usage"]["input_tokens"]
        await c.send({"type": "conversation.item.retrieve", "item_id": first_user, "event_id": "r1"})
        err = (await c.until("error"))["error"]
        assert (err["code"], err["event_id"]) == ("item_not_found", "r1")
        await c.close()
