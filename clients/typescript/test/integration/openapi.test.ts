import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { errorClassFor, HttpError, NEXT_ACTIONS, REASONS, type RunsinkServer } from "../../dist/index.js";
import { startTestServer } from "../server.js";

type Fields = Record<string, Record<string, string | null>>;
type Schema = {
  $ref?: string;
  properties?: Record<string, Schema>;
  items?: Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
  enum?: unknown[];
  const?: unknown;
};

// dist/fields.json is made from src/types.ts by scripts/fields.mjs (npm run build).
const fields: Fields = JSON.parse(
  readFileSync(fileURLToPath(new URL("../../dist/fields.json", import.meta.url)), "utf8"),
) as Fields;

/** (method, path, status or "body") -> the TypeScript interfaces that answer (or request) models. */
const ROUTES: [string, string, string, string[]][] = [
  ["post", "/v1/inboxes", "201", ["CreatedJson"]],
  ["post", "/v1/inboxes", "200", ["CreatedJson"]],
  ["post", "/v1/inboxes", "body", ["CreateInboxBody"]],
  ["get", "/v1/inboxes/{inbox_id}", "200", ["EnvelopeJson"]],
  ["post", "/v1/inboxes/{inbox_id}/wait", "200", ["EnvelopeJson"]],
  ["post", "/v1/inboxes/{inbox_id}/wait", "body", ["WaitBody"]],
  ["get", "/v1/inboxes/{inbox_id}/messages", "200", ["MessageListJson"]],
  ["get", "/v1/messages/{message_id}", "200", ["MessageJson"]],
  ["post", "/v1/messages/{message_id}/claim", "200", ["EnvelopeJson"]],
  ["post", "/v1/messages/{message_id}/claim", "409", ["EnvelopeJson", "ErrorJson"]],
  ["post", "/v1/messages/{message_id}/claim", "body", ["ClaimBody"]],
  ["get", "/v1/runs/{run_id}", "200", ["RunReportJson"]],
  ["post", "/v1/runs/{run_id}/token", "201", ["RunTokenJson"]],
  ["get", "/v1/messages", "200", ["SearchJson"]],
  ["post", "/v1/webhooks", "201", ["WebhookJson"]],
  ["post", "/v1/webhooks", "body", ["CreateWebhookBody"]],
  ["get", "/v1/webhooks", "200", ["WebhookListJson"]],
  ["get", "/v1/webhooks/{webhook_id}", "200", ["WebhookJson"]],
  ["get", "/v1/webhooks/{webhook_id}/deliveries", "200", ["DeliveryListJson"]],
  ["post", "/v1/webhooks/{webhook_id}/test", "202", ["TestDeliveryJson"]],
];

let server: RunsinkServer;
let openapi: {
  paths: Record<string, Record<string, Record<string, unknown>>>;
  components: { schemas: Record<string, Schema> };
};

before(async () => {
  server = await startTestServer();
  openapi = (await (await fetch(`${server.url}/openapi.json`)).json()) as typeof openapi;
});
after(async () => {
  await server?.stop();
});

function resolve(schema: Schema): Schema {
  if (schema.$ref) return openapi.components.schemas[schema.$ref.split("/").pop() ?? ""] ?? {};
  return schema;
}

/** The object schemas a schema may be: through $ref, anyOf/oneOf and arrays; null and scalars drop out. */
function objects(schema: Schema | undefined): Schema[] {
  if (schema === undefined) return [];
  const resolved = resolve(schema);
  const alternatives = resolved.anyOf ?? resolved.oneOf;
  if (alternatives) return alternatives.flatMap(objects);
  if (resolved.items) return objects(resolved.items);
  return resolved.properties ? [resolved] : [];
}

