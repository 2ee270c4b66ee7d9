"""The official openai SDK (>= 3) drives /v1/realtime unmodified."""

from __future__ import annotations

from openai import AsyncOpenAI


async def test_openai_sdk_realtime_text_roundtrip(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        client = AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="unused-locally")
        async with client.realtime.connect(model="tiny-llama") as conn:
            first = await conn.recv()
            assert first.type == "session.created"
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"]})
            await conn.conversation.item.create(
                item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hi"}]}
            )
            await conn.response.create(response={"max_output_tokens": 12})
            deltas: list[str] = []
            seen: list[str] = []
            async for event in conn:
                seen.append(event.type)
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)
                if event.type == "response.done":
                    status = event.response.status
                    break
        assert "session.updated" in seen
        assert deltas, f"no deltas among {seen}"
        assert status in ("completed", "incomplete")
        assert seen.index("response.created") < seen.index("response.output_text.delta")
