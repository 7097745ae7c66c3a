"""DuckDB SQL -> Spark SQL: sqlglot's transpiler plus the rewrites our queries need.

sqlglot (`read="duckdb", write="spark"`) translates most of queries/*.sql as it stands. The
rewrites below are automatic AST transforms for what it leaves untranslatable or translates with
different numbers; each says why. Rewrites apply children first, so a construct nested inside a
rewritten one is rewritten too. A construct with no exact rewrite raises QueryError naming
the portable form to write instead, so a view fails loudly rather than giving other numbers.
`translate_steps` also splits off each CTE read more than once as a step the engine computes
once (Spark would inline it at every reference; see there).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pipeline.errors import QueryError

Variables = tuple[tuple[str, str], ...]  # DuckDB session variables (SET VARIABLE) by name


Step = tuple[str | None, str]  # (temp view to create, or None for the query itself; Spark SQL)


@cache
def translate(sql: str, variables: Variables = ()) -> str:
    """DuckDB SQL -> Spark SQL, or QueryError naming what sqlglot could not translate.

    `variables` are the DuckDB session variables the table providers set; `getvariable(name)`
    becomes its value, and `query_table(getvariable(name))` the table it names."""

    def run() -> str:
        return _emit(_rewritten(_parsed(sql, variables)))

    return str(_guarded(run))


@cache
def translate_steps(sql: str, variables: Variables = (), prefix: str = "query") -> tuple[Step, ...]:
    """The query as Spark SQL steps: each CTE that the rest of the query reads more than once
    (or that is written `AS MATERIALIZED`) is its own step, a temp view `<prefix>__<cte>` that
    the engine computes once; the last step is the query itself, reading those temp views.

    DuckDB computes such a CTE once too. Spark would instead inline it at every reference, and
    the diagnosis views chain many: cache_breaks grew to thousands of copies of its first CTE,
    so planning alone took minutes and a 1 GB driver heap. A CTE written `AS NOT MATERIALIZED`
    stays inline. The rows are the same either way; only the plan changes."""

    def run() -> tuple[Step, ...]:
        return tuple(
            (name, _emit(_rewritten(step)))
            for name, step in _split_ctes(_parsed(sql, variables), prefix)
        )

    steps: tuple[Step, ...] = _guarded(run)
    return steps


_REWRITES: tuple[Any, ...] = ()  # filled below, once the rewrites are defined


def _guarded(run: Any) -> Any:
    from sqlglot.errors import SqlglotError

    try:
        return run()
    except SqlglotError as exc:
        raise QueryError(f"cannot translate to Spark SQL: {exc}") from exc


def _parsed(sql: str, variables: Variables) -> Any:
    import sqlglot

    values = dict(variables)
    statements = sqlglot.parse(sql, read="duckdb")
    if len(statements) != 1 or statements[0] is None:
        raise QueryError("expected exactly one SELECT statement")
    return statements[0].transform(lambda node: _resolve_variables(node, values))


def _rewritten(tree: Any) -> Any:
    for rewrite in _REWRITES:
        tree = _bottom_up(tree, rewrite)
    return tree


def _emit(tree: Any) -> str:
    from sqlglot.errors import ErrorLevel

    # RAISE: an unsupported construct fails here, not as wrong numbers later.
    return str(tree.sql(dialect="spark", unsupported_level=ErrorLevel.RAISE))


def _split_ctes(tree: Any, prefix: str) -> list[tuple[str | None, Any]]:
    """See translate_steps. Only the top-level WITH is split; a query whose nested WITH reuses
    one of its names, or a recursive WITH, stays one step."""
    from sqlglot import exp

    with_ = tree.args.get("with_")
    if not isinstance(with_, exp.With) or with_.args.get("recursive"):
        return [(None, tree)]
    ctes = list(with_.expressions)
    names = [c.alias for c in ctes]
    shadowed = any(
        c.alias in names for w in tree.find_all(exp.With) if w is not with_ for c in w.expressions
    )
    if shadowed or len(set(names)) != len(names):
        return [(None, tree)]

    def refs(node: Any, visible: set[str]) -> list[str]:
        # a CTE sees only the CTEs before it: a same-named table earlier is a real table
        return [
            t.name
            for t in node.find_all(exp.Table)
            if t.name in visible and not t.args.get("db") and isinstance(t.this, exp.Identifier)
        ]

    main = tree.copy()
    main.set("with_", None)
    visible_to = {n: set(names[:i]) for i, n in enumerate(names)}
    deps = {c.alias: refs(c.this, visible_to[c.alias]) for c in ctes}
    main_refs = refs(main, set(names))
    count = dict.fromkeys(names, 0)
    for r in [*main_refs, *(r for d in deps.values() for r in d)]:
        count[r] += 1
    pinned = {
        c.alias
        for c in ctes
        if c.args.get("materialized") is True
        or (count[c.alias] > 1 and c.args.get("materialized") is not False)
    }
    if not pinned:
        return [(None, tree)]

    def renamed(node: Any, visible: set[str]) -> Any:
        for t in list(node.find_all(exp.Table)):
            if t.name in visible & pinned and not t.args.get("db"):
                if not t.alias:
                    t.set("alias", exp.TableAlias(this=exp.to_identifier(t.name)))
                t.set("this", exp.to_identifier(f"{prefix}__{t.name}"))
        return node

    def with_inline(body: Any, direct: list[str]) -> Any:
        needed: set[str] = set()
        todo = [d for d in direct if d not in pinned]
        while todo:
            name = todo.pop()
            if name not in needed:
                needed.add(name)
                todo.extend(d for d in deps[name] if d not in pinned)
        if not needed:
            return body
        inline = []
        for c in ctes:
            if c.alias in needed:
                cte = c.copy()
                cte.set("materialized", None)
                renamed(cte.this, visible_to[c.alias])
                inline.append(cte)
        own = body.args.get("with_")
        body.set("with_", exp.With(expressions=inline + (list(own.expressions) if own else [])))
        return body

    steps: list[tuple[str | None, Any]] = []
    for c in ctes:
        if c.alias in pinned:
            body = renamed(c.this.copy(), visible_to[c.alias])
            steps.append((f"{prefix}__{c.alias}", with_inline(body, deps[c.alias])))
    steps.append((None, with_inline(renamed(main, set(names)), main_refs)))
    return steps


def _bottom_up(tree: Any, rewrite: Any) -> Any:
    """Apply `rewrite` to every node, children before their parent, so a construct nested in
    a rewritten one is rewritten too (sqlglot's `transform` does not descend into the node a
    rewrite returns: `hash(hash(x))` kept its inner DuckDB `hash`)."""
    for node in reversed(list(tree.dfs())):
        new = rewrite(node)
        if new is node:
            continue
        if node is tree:
            tree = new
        else:
            node.replace(new)
    return tree


def _resolve_variables(node: Any, values: dict[str, str]) -> Any:
    from sqlglot import exp

    def variable(call: Any) -> str | None:
        if not (isinstance(call, exp.Anonymous) and str(call.this).lower() == "getvariable"):
            return None
        (arg,) = call.expressions
        if not isinstance(arg, exp.Literal) or arg.name not in values:
            raise QueryError(f"getvariable({arg.sql()}): no such variable is set")
        return values[arg.name]

    if (
        isinstance(node, exp.Table)
        and isinstance(node.this, exp.Anonymous)
        and str(node.this.this).lower() == "query_table"
        and len(node.this.expressions) == 1
    ):
        name = variable(node.this.expressions[0])
        if name is not None:
            table = exp.to_table(name)
            if node.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(node.alias)))
            return table
    value = variable(node)
    return node if value is None else exp.Literal.string(value)


def _list_reduce(node: Any) -> Any:
    """DuckDB `list_reduce(list, lambda acc, x: ..., initial)` is Spark's
    `aggregate(list, initial, (acc, x) -> ...)`; without an initial value the first element
    starts, as `aggregate(slice(list, 2, n), list[0], ...)`."""
    from sqlglot import exp

    if not (isinstance(node, exp.Anonymous) and str(node.this).lower() == "list_reduce"):
        return node
    args = [a.copy() for a in node.expressions]
    if len(args) == 3:
        return exp.Anonymous(this="aggregate", expressions=[args[0], args[2], args[1]])
    if len(args) == 2:
        rest = exp.Anonymous(
            this="slice",
            expressions=[
                args[0],
                exp.Literal.number(2),
                exp.Anonymous(this="size", expressions=[args[0].copy()]),
            ],
        )
        first = exp.Anonymous(
            this="element_at", expressions=[args[0].copy(), exp.Literal.number(1)]
        )
        return exp.Anonymous(this="aggregate", expressions=[rest, first, args[1]])
    return node


_ASOF_HINT = (
    "write it as a range join keeping the nearest row: JOIN ... ON <equalities> AND <inequality>"
    " QUALIFY row_number() OVER (PARTITION BY <left row key> ORDER BY <right key> DESC) = 1"
)


def _asof_join(node: Any) -> Any:
    """`SELECT ... FROM l ASOF [LEFT] JOIN r ON eqs AND l.t >= r.t` as a range join keeping,
    per left row, the nearest right row; each side travels as one struct column named after
    its alias, so the SELECT list (`l.x`, `r.*`) reads the same on Spark:

        SELECT ... FROM (SELECT l, r FROM (SELECT struct(l.*) AS l, struct(r.*) AS r,
            row_number() OVER (PARTITION BY struct(l.*) ORDER BY r.t DESC) AS asof_rank
            FROM l [LEFT] JOIN r ON eqs AND l.t >= r.t) WHERE asof_rank = 1) AS asof

    Exact where the SELECT joins just those two relations, has no WHERE, GROUP BY, DISTINCT,
    window or QUALIFY, qualifies every column it names, and its left rows are distinct (they
    carry a request id in our queries); anything else is refused with the rewrite to make."""
    from sqlglot import exp

    if not isinstance(node, exp.Select):
        return node
    joins = node.args.get("joins") or []
    if not any(str(j.args.get("method") or "").upper() == "ASOF" for j in joins):
        return node
    from_ = node.args.get("from_")
    simple = (
        len(joins) == 1
        and isinstance(from_, exp.From)
        and not any(node.args.get(k) for k in ("where", "group", "distinct", "qualify", "having"))
        and not any(isinstance(e, exp.Window) for p in node.expressions for e in p.walk())
    )
    if not simple or from_ is None:
        raise QueryError(f"ASOF JOIN in a SELECT too complex to translate; {_ASOF_HINT}")
    join = joins[0]
    left, right = from_.this, join.this
    names = (left.alias_or_name, right.alias_or_name)
    if any(c.table not in names for p in node.expressions for c in p.find_all(exp.Column)):
        raise QueryError(f"ASOF JOIN: qualify every selected column with {' or '.join(names)}")
    order = _asof_order(join.args["on"], names[1])
    if order is None:
        raise QueryError(f"ASOF JOIN without an inequality on the right table; {_ASOF_HINT}")

    def packed(alias: str) -> Any:
        star = exp.Column(this=exp.Star(), table=exp.to_identifier(alias))
        return exp.Anonymous(this="struct", expressions=[star])

    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=[packed(names[0])],
        order=exp.Order(expressions=[order]),
    )
    pair = exp.Join(this=right.copy(), on=join.args["on"].copy(), side=join.args.get("side"))
    ranked = (
        exp.select(
            exp.alias_(packed(names[0]), names[0]),
            exp.alias_(packed(names[1]), names[1]),
            exp.alias_(rank, "asof_rank"),
        )
        .from_(left.copy())
        .join(pair)
    )
    nearest = (
        exp.select(*names)
        .from_(ranked.subquery("asof_ranked"))
        .where(exp.EQ(this=exp.column("asof_rank"), expression=exp.Literal.number(1)))
    )
    new = node.copy()
    new.set("joins", None)
    new.set("from_", exp.From(this=nearest.subquery("asof")))
    return new


def _asof_order(on: Any, right_name: str) -> Any:
    """ORDER BY for the nearest right row: the right side of the ON's inequality, descending
    when it must be below the left key (l.t >= r.t), ascending when above."""
    from sqlglot import exp

    conditions = list(on.flatten()) if isinstance(on, exp.And) else [on]
    for cond in conditions:
        if not isinstance(cond, exp.GT | exp.GTE | exp.LT | exp.LTE):
            continue
        lhs, rhs = cond.this, cond.expression
        right_first = isinstance(lhs, exp.Column) and lhs.table == right_name
        right_col = lhs if right_first else rhs
        if not (isinstance(right_col, exp.Column) and right_col.table == right_name):
            continue
        less = isinstance(cond, exp.LT | exp.LTE)
        below = less if right_first else not less
        return exp.Ordered(this=right_col.copy(), desc=below, nulls_first=False)
    return None


def _signed_types(node: Any) -> Any:
    """Spark has no unsigned or 128-bit integers: an unsigned type becomes the next wider signed
    one, except UBIGINT, which in our SQL holds hash fingerprints: BIGINT keeps all 64 bits
    (fingerprints are compared for equality only). HUGEINT becomes DECIMAL(38, 0)."""
    from sqlglot import exp

    if not isinstance(node, exp.DataType):
        return node
    swaps = {
        exp.DataType.Type.UBIGINT: "BIGINT",
        exp.DataType.Type.UINT: "BIGINT",
        exp.DataType.Type.USMALLINT: "INT",
        exp.DataType.Type.UTINYINT: "SMALLINT",
        exp.DataType.Type.INT128: "DECIMAL(38, 0)",
        exp.DataType.Type.UINT128: "DECIMAL(38, 0)",
    }
    target = swaps.get(node.this)
    return node if target is None else exp.DataType.build(target)


def _plain_cte(node: Any) -> Any:
    """`name AS MATERIALIZED (...)` is a DuckDB planner hint Spark does not parse; Spark decides
    itself whether to reuse a CTE referenced twice."""
    from sqlglot import exp

    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node = node.copy()
        node.set("materialized", None)
    return node


def _unordered_row_number(node: Any) -> Any:
    """`row_number() OVER ()` numbers rows in no defined order (a surrogate key); Spark refuses
    it without ORDER BY. monotonically_increasing_id() is unique too (not dense), so it serves
    as a key only; a query that outputs such a number should order it (request_id)."""
    from sqlglot import exp

    if (
        isinstance(node, exp.Window)
        and isinstance(node.this, exp.RowNumber)
        and not node.args.get("partition_by")
        and not node.args.get("order")
        and not node.args.get("alias")  # OVER a named window: its WINDOW clause orders it
    ):
        return exp.Anonymous(this="monotonically_increasing_id", expressions=[])
    return node


def _exact_percentiles(node: Any) -> Any:
    """DuckDB's exact quantile_cont/quantile_disc as Spark's exact percentile functions.

    sqlglot writes them as Spark's PERCENTILE_APPROX (approximate: different numbers) or as a
    two-argument PERCENTILE_CONT that Spark rejects. Spark's `percentile(x, q)` interpolates
    linearly like quantile_cont; `percentile_disc(q) WITHIN GROUP` matches quantile_disc.
    """
    from sqlglot import exp

    inner, value, descending = node, None, False
    if isinstance(node, exp.WithinGroup) and isinstance(
        node.this, exp.PercentileCont | exp.PercentileDisc
    ):
        inner = node.this
        order = node.expression.expressions if node.expression else []
        if len(order) != 1:
            return node
        value, descending = order[0].this, bool(order[0].args.get("desc"))
    elif isinstance(node, exp.PercentileCont | exp.PercentileDisc) and not isinstance(
        node.parent, exp.WithinGroup
    ):
        if node.expression is None:
            return node
        value, inner = node.this, exp.PercentileCont(this=node.expression.copy())
        if isinstance(node, exp.PercentileDisc):
            inner = exp.PercentileDisc(this=node.expression.copy())
    else:
        return node
    fraction = inner.this.copy()
    if isinstance(inner, exp.PercentileCont):
        if descending:  # the q-quantile from the top is the (1 - q)-quantile from the bottom
            fraction = exp.Sub(this=exp.Literal.number(1), expression=fraction)
        return exp.Anonymous(this="percentile", expressions=[value.copy(), fraction])
    ordered = exp.Ordered(this=value.copy(), desc=descending, nulls_first=False)
    return exp.WithinGroup(
        this=exp.Anonymous(this="percentile_disc", expressions=[fraction]),
        expression=exp.Order(expressions=[ordered]),
    )


def _glob_as_like(node: Any) -> Any:
    """`x GLOB p` (Spark has no GLOB) as `x LIKE p'` with p' = p with LIKE's own wildcards
    escaped, `*` -> `%` and `?` -> `_`. Covers the globs our data tables document (`*`, `?`);
    a `[...]` class in a pattern would be matched literally on Spark."""
    from sqlglot import exp

    if not isinstance(node, exp.Glob):
        return node
    pattern = node.expression.copy()
    for old, new in (("\\", "\\\\"), ("%", "\\%"), ("_", "\\_"), ("*", "%"), ("?", "_")):
        pattern = exp.Anonymous(
            this="replace",
            expressions=[pattern, exp.Literal.string(old), exp.Literal.string(new)],
        )
    return exp.Like(this=node.this.copy(), expression=pattern)


# DuckDB functions sqlglot passes through by name, and their Spark equivalents. `hash` becomes
# xxhash64: both 64-bit, but the values differ, so hash columns are fingerprints to compare within
# one engine's output (equal or not), never numbers to compare across engines.
_FUNCTIONS = {"EPOCH_US": "unix_micros", "HASH": "xxhash64", "STRLEN": "octet_length"}


def _duckdb_functions(node: Any) -> Any:
    """Renames per _FUNCTIONS. A `hash` of several values also hashes whether each is NULL:
    Spark's xxhash64 skips NULL arguments, so xxhash64(a, NULL) = xxhash64(NULL, a) and two
    different tuples would share a fingerprint where DuckDB's hash tells them apart."""
    from sqlglot import exp

    if not (isinstance(node, exp.Anonymous) and str(node.this).upper() in _FUNCTIONS):
        return node
    name = _FUNCTIONS[str(node.this).upper()]
    args = [e.copy() for e in node.expressions]
    if name == "xxhash64" and len(args) > 1:
        args = [
            part for arg in args for part in (arg, exp.Is(this=arg.copy(), expression=exp.Null()))
        ]
    return exp.Anonymous(this=name, expressions=args)


