"""``gc`` on an S3-compatible store that lacks multipart listing (s3rver, some
appliances answer ``ListMultipartUploads`` with 501 NotImplemented): that step is skipped
with one line, and the objects are swept all the same."""

from __future__ import annotations

import io
from typing import Any, cast

import pytest
from botocore.awsrequest import AWSResponse
from flask.testing import FlaskClient

from speechbatch.app import Services
from speechbatch.services import spending
from tests.support.storages import EVERYTHING, stored_keys

SKIPPED = (
    "skipped aborting unfinished multipart uploads: "
    "the store does not implement ListMultipartUploads (NotImplemented)"
)


def _without_multipart_listing(client: Any) -> None:
    """Make the store answer ListMultipartUploads as s3rver does: 501 NotImplemented."""

    def not_implemented(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        raw = io.BytesIO(b"")
        answer = AWSResponse("http://127.0.0.1/", 501, {}, raw)
        error = {"Code": "NotImplemented", "Message": "A header you provided implies"
                 " functionality that is not implemented"}  # fmt: skip
        return answer, {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 501}}

    client.meta.events.register("before-call.s3.ListMultipartUploads", not_implemented)


@pytest.mark.parametrize("storage_kind", ["moto"], indirect=True)
def test_gc_skips_the_multipart_step_the_store_lacks_and_still_sweeps_objects(
    svc: Services, client: FlaskClient
) -> None:
    bucket = cast(Any, svc.storage)
    _without_multipart_listing(bucket.client)
    svc.storage.write("jobs/999/1-a1.mp3", b"x")
    svc.storage.write("jobs/999/.tmp-abc.mp3", b"x")
    command = client.application.test_cli_runner().invoke(args=["gc"])
    collected = spending.collect_garbage(svc.uow_factory, svc.storage, min_age_seconds=-EVERYTHING)
    assert command.exit_code == 0, command.output
    assert command.output.splitlines() == [SKIPPED, "deleted 0 file(s)"]  # all younger than 1 h
    assert collected.skipped == [SKIPPED.removeprefix("skipped ")]
    assert collected.deleted == ["jobs/999/.tmp-abc.mp3", "jobs/999/1-a1.mp3"]
    assert stored_keys(svc.storage) == []
