// The page's fixed parts (ui/index.html): the main region every page renders into, and the
// outcome line that reports what an action did.
export const main = document.getElementById("main") as HTMLElement;
export const outcome = document.getElementById("outcome") as HTMLElement;
