// Where the rig listens. Linux gives every outgoing connection a local port from its ephemeral
// range (net.ipv4.ip_local_port_range, 32768-60999 by default), and a connection in TIME-WAIT
// keeps its port for a minute: a fixed listening port inside that range is sometimes taken by
// somebody's client connection, and the rig then refuses to start although nothing listens there.
// So the rig's ports lie below the range, where the kernel never hands out a local port, and are
// checked free before anything starts.
import { readFileSync } from "node:fs";
import net from "node:net";
import { RIG_PORT_SPAN } from "./config.js";

/** `npm run ha:up`'s rig and `npm run test:ha`'s, each with RIG_PORT_SPAN ports from here. */
export const DEFAULT_BASE_PORT = 27400;
export const TEST_BASE_PORT = 27600;

export interface PortRange {
  low: number;
  high: number;
}

/** Linux's default, for a system that does not say (no /proc). */
const DEFAULT_EPHEMERAL: PortRange = { low: 32768, high: 60999 };
/** The lowest base tried: ports below 1024 need privileges, and the low thousands are crowded. */
const LOWEST_BASE = 10_000;

/** The kernel's ephemeral port range, as it is now. */
export function ephemeralRange(file = "/proc/sys/net/ipv4/ip_local_port_range"): PortRange {
  try {
    const [low, high] = readFileSync(file, "utf8").trim().split(/\s+/).map(Number);
    if (Number.isInteger(low) && Number.isInteger(high) && low <= high) return { low, high };
  } catch {
    // not Linux, or no /proc: assume the default
  }
  return DEFAULT_EPHEMERAL;
}

/** True when any of base .. base+span-1 is a port the kernel may give an outgoing connection. */
export function overlapsEphemeral(base: number, range: PortRange, span = RIG_PORT_SPAN): boolean {
  return base <= range.high && base + span - 1 >= range.low;
}

/** Whether 127.0.0.1:port can be listened on now. */
export function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.once("error", () => resolve(false));
    srv.listen({ port, host: "127.0.0.1", exclusive: true }, () => srv.close(() => resolve(true)));
  });
}

async function firstBusy(base: number, span: number): Promise<number | undefined> {
  for (let p = base; p < base + span; p++) if (!(await portFree(p))) return p;
  return undefined;
}

/**
 * The rig's base port. One given by the operator (HA_BASE_PORT) is used as it is or refused with
 * the reason: inside the ephemeral range, or a port of it in use. Otherwise the preferred base is
 * used when all its ports are free, else the next free block of `span` ports below the range.
 */
export async function chooseBasePort(opts: { explicit?: number; preferred: number; span?: number; range?: PortRange }): Promise<number> {
  const span = opts.span ?? RIG_PORT_SPAN;
  const range = opts.range ?? ephemeralRange();
  const describe = (b: number) => `${b}-${b + span - 1}`;
  if (opts.explicit !== undefined) {
    const base = opts.explicit;
    if (!Number.isInteger(base) || base < 1024 || base + span - 1 > 65535) throw new Error(`base port ${base} is not a port from 1024 up`);
    if (overlapsEphemeral(base, range, span)) {
      throw new Error(
        `ports ${describe(base)} overlap the kernel's ephemeral range ${range.low}-${range.high} (ip_local_port_range), ` +
          `where any outgoing connection may hold one; pick a base below ${range.low - span + 1} or above ${range.high}`,
      );
    }
    const busy = await firstBusy(base, span);
    if (busy !== undefined) throw new Error(`port ${busy} is in use; set another base port to move the rig's ports (${describe(base)})`);
    return base;
  }
  const candidates = [opts.preferred];
  for (let b = LOWEST_BASE; b + span - 1 < range.low; b += span) candidates.push(b);
  for (const base of candidates) {
    if (base < 1024 || overlapsEphemeral(base, range, span)) continue;
    if ((await firstBusy(base, span)) === undefined) return base;
  }
  throw new Error(`no ${span} free ports in a row below the ephemeral range ${range.low}-${range.high}`);
}
