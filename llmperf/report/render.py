"""HTML from the templates beside this module, with autoescaping always on: prompts, dataset
text and config values reach the page as text, never as markup."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import jinja2

TEMPLATES = Path(__file__).parent / "templates"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["generated_at"] = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return env


def write_page(path: Path, template: str, **context: Any) -> Path:
    html = environment().get_template(template).render(**context)
    path.write_text(html, encoding="utf-8")
    return path
