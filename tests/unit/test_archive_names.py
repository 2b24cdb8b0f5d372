"""An export's file names: unique whatever the keys (even ignoring case), keys kept."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from speechbatch.domain.archive import archive_names


@dataclass(frozen=True)
class Item:
    job_id: int
    item_id: int
    position: int
    key: str | None = None
    audio_path: str = "audio/x.mp3"


def test_a_key_equal_to_another_items_generated_name_gets_its_own_entry() -> None:
    items = [Item(1, 7, 1), Item(1, 8, 2, key="0001-item-7")]
    # The key keeps its name; the generated one steps aside.
    assert archive_names(items) == ["job-1/0001-item-7-2.mp3", "job-1/0001-item-7.mp3"]


def test_keys_that_differ_only_in_case_are_two_files() -> None:
    names = archive_names([Item(1, 1, 1, key="Intro"), Item(1, 2, 2, key="intro")])
    assert names == ["job-1/Intro.mp3", "job-1/intro-2.mp3"]


def test_the_same_key_in_two_jobs_is_two_folders() -> None:
    names = archive_names([Item(1, 1, 1, key="a"), Item(2, 2, 1, key="a")])
    assert names == ["job-1/a.mp3", "job-2/a.mp3"]


_KEYS = st.one_of(
    st.none(),
    st.sampled_from(["a", "A", "a-2", "0001-item-1", "0002-item-2", "x.y", "X.Y", "a-3"]),
)


@settings(max_examples=150)
@given(st.lists(st.tuples(st.integers(1, 2), _KEYS), max_size=12))
def test_names_are_unique_ignoring_case_and_the_first_of_each_key_keeps_its_own(
    drawn: list[tuple[int, str | None]],
) -> None:
    # Keys are unique in a job (the database says so); items are numbered in order.
    seen: set[tuple[int, str]] = set()
    items = []
    for n, (job, key) in enumerate(drawn, start=1):
        if key is not None and (job, key) in seen:
            key = None
        if key is not None:
            seen.add((job, key))
        items.append(Item(job, n, n, key))
    names = archive_names(items)
    assert len({name.casefold() for name in names}) == len(items)
    first_of_its_case: set[tuple[int, str]] = set()
    for item, name in zip(items, names, strict=True):
        assert name.startswith(f"job-{item.job_id}/")
        if item.key is not None and (item.job_id, item.key.casefold()) not in first_of_its_case:
            first_of_its_case.add((item.job_id, item.key.casefold()))
            assert name == f"job-{item.job_id}/{item.key}.mp3"
