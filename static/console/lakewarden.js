// Small console behaviours that htmx attributes do not cover.
document.addEventListener("htmx:responseError", (event) => {
  // Show a failed fragment request instead of failing silently; 400 bodies are already fragments.
  const status = event.detail.xhr.status;
  if (status !== 400 && event.detail.xhr.getResponseHeader("X-Lakewarden-Fragment") !== "error") {
    const target = event.detail.target;
    const note = document.createElement("p");
    note.className = "error";
    note.textContent = `The request failed (HTTP ${status}). Reload the page and try again.`;
    target.prepend(note);
  }
});
document.addEventListener("htmx:beforeSwap", (event) => {
  // Validation errors come back as 400 with the re-rendered form, and refusals marked as error
  // fragments (a 403 naming the tables a query may not read) with their reason: swap them in.
  const xhr = event.detail.xhr;
  if (xhr.status === 400 || (xhr.status >= 400 && xhr.getResponseHeader("X-Lakewarden-Fragment") === "error")) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});

// Workbench: a table or column name, picked from the completion list or clicked in the schema
// browser, goes into the SQL at the cursor.
function insertIntoSql(name) {
  const editor = document.getElementById("sql");
  if (!editor || !name) return;
  const at = editor.selectionStart ?? editor.value.length;
  editor.value = editor.value.slice(0, at) + name + editor.value.slice(editor.selectionEnd ?? at);
  editor.focus();
  editor.selectionStart = editor.selectionEnd = at + name.length;
}
document.addEventListener("change", (event) => {
  if (event.target.id !== "table-picker") return;
  insertIntoSql(event.target.value);
  event.target.value = "";
});
document.addEventListener("click", (event) => {
  const button = event.target instanceof Element && event.target.closest("button[data-insert]");
  if (!button) return;
  event.preventDefault();
  insertIntoSql(button.dataset.insert);
});
// Ctrl+Enter (Cmd+Enter on a Mac) in the SQL runs the query, through htmx like the Run button.
document.addEventListener("keydown", (event) => {
  if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey) || event.target.id !== "sql") return;
  event.preventDefault();
  event.target.form?.requestSubmit();
});

// Keyboard: "/" anywhere but in a field goes to the page's search box (the top bar's "Find a
// table"), as on GitHub; typed into a field, it stays a "/".
document.addEventListener("keydown", (event) => {
  if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
  const target = event.target;
  if (target instanceof Element && target.closest("input, textarea, select, [contenteditable]")) return;
  const search = document.querySelector("[data-search-shortcut]");
  if (!search) return;
  event.preventDefault();  // no "/" typed into the box, no browser quick-find
  search.focus();
  search.select();
});

// A table or box that scrolls sideways (narrow screens) takes the keyboard focus, so its hidden
// columns can be scrolled to without a mouse (axe-core's scrollable-region-focusable); one that
// fits is no extra Tab stop. Checked on load, after each htmx swap and on resize.
function focusableScrollers() {
  for (const box of document.querySelectorAll("main table.grid, main .scroll-x, main .table-scroll")) {
    const scrolls = box.scrollWidth > box.clientWidth + 1 && getComputedStyle(box).overflowX !== "visible";
    if (scrolls && !box.hasAttribute("tabindex")) box.setAttribute("tabindex", "0");
    else if (!scrolls && box.getAttribute("tabindex") === "0") box.removeAttribute("tabindex");
  }
}
document.addEventListener("DOMContentLoaded", focusableScrollers);
document.addEventListener("htmx:afterSettle", focusableScrollers);
window.addEventListener("resize", focusableScrollers);
