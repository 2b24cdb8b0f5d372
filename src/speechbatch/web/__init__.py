"""HTTP entrypoints: the JSON API and the admin pages."""
