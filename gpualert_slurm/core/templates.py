"""The one template loader: every message gpualert sends is a Jinja2 template pair under
gpualert_slurm/data/templates/ (docs/TEMPLATES.md lists each one and its variables), which a
file of the same name in the site's directory (report.templates, default
/etc/gpualert/templates) replaces.

One Environment for all of them: autoescape for *.html.j2 (everything from a job is the
user's: docs/SECURITY.md), none for *.txt.j2 (the text parts escape what they must before they
get here, as termsafe does for the alerts' log lines). Undefined names are ChainableUndefined,
not StrictUndefined: a verdict.json of an older version lacks fields the templates ask for,
and a site's templates may ask for one this version no longer has; both render "" as before.
jinja2 is imported on first use only: the classifier's path never pays for it.
"""

from __future__ import annotations

import html
import os
from functools import lru_cache
from typing import Any

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "templates")
SITE_TEMPLATES = "/etc/gpualert/templates"


def template_dirs(site: str | None = None) -> list[str]:
    """Where templates are looked for, first match wins: the site's directory
    ($GPUALERT_TEMPLATES, else `site`, the caller's report.templates, else
    /etc/gpualert/templates: the precedence of the job epilog's and `gpualert show`'s
    setdefault), then the package's."""
    site = os.environ.get("GPUALERT_TEMPLATES", site or SITE_TEMPLATES)
    return [d for d in (site, DATA_DIR) if os.path.isdir(d)]


def _html_escape(text: Any) -> Any:
    """Python's html.escape (quotes too), as Markup so autoescape leaves it alone: the alerts'
    HTML part was escaped so before they were templates (&quot; and &#x27;, where Jinja's own
    escape writes &#34; and &#39;), and it keeps those bytes."""
    from markupsafe import Markup

    return Markup(html.escape(str(text)))


@lru_cache(maxsize=4)
def environment(dirs: tuple[str, ...], strict: bool = False) -> Any:
    """The jinja2.Environment over `dirs` (cached: the epilog compiles the templates while
    scontrol answers, and renders at once). strict: StrictUndefined, for the test that every
    template needs no variable docs/TEMPLATES.md does not list."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(list(dirs)),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",),
                                            default_for_string=False),
        undefined=jinja2.StrictUndefined if strict else jinja2.ChainableUndefined,
        trim_blocks=False, keep_trailing_newline=True)
    env.filters["html_escape"] = _html_escape
    return env


def get_template(name: str, site: str | None = None) -> Any:
    return environment(tuple(template_dirs(site))).get_template(name)


def render(name: str, site: str | None = None, **variables: Any) -> str:
    """Template `name` (e.g. "hang.txt.j2") rendered with `variables`."""
    return get_template(name, site).render(**variables)
