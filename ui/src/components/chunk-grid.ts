// The per-chunk grid of a job: one canvas, one cell per chunk, coloured by task status. A canvas
// keeps 10,000 chunks to one element and one redraw of a few milliseconds; keyboard users move a
// cursor over it with the arrow keys and open a chunk with Enter, and a live region reads it out.

/** Indexed by TaskStatus (0: not known yet; 6: waiting for its job's parents). */
export const STATUS_NAMES = ["unknown", "pending", "leased", "completed", "failed", "cancelled", "waiting"] as const;
export const STATUS_COLORS = ["#eaeef2", "#8c959f", "#0969da", "#1a7f37", "#cf222e", "#6639ba", "#8a5a00"] as const;

export class ChunkGrid {
  readonly element: HTMLElement;
  readonly statuses: Uint8Array;
  private readonly canvas: HTMLCanvasElement;
  private readonly readout: HTMLElement;
  private cursor = -1;
  private cols = 1;
  private cell = 6;
  private pending = false;

  constructor(
    readonly total: number,
    private readonly onOpen: (chunk: number) => void,
  ) {
    this.statuses = new Uint8Array(total);
    this.element = document.createElement("div");
    this.element.className = "grid-wrap";
    this.canvas = document.createElement("canvas");
    this.canvas.id = "chunk-grid";
    this.canvas.tabIndex = 0;
    this.canvas.setAttribute("role", "application");
    this.canvas.setAttribute("aria-roledescription", "chunk grid");
    this.canvas.setAttribute("aria-label", `Chunk grid, ${total} chunks. Arrow keys move between chunks, Enter opens one.`);
    this.canvas.setAttribute("aria-describedby", "grid-readout");
    this.readout = document.createElement("p");
    this.readout.id = "grid-readout";
    this.readout.className = "readout";
    this.readout.setAttribute("aria-live", "polite");
    this.readout.textContent = "Select a chunk (click, or focus the grid and use the arrow keys) to see its attempts.";
    this.element.append(this.canvas, this.readout);
    this.canvas.addEventListener("click", (ev) => this.onClick(ev));
    this.canvas.addEventListener("keydown", (ev) => this.onKey(ev));
    this.canvas.addEventListener("focus", () => {
      if (this.cursor < 0 && this.total > 0) this.moveTo(0);
      else this.schedule();
    });
    this.canvas.addEventListener("blur", () => this.schedule());
  }

  /** Lays the grid out for the width it has; call once it is in the document (and on resize). */
  layout(): void {
    const width = Math.max(200, this.element.clientWidth || 800);
    this.cell = this.total <= 200 ? 18 : this.total <= 2000 ? 10 : 7;
    this.cols = Math.max(1, Math.floor(width / this.cell));
    const rows = Math.max(1, Math.ceil(this.total / this.cols));
    const dpr = window.devicePixelRatio || 1;
    this.canvas.style.width = `${this.cols * this.cell}px`;
    this.canvas.style.height = `${rows * this.cell}px`;
    this.canvas.width = Math.ceil(this.cols * this.cell * dpr);
    this.canvas.height = Math.ceil(rows * this.cell * dpr);
    this.draw();
  }

  set(chunk: number, status: number): void {
    if (chunk < 0 || chunk >= this.total || this.statuses[chunk] === status) return;
    this.statuses[chunk] = status;
    if (chunk === this.cursor) this.describe();
    this.schedule();
  }

  fill(status: number): void {
    this.statuses.fill(status);
    this.schedule();
  }

  /** Coalesces many changes (a burst of events) into one redraw per frame. */
  schedule(): void {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.draw();
    });
  }

  draw(): void {
    const ctx = this.canvas.getContext("2d");
    if (!ctx) return;
    const dpr = window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    const { cols, cell } = this;
    const size = cell > 8 ? cell - 2 : cell - 1;
    // One fillStyle change per status rather than per cell.
    for (let s = 0; s < STATUS_COLORS.length; s++) {
      ctx.fillStyle = STATUS_COLORS[s];
      ctx.beginPath();
      for (let i = 0; i < this.total; i++) {
        if (this.statuses[i] === s) ctx.rect((i % cols) * cell, Math.floor(i / cols) * cell, size, size);
      }
      ctx.fill();
    }
    if (this.cursor >= 0) {
      const x = (this.cursor % cols) * cell;
      const y = Math.floor(this.cursor / cols) * cell;
      ctx.lineWidth = 2;
      ctx.strokeStyle = document.activeElement === this.canvas ? "#000" : "#57606a";
      ctx.strokeRect(x - 1, y - 1, size + 2, size + 2);
    }
    performance.mark("grid-drawn");
  }

  private moveTo(chunk: number): void {
    this.cursor = Math.min(this.total - 1, Math.max(0, chunk));
    this.describe();
    this.schedule();
  }

  private describe(): void {
    this.readout.textContent = `Chunk ${this.cursor}: ${STATUS_NAMES[this.statuses[this.cursor]]}. Press Enter to see its attempts.`;
  }

  private onClick(ev: MouseEvent): void {
    const r = this.canvas.getBoundingClientRect();
    const col = Math.floor((ev.clientX - r.left) / this.cell);
    const row = Math.floor((ev.clientY - r.top) / this.cell);
    const chunk = row * this.cols + col;
    if (col < 0 || col >= this.cols || chunk < 0 || chunk >= this.total) return;
    this.moveTo(chunk);
    this.onOpen(chunk);
  }

  private onKey(ev: KeyboardEvent): void {
    const step: Record<string, number> = { ArrowLeft: -1, ArrowRight: 1, ArrowUp: -this.cols, ArrowDown: this.cols };
    if (ev.key in step) {
      this.moveTo(Math.max(0, this.cursor) + step[ev.key]);
    } else if (ev.key === "Home") {
      this.moveTo(0);
    } else if (ev.key === "End") {
      this.moveTo(this.total - 1);
    } else if ((ev.key === "Enter" || ev.key === " ") && this.cursor >= 0) {
      this.onOpen(this.cursor);
    } else {
      return;
    }
    ev.preventDefault();
  }
}
