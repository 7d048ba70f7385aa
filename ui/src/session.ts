// Who is signed in, as probed at start (api.ts probeRole): pages show or hide admin actions by it.
import type { Role } from "./api.js";

let role: Role = "signed-out";

export function currentRole(): Role {
  return role;
}

export function setRole(r: Role): void {
  role = r;
}

/** A token that may list and settle billable jobs: billing or admin (or a coordinator without tokens). */
export function canSettle(): boolean {
  return role === "billing" || isAdmin();
}

/** An admin token, or a coordinator without tokens, where everything is allowed. */
export function isAdmin(): boolean {
  return role === "admin" || role === "open";
}
