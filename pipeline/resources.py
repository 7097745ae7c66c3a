"""Where the files the package reads at run time live: the SQL (`queries/`), the table schemas
(`schemas/`) and the report templates and stylesheet (`reports/`).

In a source checkout (and an editable install) they sit beside the package, where the
repository keeps them; a built wheel carries them inside the package as `pipeline.queries`,
`pipeline.schemas` and `pipeline.report_assets` (pyproject.toml maps the folders), found through
importlib.resources. The checkout wins when both exist, so editing a query takes effect at once.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
# folder in the checkout -> (its folder inside the package in a wheel, a file only it has)
_FOLDERS = {
    "queries": ("queries", "requests.sql"),
    "schemas": ("schemas", "requests.json"),
    "reports": ("report_assets", "report.css"),
}


def folder(name: str) -> Path:
    """The directory holding `name` (queries, schemas or reports)."""
    inside, marker = _FOLDERS[name]
    beside = _CHECKOUT / name
    if (beside / marker).is_file():
        return beside
    # the data folders have no __init__.py: found through the package that holds them
    return Path(str(resources.files("pipeline"))) / inside
