"""Not built yet: registers no commands."""

import typer


def register(app: typer.Typer) -> None:
    return None
