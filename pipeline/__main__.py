"""`python -m pipeline` runs the CLI (what the `cacheaudit` script does)."""

from pipeline.cli import main

main()
