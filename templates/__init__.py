"""Package data templates (Containerfiles, manifests) and the one function that renders them.

Templates are Jinja2 files beside this module, read through ``importlib.resources`` so they
work from a wheel as well as from the source tree. Rendering is strict: a variable the
caller forgot is an error, never an empty string in a Containerfile.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jinja2


def _load(name: str) -> str:
    try:
        return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise jinja2.TemplateNotFound(name) from None


def _quote(value: object) -> str:
    """A double-quoted string for Containerfile ``ENV``/``LABEL`` values (JSON escaping)."""
    return json.dumps(str(value))


def _assignments(values: dict[str, object], indent: int = 4) -> str:
    """``KEY="value"`` pairs joined by line continuations, for one ``ENV`` or ``LABEL``."""
    return (" \\\n" + " " * indent).join(f"{k}={_quote(v)}" for k, v in values.items())


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_load),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["quote"] = _quote
    env.filters["tojson"] = json.dumps
    env.filters["assignments"] = _assignments
    return env


def render(name: str, variables: dict[str, Any]) -> str:
    """Render the template file ``name`` (e.g. ``Containerfile.cpu.j2``) with ``variables``."""
    return environment().get_template(name).render(variables)