/** Every property of `schema` (and of the objects it holds) exists in `type`; returns what is missing. */
function missing(schema: Schema, type: string, where: string): string[] {
  const known = fields[type];
  if (!known) return [`${where}: no interface ${type}`];
  const gaps: string[] = [];
  for (const [name, property] of Object.entries(schema.properties ?? {})) {
    if (!(name in known)) {
      gaps.push(`${where}.${name} (missing in ${type})`);
      continue;
    }
    const inner = objects(property).filter((o) => Object.keys(o.properties ?? {}).length > 0);
    const nested = known[name];
    if (inner.length && !nested)
      gaps.push(`${where}.${name} is an object, ${type}.${name} is not an interface`);
    if (nested) for (const object of inner) gaps.push(...missing(object, nested, `${where}.${name}`));
  }
  return gaps;
}

describe("the TypeScript types against the server's /openapi.json", () => {
  it("have every property of the envelope, message, report and error schemas", () => {
    const gaps: string[] = [];
    for (const [method, path, status, types] of ROUTES) {
      const operation = openapi.paths[path]?.[method] as
        | {
            requestBody?: { content: Record<string, { schema: Schema }> };
            responses: Record<string, { content?: Record<string, { schema: Schema }> }>;
          }
        | undefined;
      assert.ok(operation, `${method} ${path} is not in the OpenAPI document`);
      const schema =
        status === "body"
          ? operation.requestBody?.content["application/json"]?.schema
          : operation.responses[status]?.content?.["application/json"]?.schema;
      assert.ok(schema, `${method} ${path} ${status} has no JSON schema`);
      for (const object of objects(schema)) {
        const where = `${method.toUpperCase()} ${path} ${status}`;
        const tries = types.map((type) => missing(object, type, where));
        if (tries.every((gap) => gap.length > 0))
          gaps.push(...(tries.sort((a, b) => a.length - b.length)[0] ?? []));
      }
    }
    assert.deepEqual(gaps, [], `fields the server sends that the types lack:\n${gaps.join("\n")}`);
  });

  it("have every error answer's fields in ErrorJson, on every route the client calls", () => {
    const gaps: string[] = [];
    const called = new Set(ROUTES.map(([, path]) => path));
    for (const [path, operations] of Object.entries(openapi.paths)) {
      if (!called.has(path)) continue;
      for (const [method, operation] of Object.entries(operations)) {
        const responses =
          (operation as { responses?: Record<string, { content?: Record<string, { schema: Schema }> }> })
            .responses ?? {};
        for (const [status, response] of Object.entries(responses)) {
          if (Number(status) < 400) continue;
          for (const object of objects(response.content?.["application/json"]?.schema)) {
            const where = `${method.toUpperCase()} ${path} ${status}`;
            const asError = missing(object, "ErrorJson", where);
            if (asError.length && missing(object, "EnvelopeJson", where).length) gaps.push(...asError);
          }
        }
      }
    }
    assert.deepEqual(gaps, []);
  });

  it("know every reason and next action the server can send, each reason with a typed error", () => {
    const envelope =
      openapi.components.schemas["EnvelopeOut"] ??
      resolve(
        (
          openapi.paths["/v1/inboxes/{inbox_id}"]?.["get"] as {
            responses: Record<string, { content: Record<string, { schema: Schema }> }>;
          }
        ).responses["200"]?.content["application/json"]?.schema ?? {},
      );
    const enumOf = (schema: Schema | undefined): string[] =>
      objects(schema).length
        ? []
        : [schema, ...(schema?.anyOf ?? [])].flatMap((s) => (s?.enum ?? []).map(String));
    const reasons = enumOf(envelope.properties?.["reason"]);
    const actions = enumOf(envelope.properties?.["next_action"]);
    assert.ok(reasons.length > 0 && actions.length > 0);
    for (const reason of reasons) {
      assert.ok((REASONS as readonly string[]).includes(reason), `reason ${reason} unknown to the client`);
      if (reason !== "already_claimed") assert.notEqual(errorClassFor(reason), HttpError, reason);
    }
    for (const action of actions)
      assert.ok((NEXT_ACTIONS as readonly string[]).includes(action), `next_action ${action}`);
  });
});
