// One runsink server for every worker (unless RUNSINK_URL names one), then the app, mailing to it.
import type { AddressInfo } from "node:net";
import { setupRunsink } from "runsink/playwright";
import { createApp } from "./app.mjs";

export default async function globalSetup(): Promise<() => Promise<void>> {
  const stopRunsink = await setupRunsink();
  const app = createApp({
    smtpHost: process.env.RUNSINK_SMTP_HOST,
    smtpPort: Number(process.env.RUNSINK_SMTP_PORT),
  });
  await new Promise<void>((resolve) => app.listen(0, "127.0.0.1", resolve));
  process.env.APP_URL = `http://127.0.0.1:${(app.address() as AddressInfo).port}`;
  return async () => {
    await new Promise((resolve) => app.close(resolve));
    await stopRunsink();
  };
}
