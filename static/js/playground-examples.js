// Example prompts under the form: a click puts the prompt in the box and picks its model.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-example]");
  const form = document.getElementById("run-form");
  if (!button || !form) return;
  form.elements.prompt.value = button.dataset.example;
  if (form.elements.model) form.elements.model.value = button.dataset.model;
  form.elements.model?.dispatchEvent(new Event("change", { bubbles: true }));
  form.elements.prompt.focus();
});
