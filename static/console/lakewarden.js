// Small console behaviours that htmx attributes do not cover.
document.addEventListener("htmx:responseError", (event) => {
  // Show a failed fragment request instead of failing silently; 400 bodies are already fragments.
  const status = event.detail.xhr.status;
  if (status !== 400) {
    const target = event.detail.target;
    const note = document.createElement("p");
    note.className = "error";
    note.textContent = `The request failed (HTTP ${status}). Reload the page and try again.`;
    target.prepend(note);
  }
});
document.addEventListener("htmx:beforeSwap", (event) => {
  // Validation errors come back as 400 with the re-rendered form: swap them in.
  if (event.detail.xhr.status === 400) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});

// Workbench: picking a table name from the completion list inserts it into the SQL at the cursor.
document.addEventListener("change", (event) => {
  if (event.target.id !== "table-picker") return;
  const editor = document.getElementById("sql");
  const name = event.target.value;
  if (!editor || !name) return;
  const at = editor.selectionStart ?? editor.value.length;
  editor.value = editor.value.slice(0, at) + name + editor.value.slice(editor.selectionEnd ?? at);
  editor.focus();
  editor.selectionStart = editor.selectionEnd = at + name.length;
  event.target.value = "";
});