def _weekdays(node: Any) -> Any:
    """DuckDB's day-of-week numbers in Spark terms. sqlglot writes `isodow(t)` (Monday 1 ..
    Sunday 7) as `dayofweek(t) % 7 + 1`, which on Spark (whose dayofweek is Sunday 1 ..
    Saturday 7) is off by one day (a Friday became 7); and DuckDB `dayofweek(t)` is Sunday 0 ..
    Saturday 6. Spark's `weekday(t)` is Monday 0 .. Sunday 6."""
    from sqlglot import exp

    if isinstance(node, exp.DayOfWeekIso):
        weekday = exp.Anonymous(this="weekday", expressions=[node.this.copy()])
        return exp.Paren(this=exp.Add(this=weekday, expression=exp.Literal.number(1)))
    if isinstance(node, exp.DayOfWeek):
        spark_dow = exp.Anonymous(this="dayofweek", expressions=[node.this.copy()])
        return exp.Paren(this=exp.Sub(this=spark_dow, expression=exp.Literal.number(1)))
    return node


def _json_wildcards(node: Any) -> Any:
    """DuckDB `json_extract_string(j, '$.a[*].b')` is a list (one value per element of the
    array at `$.a`; NULL where an element has no `b`; empty when `$.a` is not an array). sqlglot
    writes Spark's get_json_object, which returns one string. As Spark SQL: the array's elements
    as JSON strings (from_json with array<string> keeps an object element as its JSON text), each
    read at the rest of the path: `transform(from_json(get_json_object(j, '$.a'),
    'array<string>'), e -> get_json_object(e, '$.b'))`. Where `$.a` is not an array this gives
    NULL, not an empty list: our queries coalesce both to []. One `[*]` per path."""
    from sqlglot import exp

    if not isinstance(node, exp.JSONExtractScalar):
        return node
    path = node.expression
    text = path.sql(dialect="duckdb") if path is not None else ""
    if "[*]" not in text:
        return node
    if not isinstance(path, exp.JSONPath | exp.Literal):
        raise QueryError(f"JSON path with [*] must be a literal: {text}")
    raw = path.name if isinstance(path, exp.Literal) else text.strip("'")
    head, _, rest = raw.partition("[*]")
    if "[*]" in rest:
        raise QueryError(f"JSON path with more than one [*]: {raw}")
    array = exp.Anonymous(
        this="from_json",
        expressions=[
            exp.Anonymous(
                this="get_json_object",
                expressions=[node.this.copy(), exp.Literal.string(head or "$")],
            ),
            exp.Literal.string("array<string>"),
        ],
    )
    if not rest:
        return array
    element = exp.to_identifier("json_element")
    read = exp.Anonymous(
        this="get_json_object",
        expressions=[exp.column(element), exp.Literal.string("$" + rest)],
    )
    return exp.Anonymous(
        this="transform",
        expressions=[array, exp.Lambda(this=read, expressions=[element])],
    )


