"""The web pages of the caller's jobs: a WSGI application (app.py) over the spool as that
user reads it (store.py), logs shown a page at a time (logpage.py). `gpualert web` serves it on
127.0.0.1; Open OnDemand runs it through Passenger (ood/gpualert/passenger_wsgi.py). Both run
it as the user who asks: docs/SECURITY.md, "The web pages".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpualert_slurm.core.config import Config


def make_app(cfg: Config | None = None) -> Any:
    """The WSGI application over the site config (default: load_config())."""
    from gpualert_slurm.web.app import make_app as _make

    return _make(cfg)
