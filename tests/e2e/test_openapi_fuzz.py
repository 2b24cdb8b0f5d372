"""schemathesis against a live gunicorn on PostgreSQL, driven by /api/openapi.json.

Every answer must conform to the document (status, content type, headers, body schema)
and none may be a 5xx; schema-valid requests must be accepted and invalid ones refused.
The number of examples per operation is bounded so the test stays around a minute.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import requests

from tests.e2e.conftest import ServerFactory
from tests.support.fake_provider import FakeProvider
from tests.support.server import VENV_BIN

MAX_EXAMPLES = 15
# A run of one operation has no links to follow: no stateful phase.
SINGLE = ("--phases", "examples,coverage,fuzzing")
# A selection naming an item that is not the job's is well-formed but answers 422, as the
# contract says ("Editing one line"): no schema can say which ids a job has. Likewise a
# lexicon regex that is well-formed text but does not compile or matches empty text
# answers 422 invalid_rule (unsupported_regex for a backreference or a lookaround), a
# preview whose spoken text would be longer than an item 422 spoken_text_too_long, and an
# import's file is any bytes (a schema cannot say "a .txt, .md or .epub document"): an
# image answers 422 unsupported file type (offering its chapters too), and its chapters
# any indexes (which chapters a document has no schema can say); a cover is any bytes too,
# and what is not a JPEG or PNG answers 422. An Idempotency-Key that schemathesis sends
# again with another body answers 422 idempotency_key_reused, as the contract says
# ("Operators and integrators"): no schema can say which keys were used before. A request
# refused for its size is refused: 413 (a form of more than 1,000 parts, as an import's
# ``chapters`` past the document's maxItems can be) rejects invalid data as a 422 does.
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = [
    "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429",
]

[[operations]]
include-operation-id = [
    "regenerateJob", "estimateJob", "putLexicon", "lexiconImpact", "previewLexicon",
    "createJob", "importJob", "importChoices", "createRender", "createExport", "putJobCover",
]
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429",
]
"""


def schemathesis(base_url: str, token: str, workdir: Path, *selection: str) -> tuple[int, str]:
    """Run the schemathesis CLI with every check in ``workdir`` (its cache goes there);
    (exit code, output)."""
    config = workdir / "schemathesis.toml"
    config.write_text(CONFIG)
    command = [
        str(VENV_BIN / "schemathesis"),
        "--config-file",
        str(config),
        "run",
        f"{base_url}/api/openapi.json",
        "--header",
        f"Authorization: Bearer {token}",
        "--checks",
        "all",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        "20261201",
        "--request-timeout",
        "20",
        "--no-color",
        *selection,
    ]
    result = subprocess.run(
        command, cwd=workdir, capture_output=True, text=True, timeout=300, check=False
    )
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("db_kind", ["postgresql"])
def test_the_api_conforms_to_its_openapi_document(
    spawn_server: ServerFactory, api_token: str, fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.latency = 0.02
    server = spawn_server(workers=2, threads=4)
    # A second token for the DELETE run: revoking it must not cut off the main run.
    spare = requests.post(
        f"{server.base_url}/api/tokens",
        json={"name": "schemathesis delete run"},
        headers={"Authorization": f"Bearer {api_token}"},
        timeout=10,
    ).json()["token"]
    started = time.monotonic()
    runs = {
        # Everything but DELETE: it could revoke the token this run authenticates with.
        "main": (api_token, ["--exclude-method", "DELETE"]),
        "revokeToken": (spare, ["--include-operation-id", "revokeToken", *SINGLE]),
    }
    failures = []
    for name, (token, selection) in runs.items():
        code, output = schemathesis(server.base_url, token, tmp_path, *selection)
        if code != 0:
            failures.append(f"--- schemathesis run {name!r} exited {code} ---\n{output[-20000:]}")
    elapsed = time.monotonic() - started
    print(f"schemathesis: {len(runs)} runs in {elapsed:.1f} s")
    assert not failures, "\n".join(failures)
    assert "Internal Server Error" not in server.log_text()
