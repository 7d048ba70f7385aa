// Builds the web console (ui/) into dist/ui, which the coordinator serves under /ui/
// (src/api/ui-routes.ts). Everything the page needs is bundled: it fetches nothing from elsewhere.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const here = fileURLToPath(new URL(".", import.meta.url));

export default defineConfig({
  root: here,
  base: "/ui/",
  logLevel: "warn",
  build: {
    outDir: fileURLToPath(new URL("../dist/ui", import.meta.url)),
    emptyOutDir: true,
    assetsDir: "assets",
    // Small enough that one file is fine; the CSP forbids inline scripts, so no inlined module preload.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    sourcemap: true,
    target: "es2022",
  },
});
