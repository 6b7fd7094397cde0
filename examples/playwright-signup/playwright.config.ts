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
  projects: [
    { name: "signup", testDir: "tests" },
    // A test that fails on purpose, to show the run report it carries: SHOW_FAILURE=1 npx playwright test --project=failing
    ...(process.env.SHOW_FAILURE ? [{ name: "failing", testDir: "failing" }] : []),
  ],
});
