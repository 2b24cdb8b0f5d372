/* speechbatch admin pages: confirm dialogs, the live job page and the live job list.
   No dependencies, no inline script anywhere (the Content-Security-Policy forbids it): the
   templates pass what this needs in data-* attributes. Data from the server is only ever
   written with textContent, never as HTML.

   Polling is conditional: every GET carries the ETag of the last answer in If-None-Match,
   so a poll when nothing changed is a 304 without a body, and the server does not build
   the answer it does not send. The job page reads the job's summary (?items=none) and the
   items of the page on screen only, never the whole job. */
"use strict";

(function () {
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var message = form.getAttribute && form.getAttribute("data-confirm");
    if (message && !window.confirm(message)) {
      event.preventDefault();
    }
  });

  // --- small helpers ----------------------------------------------------------------------

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

  // The server renders bar widths as data-width (no inline style under the CSP).
  function applyWidths(scope) {
    scope.querySelectorAll("[data-width]").forEach(function (node) {
      node.style.width = node.dataset.width + "%";
    });
  }

  function progressBar(bar, p) {
    bar.setAttribute("aria-valuenow", String(percent(p)));
    var done = bar.querySelector(".progress-done");
    var error = bar.querySelector(".progress-error");
    done.dataset.width = String(percent(p, "done"));
    error.dataset.width = String(percent(p, "error"));
    applyWidths(bar);
  }

  function newProgressBar(p) {
    var bar = el("div", "progress");
    bar.setAttribute("role", "progressbar");
    bar.setAttribute("aria-label", "Progress");
    bar.setAttribute("aria-valuemin", "0");
    bar.setAttribute("aria-valuemax", "100");
    bar.append(el("div", "progress-done"), el("div", "progress-error"));
    progressBar(bar, p);
    return bar;
  }

  /* Make the rows of `body` show exactly `records`, in their order: a record's row is the
     one whose data-* attribute (dataset[key]) is its id, else make(record); rows of records
     that left are removed. Rows that stay are moved at most, never rebuilt, so an audio
     player keeps playing. update(row, record) then brings each row up to date. */
  function reconcile(body, key, records, make, update) {
    var rows = {};
    Array.prototype.forEach.call(body.children, function (row) {
      rows[row.dataset[key] || ""] = row;
    });
    var cursor = body.firstElementChild;
    records.forEach(function (record) {
      var id = String(record.id);
      var row = rows[id] || make(record);
      delete rows[id];
      if (row === cursor) cursor = cursor.nextElementSibling;
      else body.insertBefore(row, cursor);
      update(row, record);
    });
    Object.keys(rows).forEach(function (id) {
      rows[id].remove();
    });
  }

  /* GET url as JSON, conditionally on etag. Resolves to {changed: false} on 304, or to
     {changed: true, etag, body}. A 401 (the session ended) reloads the page, which then
     sends the visitor to sign in. */
  function getJSON(url, etag) {
    var headers = { Accept: "application/json" };
    if (etag) headers["If-None-Match"] = etag;
    // no-store: the browser's cache stays out, so the 304 reaches this code as it is.
    return fetch(url, { credentials: "same-origin", cache: "no-store", headers: headers })
      .then(function (response) {
        if (response.status === 401) {
          window.location.reload();
          return new Promise(function () {});
        }
        if (response.status === 304) return { changed: false, etag: etag };
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json().then(function (body) {
          return { changed: true, etag: response.headers.get("ETag"), body: body };
        });
      });
  }

  /* Run step() (which returns a promise of "keep going?") every pollMs until it says
     stop; after an error, retry at twice the interval and say so in `live`. */
  function pollLoop(step, pollMs, live) {
    function tick() {
      step()
        .then(function (again) {
          if (live) {
            live.textContent = "updating live…";
            live.hidden = !again;
          }
          if (again) window.setTimeout(tick, pollMs);
        })
        .catch(function () {
          if (live) {
            live.textContent = "connection lost, retrying…";
            live.hidden = false;
          }
          window.setTimeout(tick, pollMs * 2);
        });
    }
    window.setTimeout(tick, pollMs);
  }

  applyWidths(document);

  var jobRoot = document.getElementById("job");
  if (jobRoot) jobPage(jobRoot);
  var jobsTable = document.getElementById("jobs");
  if (jobsTable) jobList(jobsTable);

  // --- the job page -----------------------------------------------------------------------

  function jobPage(root) {
    var pollMs = parseInt(root.dataset.pollMs, 10) || 1500;
    var page = parseInt(root.dataset.page, 10) || 1;
    var perPage = parseInt(root.dataset.perPage, 10) || 100;
    var filter = root.dataset.filter || "";
    var etags = { summary: null, items: null };

    function itemsUrl() {
      var query = new URLSearchParams({ offset: String((page - 1) * perPage), limit: String(perPage) });
      if (filter) query.set("status", filter);
      return root.dataset.itemsUrl + "?" + query.toString();
    }

    function pageHref(n) {
      var query = new URLSearchParams(window.location.search);
      if (n > 1) query.set("page", String(n));
      else query.delete("page");
      var search = query.toString();
      return window.location.pathname + (search ? "?" + search : "");
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
      } else if (last.outcome === "CANCELLED") {
        what = "Run " + last.attempt + " was cancelled" +
          (last.cancelled_by ? " by " + last.cancelled_by : "") +
          "; items in flight went back to pending.";
      } else if (last.outcome === "OVER_BUDGET") {
        what = "Run " + last.attempt + " stopped because the organization's monthly budget ran " +
          "out (" + (last.error_message || "") + "). Raise the budget (set-budget) before retrying.";
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

    /* Items waiting for a deployment-wide provider slot or the pace (lease extension). */
    function renderWaiting(job) {
      var waiting = document.getElementById("job-waiting");
      if (!waiting) return;
      var lease = job.lease || {};
      var parts = [];
      if (lease.waiting_for_slot) {
        parts.push(lease.waiting_for_slot + " waiting for a provider slot (shared by every job)");
      }
      if (lease.waiting_for_pace) {
        parts.push(lease.waiting_for_pace + " waiting for the provider's pace");
      }
      waiting.textContent = parts.join(" · ");
      waiting.hidden = job.status !== "GENERATING" || !parts.length;
    }

    // "Generation started" speaks of a run that is live; once it has ended, it would mislead.
    function endRunMessages() {
      document.querySelectorAll("[data-while-generating]").forEach(function (node) {
        node.remove();
      });
    }

    function renderSummary(job) {
      var p = job.progress;
      document.getElementById("job-status").replaceChildren(badge(job.status));
      root.dataset.status = job.status;
      document.getElementById("job-percent").textContent = percent(p) + "%";
      document.getElementById("job-counts").textContent = counts(p);
      progressBar(document.getElementById("job-progress"), p);
      document.querySelectorAll("#item-filters [data-count]").forEach(function (node) {
        node.textContent = String(p[node.dataset.count]);
      });
      renderWaiting(job);

      if (job.status !== "GENERATING") endRunMessages();

      var info = notice(job);
      var error = document.getElementById("job-error");
      error.textContent = job.error_message || "";
      // The banner already explains a recovered or interrupted run in plainer words.
      error.hidden = !job.error_message || job.status === "GENERATING" || !!info;

      var banner = document.getElementById("notice");
      banner.hidden = !info;
      banner.className = "banner banner-" + (info ? info.kind : "none");
      if (info) {
        banner.querySelector("strong").textContent = {
          recovered: "Auto-recovered.", interrupted: "Interrupted.",
          cancelled: "Cancelled.", over_budget: "Over budget.",
        }[info.kind];
        banner.querySelector(".banner-text").textContent = info.text;
      }

      var generate = document.getElementById("btn-generate");
      generate.textContent = job.status === "FAILED" ? "Retry" : "Generate";
      generate.disabled = !(job.status === "PENDING" || (job.status === "FAILED" && p.done < p.total));
      document.getElementById("btn-regenerate").disabled =
        !(job.status === "COMPLETED" || job.status === "FAILED");
      // Spending: Cancel works only on a live run; the estimates are for the page as loaded.
      document.getElementById("btn-cancel").disabled = job.status !== "GENERATING";
      var estimates = document.getElementById("estimates");
      if (estimates && job.status === "GENERATING") estimates.hidden = true;
    }

    function billed(run) {
      var calls = run.provider_calls || 0;
      return (run.billed_characters || 0).toLocaleString("en-US") + " chars · " + calls +
        (calls === 1 ? " call" : " calls");
    }

    // A cell with the label a phone's stacked table shows before it (data-label).
    function labelled(label, className, text) {
      var cell = el("td", className, text);
      cell.dataset.label = label;
      return cell;
    }

    function renderRuns(job) {
      var body = document.querySelector("#runs tbody");
      if (!job.runs || !job.runs.length) return;
      var rows = job.runs.slice().reverse().map(function (run) {
        var tr = el("tr");
        tr.append(
          labelled("Run", "", run.attempt),
          labelled("Kind", "", run.kind || ""),
          labelled("Started by", "",
            run.kind === "resume" ? "resumed automatically after a restart" : run.started_by || ""),
          labelled("Worker", "mono", run.worker || ""),
          el("td"),
          labelled("Billed", "", billed(run)),
          labelled("Started", "nowrap", when(run.started_at)),
          labelled("Finished", "nowrap", when(run.finished_at)),
          el("td", "cell-error cell-wide", run.error_message || "")
        );
        tr.children[4].append(badge(run.outcome));
        if (run.cancelled_by) {
          tr.children[4].append(el("br"), el("small", "muted", "by " + run.cancelled_by));
        }
        return tr;
      });
      body.replaceChildren.apply(body, rows);
    }

    function newItemRow(item) {
      var row = el("tr");
      row.dataset.itemId = String(item.id);
      var text = el("td", "item-text");
      var clamp = el("div", "clamp", item.text);
      clamp.title = item.text;
      var error = el("p", "field-error item-error");
      error.hidden = true;
      text.append(clamp, error);
      row.append(el("td", "muted cell-id", item.position), text, el("td", "item-status"), el("td", "item-audio"));
      return row;
    }

    function renderItem(row, item) {
      var previous = row.dataset.status;
      row.dataset.status = item.status;
      if (previous !== item.status) row.querySelector(".item-status").replaceChildren(badge(item.status));
      var error = row.querySelector(".item-error");
      error.textContent = item.error_message || "";
      error.hidden = !item.error_message;

      var cell = row.querySelector(".item-audio");
      var position = row.querySelector(".cell-id").textContent;
      var player = cell.querySelector("audio");
      var url = item.audio_url || "";
      var fresh = item.status === "DONE" && previous !== undefined && previous !== "DONE";
      if (!url) {
        if (!cell.querySelector(".muted") || player) cell.replaceChildren(el("span", "muted", "no audio yet"));
        cell.dataset.audioUrl = "";
        return;
      }
      // A new take replaces the player, unless someone is listening to the old one.
      if (!player || (fresh && player.paused) || cell.dataset.audioUrl !== url) {
        var audio = el("audio");
        audio.controls = true;
        audio.preload = "none";
        audio.src = url;
        audio.setAttribute("aria-label", "Audio of item " + position);
        cell.replaceChildren(audio);
        cell.dataset.audioUrl = url;
      }
    }

    /* Make the table show exactly the answer's items, in its order, keeping the rows (and
       the players in them) of items that stay on the page. */
    function renderItems(answer) {
      reconcile(document.querySelector("#items tbody"), "itemId", answer.items, newItemRow, renderItem);
      root.dataset.total = String(answer.total);
      renderPager(answer.total, answer.items.length);
    }

    function renderPager(total, shown) {
      var pages = Math.max(1, Math.ceil(total / perPage));
      var pager = document.getElementById("items-pager");
      pager.hidden = pages <= 1 && page <= 1;
      var prev = page > 1 ? el("a", "", "← Previous") : el("span", "muted", "← Previous");
      var next = page < pages ? el("a", "", "Next →") : el("span", "muted", "Next →");
      if (page > 1) {
        prev.href = pageHref(page - 1);
        prev.rel = "prev";
      }
      if (page < pages) {
        next.href = pageHref(page + 1);
        next.rel = "next";
      }
      var range = el("span", "", "Page " + page + " of " + pages + " · " + total +
        " item" + (total === 1 ? "" : "s"));
      range.id = "items-range";
      pager.replaceChildren(prev, document.createTextNode(" "), range, document.createTextNode(" "), next);

      var empty = document.getElementById("items-empty");
      empty.hidden = shown > 0;
      if (shown > 0) return;
      if (total && page > pages) {
        var first = el("a", "", "Go to the first page");
        first.href = pageHref(1);
        empty.replaceChildren(document.createTextNode("No items on this page. "), first, document.createTextNode("."));
      } else {
        empty.textContent = filter ? "No " + filter.toLowerCase() + " items." : "No items.";
      }
    }

    // Summary first, then the page's items: when the summary says the run has ended, the
    // items read after it show the final state, and polling can stop.
    function step() {
      var status = root.dataset.status;
      return getJSON(root.dataset.summaryUrl, etags.summary)
        .then(function (summary) {
          if (summary.changed) {
            etags.summary = summary.etag;
            renderSummary(summary.body);
            renderRuns(summary.body);
            status = summary.body.status;
          }
          return getJSON(itemsUrl(), etags.items);
        })
        .then(function (items) {
          if (items.changed) {
            etags.items = items.etag;
            renderItems(items.body);
          }
          return status === "GENERATING";
        });
    }

    if (root.dataset.status === "GENERATING") {
      pollLoop(step, pollMs, document.getElementById("job-live"));
    } else {
      endRunMessages();
    }
  }

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

    if (generating()) pollLoop(step, pollMs, null);
  }
})();
