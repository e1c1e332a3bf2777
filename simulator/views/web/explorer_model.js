// The schedule explorer's model (explorer.js draws it): a case's order timed as
// simulator.parallel.schedules.timing.execute times it, each rank's busy and idle time, the bubble both ways, the
// activations held at most and over time, and why a choice cannot be drawn. A plain script part of one ES module
// (see assets.py), after dom.js and schedules.js.

const KIND_INDEX = { F: 0, B: 1, I: 2, W: 3 };

// Every action's start and end per rank, as timing.execute computes them (compute actions only): for rank r,
// {acts, start, end}, start[k] and end[k] those of acts[k], its k-th action in its order. An action is a number
// here, (stage * 4 + kind) * m + microbatch, so that a step of p = 64, m = 512, v = 4 (400,000 actions) runs in a
// blink: its times sit in typed arrays, not in a map of strings or an array per action.
function execute(ranks, stages, cost) {
  let m = 1;
  for (const acts of ranks) for (const a of acts) m = Math.max(m, a.mb + 1);
  const id = (stage, kind, mb) => (stage * 4 + kind) * m + mb;
  const present = new Uint8Array(stages * 4 * m);
  const orders = ranks.map((acts) => Int32Array.from(acts, (a) => id(a.stage, KIND_INDEX[a.kind], a.mb)));
  for (const ids of orders) for (const i of ids) present[i] = 1;
  const finish = new Float64Array(stages * 4 * m).fill(-1);
  const costs = [cost.F, cost.B, cost.I, cost.W];
  const clock = ranks.map(() => 0);
  const pos = ranks.map(() => 0);
  const out = ranks.map((acts) => ({ acts, start: new Float64Array(acts.length), end: new Float64Array(acts.length) }));
  // The finish time of what action i waits for (its inputs: see timing._inputs), -1 while one is not done.
  const ready = (i) => {
    const mb = i % m;
    const kind = Math.floor(i / m) % 4;
    const s = Math.floor(i / (4 * m));
    if (kind === 0) return s === 0 ? 0 : finish[id(s - 1, 0, mb)];
    if (kind === 3) return finish[id(s, 2, mb)];
    const own = finish[id(s, 0, mb)];
    if (own < 0 || s === stages - 1) return own;
    const next = finish[id(s + 1, present[id(s + 1, 2, mb)] ? 2 : 1, mb)];
    return next < 0 ? -1 : Math.max(own, next);
  };
  let progress = true;
  while (progress) {
    progress = false;
    for (let r = 0; r < ranks.length; r++) {
      const ids = orders[r];
      while (pos[r] < ids.length) {
        const i = ids[pos[r]];
        const after = ready(i);
        if (after < 0) break;
        const start = Math.max(clock[r], after);
        const end = start + costs[Math.floor(i / m) % 4];
        finish[i] = end;
        clock[r] = end;
        out[r].start[pos[r]] = start;
        out[r].end[pos[r]] = end;
        pos[r]++;
        progress = true;
      }
    }
  }
  const stuck = ranks.findIndex((acts, r) => pos[r] < acts.length);
  if (stuck >= 0) throw new Error(`rank ${stuck} can never run ${JSON.stringify(ranks[stuck][pos[stuck]])}`);
  return out;
}

// A device's live activations over time: +1 as a forward starts, -1 as the backward (or W) that frees them
// ends. Its peak is timing.peak_activations' count, which walks the same order.
function liveOverTime({ acts, start, end }) {
  const up = []; // a rank's actions run one after another, so both lists come in time order: merge them
  const down = [];
  acts.forEach((a, k) => {
    if (a.kind === "F") up.push(start[k]);
    else if (a.kind === "B" || a.kind === "W") down.push(end[k]);
  });
  const at = new Float64Array(up.length + down.length + 1); // from at[k] on, count[k] are alive
  const count = new Int32Array(at.length);
  let live = 0;
  for (let i = 0, j = 0, k = 1; k < at.length; k++) {
    if (j >= down.length || (i < up.length && up[i] < down[j])) [at[k], count[k]] = [up[i++], ++live];
    else [at[k], count[k]] = [down[j++], --live];
  }
  return { at, count };
}

