"""The read side's ETags: what each names, without a database."""

from __future__ import annotations

from speechbatch.adapters.read import ListStamp, lease_variant, seen_version


def test_a_list_etag_names_the_jobs_shown_not_their_arithmetic() -> None:
    # Same count, same sum of versions, same newest id: another page.
    before = ListStamp(2, "3:5,1:2")
    after = ListStamp(2, "3:5,2:2")
    assert before.etag("-GENERATING-1-50") != after.etag("-GENERATING-1-50")


def test_a_list_etag_names_the_total_and_the_variant() -> None:
    stamp = ListStamp(7, "9:1")
    assert stamp.etag("-1-1") != ListStamp(8, "9:1").etag("-1-1")
    assert stamp.etag("-1-1") != stamp.etag("-2-1")
    assert stamp.etag("-1-1") == ListStamp(7, "9:1").etag("-1-1")


def test_a_job_etag_variant_names_the_lease_settings() -> None:
    assert lease_variant(1800, 60) != lease_variant(3600, 60)
    assert lease_variant(1800, 60) != lease_variant(1800, 90)


def test_the_version_is_read_back_from_an_etag_of_its_variant_only() -> None:
    variant = lease_variant(30, 30)
    assert seen_version([f"j5-v12{variant}"], 5, variant) == 12
    assert seen_version([f"j5-v12-n{variant}"], 5, variant) is None
    assert seen_version([f"j5-v12{lease_variant(60, 30)}"], 5, variant) is None
    assert seen_version([f"j50-v12{variant}"], 5, variant) is None
