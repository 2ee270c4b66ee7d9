"""Real images for the vision tests and ``bench vision``: packaged photographs, text rendered with Pillow, a screenshot.

Photographs come from scikit-image's ``data`` module (in its wheel: ``chelsea`` a tabby cat,
``coffee`` a cup of coffee, ``rocket`` a rocket on its launch pad); the screenshot is the web
client's own (``web/screenshots/chat-desktop.png``). Text is drawn in DejaVu Sans (English) and
WenQuanYi Micro Hei (Chinese, Debian's ``fonts-wqy-microhei``).
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from processors.image import to_data_url

LATIN_FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
CJK_FONT = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"
SCREENSHOT = Path(__file__).resolve().parent.parent / "web" / "screenshots" / "chat-desktop.png"


def photo(name: str) -> Image.Image:
    """A scikit-image sample photograph as RGB: chelsea | coffee | rocket | astronaut."""
    from skimage import data

    return Image.fromarray(getattr(data, name)()).convert("RGB")


def screenshot() -> Image.Image:
    return Image.open(SCREENSHOT).convert("RGB")


def render_lines(
    lines: list[str], size: tuple[int, int] = (640, 480), font_size: int = 28, cjk: bool = False
) -> Image.Image:
    """Black lines on white, one every 1.8 font sizes from the top left."""
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    if cjk and not Path(CJK_FONT).exists():
        raise FileNotFoundError(f"{CJK_FONT}: Chinese text is drawn in it (apt-get install fonts-wqy-microhei)")
    font = ImageFont.truetype(CJK_FONT if cjk else LATIN_FONT, font_size)
    for i, line in enumerate(lines):
        draw.text((30, 30 + int(i * font_size * 1.8)), line, font=font, fill="black")
    return img


RECEIPT = [("CORNER CAFE", ""), ("Latte", "4.50"), ("Croissant", "3.25"), ("Orange juice", "2.80"), ("TOTAL", "10.55")]


def receipt() -> tuple[Image.Image, list[str]]:
    """A till receipt: item names on the left, prices right-aligned in a column → (image, its lines)."""
    img = Image.new("RGB", (480, 400), "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.truetype(LATIN_FONT, 26)
    for i, (name, price) in enumerate(RECEIPT):
        y = 30 + i * 60
        draw.text((30, y), name, font=font, fill="black")
        if price:
            draw.text((440 - draw.textlength(price, font=font), y), price, font=font, fill="black")
    return img, [f"{n} {p}".strip() for n, p in RECEIPT]


def bar_chart() -> tuple[Image.Image, list[str]]:
    """A bar chart with a title, category labels under the bars and a value axis → (image, the words on it)."""
    img = Image.new("RGB", (640, 480), "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.truetype(LATIN_FONT, 22)
    draw.text((180, 20), "Monthly Sales", font=font, fill="black")
    draw.line((80, 400, 600, 400), fill="black", width=2)
    draw.line((80, 80, 80, 400), fill="black", width=2)
    for value, y in ((0, 400), (50, 240), (100, 80)):
        draw.text((30, y - 12), str(value), font=font, fill="black")
    words = ["Monthly Sales", "0", "50", "100"]
    for i, (month, height) in enumerate((("March", 120), ("April", 250), ("May", 190))):
        x = 130 + i * 160
        draw.rectangle((x, 400 - height, x + 80, 400), fill=(70, 110, 200))
        draw.text((x + 5, 410), month, font=font, fill="black")
        words.append(month)
    return img, words


def data_url(img: Image.Image, fmt: str = "PNG") -> str:
    buf = io.BytesIO()
    img.save(buf, fmt)
    return to_data_url(buf.getvalue(), "image/png" if fmt == "PNG" else "image/jpeg")


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate: Levenshtein distance over the reference's length."""
    prev = list(range(len(hypothesis) + 1))
    for i, r in enumerate(reference, 1):
        cur = [i]
        for j, h in enumerate(hypothesis, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h)))
        prev = cur
    return prev[-1] / max(1, len(reference))
