// The project's pipeline schedules, generated in the page: a port of simulator/parallel/schedules (classic.py,
// looped.py, v.py), so the explorer offers any p and m without storing every case. The browser tests hold each
// generator to Python's, action for action, for p 2..8 and m 1..16 and for large cases up to p = 64, m = 512.
// An order is one list of compute actions per rank, {kind, stage, mb}; a refusal throws the generator's words.
// A plain script part of one ES module (see assets.py), after dom.js.

function act(stage, kind, mb) {
  return { kind, stage, mb };
}

// Per (stage, kind), the next microbatch: each stage takes its microbatches in order.
function counter() {
  const next = new Map();
  const get = (stage, kind) => next.get(`${stage}${kind}`) || 0;
  return {
    get,
    bump: (stage, kind) => next.set(`${stage}${kind}`, get(stage, kind) + 1),
    take(stage, kind) {
      const i = get(stage, kind);
      next.set(`${stage}${kind}`, i + 1);
      return act(stage, kind, i);
    },
  };
}

const range = (n) => [...Array(Math.max(0, n)).keys()];

function gpipe(p, m) {
  return range(p).map((r) => [...range(m).map((i) => act(r, "F", i)), ...range(m).map((i) => act(r, "B", i))]);
}

function oneFOneB(p, m) {
  return range(p).map((r) => {
    const warmup = Math.min(p - r - 1, m);
    const seq = range(warmup).map((i) => act(r, "F", i));
    for (let j = 0; j < m - warmup; j++) seq.push(act(r, "F", warmup + j), act(r, "B", j));
    for (let j = m - warmup; j < m; j++) seq.push(act(r, "B", j));
    return seq;
  });
}

function zbH1(p, m) {
  return range(p).map((r) => {
    const warmup = Math.min(p - r, m);
    const seq = range(warmup).map((i) => act(r, "F", i));
    let held = 0;
    for (let k = 0; k < m; k++) {
      seq.push(act(r, "I", k));
      if (k >= r) seq.push(act(r, "W", held++)); // the first r weight passes wait until the end
      if (warmup + k < m) seq.push(act(r, "F", warmup + k));
    }
    for (let j = held; j < m; j++) seq.push(act(r, "W", j));
    return seq;
  });
}

// looped.py's microbatches_per_round, with its words where m does not split into equal rounds.
function perRound(p, m, what) {
  const rounds = Math.max(1, Math.floor(m / p));
  if (m % rounds) {
    const lower = m - (m % rounds);
    throw new Error(
      `${what} sends microbatches through in ${rounds} rounds (m // p = ${m} // ${p}) of equal size: ${m} ` +
        `microbatches do not split into ${rounds} equal rounds; use a multiple of ${rounds} ` +
        `(e.g. ${lower} or ${lower + rounds})`,
    );
  }
  return m / rounds;
}

function interleavedOrder(p, m, v, rank, warmup, zeroBubble, round) {
  const total = m * v;
  const back = zeroBubble ? "I" : "B";
  const fwdStage = (k) => (Math.floor(k / round) % v) * p + rank;
  const bwdStage = (j) => (v - 1 - (Math.floor(j / round) % v)) * p + rank;
  const c = counter();
  const seq = range(warmup).map((k) => c.take(fwdStage(k), "F"));
  const backwards = [];
  let weights = 0;
  for (let k = warmup; k < total + warmup; k++) {
    if (k < total) seq.push(c.take(fwdStage(k), "F"));
    backwards.push(bwdStage(k - warmup));
    seq.push(c.take(backwards[backwards.length - 1], back));
    if (zeroBubble && k - warmup >= rank) seq.push(c.take(backwards[weights++], "W"));
  }
  if (zeroBubble) for (const stage of backwards.slice(weights)) seq.push(c.take(stage, "W"));
  return seq;
}

function interleaved1F1B(p, m, v) {
  const round = perRound(p, m, "interleaved 1F1B");
  return range(p).map((r) =>
    interleavedOrder(p, m, v, r, Math.min((v - 1) * round + 2 * (p - 1 - r), m * v), false, round),
  );
}

function interleavedZB(p, m, v) {
  const round = perRound(p, m, "interleaved zero bubble");
  return range(p).map((r) => interleavedOrder(p, m, v, r, Math.min((v - 1) * round + (p - 1 - r), m * v), true, round));
}

function loopedBFS(p, m, v) {
  return range(p).map((r) => {
    const stages = range(v).map((k) => r + k * p);
    const seq = stages.flatMap((s) => range(m).map((i) => act(s, "F", i)));
    for (const s of [...stages].reverse()) for (let i = m - 1; i >= 0; i--) seq.push(act(s, "B", i));
    return seq;
  });
}

function zbv(p, m) {
  const n = Math.max(2 * p - 1, m);
  return range(p).map((r) => {
    const a = r;
    const b = 2 * p - 1 - r;
    const c = counter();
    const seq = range(2 * (p - r) - 1).map(() => c.take(a, "F"));
    for (let k = 0; k < r; k++) seq.push(c.take(b, "F"), c.take(a, "F"));
    for (let k = 0; k < p - r; k++) seq.push(c.take(b, "F"), c.take(b, "I"), c.take(b, "W"));
    while (c.get(b, "F") < c.get(a, "F") || c.get(a, "F") < n) {
      if (c.get(a, "F") < n) seq.push(c.take(a, "F"));
      seq.push(c.take(a, "I"), c.take(a, "W"), c.take(b, "F"), c.take(b, "I"), c.take(b, "W"));
    }
    for (let k = 0; k < r; k++) seq.push(c.take(a, "I"), c.take(b, "I"));
    for (let k = 0; k < p - r; k++) seq.push(c.take(a, "I"), c.take(a, "W"));
    while (c.get(b, "W") < c.get(b, "I")) seq.push(c.take(b, "W"));
    while (c.get(a, "W") < c.get(a, "I")) seq.push(c.take(a, "W"));
    return seq.filter((x) => x.mb < m);
  });
}

