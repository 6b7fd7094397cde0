import { defineConfig } from "@playwright/test";

export default defineConfig({
  globalSetup: "./global-setup.ts",
  fullyParallel: true,
  workers: 2,
  use: {
    baseURL: process.env.APP_URL,
    // Debian's Chromium (apt-get install chromium); set PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 when installing.
    launchOptions: { executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium" },
  },
  testDir: "tests",
});
