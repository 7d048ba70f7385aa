// The sign-in form: the token is kept in this tab only (session storage, api.ts) and sent with
// every request; the page then probes what the token may do.
import { setToken } from "../api.js";
import { clear, h } from "../dom.js";
import { main } from "../layout.js";

export function renderSignIn(onToken: () => void, message?: string): void {
  const input = h("input", {
    id: "token",
    name: "token",
    type: "password",
    autocomplete: "off",
    required: true,
    "aria-describedby": "token-help",
  });
  const form = h(
    "form",
    { class: "card narrow", id: "sign-in" },
    h("h1", {}, "Sign in"),
    h(
      "p",
      { id: "token-help" },
      "This coordinator needs a bearer token. It is kept in this tab only (session storage) and sent with every request.",
    ),
    message ? h("p", { class: "error-text", role: "alert" }, message) : null,
    h("label", { for: "token" }, "Token"),
    input,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    setToken(input.value.trim());
    onToken();
  });
  clear(main, form);
  input.focus();
}
