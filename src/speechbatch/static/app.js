/* speechbatch admin pages: confirm dialogs and the live job page. No dependencies.
   Data from the server is only ever written with textContent, never as HTML. */
"use strict";

(function () {
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var message = form.getAttribute && form.getAttribute("data-confirm");
    if (message && !window.confirm(message)) {
      event.preventDefault();
    }
  });

  var root = document.getElementById("job");
  if (!root) {
    return;
  }
  var apiUrl = root.dataset.apiUrl;
  var pollMs = parseInt(root.dataset.pollMs, 10) || 1500;

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function badge(status) {
    return el("span", "badge badge-" + String(status).toLowerCase(), status);
  }

  function percent(progress, key) {
    if (!progress.total) return 0;
    var count = key ? progress[key] : progress.done + progress.error;
    return Math.round((100 * count) / progress.total);
  }

  function when(iso) {
    if (!iso) return "";
    var moment = new Date(iso);
    if (isNaN(moment.getTime())) return String(iso);
    return moment.toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  function counts(p) {
    var text = p.done + " of " + p.total + " done";
    if (p.generating) text += " · " + p.generating + " generating";
    if (p.pending) text += " · " + p.pending + " pending";
    if (p.error) text += " · " + p.error + " failed";
    return text;
  }

  function notice(job) {
    if (job.status === "GENERATING" || !job.runs || !job.runs.length) return null;
    var last = job.runs[job.runs.length - 1];
    var p = job.progress;
    var what;
    if (last.outcome === "RECOVERED") {
      what = "Run " + last.attempt + " stopped unexpectedly (its server process crashed or " +
        "stopped responding) and was recovered automatically.";
    } else if (last.outcome === "INTERRUPTED") {
      what = "Run " + last.attempt + " was interrupted because its server was shut down " +
        "(for example during a deploy).";
    } else {
      return null;
    }
    var advice = p.done < p.total
      ? "Retry resumes where it stopped: only the items that are not done are sent again, " +
        "so you do not pay again for finished items."
      : "Every item was already finished, so there is nothing to retry.";
    return {
      kind: last.outcome.toLowerCase(),
      text: what + " " + p.done + " of " + p.total + " items are done. " + advice,
    };
  }

  function renderSummary(job) {
    var p = job.progress;
    var status = document.getElementById("job-status");
    status.replaceChildren(badge(job.status));
    root.dataset.status = job.status;
    document.getElementById("job-percent").textContent = percent(p) + "%";
    document.getElementById("job-counts").textContent = counts(p);
    var bar = document.getElementById("job-progress");
    bar.setAttribute("aria-valuenow", String(percent(p)));
    bar.querySelector(".progress-done").style.width = percent(p, "done") + "%";
    bar.querySelector(".progress-error").style.width = percent(p, "error") + "%";

    var waiting = document.getElementById("job-waiting");
    if (waiting) {
      var lease = job.lease || {};
      var parts = [];
      if (lease.waiting_for_slot) {
        parts.push(lease.waiting_for_slot + " waiting for a provider slot (shared by every job)");
      }
      if (lease.waiting_for_pace) parts.push(lease.waiting_for_pace + " waiting for the provider's pace");
      waiting.textContent = parts.join(" · ");
      waiting.hidden = job.status !== "GENERATING" || !parts.length;
    }

    var info = notice(job);
    var error = document.getElementById("job-error");
    error.textContent = job.error_message || "";
    // The banner already explains a recovered or interrupted run in plainer words.
    error.hidden = !job.error_message || job.status === "GENERATING" || !!info;

    var banner = document.getElementById("notice");
    banner.hidden = !info;
    banner.className = "banner banner-" + (info ? info.kind : "none");
    if (info) {
      banner.querySelector("strong").textContent =
        info.kind === "recovered" ? "Auto-recovered." : "Interrupted.";
      banner.querySelector(".banner-text").textContent = info.text;
    }

    var generate = document.getElementById("btn-generate");
    generate.textContent = job.status === "FAILED" ? "Retry" : "Generate";
    generate.disabled = !(job.status === "PENDING" || (job.status === "FAILED" && p.done < p.total));
    document.getElementById("btn-regenerate").disabled =
      !(job.status === "COMPLETED" || job.status === "FAILED");
    // Spending: Cancel works only on a live run; estimates are for the page as loaded.
    var cancel = document.getElementById("btn-cancel");
    if (cancel) cancel.disabled = job.status !== "GENERATING";
    var estimates = document.getElementById("estimates");
    if (estimates && job.status === "GENERATING") estimates.hidden = true;
  }

  function renderItem(row, item) {
    var previous = row.dataset.status;
    row.dataset.status = item.status;
    row.querySelector(".item-status").replaceChildren(badge(item.status));
    var error = row.querySelector(".item-error");
    error.textContent = item.error_message || "";
    error.hidden = !item.error_message;

    var cell = row.querySelector(".item-audio");
    var player = cell.querySelector("audio");
    var url = item.audio_url || "";
    var fresh = item.status === "DONE" && previous !== undefined && previous !== "DONE";
    if (!url) {
      if (!player) cell.replaceChildren(el("span", "muted", "no audio yet"));
      return;
    }
    // A new take replaces the player, unless someone is listening to the old one.
    if (!player || (fresh && player.paused) || cell.dataset.audioUrl !== url) {
      var audio = el("audio");
      audio.controls = true;
      audio.preload = "none";
      audio.src = url;
      cell.replaceChildren(audio);
      cell.dataset.audioUrl = url;
    }
  }

  function renderItems(job) {
    var rows = {};
    document.querySelectorAll("#items tbody tr[data-item-id]").forEach(function (row) {
      rows[row.dataset.itemId] = row;
    });
    job.items.forEach(function (item) {
      var row = rows[String(item.id)];
      if (row) renderItem(row, item);
    });
  }

  function billed(run) {
    var calls = run.provider_calls || 0;
    return (run.billed_characters || 0).toLocaleString("en-US") + " chars · " + calls +
      (calls === 1 ? " call" : " calls");
  }

  function renderRuns(job) {
    var body = document.querySelector("#runs tbody");
    if (!job.runs.length) return;
    var rows = job.runs.slice().reverse().map(function (run) {
      var tr = el("tr");
      tr.append(
        el("td", "", run.attempt),
        el("td", "", run.kind || ""),
        el("td", "", run.kind === "resume" ? "resumed automatically after a restart" : run.started_by || ""),
        el("td", "mono", run.worker || ""),
        el("td"),
        el("td", "nowrap", billed(run)),
        el("td", "", when(run.started_at)),
        el("td", "", when(run.finished_at)),
        el("td", "", run.error_message || "")
      );
      tr.children[4].append(badge(run.outcome));
      if (run.cancelled_by) {
        tr.children[4].append(el("br"), el("small", "muted", "by " + run.cancelled_by));
      }
      return tr;
    });
    body.replaceChildren.apply(body, rows);
  }

  function render(job) {
    renderSummary(job);
    renderItems(job);
    renderRuns(job);
  }

  var live = document.getElementById("job-live");

  function poll() {
    fetch(apiUrl, { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status === 401) {
          window.location.reload(); // the session ended: the page sends us to sign in
          return null;
        }
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (job) {
        if (!job) return;
        render(job);
        if (job.status === "GENERATING") {
          live.textContent = "updating live…";
          live.hidden = false;
          window.setTimeout(poll, pollMs);
        } else {
          live.hidden = true;
        }
      })
      .catch(function () {
        live.textContent = "connection lost, retrying…";
        live.hidden = false;
        window.setTimeout(poll, pollMs * 2);
      });
  }

  document.querySelectorAll("#items tbody tr[data-item-id]").forEach(function (row) {
    row.dataset.status = row.querySelector(".item-status").textContent.trim();
  });
  if (root.dataset.status === "GENERATING") {
    window.setTimeout(poll, pollMs);
  }
})();
