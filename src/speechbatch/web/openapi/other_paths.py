"""The document's other calls: renders, exports, usage, voices, tokens, webhooks and the
lexicon."""

from __future__ import annotations

from typing import Any

from speechbatch.domain import renders as rules
from speechbatch.shapes import accounts, outputs
from speechbatch.web.openapi.operations import (
    NO_CONTENT,
    answer,
    download,
    errors,
    file_path,
    operation,
    path_id,
)

JOB_ID = path_id("job_id", "job")
RENDER_ID = path_id("render_id", "render")
RENDERS = "/api/jobs/{job_id}/renders"
WEBHOOK_ID = path_id("webhook_id", "webhook")
LOCATION = {"Location": {"description": "Where to read it.", "schema": {"type": "string"}}}


def _renders() -> dict[str, Any]:
    def file(operation_id: str, summary: str, ok: dict[str, Any]) -> dict[str, Any]:
        return file_path([JOB_ID, RENDER_ID], operation_id, summary, ok)

    return {
        RENDERS: {
            "parameters": [JOB_ID],
            "get": operation(
                "listRenders",
                "A job's renders, newest first, after lease-expiry recovery.",
                {"200": answer(outputs.RenderList, "The renders."), **errors(401, 404)},
            ),
            "post": operation(
                "createRender",
                "Start one audio file of the whole job, with chapters and captions.",
                # 409: job_not_complete (an item is not DONE) or render_in_progress.
                {
                    "202": answer(outputs.Render, "The RUNNING render."),
                    **errors(400, 401, 404, 409, 413, 422),
                },
                body=outputs.RenderRequest,
            ),
        },
        RENDERS + "/{render_id}": {
            "parameters": [JOB_ID, RENDER_ID],
            "get": operation(
                "getRender",
                "One render, after lease-expiry recovery.",
                {"200": answer(outputs.Render, "The render."), **errors(401, 404)},
            ),
        },
        RENDERS + "/{render_id}/download": file(
            "downloadRender",
            "A COMPLETED render's audio (MP3 or M4B); 404 until then.",
            download("The audio file.", *rules.CONTENT_TYPES.values()),
        ),
        RENDERS + "/{render_id}/chapters.zip": file(
            "downloadRenderChapterFiles",
            "A COMPLETED render's chapter files in a ZIP (the acx preset's); 404 otherwise.",
            download("A ZIP of one audio file per chapter.", "application/zip"),
        ),
        RENDERS + "/{render_id}/captions.vtt": file(
            "renderCaptionsVtt",
            "A COMPLETED render's captions as WebVTT, one cue per item.",
            download("WebVTT.", "text/vtt"),
        ),
        RENDERS + "/{render_id}/captions.srt": file(
            "renderCaptionsSrt",
            "A COMPLETED render's captions as SubRip, one cue per item.",
            download("SubRip.", "application/x-subrip"),
        ),
    }


def _cover() -> dict[str, Any]:
    images = ("image/jpeg", "image/png")
    binary = {"schema": {"type": "string", "format": "binary"}}
    path = file_path(
        [JOB_ID], "getJobCover", "The job's cover image; 404 when it has none.",
        download("The image.", *images),
    )  # fmt: skip
    path["put"] = operation(
        "putJobCover",
        "Make the request's body (a JPEG or PNG, at most 10 MiB and 4096 pixels a side) the "
        "job's cover, which renders carry in their tags.",
        {"200": answer(outputs.CoverStored, "The stored cover."), **errors(401, 404, 413, 422)},
    )
    # The bytes are what counts (the server reads what they are); generic bytes is the
    # one binary body a generated client sends as it is.
    path["put"]["requestBody"] = {
        "required": True,
        "description": "A JPEG or PNG image, sent as it is (any Content-Type).",
        "content": {"application/octet-stream": binary},
    }
    return {"/api/jobs/{job_id}/cover": path}


def _exports() -> dict[str, Any]:
    export_id = path_id("export_id", "export")
    exports = {"getExport": "export_id", "downloadExport": "export_id"}
    return {
        "/api/exports": {
            "post": operation(
                "createExport",
                "Start a ZIP of the organization's finished audio.",
                {
                    "202": answer(outputs.Export, "The RUNNING export.", links=exports),
                    **errors(400, 401, 409),
                },
            )
        },
        "/api/exports/{export_id}": {
            "parameters": [export_id],
            "get": operation(
                "getExport",
                "One export, after lease-expiry recovery.",
                {"200": answer(outputs.Export, "The export."), **errors(401, 404)},
            ),
        },
        "/api/exports/{export_id}/download": file_path(
            [export_id],
            "downloadExport",
            "A COMPLETED export's ZIP: every DONE item's audio and a manifest.csv.",
            download("The archive.", "application/zip"),
        ),
    }


def _account() -> dict[str, Any]:
    """Usage, voices and tokens."""
    return {
        "/api/usage": {
            "get": operation(
                "getUsage",
                "The organization's billed characters this month (UTC) against its budget.",
                {"200": answer(outputs.Usage, "This month's usage."), **errors(401)},
            )
        },
        "/api/voices": {
            "get": operation(
                "listVoices",
                "The enabled providers' voices (`PROVIDER:VOICE`, bare for the default).",
                {"200": answer(accounts.Voices, "The voices."), **errors(401)},
            )
        },
        "/api/tokens": {
            "get": operation(
                "listTokens",
                "The caller's live API tokens, never their secrets.",
                {"200": answer(accounts.TokenList, "The tokens, newest first."), **errors(401)},
            ),
            "post": operation(
                "createToken",
                "Create a named API token; its secret is in this answer only.",
                {
                    "201": answer(
                        accounts.NewToken,
                        "The token, shown this once.",
                        links={"revokeToken": "token_id"},
                    ),
                    **errors(400, 401, 413, 422),
                },
                body=accounts.TokenRequest,
            ),
        },
        "/api/tokens/{token_id}": {
            "parameters": [path_id("token_id", "token")],
            "delete": operation(
                "revokeToken",
                "Revoke one of the caller's tokens: it stops working at once.",
                {**NO_CONTENT, **errors(400, 401, 404)},
            ),
        },
    }


