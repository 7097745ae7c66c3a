"""Dated price tables: shipped CSVs in `data/`, user overrides, validation, and the
DuckDB tables behind the `request_costs` view.

- `rows`: the typed rows and the condition mini-language.
- `loader`: CSV files -> `PriceTables` (shipped first, then user files, which win).
- `validate`: the checks behind `cacheaudit prices check`, each with file and line.
- `resolve`: which rows are in force for a model at an instant (`cacheaudit prices show`).
- `tables`: registers the rows into every SQL session (`pipeline.sql.TABLE_PROVIDERS`).
"""
