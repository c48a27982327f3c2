// Destructive forms ask before they post. The question is the form's data-confirm attribute
// (HTML-escaped by the template, never spliced into script); data-confirm-empty replaces it
// when the field named by data-confirm-field is empty (a reset with no time skips the backlog).
// A button's own data-confirm wins (a form whose buttons do different things: export, resend).
document.addEventListener("submit", function (event) {
  var form = event.target, button = event.submitter;
  var question = (button && button.dataset.confirm) || form.dataset.confirm;
  if (!question) return;
  var field = form.dataset.confirmField ? form.elements[form.dataset.confirmField] : null;
  if (field && !field.value && form.dataset.confirmEmpty) question = form.dataset.confirmEmpty;
  if (!window.confirm(question)) event.preventDefault();
});