def _webhooks() -> dict[str, Any]:
    links = {"updateWebhook": "webhook_id", "pingWebhook": "webhook_id",
             "listDeliveries": "webhook_id"}  # fmt: skip
    return {
        "/api/webhooks": {
            "get": operation(
                "listWebhooks",
                "The organization's webhooks, newest first, without secrets.",
                {"200": answer(accounts.WebhookList, "The webhooks."), **errors(401)},
            ),
            "post": operation(
                "createWebhook",
                "Add a webhook; its signing secret (whsec_…) is in this answer only.",
                {
                    "201": answer(
                        accounts.NewWebhook, "The webhook, with its secret.", links=links
                    ),
                    **errors(400, 401, 413, 422),
                },
                body=accounts.WebhookRequest,
            ),
        },
        "/api/webhooks/{webhook_id}": {
            "parameters": [WEBHOOK_ID],
            "patch": operation(
                "updateWebhook",
                "Change a webhook's url, events, description or enabled.",
                {
                    "200": answer(accounts.Webhook, "The webhook."),
                    **errors(400, 401, 404, 413, 422),
                },
                body=accounts.WebhookChange,
            ),
            "delete": operation(
                "deleteWebhook",
                "Delete a webhook and its deliveries.",
                {**NO_CONTENT, **errors(400, 401, 404)},
            ),
        },
    }


def _deliveries() -> dict[str, Any]:
    """Ping, the delivery log and redeliver."""
    return {
        "/api/webhooks/{webhook_id}/ping": {
            "parameters": [WEBHOOK_ID],
            "post": operation(
                "pingWebhook",
                "Send the webhook a ping event (delivered in the background).",
                {
                    "202": answer(accounts.Ping, "The ping's event id (its webhook-id)."),
                    **errors(400, 401, 404),
                },
            ),
        },
        "/api/webhooks/{webhook_id}/deliveries": {
            "parameters": [WEBHOOK_ID],
            "get": operation(
                "listDeliveries",
                "The webhook's deliveries, newest first.",
                {"200": answer(accounts.DeliveryList, "The deliveries."), **errors(401, 404)},
            ),
        },
        "/api/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver": {
            "parameters": [WEBHOOK_ID, path_id("delivery_id", "delivery")],
            "post": operation(
                "redeliverDelivery",
                "Send a delivery again, with the same webhook-id.",
                {"202": answer(accounts.Redelivery, "It is due now."), **errors(400, 401, 404)},
            ),
        },
    }


def _lexicon() -> dict[str, Any]:
    body_errors = errors(400, 401, 413, 422)
    return {
        "/api/lexicon": {
            "get": operation(
                "getLexicon",
                "The organization's pronunciation rules, their version, and whether the "
                "stale marks of the newest version are still being written.",
                {"200": answer(accounts.Lexicon, "The rules."), **errors(401)},
            ),
            "put": operation(
                "putLexicon",
                "Replace the rules (a regex that does not compile: 422 invalid_rule; one "
                "with a construct RE2 cannot run in linear time, such as a backreference or "
                "a lookaround: 422 unsupported_regex; nothing changed); the version "
                "increments and the DONE lines the change affects are marked stale in the "
                "background (stale_pass).",
                {"200": answer(accounts.Lexicon, "The new rules."), **body_errors},
                body=accounts.LexiconRules,
            ),
        },
        "/api/lexicon/preview": {
            "post": operation(
                "previewLexicon",
                "A text as the organization's rules would have it spoken (422 "
                "spoken_text_too_long when that is longer than an item may be, "
                "too_many_replacements when the rules replace too often in it).",
                {"200": answer(accounts.SpokenText, "The spoken text."), **body_errors},
                body=accounts.PreviewRequest,
            ),
        },
        "/api/lexicon/impact": {
            "post": operation(
                "lexiconImpact",
                "Ask how many DONE lines in how many jobs these rules would make stale (a "
                "dry run: nothing is saved). It is counted in the background: read it at "
                "`url` (also the Location header) until `complete`.",
                {
                    "202": answer(
                        accounts.ImpactRequest,
                        "The pending request.",
                        headers=LOCATION,
                        links={"getLexiconImpact": "impact_id"},
                    ),
                    **body_errors,
                },
                body=accounts.LexiconRules,
            ),
        },
        "/api/lexicon/impact/{impact_id}": {
            "parameters": [path_id("impact_id", "impact request")],
            "get": operation(
                "getLexiconImpact",
                "A dry run's counts so far; `complete` once every line was read.",
                {"200": answer(accounts.LexiconImpact, "The counts."), **errors(401, 404)},
            ),
        },
    }


def other_paths() -> dict[str, Any]:
    """Every call that is not about one job's items."""
    return {
        **_renders(), **_cover(), **_exports(), **_account(), **_webhooks(), **_deliveries(),
        **_lexicon(),
    }  # fmt: skip
