"""Assemble one self-contained page: template, CSS, sections, inline specs and the Vega bundle.

Templates live in `reports/templates/` (HTML and JS) and `reports/report.css`. Every value put
into the page is either our own text escaped with `escape.text`, HTML built from escaped parts,
or JSON made safe for a <script> element by `escape.inline_json`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from string import Template

from pipeline import __version__, resources
from pipeline.reports import bundle, escape
from pipeline.reports.section import Section

TEMPLATE_DIR = resources.folder("reports")


@cache
def _asset(name: str) -> str:
    return (TEMPLATE_DIR / name).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class Page:
    title: str
    heading: str
    subtitle: str
    sections: Sequence[Section]
    footer_html: str
    nav_html: str = ""
    stamp: str = ""


def chart_id(name: str) -> str:
    return f"chart-{name}"


def render_section(section: Section) -> str:
    parts = [
        f'<section id="{escape.text(section.key)}">',
        f"<h2>{escape.text(section.title)}</h2>",
    ]
    if section.caption:
        parts.append(f'<p class="caption">{escape.text(section.caption)}</p>')
    if section.note:
        parts.append(f'<p class="note">{escape.text(section.note)}</p>')
    charts = "".join(
        f'<div class="chart" id="{escape.text(chart_id(c.name))}"></div>' for c in section.charts
    )
    if charts and section.body_html:
        parts.append(f'<div class="row">{charts}<div>{section.body_html}</div></div>')
    else:
        parts.append(charts + section.body_html)
    parts.append("</section>")
    return "\n".join(parts)


def render(page: Page) -> str:
    specs = {chart_id(c.name): c.spec for s in page.sections for c in s.charts}
    return Template(_asset("templates/page.html")).substitute(
        version=escape.text(__version__),
        stamp=escape.text(page.stamp),
        title=escape.text(page.title),
        heading=escape.text(page.heading),
        subtitle=escape.text(page.subtitle),
        nav=page.nav_html,
        css=_asset("report.css"),
        probe_js=_asset("templates/probe.js"),
        sections="\n".join(render_section(s) for s in page.sections),
        footer=page.footer_html,
        specs=escape.inline_json(specs),
        # A page without charts (the index) does not need the 900 KB of Vega.
        vega_js=bundle.javascript() if specs else "",
        embed_js=_asset("templates/embed.js"),
    )
