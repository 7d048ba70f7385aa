// The Previous / Next buttons under a paged list. The page tokens seen before the current one are
// kept by the caller (per filter), so Previous goes back without the server keeping a cursor.
import { h } from "../dom.js";

/**
 * A pager for a list whose current page is `page` ("" for the first) and whose next is `next` ("" for none).
 * `before` holds the tokens of the pages before this one; `remember` stores the list a move leaves.
 */
export function pager(
  label: string,
  page: string,
  next: string,
  before: string[],
  remember: (tokens: string[]) => void,
  go: (token: string) => void,
): HTMLElement {
  return h(
    "nav",
    { class: "pager", "aria-label": label },
    h(
      "button",
      {
        type: "button",
        disabled: !page,
        onclick: () => {
          const prev = before.pop() ?? "";
          remember(before);
          go(prev);
        },
      },
      "Previous page",
    ),
    h(
      "button",
      {
        type: "button",
        disabled: !next,
        onclick: () => {
          remember([...before, page]);
          go(next);
        },
      },
      "Next page",
    ),
  );
}
