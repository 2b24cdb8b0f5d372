"""The limits of what a request may carry: the services enforce them, the API's shapes
(``speechbatch.shapes``) say them in the OpenAPI document."""

MAX_TITLE = 200
MAX_ITEMS = 5000
MAX_KEY = 100
MIN_ITEM_CHARACTERS = 200
MAX_ITEM_CHARACTERS = 4096
MAX_TOKEN_NAME = 100
MAX_PREVIEW = 100_000
MAX_SPEAKER = 50
MAX_CAST = 100
