// "Copy" buttons: each copies the text of the element its data-copy names, and says so
// in its live status (read by screen readers) rather than by a dialog.
for (const button of document.querySelectorAll("button[data-copy]")) {
  button.hidden = false; // without this script the block is still there to select
  button.addEventListener("click", async () => {
    const source = document.querySelector(button.dataset.copy);
    const status = document.querySelector(button.dataset.status);
    try {
      await navigator.clipboard.writeText(source.textContent);
      status.textContent = "Copied.";
    } catch {
      status.textContent = "Could not copy: select the text and copy it.";
    }
  });
}
