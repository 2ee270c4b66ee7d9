"""Image decode memory: measured peak RSS of each decompression-bomb-style image vs its estimate.

Each image (36 MP, within the 40 MP pixel limit, a few KB encoded) is decoded in a fresh
subprocess by ``processors.image.load_image_url`` (max_side 1024, as the server does); the
increase of the peak RSS over the process's RSS just before decoding is compared with
``decode_memory`` (what the DecodeGate reserves) and with the gate's budget. Run:
``python -m bench.security_images``; writes bench/results/security_images.{json,md}.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from typing import Any

from PIL import Image

from bench.common import machine, markdown_table, write
from processors.image import decode_memory, to_data_url

SIDE = 6000  # 36 MP
BUDGET = 512 * 1024 * 1024  # vision.decode_budget_bytes default

CHILD = r"""
import json, sys
from processors.image import DecodeGate, ImageLimits, load_image_url

def status(field):  # kB → bytes, from /proc (ru_maxrss keeps the parent's peak across fork+exec)
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

url = sys.stdin.read()
gate = DecodeGate(int(sys.argv[1]), 1)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
rss0 = status("VmRSS")
try:
    load_image_url(url, ImageLimits(max_side=1024), gate=gate)
    outcome = "decoded"
except Exception as exc:
    outcome = getattr(exc, "code", type(exc).__name__)
print(json.dumps({"peak_delta": status("VmHWM") - rss0, "outcome": outcome}))
"""


def images() -> list[tuple[str, str, str, int]]:
    """(what, data URL, mode as decoded, encoded bytes)."""
    out = []

    def save(img: Image.Image, fmt: str, **kw: Any) -> bytes:
        buf = io.BytesIO()
        img.save(buf, fmt, **kw)
        return buf.getvalue()

    grey16 = Image.new("I;16", (SIDE, SIDE), 0)
    raw = save(grey16, "PNG")
    out.append(("16-bit grey PNG", to_data_url(raw), "I;16", len(raw)))
    del grey16
    rgb = Image.new("RGB", (SIDE, SIDE), (10, 20, 30))
    raw = save(rgb, "WEBP", lossless=True)
    out.append(("lossless WebP", to_data_url(raw, "image/webp"), "RGB", len(raw)))
    raw = save(rgb, "PNG")
    out.append(("RGB PNG", to_data_url(raw), "RGB", len(raw)))
    raw = save(rgb, "JPEG", quality=50)
    out.append(("JPEG (DCT-scaled decode)", to_data_url(raw, "image/jpeg"), "RGB", len(raw)))
    del rgb
    rgba = Image.new("RGBA", (SIDE, SIDE), (10, 20, 30, 0))
    raw = save(rgba, "PNG")
    out.append(("RGBA PNG (alpha flattened)", to_data_url(raw), "RGBA", len(raw)))
    raw = save(rgba, "WEBP", lossless=True)
    out.append(("lossless RGBA WebP", to_data_url(raw, "image/webp"), "RGBA", len(raw)))
    del rgba
    pal = Image.new("P", (SIDE, SIDE), 0)
    raw = save(pal, "PNG", transparency=0)
    out.append(("palette PNG with transparency", to_data_url(raw), "P", len(raw)))
    return out


def measure(url: str, budget: int) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(budget)], input=url, capture_output=True, text=True, timeout=300, check=True
    )
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def main() -> None:
    rows = []
    for what, url, mode, n in images():
        with Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2]))) as img:  # the header, as the gate sees it
            if img.format == "JPEG":
                img.draft("RGB", (1024, 1024))  # as decode_image does: 1/4 scale, 1500² ≥ 1024
            estimate = decode_memory(img.mode, *img.size, img.format, "transparency" in img.info)
            mode = img.mode
        big = measure(url, 1 << 40)  # no budget: what the decode really costs
        gated = measure(url, BUDGET)
        rows.append(
            {
                "image": f"{what}, {SIDE}x{SIDE} ({mode})",
                "encoded B": n,
                "peak MiB": round(big["peak_delta"] / 2**20, 1),
                "estimate MiB": round(estimate / 2**20, 1),
                "peak ≤ estimate": big["peak_delta"] <= estimate,
                "with 512 MiB budget": gated["outcome"],
                "peak MiB with budget": round(gated["peak_delta"] / 2**20, 1),
            }
        )
        print(rows[-1], flush=True)
    cols = list(rows[0])
    md = (
        "# Image decode memory vs the decode budget\n\n"
        f"{machine()}. Each image decoded in a fresh process (max_side 1024); peak = increase of the peak RSS.\n"
        "Estimate = processors.image.decode_memory (what DecodeGate reserves before decoding).\n\n"
        + markdown_table(rows, cols)
    )
    write("security_images", {"machine": machine(), "budget_bytes": BUDGET, "rows": rows}, md)


if __name__ == "__main__":
    main()