def _json_valid(node: Any) -> Any:
    """DuckDB `json_valid(j)`: Spark has no such function; `try_parse_json(j) IS NOT NULL`
    parses the text as JSON the same way (NULL in, NULL out)."""
    from sqlglot import exp

    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "json_valid":
        (arg,) = node.expressions
        parsed = exp.Anonymous(this="try_parse_json", expressions=[arg.copy()])
        return exp.If(
            this=exp.Is(this=arg.copy(), expression=exp.Null()),
            true=exp.Null(),
            false=exp.Not(this=exp.Is(this=parsed, expression=exp.Null())),
        )
    return node


def _list_length(node: Any) -> Any:
    """DuckDB `len(list_filter(...))` is a list length: Spark's `size`, not `length` (strings).
    sqlglot cannot tell a list column from a string one; queries should use `array_length`."""
    from sqlglot import exp

    if isinstance(node, exp.Length) and isinstance(node.this, exp.ArrayFilter | exp.Array):
        return exp.ArraySize(this=node.this.copy())
    return node


def spark_type(duckdb_type: str) -> str:
    """A DuckDB type name from schemas/*.json as a Spark SQL type."""
    import sqlglot

    if duckdb_type.upper() == "TIMESTAMPTZ":
        return "TIMESTAMP"  # Spark's TIMESTAMP is an instant, like TIMESTAMPTZ
    # unsigned types as in the translated SQL (a helper view's fingerprints are UBIGINT)
    built = _signed_types(sqlglot.exp.DataType.build(duckdb_type, dialect="duckdb"))
    return str(built.sql("spark"))


_REWRITES = (
    _exact_percentiles,
    _glob_as_like,
    _duckdb_functions,
    _weekdays,
    _json_wildcards,
    _json_valid,
    _list_length,
    _unordered_row_number,
    _plain_cte,
    _signed_types,
    _list_reduce,
    _asof_join,
)
