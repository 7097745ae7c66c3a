"""`cacheaudit prices list|show|check`: the dated price tables the cost views use."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from pipeline.commands.options import err
from pipeline.errors import DataError, UsageError

PricesOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--prices",
        envvar="CACHEAUDIT_PRICES",
        help="Extra price/alias table (CSV) or a directory of them; their rows win.",
    ),
]

_LIST_COLUMNS = (
    "row_id",
    "layer",
    "provider",
    "model",
    "effective_from",
    "effective_to",
    "currency",
    "condition",
    "input_cache_miss_per_mtok",
    "input_cache_hit_per_mtok",
    "cache_write_5m_per_mtok",
    "cache_write_1h_per_mtok",
    "output_per_mtok",
    "input_audio_cache_miss_per_mtok",
    "input_audio_cache_hit_per_mtok",
    "output_audio_per_mtok",
    "web_search_per_1k",
    "request_fee_per_1k",
)  # the row's identity, then pipeline.prices.rows.ALL_PRICES in order (a test holds them equal)


def _parse_at(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    from pipeline.prices.loader import parse_timestamp

    try:
        value = parse_timestamp(text)
    except ValueError as exc:
        raise UsageError(f"--at: {exc}", hint="e.g. --at 2025-03-01T17:00Z") from None
    if value is None:
        raise UsageError("--at is empty", hint="e.g. --at 2025-03-01T17:00Z")
    return value


def _utc(v: datetime, *, seconds: bool = False) -> str:
    """An instant in UTC to the minute (`2027-01-01T00:00Z`), with its seconds (always with
    `seconds`) and microseconds where it has them: a row starting at 00:00:30, or an instant
    asked for a microsecond before a change, never prints as the minute or second before it."""
    text = v.strftime("%Y-%m-%dT%H:%M")
    if seconds or v.second or v.microsecond:
        text += f":{v.second:02d}"
    if v.microsecond:
        text += f".{v.microsecond:06d}"
    return text + "Z"


def _row_cells(row: Any) -> tuple[Any, ...]:
    from pipeline.prices.rows import ALL_PRICES

    def ts(v: datetime | None) -> str:
        return _utc(v) if v else ""

    return (
        row.place.row_id,
        row.place.layer,
        row.provider,
        row.model,
        ts(row.effective_from),
        ts(row.effective_to),
        row.currency,
        row.condition.text,
        *(row.prices.get(b) for b in ALL_PRICES),
    )


def register(app: typer.Typer) -> None:
    prices_app = typer.Typer(
        help="Dated price tables: list rows, show what priced a model at an instant, check them.",
        no_args_is_help=True,
    )
    app.add_typer(prices_app, name="prices")

    @prices_app.command("list")
    def list_rows(
        prices: PricesOpt = None,
        provider: Annotated[str | None, typer.Option(help="Only this provider.")] = None,
        model: Annotated[
            str | None, typer.Option(help="Only rows whose model contains this text.")
        ] = None,
        layer: Annotated[
            str | None,
            typer.Option(
                help="Only this layer: user (your --prices files), shipped (our researched"
                " tables) or library (from the installed genai-prices)."
            ),
        ] = None,
        fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")] = "table",
    ) -> None:
        """Every price row of the three layers, with the interval and condition it covers.

        A request is priced by the user's rows first, then our researched (shipped) rows, then
        the genai-prices library's rows for models neither of the others names. Prices are per
        million tokens; an empty cell is a price nobody established.
        """
        if layer is not None and layer not in ("user", "shipped", "library"):
            raise UsageError(f"--layer {layer}: use user, shipped or library")
        from pipeline import output
        from pipeline.prices import tables as price_tables

        loaded = price_tables.load_checked(tuple(prices or ()))
        rows = [
            _row_cells(r)
            for r in loaded.prices
            if (provider is None or r.provider == provider.lower())
            and (model is None or model.lower() in r.model)
            and (layer is None or r.place.layer == layer)
        ]
        if not rows:
            # An empty table alone reads as "free" or "broken": say what exists instead.
            ours = sorted({r.provider for r in loaded.prices if r.place.layer != "library"})
            more = {r.provider for r in loaded.prices if r.place.layer == "library"} - set(ours)
            err(
                f"no price rows match (provider={provider}, model={model}); providers with rows:"
                f" {', '.join(ours)}, and {len(more)} more from genai-prices (prices list"
                " --layer library). Add yours with --prices FILE.csv"
            )
        if fmt == "table":
            output.write_table(list(_LIST_COLUMNS), rows, _stdout())
        else:
            _emit_plain(list(_LIST_COLUMNS), rows, fmt)

    @prices_app.command("show")
    def show(
        model: Annotated[str, typer.Argument(help="Model as requested, e.g. deepseek-chat.")],
        at: Annotated[
            str | None, typer.Option(help="UTC instant, e.g. 2025-03-01T17:00Z (default: now).")
        ] = None,
        provider: Annotated[
            str | None,
            typer.Option(help="Request provider (default: every provider that knows the model)."),
        ] = None,
        prompt_tokens: Annotated[
            int | None,
            typer.Option(help="Whole prompt size, to pick a long-context row."),
        ] = None,
        prices: PricesOpt = None,
    ) -> None:
        """The price row(s) in force for MODEL at an instant, and which one a request would use.

        `*` marks that row; without --prompt-tokens, `?` marks a row that takes over when the
        whole prompt reaches its prompt_tokens threshold.
        """
        from pipeline import output
        from pipeline.prices import resolve
        from pipeline.prices import tables as price_tables

        loaded = price_tables.load_checked(tuple(prices or ()))
        when = _parse_at(at)
        candidates = [provider.lower()] if provider else _providers_for(loaded, model)
        shown = False
        for prov in candidates:
            res = resolve.resolve(loaded, prov, model, when)
            rows = resolve.rows_in_force(loaded, res, when)
            if not rows and not res.alias:
                continue
            shown = True
            alias = ""
            if res.alias:
                beaten = (
                    f"a {res.alias.place.layer} alias wins over {res.exact_row.place.layer} row"
                    f" {res.exact_row.place.row_id} for the exact name"
                    if res.exact_row
                    else "no price row for the exact name is in force"
                )
                alias = (
                    f" (alias {res.alias.place.row_id}: {res.requested} -> {res.model}; {beaten})"
                )
            elif res.skipped_alias and res.exact_row:
                skipped, exact = res.skipped_alias, res.exact_row.place
                alias = (
                    f" (priced as itself: {exact.row_id} is a {exact.layer} row for this exact"
                    f" name, which wins over alias {skipped.place.row_id}:"
                    f" {skipped.alias} -> {skipped.model})"
                )
            typer.echo(f"{res.provider}/{res.model}{alias} at {_utc(when, seconds=True)}")
            picked = resolve.pick(loaded, res, when, prompt_tokens)
            by_size = _rows_by_prompt_size(rows, picked, when, prompt_tokens)
            cells = [
                ("*" if picked is row else "?" if row in by_size else "", *_row_cells(row))
                for row in rows
            ]
            output.write_table(["used", *_LIST_COLUMNS], cells, _stdout())
            if by_size:
                typer.echo(
                    "?: used" + (" instead of *" if picked else "") + " when the whole prompt"
                    " reaches its prompt_tokens threshold: the row depends on the prompt size"
                    " (pass --prompt-tokens N)"
                )
            if picked is None:
                typer.echo(
                    "no row applies to a prompt under the thresholds: such a request at this"
                    " instant is unpriced"
                    if by_size
                    else "no row applies: a request at this instant is unpriced"
                )
            for row in rows:
                if row.notes:
                    typer.echo(f"  {row.place.row_id}: {row.notes}")
        if not shown:
            raise DataError(
                f"no price row in force for {model!r} at {_utc(when, seconds=True)}",
                hint=f"`cacheaudit prices list --model {model.split('/')[-1]}` shows every"
                " interval; a request at this instant is unpriced",
            )

    @prices_app.command("check")
    def check(prices: PricesOpt = None) -> None:
        """Validate the shipped tables and yours: each problem with its file and line."""
        from pipeline.prices import loader, validate

        loaded = loader.load(tuple(prices or ()))
        problems = validate.check(loaded)
        for problem in problems:
            typer.echo(str(problem), err=True)
        if problems:
            raise DataError(f"{len(problems)} problem(s) in the price tables")
        typer.echo(
            f"ok: {len(loaded.prices)} price rows, {len(loaded.aliases)} aliases,"
            f" {len(loaded.prefixes)} gateway prefixes in {len(loaded.files)} files;"
            f" digest {loaded.digest()}"
        )


def _rows_by_prompt_size(
    rows: list[Any], picked: Any, when: datetime, prompt_tokens: int | None
) -> list[Any]:
    """Without --prompt-tokens: the rows ranked before the picked one (best first) that a
    request would use instead if its prompt reached their prompt_tokens threshold."""
    if prompt_tokens is not None:
        return []
    before = rows[: rows.index(picked)] if picked is not None else rows
    return [row for row in before if row.condition.holds(when, None) is None]


def _providers_for(loaded: Any, model: str) -> list[str]:
    from fnmatch import fnmatchcase

    name = model.lower().split("/", 1)[-1]
    found = {r.provider for r in loaded.prices if fnmatchcase(name, r.model)}
    found |= {a.provider for a in loaded.aliases if fnmatchcase(name, a.alias)}
    if "/" in model:
        found |= {g.gateway for g in loaded.prefixes if g.gateway != "*"}
    return sorted(found)


def _stdout() -> Any:
    import sys

    return sys.stdout


def _emit_plain(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    import csv
    import sys

    import orjson

    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(["" if v is None else v for v in row] for row in rows)
    elif fmt == "json":
        records = [dict(zip(columns, row, strict=True)) for row in rows]
        sys.stdout.write(orjson.dumps(records).decode() + "\n")
    else:
        raise UsageError(f"unknown format {fmt!r}", hint="table, csv or json")
