"""WSGI entry point: ``gunicorn wsgi:app``."""

import sys

from speechbatch import create_app
from speechbatch.errors import ConfigError

try:
    app = create_app()
except ConfigError as exc:
    # One clear line naming the variable, not a traceback.
    sys.stderr.write(f"speechbatch: configuration error: {exc.message}\n")
    raise SystemExit(1) from None
