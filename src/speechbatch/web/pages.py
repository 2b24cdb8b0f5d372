"""Server-rendered admin pages (placeholder until the web app lands)."""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("pages", __name__)
