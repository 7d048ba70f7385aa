// npm run test:deploy's setup, once per run: the Debian packages (apt-get as root when missing), a
// Docker engine (a dockerd started here is stopped at the end; one that was running is left
// alone), leftovers of killed runs removed, and the images built once: PostgreSQL, HAProxy,
// Prometheus and Node stand-ins where no registry answers, and the coordinator's image (by the
// hash of its sources). The test files get the image names through inject().
import type { TestProject } from "vitest/node";
import { ensureEngine, ensureTools, sweepLeftovers } from "./docker.js";
import { coordinatorImage, supportImage } from "./images.js";

declare module "vitest" {
  export interface ProvidedContext {
    deployImages: { coordinator: string; postgres: string; haproxy: string; prometheus: string; node: string };
  }
}

const log = (m: string) => console.log(`test:deploy: ${m}`);

export default async function setup(project: TestProject) {
  const started = performance.now();
  ensureTools(log);
  const engine = await ensureEngine(log);
  try {
    sweepLeftovers(log);
    const node = supportImage("node", log);
    const postgres = supportImage("postgres", log);
    const haproxy = supportImage("haproxy", log);
    const prometheus = supportImage("prometheus", log);
    const coordinator = coordinatorImage(node, log);
    log(
      `images ready in ${((performance.now() - started) / 1000).toFixed(0)} s; coordinator ${coordinator.image}: ` +
        `${(coordinator.size / 1e6).toFixed(0)} MB` +
        (coordinator.buildSeconds > 0 ? `, built in ${coordinator.buildSeconds.toFixed(0)} s` : ", built earlier"),
    );
    project.provide("deployImages", { coordinator: coordinator.image, postgres, haproxy, prometheus, node });
  } catch (err) {
    await engine.stop();
    throw err;
  }
  return async () => {
    if (engine.started) log("stopping the dockerd this run started");
    await engine.stop();
  };
}
