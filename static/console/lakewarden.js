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
