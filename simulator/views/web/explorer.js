// The schedule explorer (simulator/views/web/explorer.py writes the page): pick a pipeline schedule, p, m,
// v and the costs of F, B and W; see the timeline with every block labelled, the bubble measured and its
// closed form, and the activations each device keeps at most.
//
// The orders are the project's (generated in Python, stored in the page); the times come from `execute`,
// a port of simulator.parallel.schedules.timing.execute: every action starts when its rank is free and
// its inputs are done (the previous stage's forward, the next stage's backward or its input-gradient
// pass, its own forward), messages take no time. The last part of one ES module, after dom.js.

const KIND_ORDER = ["F", "B", "I", "W"];

// ---- the model: orders, times, bubble, activations ---------------------------------------------

function decode(c) {
  return c.ranks.map((text) => {
    const acts = [];
    for (let k = 0; k < text.length; k += 3)
      acts.push({ kind: text[k], stage: parseInt(text[k + 1], 36), mb: parseInt(text[k + 2], 36) });
    return acts;
  });
}

const key = (stage, kind, mb) => `${stage}${kind}${mb}`;

// Every action's [start, end] per rank, as timing.execute computes them (compute actions only).
function execute(ranks, stages, cost) {
  const present = new Set();
  for (const acts of ranks) for (const a of acts) present.add(key(a.stage, a.kind, a.mb));
  const inputs = (a) => {
    const s = a.stage;
    if (a.kind === "F") return s === 0 ? [] : [key(s - 1, "F", a.mb)];
    if (a.kind === "B" || a.kind === "I") {
      const deps = [key(s, "F", a.mb)];
      if (s < stages - 1) deps.push(key(s + 1, present.has(key(s + 1, "I", a.mb)) ? "I" : "B", a.mb));
      return deps;
    }
    return [key(s, "I", a.mb)]; // W
  };
  const finish = new Map();
  const clock = ranks.map(() => 0);
  const pos = ranks.map(() => 0);
  const out = ranks.map(() => []);
  let progress = true;
  while (progress) {
    progress = false;
    ranks.forEach((acts, r) => {
      while (pos[r] < acts.length) {
        const a = acts[pos[r]];
        const deps = inputs(a);
        if (!deps.every((d) => finish.has(d))) break;
        const start = Math.max(clock[r], ...deps.map((d) => finish.get(d)));
        const end = start + cost[a.kind];
        finish.set(key(a.stage, a.kind, a.mb), end);
        clock[r] = end;
        out[r].push([start, end, a]);
        pos[r]++;
        progress = true;
      }
    });
  }
  const stuck = ranks.findIndex((acts, r) => pos[r] < acts.length);
  if (stuck >= 0) throw new Error(`rank ${stuck} can never run ${JSON.stringify(ranks[stuck][pos[stuck]])}`);
  return out;
}

// What the page shows for one choice: the times, the step, each rank's busy and idle time, its peak.
function model(data, choice) {
  const c = data.cases[`${choice.schedule}|${choice.p}|${choice.m}|${choice.v}`];
  if (!c) return { error: `the page does not offer ${choice.schedule} with p = ${choice.p}, m = ${choice.m}, v = ${choice.v}` };
  if (c.error) return { error: c.error };
  const ranks = decode(c);
  const split = ranks.some((acts) => acts.some((a) => a.kind === "I" || a.kind === "W"));
  if (split && !(choice.W < choice.B))
    return {
      error:
        `W = ${choice.W} is not less than B = ${choice.B}: this schedule splits the backward B into its ` +
        "input-gradient pass I and its weight-gradient pass W (I = B - W), so pick W below B",
    };
  const cost = { F: choice.F, B: choice.B, I: choice.B - choice.W, W: choice.W };
  const times = execute(ranks, c.stages, cost);
  const step = Math.max(0, ...times.flat().map(([, end]) => end));
  const busy = times.map((rows) => rows.reduce((sum, [start, end]) => sum + (end - start), 0));
  const peaks = ranks.map((acts) => {
    let alive = 0;
    let peak = 0;
    for (const a of acts) {
      alive += (a.kind === "F") - (a.kind === "B" || a.kind === "W");
      peak = Math.max(peak, alive);
    }
    return peak;
  });
  return { case: c, times, step, busy, ratio: busy.map((b) => (step - b) / b), peaks, split, cost };
}

// ---- drawing -------------------------------------------------------------------------------------

const SHADES = [0, 14, 26, 36]; // lighter for a rank's later stages (v > 1)

function blockColour(kind, chunk) {
  const base = { F: [215, 48, 44], B: [22, 72, 46], I: [38, 82, 50], W: [142, 45, 40] }[kind];
  return `hsl(${base[0]} ${base[1]}% ${base[2] + SHADES[Math.min(chunk, 3)]}%)`;
}

