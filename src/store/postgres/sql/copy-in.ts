// COPY … FROM STDIN through a pg client. node-postgres speaks the protocol's copy messages but has
// no API for them. pg-copy-streams, the usual package, holds the data until this process has read
// the server's CopyInResponse, which a coordinator busy encoding an answer reads late: measured on
// a 10,000-task CreateJob, 138 against 110 ms (docs/performance.md). So this is a Submittable, the
// form pg runs its own queries in (and pg-copy-streams too). The statement goes as a simple
// Query with the data right behind it (every chunk as CopyData, then CopyDone), without waiting
// for the server's CopyInResponse: the server reads them next once it is in copy-in mode, so the
// copy starts a round trip earlier and does not wait for this process to read that answer (it
// may be busy). It settles on ReadyForQuery with the row count of the CommandComplete
// ("COPY n"), or on the first error. Copy messages the server gets outside copy-in mode, or after
// an error in it, it drops (the protocol says so, and postgres.c does), so if the COPY fails
// the connection stays usable (in an aborted transaction if there was one, which the caller
// rolls back).
import type pg from "pg";

/** What a Submittable gets from pg: its Connection (lib/connection.js), these methods of it. */
interface CopyConnection {
  query(text: string): void;
  sendCopyFromChunk(chunk: Buffer): void;
  endCopyFrom(): void;
  sendCopyFail(message: string): void;
}

class CopyIn {
  private rowCount = 0;
  private settled = false;
  /** An error making the data (the COPY was failed for it): the call's error, not the server's. */
  private failed: Error | undefined;
  readonly done: Promise<number>;
  private resolve!: (rows: number) => void;
  private reject!: (err: Error) => void;

  constructor(
    private readonly text: string,
    private chunks: Iterable<Buffer>,
  ) {
    this.done = new Promise<number>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  /** Each chunk is sent as it is made, so the server copies the first rows while the next are made. */
  submit(connection: CopyConnection): void {
    connection.query(this.text);
    try {
      for (const chunk of this.chunks) connection.sendCopyFromChunk(chunk);
    } catch (err) {
      this.failed = err instanceof Error ? err : new Error(String(err));
      connection.sendCopyFail(`the client failed making the data: ${this.failed.message}`);
      return;
    } finally {
      this.chunks = [];
    }
    connection.endCopyFrom();
  }

  /** The data went with the statement (submit). */
  handleCopyInResponse(): void {}

  handleCommandComplete(msg: { text?: string }): void {
    const n = /^COPY (\d+)$/.exec(msg.text ?? "");
    if (n) this.rowCount = Number(n[1]);
  }

  handleReadyForQuery(): void {
    this.settle(this.failed);
  }

  handleError(err: Error): void {
    this.settle(this.failed ?? err);
  }

  // Messages a COPY FROM never gets; pg calls them on whatever query is active.
  handleRowDescription(): void {}
  handleDataRow(): void {}
  handleEmptyQuery(): void {}
  handlePortalSuspended(): void {}
  handleCopyData(): void {}

  private settle(err: Error | undefined): void {
    if (this.settled) return;
    this.settled = true;
    this.chunks = [];
    if (err) this.reject(err);
    else this.resolve(this.rowCount);
  }
}

/**
 * Runs `text` (a `COPY … FROM STDIN`) on client with chunks as its data, each sent as it is taken
 * from the iterable; resolves to the rows copied. If taking a chunk throws, the COPY is failed
 * (nothing of it is written) and the promise rejects with that error.
 */
export function copyIn(client: pg.ClientBase, text: string, chunks: Iterable<Buffer>): Promise<number> {
  const copy = new CopyIn(text, chunks);
  (client as unknown as { query(q: CopyIn): void }).query(copy);
  return copy.done;
}
