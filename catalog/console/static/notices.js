// Notices: short messages in a stack of their own (#live), never over the content they are about.
//
// Success and information go after a few seconds; an error stays until it is dismissed. The stack
// is a polite live region (role=status), so screen readers announce each notice; an error is an
// alert of its own. Where the stack sits is console.css's (.live): a corner at desktop width, in
// the page's flow above the content at phone width, so it never covers the page's buttons.

import { h } from "./dom.js";

export const NOTICE_MS = 5000; // how long a success or an information stays
const MAX_SHOWN = 4;

const stack = document.getElementById("live");

// ``text`` (or DOM nodes) as a notice: kind "success" | "info" go after NOTICE_MS, "error" stays
// until dismissed. Returns the notice's element (its dismiss() removes it).
export function notify(text, { kind = "info", dataset = {} } = {}) {
  const persistent = kind === "error";
  const close = h("button", { type: "button", class: "dismiss", "aria-label": "Dismiss" }, "×");
  const item = h(
    "div",
    { class: `event notice-${kind}`, role: persistent ? "alert" : null, dataset: { kind, ...dataset } },
    h("span", { class: "notice-text" }, text),
    close,
  );
  const dismiss = () => item.remove();
  close.addEventListener("click", dismiss);
  item.dismiss = dismiss;
  stack.prepend(item);
  // Beyond a few, the oldest that would go by itself goes first; errors stay.
  const passing = [...stack.children].filter((el) => el.dataset.kind !== "error");
  for (const old of passing.slice(MAX_SHOWN)) old.remove();
  if (!persistent) setTimeout(dismiss, NOTICE_MS);
  return item;
}