function timeline(m, width, rowH, choice) {
  const left = 82;
  const right = 12;
  const top = 6;
  const axis = 30;
  const p = m.times.length;
  const height = top + p * rowH + axis;
  const x = (t) => left + (t / (m.step || 1)) * (width - left - right);
  const root = svg("svg", { class: "ex-timeline", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  const defs = svg("defs");
  const pattern = svg("pattern", { id: "ex-hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
  pattern.append(svg("rect", { width: 6, height: 6, fill: "#fbe9e7" }), svg("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#e57373", "stroke-width": 2 }));
  defs.append(pattern);
  root.append(defs);
  const font = clamp(Math.round(rowH * 0.42), 10, 15);
  m.times.forEach((rows, r) => {
    const y = top + r * rowH;
    const stagesHere = [...new Set(rows.map(([, , a]) => a.stage))].sort((a, b) => a - b);
    root.append(svg("text", { x: 6, y: y + rowH / 2, class: "ex-rank", "dominant-baseline": "central", "font-size": font + 1 }, `device ${r}`));
    root.append(svg("rect", { x: left, y: y + 2, width: x(m.step) - left, height: rowH - 4, fill: "url(#ex-hatch)", class: "ex-idle" }));
    for (const [start, end, a] of rows) {
      const w = x(end) - x(start);
      const chunk = stagesHere.indexOf(a.stage);
      const g = svg("g", { class: "ex-block" });
      const label = `${a.kind}${a.mb}`;
      const rect = svg("rect", {
        x: x(start),
        y: y + 2,
        width: Math.max(w, 0.5),
        height: rowH - 4,
        fill: blockColour(a.kind, chunk),
        stroke: "#fff",
        "stroke-width": w > 3 ? 1 : 0,
        "data-rank": r,
        "data-action": `${a.stage}${a.kind}${a.mb}`,
        "data-start": start,
        "data-end": end,
      });
      rect.append(svg("title", {}, `device ${r}: ${PASS_WORDS[a.kind]} of microbatch ${a.mb} through stage ${a.stage}, from ${fmt(start)} to ${fmt(end)}`));
      g.append(rect);
      if (w >= font * 0.62 * label.length + 4) {
        const light = SHADES[Math.min(chunk, 3)] >= 26;
        g.append(svg("text", { x: x(start) + w / 2, y: y + rowH / 2, "text-anchor": "middle", "dominant-baseline": "central", "font-size": font, class: light ? "ex-label ex-dark" : "ex-label" }, label));
      }
      root.append(g);
    }
  });
  const tick = niceStep(m.step / 10);
  for (let t = 0; t <= m.step + 1e-9; t += tick) {
    root.append(svg("line", { x1: x(t), x2: x(t), y1: top + p * rowH, y2: top + p * rowH + 4, stroke: "#555" }));
    root.append(svg("text", { x: x(t), y: top + p * rowH + 17, "text-anchor": "middle", class: "ex-tick" }, fmt(t)));
  }
  root.append(svg("text", { x: width - right, y: top + p * rowH + 29, "text-anchor": "end", class: "ex-tick" }, `time, in units of F = ${fmt(choice.F)}, B = ${fmt(choice.B)}${m.split ? `, I = ${fmt(m.cost.I)}, W = ${fmt(choice.W)}` : ""}`));
  return root;
}

function legend(m, choice) {
  const kinds = new Set(m.times.flat().map(([, , a]) => a.kind));
  const entry = (fill, text, extra = "") =>
    h("span", { class: "ex-legend-entry" }, h("span", { class: `ex-swatch ${extra}`, style: fill ? `background: ${fill}` : null }), text);
  const items = KIND_ORDER.filter((k) => kinds.has(k)).map((k) => entry(blockColour(k, 0), `${k}3: ${PASS_WORDS[k]} of microbatch 3`));
  items.push(entry(null, "idle: the bubble", "ex-swatch-idle"));
  if (choice.v > 1) items.push(h("span", { class: "ex-legend-entry", text: "a lighter shade: a later stage on the same device" }));
  return h("div", { class: "ex-legend" }, ...items);
}

const round = (x) => Number(x.toPrecision(3)).toString();

function summary(data, m, choice) {
  const meta = data.schedules.find((s) => s.name === choice.schedule);
  const mean = m.ratio.reduce((a, b) => a + b, 0) / m.ratio.length;
  const same = m.ratio.every((r) => Math.abs(r - m.ratio[0]) < 1e-12);
  const measured = same ? round(m.ratio[0]) + " on every device" : m.ratio.map((r, i) => `${i}: ${round(r)}`).join(", ") + `; mean ${round(mean)}`;
  const f = m.case.formula;
  const unit = choice.F === data.unit.F && choice.B === data.unit.B && (!m.split || choice.W === data.unit.W);
  let closed;
  if (!f) closed = `${meta.formula}: not stated for these p and m (measure it: the timeline shows it)`;
  else {
    closed = `${meta.formula} = ${f[0]}/${f[1]} = ${round(f[0] / f[1])}`;
    if (!unit) closed += `, with the papers' costs F = ${data.unit.F}, B = ${data.unit.B} (I = W = ${data.unit.W}); these costs measure ${round(mean)}`;
  }
  const v = m.case.stages / choice.p;
  const held =
    v > 1
      ? `${m.peaks.join(", ")} forwards through one of its ${v} stages, of ${choice.m * v} (each 1/${v} of a whole device's work)`
      : `${m.peaks.join(", ")} microbatches' forwards, of m = ${choice.m}`;
  const row = (name, text, attrs = {}) => h("div", { class: "ex-row", ...attrs }, h("span", { class: "ex-what", text: name }), h("span", { class: "ex-value", text }));
  return h(
    "div",
    { class: "ex-summary" },
    row("bubble, measured (idle / busy time)", measured, { "data-ratio": JSON.stringify(m.ratio), "data-step": m.step }),
    row("bubble, closed form", closed, { "data-formula": f ? `${f[0]}/${f[1]}` : "" }),
    row("peak activations per device", held, { "data-peaks": JSON.stringify(m.peaks) }),
    row("step time", `${fmt(m.step)} units; each device busy ${same ? fmt(m.busy[0]) : m.busy.map(fmt).join(", ")}`),
  );
}

// ---- the page ------------------------------------------------------------------------------------

export function explore(el, data) {
  const controls = {};
  const select = (name, label, values, show = (v) => String(v)) => {
    const s = h("select", { "data-control": name, "aria-label": label, onchange: () => update(true) });
    s.append(...values.map((v) => h("option", { value: v, text: show(v) })));
    controls[name] = s;
    return h("label", { class: "ex-control" }, h("span", { text: label }), s);
  };
  const title = (s) => `${s.name}: ${s.title.replace(/``/g, "")}`;
  const bar = h(
    "div",
    { class: "ex-controls" },
    select("schedule", "schedule", data.schedules.map((s) => s.name)),
    select("p", "p (devices)", data.ranks),
    select("m", "m (microbatches)", data.microbatches),
    select("v", "v (stages per device)", [1, 2, 3, 4]),
    select("F", "F", data.costs.F),
    select("B", "B", data.costs.B),
    select("W", "W", data.costs.W),
  );
  const about = h("p", { class: "ex-about" });
  const out = h("div", { class: "ex-out" });
  const root = h(
    "div",
    { class: "ex" },
    h("h1", { text: "Pipeline schedules: the order decides the bubble" }),
    bar,
    about,
    out,
  );
  el.append(root);

  const read = () => {
    const c = {};
    for (const [k, s] of Object.entries(controls)) c[k] = k === "schedule" ? s.value : Number(s.value);
    return c;
  };
  const set = (choice) => {
    for (const [k, v] of Object.entries(choice)) if (controls[k]) controls[k].value = String(v);
  };

  function update(fromControls) {
    let choice = read();
    const meta = data.schedules.find((s) => s.name === choice.schedule);
    for (const o of controls.v.options) o.disabled = !meta.virtual.includes(Number(o.value));
    if (!meta.virtual.includes(choice.v)) {
      choice.v = meta.virtual.includes(2) && meta.virtual.length === 1 ? 2 : meta.virtual[0];
      controls.v.value = String(choice.v);
    }
    about.textContent = title(meta);
    const m = model(data, choice);
    controls.W.disabled = !!(m.times && !m.split);
    root.dataset.choice = JSON.stringify(choice);
    if (fromControls) history.replaceState(null, "", "#" + new URLSearchParams(Object.entries(choice).map(([k, v]) => [k, String(v)])).toString());
    if (m.error) {
      out.replaceChildren(h("div", { class: "ex-error", role: "alert", text: m.error }));
      root.dataset.ready = "true";
      return m;
    }
    const width = Math.max(600, out.clientWidth || 1200);
    out.replaceChildren(summary(data, m, choice), legend(m, choice));
    const room = window.innerHeight - out.getBoundingClientRect().bottom - 48; // the axis and the page's margin
    let rowH = clamp(Math.floor(room / choice.p), 16, 96);
    out.append(timeline(m, width, rowH, choice));
    const over = document.documentElement.scrollHeight - window.innerHeight; // a wrapped line: take it off the rows
    if (over > 0 && rowH > 16) {
      rowH = clamp(rowH - Math.ceil(over / choice.p), 16, 96);
      out.lastChild.replaceWith(timeline(m, width, rowH, choice));
    }
    root.dataset.ready = "true";
    return m;
  }

  const fromHash = () => {
    const q = new URLSearchParams(window.location.hash.slice(1));
    const choice = { ...data.start };
    for (const k of Object.keys(choice)) if (q.has(k)) choice[k] = k === "schedule" ? q.get(k) : Number(q.get(k));
    return choice;
  };
  set(fromHash());
  update(false);
  window.addEventListener("hashchange", () => {
    set(fromHash());
    update(false);
  });
  let width = 0;
  new ResizeObserver((entries) => {
    const w = Math.round(entries[0].contentRect.width);
    if (w !== width) {
      width = w;
      requestAnimationFrame(() => update(false));
    }
  }).observe(out);

  return {
    data,
    model: (choice) => model(data, choice),
    show(choice) {
      set(choice);
      return update(true);
    },
  };
}
