/* The lexicon's "Check the change": the count of what the rules would make stale is made
   in the background; this polls its state (GET /api/lexicon/impact/<id>) until it is
   done or failed, and writes the counts as the server's page would. Without JavaScript
   the page refreshes itself instead (a <noscript> meta refresh). */

import { el, pollLoop } from "./common.js";

function number(n) {
  return Number(n).toLocaleString("en-US");
}

function plural(n, word) {
  return number(n) + " " + word + (n === 1 ? "" : "s");
}

export function staleLines(impact) {
  return plural(impact.lines, "line") + " in " + plural(impact.jobs, "job");
}

function linesRead(impact) {
  if (impact.total === null || impact.total === undefined) {
    return number(impact.checked) + " lines read";
  }
  return number(impact.checked) + " of " + number(impact.total) + " lines read";
}

export function impactCheck(root) {
  var pollMs = parseInt(root.dataset.pollMs, 10) || 1000;
  var save = document.getElementById("lexicon-save");

  function show(impact) {
    root.dataset.status = impact.status;
    if (impact.complete) {
      root.replaceChildren(
        "This change makes ", el("strong", "", staleLines(impact)), " stale. Save it to apply it."
      );
      if (save) save.textContent = "Save: " + staleLines(impact) + " become stale";
    } else if (impact.status === "failed") {
      root.className = "flash flash-error";
      root.replaceChildren("This change could not be counted: check it again.");
    } else {
      root.replaceChildren(
        "Counting what this change makes stale: ", el("strong", "", linesRead(impact)),
        ", " + staleLines(impact) + " so far…"
      );
    }
  }

  function step() {
    return fetch(root.dataset.apiUrl, {
      credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" },
    }).then(function (response) {
      if (response.status === 401) window.location.reload();
      // Gone (deleted an hour after it was asked): nothing more to poll.
      if (response.status === 404 || response.status === 401) return null;
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.json();
    }).then(function (impact) {
      if (!impact) return false;
      show(impact);
      return impact.status === "pending" || impact.status === "running";
    });
  }

  if (root.dataset.status === "pending" || root.dataset.status === "running") {
    pollLoop(step, pollMs, null, 0, 300);
  }
}
