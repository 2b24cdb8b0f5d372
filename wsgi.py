"""WSGI entry point: ``gunicorn wsgi:app``."""

from speechbatch import create_app

app = create_app()
