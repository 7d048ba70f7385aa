// Without an SDK the RPC span is skipped; this file registers none until it checks that one counts.
import { trace } from "@opentelemetry/api";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { afterAll, describe, expect, it } from "vitest";
import { tracingActive } from "../../src/telemetry/tracing.js";

describe("tracingActive", () => {
  afterAll(() => trace.disable());

  it("is false until an SDK registers a tracer provider, true after, false once it is gone", () => {
    expect(tracingActive()).toBe(false);
    new NodeTracerProvider().register();
    expect(tracingActive()).toBe(true);
    trace.disable();
    expect(tracingActive()).toBe(false);
  });
});
