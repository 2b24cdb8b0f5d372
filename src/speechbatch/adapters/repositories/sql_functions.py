"""SQL functions the two dialects spell differently: a timestamp plus seconds, the larger
of two values."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement

from speechbatch.adapters.db import UTCDateTime


class plus_seconds(FunctionElement[datetime]):
    """A timestamp expression plus a (signed) number of seconds."""

    type = UTCDateTime()
    inherit_cache = True


@compiles(plus_seconds, "postgresql")
def _pg_plus(element: plus_seconds, compiler: SQLCompiler, **kw: Any) -> str:
    moment, seconds = (compiler.process(arg, **kw) for arg in element.clauses)
    return f"({moment} + make_interval(secs => CAST({seconds} AS double precision)))"


@compiles(plus_seconds, "sqlite")
def _sqlite_plus(element: plus_seconds, compiler: SQLCompiler, **kw: Any) -> str:
    moment, seconds = (compiler.process(arg, **kw) for arg in element.clauses)
    return f"strftime('%Y-%m-%d %H:%M:%f000', {moment}, printf('%+.6f seconds', {seconds}))"


class greatest(FunctionElement[Any]):
    """The larger of two values."""

    inherit_cache = True


@compiles(greatest, "postgresql")
def _pg_greatest(element: greatest, compiler: SQLCompiler, **kw: Any) -> str:
    return f"GREATEST({compiler.process(element.clauses, **kw)})"


@compiles(greatest, "sqlite")
def _sqlite_greatest(element: greatest, compiler: SQLCompiler, **kw: Any) -> str:
    return f"max({compiler.process(element.clauses, **kw)})"
