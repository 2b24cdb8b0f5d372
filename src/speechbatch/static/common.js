/* speechbatch admin pages: the helpers the job page and the job list share (an ES module).
   Data from the server is only ever written with textContent, never as HTML. */

export function el(tag, className, text) {
  var node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

export function badge(status) {
  return el("span", "badge badge-" + String(status).toLowerCase(), status);
}

export function percent(progress, key) {
  if (!progress.total) return 0;
  var count = key ? progress[key] : progress.done + progress.error;
  return Math.round((100 * count) / progress.total);
}

export function when(iso) {
  if (!iso) return "";
  var moment = new Date(iso);
  if (isNaN(moment.getTime())) return String(iso);
  return moment.toISOString().slice(0, 19).replace("T", " ") + " UTC";
}

export function counts(p) {
  var text = p.done + " of " + p.total + " done";
  if (p.generating) text += " · " + p.generating + " generating";
  if (p.pending) text += " · " + p.pending + " pending";
  if (p.error) text += " · " + p.error + " failed";
  return text;
}

// The server renders bar widths as data-width (no inline style under the CSP).
export function applyWidths(scope) {
  scope.querySelectorAll("[data-width]").forEach(function (node) {
    node.style.width = node.dataset.width + "%";
  });
}

export function progressBar(bar, p) {
  bar.setAttribute("aria-valuenow", String(percent(p)));
  var done = bar.querySelector(".progress-done");
  var error = bar.querySelector(".progress-error");
  done.dataset.width = String(percent(p, "done"));
  error.dataset.width = String(percent(p, "error"));
  applyWidths(bar);
}

export function newProgressBar(p) {
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
export function reconcile(body, key, records, make, update) {
  var rows = {};
  // Section rows (data-section: the job page's chapters) are the server's; they stay put.
  function skipSections(row) {
    while (row && row.dataset.section !== undefined) row = row.nextElementSibling;
    return row;
  }
  Array.prototype.forEach.call(body.children, function (row) {
    if (row.dataset.section === undefined) rows[row.dataset[key] || ""] = row;
  });
  var cursor = skipSections(body.firstElementChild);
  records.forEach(function (record) {
    var id = String(record.id);
    var row = rows[id] || make(record);
    delete rows[id];
    if (row === cursor) cursor = skipSections(cursor.nextElementSibling);
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
export function getJSON(url, etag) {
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

/* Run step() (which returns a promise of "is it live?") every pollMs while it says yes.
   When it says no, stop; or, with idleMs, go on every idleMs (so that a run started
   elsewhere is noticed) until it says yes again. The first step runs after firstMs
   (default pollMs). After an error, retry at twice the interval and say so in `live`. */
export function pollLoop(step, pollMs, live, idleMs, firstMs) {
  function tick() {
    step()
      .then(function (again) {
        if (live) {
          live.textContent = "updating live…";
          live.hidden = !again;
        }
        if (again) window.setTimeout(tick, pollMs);
        else if (idleMs) window.setTimeout(tick, idleMs);
      })
      .catch(function () {
        if (live) {
          live.textContent = "connection lost, retrying…";
          live.hidden = false;
        }
        window.setTimeout(tick, pollMs * 2);
      });
  }
  window.setTimeout(tick, firstMs || pollMs);
}
