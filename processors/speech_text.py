"""What a voice should say for a piece of reply text: markdown, code, URLs, emoji, numbers. Pure.

The transcript keeps the text as the model wrote it; the voice says words. ``SpeechText.feed``
takes the reply chunk by chunk (a code fence may open in one chunk and close many chunks later)
and returns ``Piece``s: each is an exact, in-order slice of the text (``source``) and the words
said for it (``spoken``, "" when it is skipped). Joining the sources gives the chunk back, so a
point in the spoken words maps back to a point in the transcript (truncation to what was heard).

- code fences are skipped (the listener hears nothing for them); inline code is read;
- markdown emphasis, headings, quotes, bullets and link targets are not read;
- a URL is read as its host ("example dot com"); an e-mail address as "name at host dot com";
- emoji and other pictographs are skipped;
- numbers, ordinals, years, dates (ISO and "5/3/2024"), times, money, percentages and units are
  spoken as words (num2words, English).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from num2words import num2words


@dataclass(frozen=True)
class Piece:
    source: str  # the transcript's text for it, whitespace after it included
    spoken: str  # what the voice says for it ("" = nothing)


_TOKEN = re.compile(r"\s*\S+\s*|\s+")
_URL = re.compile(r"^(?:https?://|www\.)([^/\s?#]+)", re.I)
_EMAIL = re.compile(r"^([\w.+-]+)@([\w-]+(?:\.[\w-]+)+)$")
_MD_LINK_TARGET = re.compile(r"\]\([^)]*\)?")
_ISO_DATE = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})$")
_US_DATE = re.compile(r"^(\d{1,2})/(\d{1,2})/(\d{4})$")
_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?:\s*([ap])\.?m\.?)?$", re.I)
_MONEY = re.compile(r"^([$€£])(\d[\d,]*(?:\.\d+)?)([kKmMbB]n?)?$")
_NUMBER = re.compile(r"^[-−]?\d[\d,]*(?:\.\d+)?$")
_ORDINAL = re.compile(r"^(\d+)(st|nd|rd|th)$", re.I)
_NUM_UNIT = re.compile(r"^([-−]?\d[\d,]*(?:\.\d+)?)(%|°[CF]?|[a-zA-Zµ/²³]+)$")
_DIGITS = re.compile(r"\d+(?:\.\d+)?")
_EDGE = re.compile(r"^([\"'(\[{<«“‘]*)(.*?)([\"')\]}>»”’.,;:!?…]*)$", re.S)

_MONTHS = "January February March April May June July August September October November December".split()
_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents")}
_CURRENCY["£"] = ("pound", "pounds", "penny", "pence")
_SCALE = {"k": "thousand", "m": "million", "b": "billion", "bn": "billion"}
# abbreviation → (singular, plural); only after a number (a bare "m" or "in" is a word)
_UNITS = {
    "%": ("percent", "percent"),
    "°": ("degree", "degrees"),
    "°c": ("degree Celsius", "degrees Celsius"),
    "°f": ("degree Fahrenheit", "degrees Fahrenheit"),
    "mm": ("millimeter", "millimeters"),
    "cm": ("centimeter", "centimeters"),
    "m": ("meter", "meters"),
    "km": ("kilometer", "kilometers"),
    "in": ("inch", "inches"),
    "ft": ("foot", "feet"),
    "mi": ("mile", "miles"),
    "mg": ("milligram", "milligrams"),
    "g": ("gram", "grams"),
    "kg": ("kilogram", "kilograms"),
    "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "ml": ("milliliter", "milliliters"),
    "l": ("liter", "liters"),
    "ms": ("millisecond", "milliseconds"),
    "s": ("second", "seconds"),
    "sec": ("second", "seconds"),
    "min": ("minute", "minutes"),
    "h": ("hour", "hours"),
    "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"),
    "kb": ("kilobyte", "kilobytes"),
    "mb": ("megabyte", "megabytes"),
    "gb": ("gigabyte", "gigabytes"),
    "tb": ("terabyte", "terabytes"),
    "hz": ("hertz", "hertz"),
    "khz": ("kilohertz", "kilohertz"),
    "mhz": ("megahertz", "megahertz"),
    "ghz": ("gigahertz", "gigahertz"),
    "kw": ("kilowatt", "kilowatts"),
    "kwh": ("kilowatt hour", "kilowatt hours"),
    "v": ("volt", "volts"),
    "w": ("watt", "watts"),
}
# after a number as a word of their own these are more often plain words ("5 in a row")
_AMBIGUOUS = frozenset({"in", "s", "m", "h", "g", "l", "v", "w", "min", "sec", "mi", "ms", "oz"})
_SYMBOLS = {"&": "and", "+": "plus", "=": "equals", "@": "at", "#": "number", "~": "about"}


MAX_NUMBER_DIGITS = 30  # past this a number is read digit by digit (num2words stops below 10**36)
_DIGIT_NAMES = "zero one two three four five six seven eight nine".split()


def _number(text: str) -> str:
    """'1,234.5' → 'one thousand, two hundred and thirty-four point five'; years read as years."""
    neg = text[:1] in "-−"
    digits = text.lstrip("-−").replace(",", "")
    if len(digits) > MAX_NUMBER_DIGITS:
        said = " ".join(_DIGIT_NAMES[int(c)] if c.isdigit() else "point" for c in digits)
        return ("minus " if neg else "") + said
    value: float | int = float(digits) if "." in digits else int(digits)
    if not neg and "," not in text and isinstance(value, int) and 1100 <= value <= 2099 and len(digits) == 4:
        words = num2words(value, lang="en", to="year")
    else:
        words = num2words(value, lang="en")
    return ("minus " if neg else "") + str(words)


def _is_one(text: str) -> bool:
    return text.lstrip("-−").replace(",", "") in ("1", "1.0")


def _money(sym: str, amount: str, scale: str | None) -> str:
    one, many, sub_one, sub_many = _CURRENCY[sym]
    if scale:
        return f"{_number(amount)} {_SCALE[scale.lower()]} {many}"
    whole, _, frac = amount.replace(",", "").partition(".")
    words = f"{_number(whole)} {one if whole == '1' else many}"
    cents = int((frac + "00")[:2]) if frac else 0
    if cents:
        words += f" and {num2words(cents, lang='en')} {sub_one if cents == 1 else sub_many}"
    return words


def _date(year: int, month: int, day: int) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    return f"{_MONTHS[month - 1]} {num2words(day, lang='en', to='ordinal')}, {num2words(year, lang='en', to='year')}"


def _time(hour: int, minute: int, half: str | None) -> str | None:
    if hour > 23 or minute > 59:
        return None
    words = str(num2words(hour, lang="en"))
    if minute == 0:
        words += "" if half else " o'clock"
    elif minute < 10:
        words += f" oh {num2words(minute, lang='en')}"
    else:
        words += f" {num2words(minute, lang='en')}"
    return words + (f" {half.lower()} m" if half else "")


def _unit(name: str, plural: bool) -> str | None:
    forms = _UNITS.get(name.lower()) or _UNITS.get(name)
    if forms is None:
        return None
    return forms[1] if plural else forms[0]


def _word(core: str) -> str:
    """One token without its surrounding punctuation → the words for it."""
    if m := _ISO_DATE.match(core):
        said = _date(int(m[1]), int(m[2]), int(m[3]))
        if said:
            return said
    if m := _US_DATE.match(core):
        said = _date(int(m[3]), int(m[1]), int(m[2]))
        if said:
            return said
    if m := _TIME.match(core):
        said = _time(int(m[1]), int(m[2]), m[3])
        if said:
            return said
    if m := _MONEY.match(core):
        return _money(m[1], m[2], m[3])
    if m := _ORDINAL.match(core):
        if len(m[1]) > MAX_NUMBER_DIGITS:
            return _number(m[1])
        return str(num2words(int(m[1]), lang="en", to="ordinal"))
    if _NUMBER.match(core):
        return _number(core)
    if m := _NUM_UNIT.match(core):
        unit = _unit(m[2], not _is_one(m[1]))
        if unit is not None:
            return f"{_number(m[1])} {unit}"
    if core in _SYMBOLS:
        return _SYMBOLS[core]
    # digits inside a word ("COVID-19", "v2", "3D"): the digits are read, the rest as written
    return _DIGITS.sub(lambda d: f" {_number(d[0])} ", core).replace("  ", " ").strip()


def _visible(text: str) -> str:
    """Drop pictographs, variation selectors and joiners: emoji are not read out."""
    return "".join(
        ch
        for ch in text
        if unicodedata.category(ch) not in ("So", "Sk", "Cs", "Co", "Cf", "Mn") or ch in "°'"
        if not 0xFE00 <= ord(ch) <= 0xFE0F
    )


class SpeechText:
    """A reply's text → ``Piece``s, chunk by chunk (it remembers an open code fence and a number
    waiting for its unit)."""

    def __init__(self) -> None:
        self.in_fence = False
        self._last_number: str | None = None  # the previous token was this number: a unit may follow

    def feed(self, text: str) -> list[Piece]:
        pieces: list[Piece] = []
        for line in text.splitlines(keepends=True):
            pieces.extend(self._line(line))
        return pieces

    def _line(self, line: str) -> list[Piece]:
        if line.lstrip().startswith(("```", "~~~")):
            self.in_fence = not self.in_fence
            return [Piece(line, "")]
        if self.in_fence:
            return [Piece(line, "")]
        out: list[Piece] = []
        first = True
        for m in _TOKEN.finditer(line):
            token = m[0]
            spoken = self._token(token.strip(), first)
            first = False
            out.append(Piece(token, spoken))
        return out

    def _token(self, token: str, line_start: bool) -> str:
        last, self._last_number = self._last_number, None
        if not token:
            return ""
        if line_start and re.fullmatch(r"#{1,6}|>+|[-*+•]|\d+[.)]", token):  # heading, quote, bullet marks
            return "" if not token[0].isdigit() else _number(token[:-1]) + ","
        url = _URL.match(token.strip("<>()[]*_\"'"))
        if url:
            host = url[1].removeprefix("www.").split(":")[0].rstrip(".,;")
            return " dot ".join(p for p in host.split(".") if p)
        token = _MD_LINK_TARGET.sub("", token)  # [text](target): the text is read, not the target
        token = _visible(token).replace("**", "").replace("__", "").replace("`", "").strip("*_~[]")
        if not token:
            return ""
        email = _EMAIL.match(token.rstrip(".,;:!?"))
        if email:
            return f"{email[1]} at {' dot '.join(email[2].split('.'))}"
        lead, core, trail = _EDGE.match(token).groups()  # type: ignore[union-attr]
        if last is not None and core.lower().replace(".", "") in ("am", "pm"):
            return f"{core[0].lower()} m{trail}"
        if last is not None and core.lower() not in _AMBIGUOUS and (unit := _unit(core, not _is_one(last))) is not None:
            return unit + trail
        if _NUMBER.match(core) or _TIME.match(core):
            self._last_number = core
        said = _word(core) if core else ""
        return f"{lead}{said}{trail}".strip() if said else trail.strip(".,;:")


def spoken_text(pieces: list[Piece]) -> str:
    """The words of ``pieces`` as one string for the voice."""
    return " ".join(p.spoken for p in pieces if p.spoken)


def bounded_pieces(text: str, max_chars: int) -> list[str]:
    """``text`` in pieces of at most ``max_chars`` characters, cut at spaces where it can (a run of more
    than ``max_chars`` without one is cut inside it), whitespace trimmed: one synthesis takes time in
    proportion to its length, so text with no sentence end is not said as one unbounded synthesis."""
    pieces: list[str] = []
    rest = text.strip()
    while len(rest) > max_chars:
        cut = rest.rfind(" ", 0, max_chars + 1)
        if cut <= 0:
            cut = max_chars
        pieces.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        pieces.append(rest)
    return pieces
