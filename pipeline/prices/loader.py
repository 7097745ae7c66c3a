"""Read price, alias and gateway-prefix CSVs into `PriceTables`.

Shipped files live in `data/`; user files (from `--prices` / `CACHEAUDIT_PRICES`, files or
directories) are read after them and their rows win. A file's kind is told by its header. Reading
never stops at the first bad cell: every problem is collected with its file and line, so
`cacheaudit prices check` can list them all.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path

import orjson

from pipeline.errors import InputError
from pipeline.prices.rows import (
    ALIAS_COLUMNS,
    ALL_PRICES,
    PREFIX_COLUMNS,
    PRICE_COLUMNS,
    Alias,
    ConditionError,
    GatewayPrefix,
    Place,
    PriceRow,
    parse_condition,
)

SHIPPED_DIR = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass
class PriceTables:
    prices: list[PriceRow] = field(default_factory=list)
    aliases: list[Alias] = field(default_factory=list)
    prefixes: list[GatewayPrefix] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def digest(self) -> str:
        """sha256 over every row's content (not its file name), in a stable order."""
        h = hashlib.sha256()
        for line in sorted(_canonical(self)):
            h.update(line)
            h.update(b"\n")
        return h.hexdigest()


def _canonical(tables: PriceTables) -> Iterable[bytes]:
    def ts(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    for p in tables.prices:
        yield orjson.dumps(
            [
                "price",
                p.place.layer,
                p.provider,
                p.model,
                ts(p.effective_from),
                ts(p.effective_to),
                p.currency,
                p.condition.text,
                [p.prices.get(b) for b in ALL_PRICES],
            ]
        )
    for a in tables.aliases:
        yield orjson.dumps(
            [
                "alias",
                a.place.layer,
                a.provider,
                a.alias,
                a.model,
                ts(a.effective_from),
                ts(a.effective_to),
            ]
        )
    for g in tables.prefixes:
        yield orjson.dumps(["prefix", g.place.layer, g.gateway, g.prefix, g.provider])


def parse_timestamp(text: str) -> datetime | None:
    """'' -> None; a date is midnight UTC; a date-time must say its zone (Z or +hh:mm). RFC 3339
    allows a lower-case z, as captures do (capture_format.parse_timestamp)."""
    text = text.strip()
    if not text:
        return None
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), tzinfo=UTC)
        zone_z = text[-1:] in ("Z", "z")
        value = datetime.fromisoformat(text[:-1] + "+00:00" if zone_z else text)
    except ValueError as exc:
        raise ValueError(
            f"{text!r} is not a date (YYYY-MM-DD) or a UTC time (YYYY-MM-DDTHH:MMZ): {exc}"
        ) from None
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no zone; write it in UTC with a Z")
    return value.astimezone(UTC)


def _timestamp(cells: dict[str, str], column: str) -> datetime | None:
    """A timestamp cell; a bad one names its column (the caller adds file and line)."""
    try:
        return parse_timestamp(cells.get(column, ""))
    except ValueError as exc:
        raise ValueError(f"{column} {exc}") from None


# Prices are per million tokens. The dearest shipped price is under 1,000 (USD); even in KRW or
# JPY a price over this is a slip (a per-token price typed per token count, an extra digit run),
# and a huge one would overflow the sums to inf.
MAX_PRICE_PER_MTOK = 1e9


def _price(column: str, text: str) -> float | None:
    """A price cell: empty is None (nobody established it); anything else a finite number >= 0."""
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{column} {text!r} is not a number") from None
    if math.isnan(value) or math.isinf(value):
        # float() reads 'inf', 'nan' and '1e400' (which overflows to inf).
        raise ValueError(f"{column} {text!r} is not a finite number")
    if value < 0:
        raise ValueError(f"{column} is negative: {text}")
    if value > MAX_PRICE_PER_MTOK:
        raise ValueError(
            f"{column} {text} is over {MAX_PRICE_PER_MTOK:.0e} per million tokens;"
            " prices are per million tokens"
        )
    return value


