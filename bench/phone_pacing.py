"""The outbound send path of phone calls alone, in one process: ``--calls`` calls each play a
``--reply-s`` reply through ``PhoneCall``'s shared pacer (``gateway.telephony.pacer``) while the event
loop is made to stall (``--stall-ms`` of blocking work every ``--every-ms``, as a loaded gateway's loop
does), once per ``--leads`` value. Each call's frames are timed as the line gets them; a provider that
plays each frame as soon as it has it gives the longest silence the caller hears mid-reply (0: none).
Writes bench/results/phone_pacing.{json,md}, with the 1-minute load average on each row.

``python -m bench.phone_pacing --calls 8 --stall-ms 60``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from bench.common import machine, markdown_table, write
from bench.phone import gaps
from gateway.telephony.call import PhoneCall
from gateway.telephony.pacer import pacer


class TimedLine:
    codec = "audio/pcmu"

    def __init__(self, lead_frames: int):
        self.lead_frames = lead_frames
        self.times: list[float] = []

    async def send(self, frames: list[bytes | str]) -> None:
        now = time.monotonic()
        self.times += [now for f in frames if isinstance(f, bytes)]

    async def clear(self) -> None:
        pass

    async def close(self, reason: str) -> None:
        pass


async def one_row(calls: int, reply_s: float, lead_ms: int, stall_ms: float, every_ms: float) -> dict[str, Any]:
    lines = [TimedLine(lead_ms // 20) for _ in range(calls)]
    phones = [PhoneCall(line, f"c{i}", 100, lambda: None) for i, line in enumerate(lines)]
    for ph in phones:
        ph.playout.push(b"\xff" * int(reply_s * 8000), "r", "i")
    leaves = [pacer().join(ph._tick) for ph in phones]
    end = time.monotonic() + reply_s + 0.5
    while time.monotonic() < end:  # the loop's other work: a blocking stretch now and then
        await asyncio.sleep(every_ms / 1000)
        busy = time.monotonic() + stall_ms / 1000
        while time.monotonic() < busy:
            pass
    for leave in leaves:
        leave()
    per_call = [gaps(line.times) for line in lines]
    return {
        "stream_lead_ms": lead_ms,
        "calls": calls,
        "frames_sent": sorted({len(line.times) for line in lines}),
        "frames_per_s": f"{min(f for f, _, _ in per_call)}–{max(f for f, _, _ in per_call)}",
        "longest_arrival_gap_ms": max(g for _, g, _ in per_call),
        "longest_silence_heard_ms": max(h for _, _, h in per_call),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(prog="python -m bench.phone_pacing")
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--reply-s", type=float, default=5.0)
    ap.add_argument("--leads", default="0,200")
    ap.add_argument("--stall-ms", type=float, default=60.0, help="blocking work on the loop each time (0: none)")
    ap.add_argument("--every-ms", type=float, default=500.0)
    args = ap.parse_args(argv)
    rows = [
        asyncio.run(one_row(args.calls, args.reply_s, int(lead), args.stall_ms, args.every_ms))
        for lead in args.leads.split(",")
    ]
    md = markdown_table(rows, list(rows[0]))
    write("phone_pacing", {"machine": machine(), "args": vars(args), "rows": rows}, md + "\n")
    print(md)
    return rows


if __name__ == "__main__":
    main()
