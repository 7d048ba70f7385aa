// The chunk grid's first fill. The snapshot's counts say which status most chunks have: the grid
// starts filled with it, and only the other statuses are paged in (in parallel, one stream per
// status), so the grid is right after reading the minority of tasks. The majority's pages follow,
// only to learn their task ids.
import { TaskStatus, type GetJobResponse } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import type { ChunkGrid } from "./chunk-grid.js";

export interface ChunkState {
  /** The task id of each chunk, as learned. */
  chunkTask: string[];
  /** 1 for a chunk an event has reported: it is as new as the stream, and a page may be older. */
  touched: Uint8Array;
}

export async function loadChunks(
  jobId: string,
  grid: ChunkGrid,
  snapshot: GetJobResponse,
  state: ChunkState,
  signal: AbortSignal,
  stopped: () => boolean,
): Promise<void> {
  const c = snapshot.taskCounts;
  const order = ["pending", "leased", "completed", "failed", "cancelled", "waiting"] as const;
  const counts = order.map((s) => c?.[s] ?? 0);
  const majority = counts.indexOf(Math.max(...counts));
  grid.fill(majority + 1);
  const pageAll = async (status: TaskStatus) => {
    let token = "";
    if (status === TaskStatus.COMPLETED) {
      // The result manifests carry chunk and task id, and cost the server far less than tasks with their attempts.
      do {
        const r = await client.listCompletedResults({ jobId, pageSize: 1000, pageToken: token }, { signal });
        for (const m of r.results) {
          state.chunkTask[m.chunkIndex] = m.taskId;
          if (!state.touched[m.chunkIndex]) grid.set(m.chunkIndex, TaskStatus.COMPLETED);
        }
        token = r.nextPageToken;
      } while (token && !stopped());
      return;
    }
    do {
      const r = await client.listTasks({ jobId, status, pageSize: 1000, pageToken: token }, { signal });
      for (const { task } of r.tasks) {
        if (!task) continue;
        state.chunkTask[task.chunkIndex] = task.id;
        if (!state.touched[task.chunkIndex]) grid.set(task.chunkIndex, task.status);
      }
      token = r.nextPageToken;
    } while (token && !stopped());
  };
  await Promise.all(
    order
      .map((_, i) => i)
      .filter((i) => i !== majority && counts[i] > 0)
      .map((i) => pageAll((i + 1) as TaskStatus)),
  );
  performance.mark("grid-known");
  grid.element.setAttribute("data-known", "true");
  if (counts[majority] > 0) await pageAll((majority + 1) as TaskStatus);
  grid.element.setAttribute("data-complete", "true");
}
