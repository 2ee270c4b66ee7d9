"""Worker threads for CPU work on client input (grammar compilation): they yield the cores to decoding.

On a small machine the decode threads use every core, so any other CPU work slows every running
response. Work a client's request brings (a schema to compile) runs at a
lower scheduling priority than the engine: a flood of such requests waits for idle CPU instead of
stretching other sessions' gaps between chunks. The niceness is per OS thread
(``models.cores.yield_to_decoding``, which the image reader's thread uses too). Only for threads
nothing waits on synchronously: a thread the event loop blocks on must keep the loop's priority. A
niced thread that holds the GIL can still hold the loop back for a few scheduler slices (tens of
ms); under the schema floods of ``bench.abuse`` /health's p99 stayed under 100 ms.
"""

from __future__ import annotations

from models.cores import NICE, niceness, yield_to_decoding

__all__ = ["NICE", "niceness", "yield_to_decoding"]
