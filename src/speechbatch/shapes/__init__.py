"""The API's shapes, described once: every JSON answer and body as a type.

The OpenAPI document's schemas are made from these types (``shapes.schema``), the
services that build answers in Python return them (mypy checks every key and value), and
the read side builds its JSON in the database from their fields (``adapters.read``). A
new field is one line in its ``TypedDict`` here, and then the code that fills it.
"""
