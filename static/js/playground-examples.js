// Example prompts under the form: a click puts the prompt in the box and picks its model.
// Picking a model applies the settings its directory asks for (data-defaults on the
// option, from its playground.json), e.g. seeded sampling for the text model.
function applyDefaults(form) {
  const option = form.elements.model?.selectedOptions?.[0];
  if (!option?.dataset.defaults) return;
  for (const [name, value] of Object.entries(JSON.parse(option.dataset.defaults))) {
    const field = form.elements[name];
    if (!field) continue;
    if (field instanceof RadioNodeList) {
      for (const radio of field) radio.checked = radio.value === String(value);
      field[0]?.dispatchEvent(new Event("change", { bubbles: true }));
    } else {
      field.value = value;
    }
  }
}

document.addEventListener("change", (event) => {
  const form = document.getElementById("run-form");
  if (form && event.target === form.elements.model) applyDefaults(form);
});

document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-example]");
  const form = document.getElementById("run-form");
  if (!button || !form) return;
  form.elements.prompt.value = button.dataset.example;
  if (form.elements.model && form.elements.model.value !== button.dataset.model) {
    form.elements.model.value = button.dataset.model;
    form.elements.model.dispatchEvent(new Event("change", { bubbles: true }));
  }
  form.elements.prompt.focus();
});
