import { describe, expect, it } from "vitest";
import { giveBackController, takeController } from "../../src/api/direct/call-controllers.js";

describe("unary calls' AbortControllers", () => {
  it("are reused once given back unused", () => {
    const first = takeController();
    giveBackController(first);
    expect(takeController()).toBe(first);
  });

  it("are never reused after an abort, or while anything still listens", () => {
    const aborted = takeController();
    aborted.abort(new Error("client closed the request"));
    giveBackController(aborted);
    const next = takeController();
    expect(next).not.toBe(aborted);
    expect(next.signal.aborted).toBe(false);

    const onAbort = () => {};
    next.signal.addEventListener("abort", onAbort);
    giveBackController(next);
    const third = takeController();
    expect(third).not.toBe(next);

    next.signal.removeEventListener("abort", onAbort);
    giveBackController(next);
    expect(takeController()).toBe(next);
    giveBackController(third);
  });
});