function dualpipeV(p, m) {
  if (m < 2 * p)
    throw new Error(
      `DualPipeV needs at least as many microbatches as stages: ${2 * p} stages on ${p} ranks need m >= ${2 * p}, got ${m}`,
    );
  return range(p).map((r) => {
    const a = r;
    const b = 2 * p - 1 - r;
    const c = counter();
    const held = []; // I passes whose W comes later, oldest first
    const seq = [];
    const run = (stage, kind) => {
      if (kind === "B") {
        // a full backward counts as both parts, so the I and W counters stay in step
        const i = c.take(stage, "I").mb;
        c.take(stage, "W");
        seq.push(act(stage, "B", i));
        return;
      }
      const done = c.take(stage, kind);
      if (kind === "I") held.push(act(stage, "W", done.mb));
      seq.push(done);
    };
    const weight = () => {
      if (!held.length) return;
      const w = held.shift();
      c.bump(w.stage, "W");
      seq.push(w);
    };
    const pair = (forward, backward) => {
      run(forward, "F");
      run(backward, "B");
    };
    for (let k = 0; k < 2 * (p - r - 1); k++) run(a, "F");
    for (let k = 0; k < r + 1; k++) {
      run(a, "F");
      run(b, "F");
    }
    for (let k = 0; k < p - r - 1; k++) {
      run(b, "I");
      weight();
      run(b, "F");
    }
    for (let i = 0; i < m - 2 * p + r + 1; i++) {
      if (i === 0 && r === p - 1) {
        run(a, "F");
        run(b, "B");
      } else pair(a, b);
      pair(b, a);
    }
    for (let k = 0; k < p - r - 1; k++) {
      run(b, "B");
      pair(b, a);
    }
    let split = false;
    for (let i = 0; i < r + 1; i++) {
      if (i === Math.floor((r + 1) / 2) && r % 2 === 1) split = true;
      run(b, split ? "I" : "B");
      if (i === Math.floor((r + 1) / 2) && r % 2 === 0) split = true;
      run(a, split ? "I" : "B");
    }
    for (let k = 0; k < p - r - 1; k++) {
      weight();
      run(a, split ? "I" : "B");
    }
    for (let k = 0; k < r + 1; k++) weight();
    return seq;
  });
}

// name -> (p, m, v) -> {ranks, stages}; v is used by the looped schedules only (the V-shaped ones have 2).
const GENERATORS = {
  gpipe: (p, m) => ({ ranks: gpipe(p, m), stages: p }),
  "1f1b": (p, m) => ({ ranks: oneFOneB(p, m), stages: p }),
  "interleaved-1f1b": (p, m, v) => ({ ranks: interleaved1F1B(p, m, v), stages: p * v }),
  "zb-h1": (p, m) => ({ ranks: zbH1(p, m), stages: p }),
  "looped-bfs": (p, m, v) => ({ ranks: loopedBFS(p, m, v), stages: p * v }),
  "interleaved-zb": (p, m, v) => ({ ranks: interleavedZB(p, m, v), stages: p * v }),
  zbv: (p, m) => ({ ranks: zbv(p, m), stages: 2 * p }),
  "dualpipe-v": (p, m) => ({ ranks: dualpipeV(p, m), stages: 2 * p }),
};

// The bubble in closed form (bubbles.py's bubble_ratio), idle over busy, as [numerator, denominator], or null.
function bubbleFraction(name, p, m, v) {
  if (name === "gpipe" || name === "1f1b") return [p - 1, m];
  if (name === "interleaved-1f1b" || name === "looped-bfs") return [p - 1 + (v - 1) * Math.max(0, p - m), v * m];
  if (name === "zb-h1") return [p - 1 + Math.max(0, p - m), 3 * m];
  if (name === "interleaved-zb") return m >= p ? [p - 1, 3 * v * m] : null;
  if (name === "zbv") return m >= 2 * p - 1 ? [p - 1, 6 * m] : null;
  if (name === "dualpipe-v") return m >= 2 * p ? [p - 1, 6 * m] : null;
  return null;
}

// One case: {ranks, stages, formula} or {error}. A schedule not ported here (a record added in Python only) comes
// from the orders Python stored in the page for small cases (explorer.py's offered), [kind, stage, mb] each.
function makeCase(name, p, m, v, stored = { cases: {} }) {
  const make = GENERATORS[name];
  if (!make) {
    const c = stored.cases[`${name}|${p}|${m}|${v}`];
    if (!c) {
      const [[p0, p1], [m0, m1]] = [stored.p || [0, 0], stored.m || [0, 0]];
      return {
        error:
          `the page holds schedule "${name}" for p ${p0} to ${p1} and m ${m0} to ${m1} only: port its generator ` +
          "to schedules.js for other sizes",
      };
    }
    if (c.error) return c;
    return { ...c, ranks: c.ranks.map((acts) => acts.map(([kind, stage, mb]) => act(stage, kind, mb))) };
  }
  try {
    const made = make(p, m, v);
    const g = made.stages > 0 ? bubbleFraction(name, p, m, v) : null;
    const d = g ? gcd(g[0], g[1]) : 1;
    return { ...made, formula: g ? [g[0] / d, g[1] / d] : null };
  } catch (exc) {
    return { error: exc.message };
  }
}

function gcd(a, b) {
  return b ? gcd(b, a % b) : Math.abs(a) || 1;
}