def expand(paths: Sequence[Path]) -> list[Path]:
    """User paths: files as given, directories as their *.csv files in name order."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(f for f in p.glob("*.csv") if not f.name.startswith(".")))
        elif p.is_file():
            out.append(p)
        else:
            raise InputError(f"price file not found: {p}", hint="--prices FILE.csv or DIR")
    return out


def shipped_files() -> list[Path]:
    return sorted(SHIPPED_DIR.glob("*.csv"))


def load(user_paths: Sequence[Path] = ()) -> PriceTables:
    """The three layers: the price library's rows, our shipped tables, the user's files."""
    from pipeline.prices import library

    tables = PriceTables()
    built = library.rows()
    if built:
        tables.files.append(built[0].place.file)
        tables.prices.extend(built)
    for path in shipped_files():
        _read_file(tables, path, path.name, "shipped")
    for path in expand(user_paths):
        _read_file(tables, path, str(path), "user")
    return tables


def _read_file(tables: PriceTables, path: Path, label: str, layer: str) -> None:
    tables.files.append(label)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        tables.problems.append(Problem(label, 0, f"cannot read: {exc}"))
        return
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = tuple(h.strip() for h in reader.fieldnames or ())
    if set(PRICE_COLUMNS) <= set(header):
        kind = "price"
    elif set(ALIAS_COLUMNS) <= set(header):
        kind = "alias"
    elif set(PREFIX_COLUMNS) <= set(header):
        kind = "prefix"
    else:
        tables.problems.append(
            Problem(
                label,
                1,
                "header is not a price, alias or gateway-prefix table; a price table needs "
                + ", ".join(PRICE_COLUMNS),
            )
        )
        return
    for raw in reader:
        line = reader.line_num  # physical line where the record ends (header is line 1)
        cells = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        if not any(cells.values()):
            continue
        place = Place(label, line, layer)
        try:
            if kind == "price":
                tables.prices.append(_price_row(place, cells))
            elif kind == "alias":
                tables.aliases.append(_alias_row(place, cells))
            else:
                tables.prefixes.append(_prefix_row(place, cells))
        except (ValueError, ConditionError) as exc:
            tables.problems.append(Problem(label, line, str(exc)))


def _required(cells: dict[str, str], name: str) -> str:
    value = cells.get(name, "")
    if not value:
        raise ValueError(f"{name} is empty")
    return value


def _price_row(place: Place, cells: dict[str, str]) -> PriceRow:
    prices: dict[str, float | None] = {}
    for bucket in ALL_PRICES:
        prices[bucket] = _price(bucket, cells.get(bucket, ""))
    return PriceRow(
        place=place,
        provider=_required(cells, "provider").lower(),
        model=_required(cells, "model").lower(),
        effective_from=_timestamp(cells, "effective_from"),
        effective_to=_timestamp(cells, "effective_to"),
        currency=_required(cells, "currency").upper(),
        condition=parse_condition(cells.get("condition", "")),
        prices=prices,
        notes=cells.get("notes", ""),
        source=cells.get("source", ""),
    )


def _alias_row(place: Place, cells: dict[str, str]) -> Alias:
    return Alias(
        place=place,
        provider=_required(cells, "provider").lower(),
        alias=_required(cells, "alias").lower(),
        model=_required(cells, "model").lower(),
        effective_from=_timestamp(cells, "effective_from"),
        effective_to=_timestamp(cells, "effective_to"),
        note=cells.get("note", ""),
        source=cells.get("source", ""),
    )


def _prefix_row(place: Place, cells: dict[str, str]) -> GatewayPrefix:
    return GatewayPrefix(
        place=place,
        gateway=_required(cells, "gateway").lower(),
        prefix=_required(cells, "prefix").lower(),
        provider=cells.get("provider", "").lower() or None,
        note=cells.get("note", ""),
        source=cells.get("source", ""),
    )
