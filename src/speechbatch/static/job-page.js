/* The live job page: polls the job's summary (?items=none) and the items of the page on
   screen, each conditionally (If-None-Match), and updates them in place. */

import {
  badge, counts, el, getJSON, percent, pollLoop, progressBar, reconcile, when,
} from "./common.js";

export function jobPage(root) {
  var pollMs = parseInt(root.dataset.pollMs, 10) || 1500;
  // Between runs the page still reads the summary, slower, to notice a run started
  // elsewhere (the API, another tab); a 304 costs the server next to nothing.
  var idleMs = parseInt(root.dataset.idlePollMs, 10) || 5000;
  var page = parseInt(root.dataset.page, 10) || 1;
  var perPage = parseInt(root.dataset.perPage, 10) || 100;
  var filter = root.dataset.filter || "";
  var flag = root.dataset.flag || "";
  var etags = { summary: null, items: null };

  function itemsUrl() {
    var query = new URLSearchParams({ offset: String((page - 1) * perPage), limit: String(perPage) });
    if (filter) query.set("status", filter);
    if (flag) query.set(flag, "1");
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
    renderRenderForm(job);
  }

  /* The Render button works once every item is done; stale lines earn a warning beside
     it and a question on submit (the render would use their old audio). */
  function renderRenderForm(job) {
    var p = job.progress;
    var button = document.getElementById("btn-render");
    if (!button) return;
    var complete = job.status !== "GENERATING" && p.total > 0 && p.done === p.total;
    button.disabled = !complete;
    if (complete) button.removeAttribute("title");
    else button.title = "Every item must be done first";
    var notReady = document.getElementById("render-not-ready");
    if (notReady) notReady.hidden = complete;
    var stale = p.stale || 0;
    var words = stale + (stale === 1 ? " line is" : " lines are");
    var form = document.getElementById("render-form");
    if (stale) {
      form.dataset.confirm = words + " stale: the render would use their old audio, from " +
        "before their change. Render anyway?";
    } else {
      delete form.dataset.confirm;
    }
    document.getElementById("render-stale").hidden = !stale;
    document.getElementById("render-stale-text").textContent = words +
      " stale: their audio is from before their change, and a render would use it.";
    var link = document.getElementById("btn-regenerate-stale");
    if (link) {
      link.hidden = !stale;
      link.textContent = "Regenerate " + stale + " stale line" + (stale === 1 ? "" : "s") + "…";
    }
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
        labelled("Kind", "", (run.kind || "") +
          (run.selected === null || run.selected === undefined ? "" : " · " + run.selected + " selected")),
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
    var select = el("td", "cell-select");
    var box = el("input");
    box.type = "checkbox";
    box.name = "items";
    box.value = String(item.id);
    box.setAttribute("form", "selection-form");
    box.setAttribute("aria-label", "Select line " + item.position);
    select.append(box);
    var text = el("td", "item-text");
    var clamp = el("div", "clamp", item.text);
    clamp.title = item.text;
    var error = el("p", "field-error item-error");
    error.hidden = true;
    var fix = el("a", "item-fix", "Edit · takes");
    fix.href = "/jobs/" + root.dataset.jobId + "/items/" + item.id;
    fix.setAttribute("aria-label", "Edit line " + item.position + ", listen to and restore its takes");
    if (item.speaker) text.append(el("span", "item-speaker", item.speaker));
    text.append(clamp, error, fix);
    row.append(el("td", "muted cell-id", item.position), select, text, el("td", "item-status"), el("td", "item-audio"));
    return row;
  }

  function flags(item) {
    var span = el("span", "item-flags");
    if (item.stale) span.append(document.createTextNode(" "), el("span", "badge badge-stale", "stale"));
    if (item.suspect) {
      var suspect = el("span", "badge badge-suspect", "suspect");
      suspect.title = item.suspect.replace("_", " ");
      span.append(document.createTextNode(" "), suspect);
    }
    return span;
  }

  function renderItem(row, item) {
    var previous = row.dataset.status;
    row.dataset.status = item.status;
    var flagged = String(!!item.stale) + (item.suspect || "");
    if (previous !== item.status || row.dataset.flags !== flagged) {
      row.querySelector(".item-status").replaceChildren(badge(item.status), flags(item));
      row.dataset.flags = flagged;
    }
    var clampText = row.querySelector(".item-text .clamp");
    if (clampText.textContent !== item.text) {
      clampText.textContent = item.text;
      clampText.title = item.text;
    }
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
      audio.preload = "metadata";
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
  // items read after it show the final state, and polling slows down. Between runs the
  // items are read only when the summary changed (an edit, a run that started).
  function step() {
    var status = root.dataset.status;
    var wasLive = status === "GENERATING";
    return getJSON(root.dataset.summaryUrl, etags.summary)
      .then(function (summary) {
        if (summary.changed) {
          etags.summary = summary.etag;
          renderSummary(summary.body);
          renderRuns(summary.body);
          status = summary.body.status;
        }
        if (!wasLive && !summary.changed && status !== "GENERATING") return { changed: false };
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

  if (root.dataset.status !== "GENERATING") endRunMessages();
  pollLoop(step, pollMs, document.getElementById("job-live"), idleMs,
    root.dataset.status === "GENERATING" ? pollMs : idleMs);
}
