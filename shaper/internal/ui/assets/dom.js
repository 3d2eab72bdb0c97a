// The page's ways of making and filling elements, shared by its modules.

// el returns a new element tag with props (textContent, className, …) set
// and children appended.
export function el(tag, props, ...children) {
  const e = Object.assign(document.createElement(tag), props);
  e.append(...children);
  return e;
}

// say shows message in a panel's result line, as a success or a failure.
export function say(result, message, ok) {
  result.textContent = message;
  result.className = 'result ' + (ok ? 'ok' : 'bad');
}