const cases = new Map(); // the last few cases' orders
function caseOf(data, choice) {
  const k = `${choice.schedule}|${choice.p}|${choice.m}|${choice.v}`;
  if (!cases.has(k)) {
    if (cases.size >= 12) cases.delete(cases.keys().next().value); // a p = 64, m = 512 order is 400,000 actions
    cases.set(k, makeCase(choice.schedule, choice.p, choice.m, choice.v, data.stored));
  }
  return cases.get(k);
}

const models = new Map(); // the last few choices' models: a redraw (a resize, a second schedule) reuses them
function model(data, choice) {
  const k = ["schedule", "p", "m", "v", "F", "B", "W"].map((x) => choice[x]).join("|");
  if (!models.has(k)) {
    if (models.size >= 6) models.delete(models.keys().next().value);
    models.set(k, timed(data, { ...choice, versus: "" })); // the second schedule is the page's to check
  }
  return models.get(k);
}

// What the page shows for one choice: the times, the step, each rank's busy and idle time, its peak.
function timed(data, choice) {
  const problem = checkChoice(data, choice);
  if (problem) return { error: problem };
  const c = caseOf(data, choice);
  if (c.error) return { error: c.error };
  const ranks = c.ranks;
  const kinds = new Set(); // the passes the order has (the legend lists only those)
  for (const acts of ranks) for (const a of acts) kinds.add(a.kind);
  const split = kinds.has("I") || kinds.has("W");
  if (split && !(choice.W < choice.B))
    return {
      error:
        `W = ${choice.W} is not less than B = ${choice.B}: this schedule splits the backward B into its ` +
        "input-gradient pass I and its weight-gradient pass W (I = B - W), so pick W below B",
    };
  const cost = { F: choice.F, B: choice.B, I: choice.B - choice.W, W: choice.W };
  const rows = execute(ranks, c.stages, cost);
  let step = 0;
  const busy = rows.map(({ start, end }) => {
    let sum = 0;
    for (let k = 0; k < start.length; k++) {
      sum += end[k] - start[k];
      step = Math.max(step, end[k]);
    }
    return sum;
  });
  const peaks = ranks.map((acts) => {
    let alive = 0;
    let peak = 0;
    for (const a of acts) {
      alive += (a.kind === "F") - (a.kind === "B" || a.kind === "W");
      peak = Math.max(peak, alive);
    }
    return peak;
  });
  let times = null;
  return {
    case: c,
    rows,
    // [start, end, action] per action, rank by rank: made when asked (the tests read it; the page reads rows)
    get times() {
      times = times || rows.map(({ acts, start, end }) => acts.map((a, k) => [start[k], end[k], a]));
      return times;
    },
    step,
    busy,
    ratio: busy.map((b) => (step - b) / b),
    share: busy.map((b) => (step - b) / step),
    peaks,
    kinds,
    split,
    cost,
    live: rows.map(liveOverTime),
  };
}

// ---- choices: what a link or the controls may ask for ------------------------------------------

const WHOLE = { p: "devices", m: "microbatches", v: "stages per device" };

// Why a choice cannot be drawn (a sentence naming the allowed values), or null.
function checkChoice(data, c) {
  const names = data.schedules.map((s) => s.name);
  for (const k of ["schedule", "versus"]) {
    if (k === "versus" && !c.versus) continue;
    if (!names.includes(c[k]))
      return `there is no schedule named "${c[k]}"${k === "versus" ? " to compare with" : ""}: choose one of ${names.join(", ")}`;
  }
  const said = (x) => (typeof x === "string" ? JSON.stringify(x) : String(x)); // a link's text that is no number, quoted
  for (const [k, what] of Object.entries(WHOLE)) {
    const [lo, hi] = data.limits[k];
    if (!Number.isInteger(c[k]) || c[k] < lo || c[k] > hi)
      return `${k} = ${said(c[k])} is not offered: ${k} (${what}) is a whole number from ${lo} to ${hi}`;
  }
  for (const k of ["F", "B", "W"])
    if (!data.costs[k].includes(c[k])) return `${k} = ${said(c[k])} is not offered: ${k} is one of ${data.costs[k].join(", ")}`;
  return null;
}

// The stages per device a schedule runs with: the chosen v where it loops, 2 for a V, else 1.
function virtualFor(meta, v) {
  return meta.virtual.includes(v) ? v : meta.virtual.includes(2) && meta.virtual.length === 1 ? 2 : meta.virtual[0];
}

