"""cacheaudit: prompt-cache audit over recorded LLM API traffic.

The library is the product; `pipeline.cli` is a thin Typer wrapper around it.
"""

__version__ = "0.1.0"
