/* speechbatch admin pages (ES modules: this one, job-page.js, new-job.js, common.js):
   confirm dialogs, the live job page, the live job list and a document's chapters on the
   New job page.
   No dependencies, no inline script anywhere (the Content-Security-Policy forbids it): the
   templates pass what this needs in data-* attributes. Data from the server is only ever
   written with textContent, never as HTML.

   Polling is conditional: every GET carries the ETag of the last answer in If-None-Match,
   so a poll when nothing changed is a 304 without a body, and the server does not build
   the answer it does not send. The job page reads the job's summary (?items=none) and the
   items of the page on screen only, never the whole job. */

import {
  applyWidths, badge, counts, el, getJSON, newProgressBar, pollLoop, progressBar, reconcile, when,
} from "./common.js";
import { impactCheck } from "./impact-check.js";
import { jobPage } from "./job-page.js";
import { newJobForm } from "./new-job.js";

document.addEventListener("submit", function (event) {
  var form = event.target;
  var message = form.getAttribute && form.getAttribute("data-confirm");
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
});

// A render's chapter titles are seek points of its player.
document.addEventListener("click", function (event) {
  var button = event.target.closest && event.target.closest("button[data-seek]");
  if (!button) return;
  var player = document.getElementById(button.dataset.player);
  if (!player) return;
  player.currentTime = parseFloat(button.dataset.seek) || 0;
  player.play().catch(function () {});
});

applyWidths(document);

var newJob = document.getElementById("new-job");
if (newJob) newJobForm(newJob);
var jobRoot = document.getElementById("job");
if (jobRoot) jobPage(jobRoot);
var jobsTable = document.getElementById("jobs");
if (jobsTable) jobList(jobsTable);
var impact = document.getElementById("lexicon-impact");
if (impact) impactCheck(impact);

// --- the job list -----------------------------------------------------------------------

function jobList(table) {
  var pollMs = parseInt(table.dataset.pollMs, 10) || 1500;
  var etag = null;
  var body = table.querySelector("tbody");

  function generating() {
    return !!body.querySelector("tr[data-status='GENERATING']");
  }

  function updateRow(row, job) {
    if (row.dataset.status !== job.status) {
      row.querySelector(".job-status").replaceChildren(badge(job.status));
      row.dataset.status = job.status;
    }
    progressBar(row.querySelector(".progress"), job.progress);
    row.querySelector(".job-counts").textContent = counts(job.progress);
  }

  function newRow(job) {
    var row = el("tr");
    row.dataset.jobId = String(job.id);
    var link = el("a", "", job.title);
    link.href = "/jobs/" + job.id;
    var title = el("td", "cell-title");
    title.append(link);
    var progress = el("td", "col-progress");
    progress.append(newProgressBar(job.progress), el("small", "muted job-counts", counts(job.progress)));
    var voice = el("td", "", job.voice);
    voice.dataset.label = "Voice";
    var created = el("td", "nowrap muted", when(job.created_at));
    created.dataset.label = "Created";
    row.append(el("td", "muted cell-id", job.id), title, voice, el("td", "job-status"), progress, created);
    row.querySelector(".job-status").append(badge(job.status));
    row.dataset.status = job.status;
    return row;
  }

  function step() {
    return getJSON(table.dataset.apiUrl, etag).then(function (answer) {
      if (answer.changed) {
        etag = answer.etag;
        reconcile(body, "jobId", answer.body.jobs, newRow, updateRow);
      }
      return generating();
    });
  }

  var idleMs = parseInt(table.dataset.idlePollMs, 10) || 5000;
  pollLoop(step, pollMs, null, idleMs, generating() ? pollMs : idleMs);
}
