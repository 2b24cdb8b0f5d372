"""The process's cache of built answers: newest version per job and variant, bounded."""

from __future__ import annotations

from speechbatch.adapters.read import DocumentCache


def test_a_newer_version_replaces_the_kept_one_and_an_older_one_does_not() -> None:
    cache = DocumentCache()
    cache.put(1, "", 3, "v3")
    cache.put(1, "", 4, "v4")
    cache.put(1, "", 2, "v2")  # a slow reader's older build arrives late
    kept = cache.get(1, "")
    assert kept is not None and (kept.version, kept.text) == (4, "v4")
    assert cache.get(1, "-n") is None and cache.get(2, "") is None


def test_the_least_recently_used_go_first_when_the_bound_is_reached() -> None:
    cache = DocumentCache(max_characters=40)
    for job in (1, 2, 3):
        cache.put(job, "", 1, "x" * 10)
    assert cache.get(1, "") is not None  # 1 is now the most recently used
    cache.put(4, "", 1, "x" * 10)
    cache.put(5, "", 1, "x" * 10)
    assert [job for job in (1, 2, 3, 4, 5) if cache.get(job, "") is not None] == [1, 3, 4, 5]
    assert len(cache) == 4


def test_a_document_larger_than_a_quarter_of_the_bound_is_not_kept() -> None:
    cache = DocumentCache(max_characters=40)
    cache.put(1, "", 1, "x" * 11)
    assert cache.get(1, "") is None
    cache.put(1, "", 1, "x" * 10)
    assert cache.get(1, "") is not None
