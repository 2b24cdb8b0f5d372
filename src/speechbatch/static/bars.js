// Progress bars are rendered with their widths in data-width (percent): the
// Content-Security-Policy allows no inline style attribute, and setting a width from a
// script (CSSOM) is allowed. app.js updates the widths afterwards the same way.
"use strict";
document.querySelectorAll("[data-width]").forEach(function (bar) {
  bar.style.width = bar.dataset.width + "%";
});
