/** A run report as lines of text, for test failures (no mail content: the report has none). */

import type { RunReportJson } from "./types.js";

export function describeReport(report: RunReportJson): string {
  const lines = [`run ${report.run_id}:`];
  for (const i of report.inboxes) {
    lines.push(
      `  inbox ${i.inbox_id} <${i.address}> purpose=${i.purpose} policy=${i.policy} state=${i.state} ` +
        `reason=${i.reason} attempt=${i.attempt} remaining_attempts=${i.remaining_attempts} expires_at=${i.expires_at}`,
    );
  }
  for (const e of report.events) {
    const detail = Object.entries(e.detail ?? {})
      .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
      .join(" ");
    const target = [e.inbox_id, e.message_id].filter(Boolean).join(" ");
    lines.push(`  ${e.at} ${e.type} ${target} ${detail}`.trimEnd());
  }
  return lines.join("\n");
}
