"""Open OnDemand's entry point for gpualert's web pages: Passenger (in the user's per-user
server, as that user) loads this file and serves `application`, a WSGI app
(gpualert_slurm.web). Installed at /var/www/ood/apps/sys/gpualert by the .deb; a source
install links this directory there (README, "Web pages").

The package comes from the Python Passenger starts (the .deb's, in /usr/lib/python3) or, when
that one lacks it, from gpualert's venv: Passenger then runs this file again under the venv's
Python (its documented way to pick an interpreter from the startup file).
"""

import os
import sys

VENV_PYTHON = os.environ.get("GPUALERT_PYTHON", "/opt/gpualert/venv/bin/python3")

try:
    import gpualert_slurm  # noqa: F401 (only: is it there)
except ImportError:
    if os.path.exists(VENV_PYTHON) and os.path.realpath(sys.executable) != \
            os.path.realpath(VENV_PYTHON):
        os.execl(VENV_PYTHON, VENV_PYTHON, *sys.argv)
    raise

if os.geteuid() == 0:  # a PUN is never root's; root would read every user's jobs
    raise SystemExit("gpualert: the web pages refuse to run as root")

from gpualert_slurm.web import make_app  # noqa: E402

application = make_app()
