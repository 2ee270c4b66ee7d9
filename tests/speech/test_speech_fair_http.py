"""``/v1/audio/speech`` shared fairly (real uvicorn, the real Piper voice, two API keys): a bystander's short
request waits for a piece or two of another key's long unpunctuated requests, not for all of them, and a key
past its concurrency is refused 429 naming the config key."""

from __future__ import annotations

import asyncio
import time

import httpx

from testkit.fake_backend import FakeBackend
from tests.http.helpers import NO_AUDIO

KEYS = {"server.api_keys": ["key-a", "key-b"], **NO_AUDIO}
LONG = "word " * 240  # 1,200 characters, no punctuation: six pieces of at most 200
WAIT_S = 120


def body(text: str) -> dict[str, str]:
    return {"model": "fake", "input": text, "voice": "alloy", "response_format": "pcm"}


async def test_a_bystander_waits_for_a_piece_not_for_another_keys_long_requests(server_factory):
    with server_factory(FakeBackend(answer_tokens=12), **KEYS) as addr:
        url = f"http://{addr}/v1/audio/speech"
        async with httpx.AsyncClient(timeout=WAIT_S) as h:
            a = {"Authorization": "Bearer key-a"}
            b = {"Authorization": "Bearer key-b"}
            t0 = time.monotonic()
            quiet = await h.post(url, json=body("Hi."), headers=b)
            assert quiet.status_code == 200 and quiet.content
            quiet_s = time.monotonic() - t0
            piece = await h.post(url, json=body("word " * 40), headers=b)  # one 200-character piece, as cut
            piece_bytes = len(piece.content)
            chunks = [0, 0]  # bytes of audio each long request has received
            started = [asyncio.Event(), asyncio.Event()]

            async def flood(i: int) -> None:
                async with h.stream("POST", url, json=body(LONG), headers=a) as r:
                    assert r.status_code == 200
                    async for data in r.aiter_raw():
                        chunks[i] += len(data)
                        started[i].set()

            floods = [asyncio.create_task(flood(i)) for i in range(2)]
            try:
                await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), WAIT_S)
                third = await h.post(url, json=body("One more."), headers=a)
                assert third.status_code == 429, third.text
                assert "audio.output.http_max_concurrent_per_key" in third.json()["error"]["message"]
                t0 = time.monotonic()
                busy = await h.post(url, json=body("Hi."), headers=b)
                busy_s = time.monotonic() - t0
                heard = sum(chunks) / piece_bytes
            finally:
                for task in floods:
                    task.cancel()
                await asyncio.gather(*floods, return_exceptions=True)
    assert busy.status_code == 200 and busy.content
    print(f"quiet {quiet_s:.2f} s, behind two 1,200-character requests {busy_s:.2f} s, their pieces heard {heard:.1f}")
    # in arrival order it would wait for all 12 pieces: here for the two running and at most one more each
    assert heard <= 2 + 2 + 0.5, heard
