// The REST routes come from the proto's google.api.http options, read at start: every RPC has
// one, no two routes collide, and a rule the transcoder cannot serve is refused when the server
// starts rather than on some request.
import { create, createFileRegistry, setExtension, type DescService, type MessageInitShape } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, MethodOptionsSchema } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { http } from "../../gen/google/api/annotations_pb.js";
import { HttpRuleSchema } from "../../gen/google/api/http_pb.js";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { restRoutes } from "../../src/api/rest-routes.js";

type Rule = MessageInitShape<typeof HttpRuleSchema>;

/** A one-method service whose method carries the given google.api.http rule. */
function serviceWith(rule: Rule): DescService {
  const options = create(MethodOptionsSchema);
  setExtension(options, http, create(HttpRuleSchema, rule));
  const file = create(FileDescriptorProtoSchema, {
    name: "t/v1/t.proto",
    package: "t.v1",
    syntax: "proto3",
    messageType: [{ name: "Req", field: [{ name: "job_id", number: 1, type: 9, label: 1, jsonName: "jobId" }] }, { name: "Res" }],
    service: [{ name: "S", method: [{ name: "Do", inputType: ".t.v1.Req", outputType: ".t.v1.Res", options }] }],
  });
  const registry = createFileRegistry(file, () => undefined);
  return registry.getService("t.v1.S")!;
}

describe("REST routes from google.api.http", () => {
  it("every RPC has one, and no two share a method and path", () => {
    const routes = restRoutes(QueueService);
    expect(new Set(routes.map((r) => r.rpc.name))).toEqual(new Set(QueueService.methods.map((m) => m.name)));
    const keys = routes.map((r) => `${r.method} ${r.pattern}`);
    expect(new Set(keys).size).toBe(keys.length);
    expect(keys).toContain("POST /tasks/{task_id}/heartbeat");
    expect(routes.find((r) => r.rpc.name === "ListJobs")).toMatchObject({ method: "GET", pattern: "/jobs", from: "query" });
  });

  it("reads a rule with its additional bindings", () => {
    const routes = restRoutes(
      serviceWith({
        pattern: { case: "post", value: "/things/{job_id}" },
        body: "*",
        additionalBindings: [{ pattern: { case: "get", value: "/things/{job_id}" } }],
      }),
    );
    expect(routes.map((r) => [r.method, r.pattern, r.from])).toEqual([
      ["POST", "/things/{job_id}", "body"],
      ["GET", "/things/{job_id}", "query"],
    ]);
  });

  it.each([
    ["a multi-segment variable", { pattern: { case: "get", value: "/things/{job_id=**}" } }, /path template/],
    ["one path variable twice", { pattern: { case: "get", value: "/a/{job_id}/b/{job_id}" } }, /path template/],
    ["a field body", { pattern: { case: "post", value: "/things" }, body: "job_id" }, /body/],
    ["a response body", { pattern: { case: "get", value: "/things" }, responseBody: "x" }, /response_body/],
    ["a variable that is not a field", { pattern: { case: "get", value: "/things/{task_id}" } }, /not a field/],
    ["no pattern", {}, /without a pattern/],
  ] as [string, Rule, RegExp][])("refuses %s at start", (_what, rule, message) => {
    expect(() => restRoutes(serviceWith(rule))).toThrow(message);
  });
});
