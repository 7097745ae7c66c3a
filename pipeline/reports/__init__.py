"""Static, self-contained HTML cache reports.

Every chart's data is aggregated in SQL first (`queries/report_*.sql`); Python only fetches the
small result, builds Altair specs (`sections/`), and assembles one offline page (`page.py`) with
the Vega JavaScript inlined (`bundle.py`) and every string from traffic escaped (`escape.py`).
`weekly.py` and `conversation.py` are the two entry points the CLI calls.
"""
