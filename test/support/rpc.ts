import { ConnectError } from "@connectrpc/connect";

/** The ConnectError a call fails with; throws if it succeeds. */
export async function rpcError(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("expected the call to fail");
}
