"""How a money amount and a ratio are printed, one rule for every surface (`cacheaudit summary`,
the weekly cards and tables, the index), so a non-zero amount never reads as zero and a ratio
that is not exactly 0 or 1 never reads as 0% or 100%.

Plain text, no HTML and no heavy imports: the CLI uses it too. Unknown (None) is the caller's
to show (a dash on a page, `unknown` on stdout), never 0.
"""

from __future__ import annotations

import math

MONEY_DECIMALS = 4
# Sums of float costs carry noise (0.0066 - 0.0066 can be 4e-19): below a ten-billionth of a
# unit, far under one token at any price, an amount is 0. (+ 0.0 turns -0.0 into 0.0.)
NOISE_DECIMALS = 10


def count(n: int, noun: str, plural: str | None = None, *, grouping: bool = True) -> str:
    """`1 request`, `2 requests`: captions and summary lines read as sentences. `grouping`
    off: `16000 records`, for lines scripts read the numbers of (ingest's counts)."""
    return f"{n:{',' if grouping else ''}} {noun if n == 1 else plural or noun + 's'}"


def money(value: float, *, grouping: bool = True) -> str:
    """4 decimals (`0.0031`, `1,234.5678`); a non-zero amount that would round to 0.0000 gets
    as many decimals as two significant digits need (`0.000025`), so it never prints as 0."""
    sep = "," if grouping else ""
    amount = round(float(value), NOISE_DECIMALS) + 0.0
    text = f"{amount:{sep}.{MONEY_DECIMALS}f}"
    if amount != 0 and float(text.replace(",", "")) == 0:
        text = f"{amount:{sep}.{1 - math.floor(math.log10(abs(amount)))}f}"
    return text


def ratio(value: float) -> str:
    """A share at 0.1%; a share that is not exactly 0 or 1 but would round to it says so:
    `<0.1%`, `>99.9%`."""
    share = float(value)
    text = f"{share:.1%}"
    if text == "0.0%" and share > 0:
        return "<0.1%"
    if text == "100.0%" and share < 1:
        return ">99.9%"
    return text
