// Drives runsink's /api/v1 with the npm mailpit-api client, as an existing Mailpit user would:
// list, search, read (by ID and "latest"), headers, source, an attachment, the text and HTML
// views, and deletes.
// Prints one JSON object of what it saw; tests/test_mailpit_compat.py checks it.
import { MailpitClient } from "mailpit-api";

const { RUNSINK_URL, RUNSINK_TOKEN, LIVE_ID, TAG } = process.env;
const mailpit = new MailpitClient(RUNSINK_URL, {
  fetchOptions: { headers: { Authorization: `Bearer ${RUNSINK_TOKEN}` } },
});

const seen = {};
async function attempt(name, work) {
  try {
    seen[name] = await work();
  } catch (error) {
    seen[name] = { error: String(error.message || error) };
  }
}

await attempt("info", () => mailpit.getInfo());
await attempt("list", () => mailpit.listMessages(0, 50));
await attempt("search", () => mailpit.searchMessages({ query: `${TAG} to:gmail.com` }));
await attempt("waited", () =>
  mailpit.waitForMessage({ query: `${TAG} has:attachment` }, { timeout: 5000, interval: 100 }),
);
await attempt("latest", () => mailpit.getMessageSummary());
const caughtId = seen.search?.messages?.[0]?.ID;
await attempt("message", () => mailpit.getMessageSummary(caughtId));
await attempt("headers", () => mailpit.getMessageHeaders(caughtId));
await attempt("source", () => mailpit.getMessageSource(caughtId));
const part = seen.message?.Attachments?.[0]?.PartID;
await attempt("part", async () => {
  const blob = await mailpit.getMessageAttachment(caughtId, part);
  return { type: blob.type, size: blob.size, text: await blob.text() };
});
await attempt("viewText", () => mailpit.renderMessageText(caughtId));
await attempt("viewHtml", () => mailpit.renderMessageHTML(caughtId));
await attempt("deleteLive", () => mailpit.deleteMessages({ IDs: [LIVE_ID, caughtId] }));
await attempt("afterRefusal", () => mailpit.listMessages());
await attempt("deleteAll", () => mailpit.deleteMessages());
await attempt("afterDelete", () => mailpit.listMessages());
process.stdout.write(JSON.stringify(seen));
