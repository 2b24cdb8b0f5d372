/* The New job page: a document's chapters, to tick before the import (an ES module).
   When a document is chosen (Markdown, EPUB, or TXT read as a document), its chapters are
   read by POST /api/jobs/import/chapters (nothing is stored) and listed with checkboxes,
   front and back matter unticked; the form then sends the ticked ones as "chapters".
   Without this script the import keeps its default choice. Data from the server is only
   ever written with textContent. */

import { el } from "./common.js";

var DOCUMENTS = [".md", ".markdown", ".epub"];

export function newJobForm(form) {
  var file = form.querySelector("#file");
  var box = form.querySelector("#chapters");
  var list = form.querySelector("#chapters-list");
  var note = form.querySelector("#chapters-status");
  var title = form.querySelector("#title");
  var csrf = form.querySelector("input[name=csrf_token]").value;
  var reading = 0;

  function isDocument(name) {
    name = name.toLowerCase();
    if (DOCUMENTS.some(function (suffix) { return name.endsWith(suffix); })) return true;
    var mode = form.querySelector("input[name=file_mode]:checked");
    return name.endsWith(".txt") && mode !== null && mode.value === "document";
  }

  function clear() {
    list.replaceChildren();
    note.textContent = "";
    box.hidden = true;
    title.placeholder = "";
  }

  function say(text, isError) {
    box.hidden = false;
    note.textContent = text;
    note.classList.toggle("field-error", Boolean(isError));
  }

  function show(documentChoices) {
    var listed = el("input");
    listed.type = "hidden";
    listed.name = "chapters_listed";
    listed.value = "1";
    list.append(listed);
    documentChoices.chapters.forEach(function (chapter) {
      var label = el("label", "choice");
      var box = el("input");
      box.type = "checkbox";
      box.name = "chapters";
      box.value = String(chapter.index);
      box.checked = chapter.kept;
      label.append(box, el("span", null, chapter.title));
      if (chapter.front_back_matter) label.append(el("span", "muted", " (front or back matter)"));
      list.append(label);
    });
    count();
    if (documentChoices.title) title.placeholder = documentChoices.title;
  }

  function count() {
    var boxes = list.querySelectorAll("input[type=checkbox]");
    var ticked = list.querySelectorAll("input[type=checkbox]:checked").length;
    say(ticked + " of " + boxes.length + " chapters ticked to import.", ticked === 0);
  }

  function read() {
    clear();
    var chosen = file.files && file.files[0];
    if (!chosen || !isDocument(chosen.name)) return;
    var mine = ++reading;
    say("Reading the chapters…", false);
    var body = new FormData();
    body.append("file", chosen);
    fetch(form.dataset.chaptersUrl, {
      method: "POST", body: body, credentials: "same-origin", headers: { "X-CSRFToken": csrf },
    })
      .then(function (response) {
        return response.json().then(function (data) { return { ok: response.ok, data: data }; });
      })
      .then(function (answer) {
        if (mine !== reading) return;  // another file was chosen meanwhile
        if (answer.ok) show(answer.data);
        else say(answer.data.error ? answer.data.error.message : "The file cannot be read.", true);
      })
      .catch(function () {
        if (mine === reading) say("The chapters could not be read; the import keeps all but front and back matter.", true);
      });
  }

  list.addEventListener("change", count);
  file.addEventListener("change", read);
  form.querySelectorAll("input[name=file_mode]").forEach(function (radio) {
    radio.addEventListener("change", read);
  });
}
