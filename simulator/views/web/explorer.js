// The schedule explorer (simulator/views/web/explorer.py writes the page): pick a pipeline schedule, p, m, v and
// the costs of F, B and W, and optionally a second schedule to compare on the same time axis; see each timeline
// (blocks labelled where they have room), the bubble as idle / busy and as idle / total (measured, and each
// closed form), the activations each device keeps at most, and those it keeps over time.
//
// The orders come from schedules.js (the project's generators, ported); the times from `execute` in
// explorer_model.js, a port of simulator.parallel.schedules.timing.execute: every action starts when its rank
// is free and its inputs are done (the previous stage's forward, the next stage's backward or its input-gradient
// pass, its own forward); messages take no time. Drawn on canvases, so p = 64 and m = 512 (hundreds of thousands
// of blocks) draw at once (explorer_paint.js paints them pixel by pixel).
// The last part of one ES module, after dom.js, schedules.js, explorer_model.js and explorer_paint.js.

const KIND_ORDER = ["F", "B", "I", "W"];

// ---- drawing -------------------------------------------------------------------------------------

const SHADES = [0, 14, 26, 36]; // lighter for a rank's later stages (v > 1)
const IDLE = "#f6c9c4";
const LEFT = 86; // room for "device 12"

const BLOCK_HSL = { F: [215, 48, 44], B: [22, 72, 46], I: [38, 82, 50], W: [142, 45, 40] };
const BLOCK_COLOURS = Object.fromEntries(
  Object.entries(BLOCK_HSL).map(([k, [hue, sat, light]]) => [k, SHADES.map((s) => `hsl(${hue} ${sat}% ${light + s}%)`)]),
);

function blockColour(kind, chunk) {
  return BLOCK_COLOURS[kind][Math.min(chunk, 3)];
}

function canvasOf(width, height, cls) {
  const canvas = h("canvas", { class: cls });
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return { canvas, ctx };
}

// Device names down the left, every `every`-th where the rows are too thin for all.
function rankNames(ctx, p, rowH, top, font) {
  const every = Math.max(1, Math.ceil((font + 2) / rowH));
  ctx.fillStyle = "#333";
  ctx.font = `${font}px system-ui, sans-serif`;
  ctx.textBaseline = "middle";
  ctx.textAlign = "left";
  const bottom = top + p * rowH;
  const rows = [];
  for (let r = 0; r < p; r += every) {
    const y = top + r * rowH + rowH / 2;
    if (y + font / 2 > bottom + 1 && r > 0) break; // a name that would spill past the chart
    rows.push([r, clamp(y, font / 2 + 1, Math.max(font / 2 + 1, bottom - font / 2))]);
  }
  // Rows too thin for a second name: one name for them all, so "device 0" does not stand for every row.
  if (rows.length === 1 && p > 1) {
    const all = `devices 0-${p - 1}`;
    if (ctx.measureText(all).width > LEFT - 8) ctx.font = "12px system-ui, sans-serif";
    ctx.fillText(all, 6, (top + bottom) / 2);
    ctx.canvas.dataset.names = JSON.stringify([all]); // for the tests: the canvas keeps no text
    return;
  }
  for (const [r, y] of rows) ctx.fillText(`device ${r}`, 6, y);
  ctx.canvas.dataset.names = JSON.stringify(rows.map(([r]) => `device ${r}`));
}

// One schedule's timeline on a canvas; returns it, and what it drew (for the tests: every block, its label).
// Blocks of one colour are filled as one path; past PAINT_ABOVE blocks (p = 64, m = 512 has up to 400,000) they
// are painted pixel by pixel instead (explorer_paint.js), each pixel mixing the colours that cover it.
function timeline(m, width, rowH, span) {
  const top = 4;
  const p = m.rows.length;
  const height = top + p * rowH;
  const x = (t) => LEFT + (t / (span || 1)) * (width - LEFT - 12);
  const { canvas, ctx } = canvasOf(width, height, "ex-timeline");
  const font = clamp(Math.round(rowH * 0.42), 12, 15);
  const gap = rowH >= 8 ? 2 : 0;
  const painted = m.rows.reduce((sum, row) => sum + row.acts.length, 0) > PAINT_ABOVE;
  // A rank's stages in order: its later ones are drawn lighter.
  const chunks = m.rows.map(({ acts }) => {
    const stages = [...new Set(acts.map((a) => a.stage))].sort((a, b) => a - b);
    return new Map(stages.map((s, k) => [s, Math.min(k, 3)]));
  });
  if (painted) {
    const palette = [IDLE, ...KIND_ORDER.flatMap((k) => BLOCK_COLOURS[k])]; // idle, then each pass's four shades
    const spans = (r, add) => {
      add(0, x(0), x(m.step));
      const { acts, start, end } = m.rows[r];
      acts.forEach((a, k) => add(1 + 4 * KIND_ORDER.indexOf(a.kind) + chunks[r].get(a.stage), x(start[k]), x(end[k]), 0));
    };
    paintRows(canvas, ctx, palette, p, spans, (r) => top + r * rowH + gap, rowH - 2 * gap);
  } else {
    ctx.fillStyle = IDLE;
    for (let r = 0; r < p; r++) ctx.fillRect(LEFT, top + r * rowH + gap, x(m.step) - LEFT, rowH - 2 * gap);
  }
  // A label at the row's size where it fits the block, else at 12 px, else none (the tooltip-free canvas keeps
  // the legend's words: F3 is microbatch 3's forward).
  const fonts = [font, 12].filter((f, k, all) => all.indexOf(f) === k && rowH >= f + 2);
  const fits = (label, w) => {
    for (const f of fonts) {
      ctx.font = `600 ${f}px system-ui, sans-serif`;
      if (ctx.measureText(label).width + 4 <= w) return f;
    }
    return null;
  };
  const paths = new Map(); // colour -> Path2D
  const labels = [];
  const labelled = new Set(); // "rank|action" of the blocks with a label
  m.rows.forEach(({ acts, start: starts, end: ends }, r) => {
    const y = top + r * rowH;
    for (let k = 0; k < acts.length; k++) {
      const start = starts[k];
      const end = ends[k];
      const a = acts[k];
      const w = x(end) - x(start);
      const chunk = chunks[r].get(a.stage);
      if (!painted) {
        const colour = blockColour(a.kind, chunk);
        if (!paths.has(colour)) paths.set(colour, new Path2D());
        paths.get(colour).rect(x(start), y + gap, Math.max(w - (w > 3 ? 1 : 0), 0.5), rowH - 2 * gap);
      }
      if (!fonts.length || w < 2 * 6 + 4) continue; // no room for two characters: no label
      const label = `${a.kind}${a.mb}`;
      const size = w >= label.length * 6 + 4 ? fits(label, w) : null;
      if (size) {
        labels.push([label, x(start) + w / 2, y + rowH / 2, SHADES[chunk] >= 26, size]);
        labelled.add(`${r}|${a.stage}${a.kind}${a.mb}`);
      }
    }
  });
  for (const [colour, path] of paths) {
    ctx.fillStyle = colour;
    ctx.fill(path);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "middle";
  for (const [label, lx, ly, dark, size] of labels) {
    ctx.font = `600 ${size}px system-ui, sans-serif`;
    ctx.fillStyle = dark ? "#1d2330" : "#fff";
    ctx.fillText(label, lx, ly);
  }
  rankNames(ctx, p, rowH, top, Math.min(15, Math.max(12, font)));
  const drawn = () =>
    m.times.flatMap((rows, r) =>
      rows.map(([start, end, a]) => {
        const action = `${a.stage}${a.kind}${a.mb}`;
        return [r, action, start, end, labelled.has(`${r}|${action}`) ? `${a.kind}${a.mb}` : null];
      }),
    );
  return { canvas, drawn, x };
}

// Each device's live activations over time, on the timeline's axis: a filled step line per device, or where the
// rows are too thin, a shade of blue per level, painted pixel by pixel (explorer_paint.js); the peak at the right.
function memoryChart(m, width, rowH, x) {
  const p = m.live.length;
  const height = p * rowH + 2;
  const { canvas, ctx } = canvasOf(width, height, "ex-memory");
  const top = Math.max(1, ...m.peaks);
  if (rowH >= 10) {
    m.live.forEach(({ at, count }, r) => {
      const y0 = 1 + (r + 1) * rowH;
      ctx.fillStyle = "#e8eef8";
      ctx.fillRect(LEFT, y0 - rowH + 1, x(m.step) - LEFT, rowH - 1);
      ctx.fillStyle = "#3f6fb5";
      ctx.beginPath();
      ctx.moveTo(x(0), y0);
      for (let k = 0; k < at.length; k++) {
        ctx.lineTo(x(at[k]), y0 - ((k ? count[k - 1] : 0) / top) * (rowH - 3));
        ctx.lineTo(x(at[k]), y0 - (count[k] / top) * (rowH - 3));
      }
      ctx.lineTo(x(m.step), y0 - (count[at.length - 1] / top) * (rowH - 3));
      ctx.lineTo(x(m.step), y0);
      ctx.closePath();
      ctx.fill();
    });
  } else {
    const shades = Array.from({ length: 12 }, (_, k) => `hsl(215 55% ${94 - (58 * (k + 1)) / 12}%)`); // level 1..12
    const spans = (r, add) => {
      const { at, count } = m.live[r];
      for (let k = 0; k < at.length; k++) {
        const level = Math.round((12 * count[k]) / top);
        if (level) add(level - 1, x(at[k]), x(k + 1 < at.length ? at[k + 1] : m.step));
      }
    };
    paintRows(canvas, ctx, shades, p, spans, (r) => 1 + r * rowH, rowH);
  }
  rankNames(ctx, p, rowH, 1, clamp(Math.round(rowH * 0.7), 12, 14));
  return canvas;
}

function axis(width, span, x, choice, split, cost) {
  const { canvas, ctx } = canvasOf(width, 34, "ex-axis");
  ctx.fillStyle = "#444";
  ctx.font = "13px system-ui, sans-serif";
  ctx.textAlign = "center";
  const tick = niceStep(span / 10);
  for (let t = 0; t <= span + 1e-9; t += tick) {
    ctx.fillRect(x(t), 0, 1, 4);
    ctx.fillText(fmt(t), x(t), 16);
  }
  ctx.textAlign = "right";
  const costs = `F = ${fmt(choice.F)}, B = ${fmt(choice.B)}${split ? `, I = ${fmt(cost.I)}, W = ${fmt(choice.W)}` : ""}`;
  ctx.fillText(`time, in units of ${costs}`, width - 12, 31);
  return canvas;
}

function legend(models, choice) {
  const kinds = new Set(models.flatMap((m) => [...m.kinds]));
  const entry = (fill, text, extra = "") =>
    h("span", { class: "ex-legend-entry" }, h("span", { class: `ex-swatch ${extra}`, style: fill ? `background: ${fill}` : null }), text);
  const items = KIND_ORDER.filter((k) => kinds.has(k)).map((k) => entry(blockColour(k, 0), `${k}3: ${PASS_WORDS[k]} of mb 3`));
  items.push(entry(IDLE, "idle: the bubble"));
  items.push(entry("#3f6fb5", "activations held"));
  if (choice.v > 1) items.push(h("span", { class: "ex-legend-entry", text: "lighter: a later stage on the device" }));
  return h("div", { class: "ex-legend" }, ...items);
}

// ---- the page ------------------------------------------------------------------------------------

export function explore(el, data) {
  const controls = {};
  // Typing 512, or holding a spinner's arrow, redraws once the keys pause, not at each digit or step.
  let pending = 0;
  const soon = () => {
    clearTimeout(pending);
    pending = setTimeout(() => update(true), 150);
  };
  const select = (name, label, values, show = (v) => String(v)) => {
    const s = h("select", { "data-control": name, "aria-label": label, onchange: () => update(true) });
    s.append(...values.map((v) => h("option", { value: v, text: show(v) })));
    controls[name] = s;
    return h("label", { class: "ex-control" }, h("span", { text: label }), s);
  };
  const number = (name, label, [lo, hi]) => {
    const input = h("input", { type: "number", min: lo, max: hi, step: 1, "data-control": name, "aria-label": label, title: `${lo} to ${hi}`, oninput: soon, onchange: () => update(true) });
    controls[name] = input;
    return h("label", { class: "ex-control" }, h("span", { text: label }), input);
  };
  const names = data.schedules.map((s) => s.name);
  const bar = h(
    "div",
    { class: "ex-controls" },
    select("schedule", "schedule", names),
    select("versus", "beside", ["", ...names], (v) => v || "(none)"),
    number("p", "p devices", data.limits.p),
    number("m", "m microbatches", data.limits.m),
    select("v", "v stages/device", [1, 2, 3, 4]),
    select("F", "F", data.costs.F),
    select("B", "B", data.costs.B),
    select("W", "W", data.costs.W),
  );
  const about = h("p", { class: "ex-about" });
  const out = h("div", { class: "ex-out" });
  const root = h("div", { class: "ex" }, h("h1", { text: "Pipeline schedules: the order decides the bubble" }), bar, about, out);
  el.append(root);
  let drawn = [];

  const read = () => {
    const c = {};
    for (const [k, s] of Object.entries(controls)) c[k] = k === "schedule" || k === "versus" ? s.value : Number(s.value);
    return c;
  };
  const set = (choice) => {
    for (const k of ["schedule", "versus"]) if ([...names, ""].includes(choice[k])) controls[k].value = choice[k];
    for (const k of ["p", "m", "v", "F", "B", "W"]) if (choice[k] !== undefined) controls[k].value = String(choice[k]);
  };
  const fail = (text) => {
    out.replaceChildren(h("div", { class: "ex-error", role: "alert", text }));
    drawn = [];
    root.dataset.ready = "true";
    return { error: text };
  };

  function draw(choice) {
    const problem = checkChoice(data, choice);
    root.dataset.choice = JSON.stringify(choice);
    if (problem) return fail(problem);
    const meta = data.schedules.find((s) => s.name === choice.schedule);
    for (const o of controls.v.options) o.disabled = !meta.virtual.includes(Number(o.value));
    choice.v = virtualFor(meta, choice.v);
    controls.v.value = String(choice.v);
    root.dataset.choice = JSON.stringify(choice);
    const picks = [choice.schedule, ...(choice.versus ? [choice.versus] : [])];
    const shown = [];
    for (const name of picks) {
      const sMeta = data.schedules.find((s) => s.name === name);
      const v = virtualFor(sMeta, choice.v);
      const m = model(data, { ...choice, schedule: name, v });
      if (m.error) return fail(picks.length > 1 ? `${name}: ${m.error}` : m.error);
      shown.push({ choice: { ...choice, schedule: name, v }, meta: sMeta, m, v });
    }
    about.textContent = shown.map((s) => `${s.meta.name}: ${s.meta.title.replace(/``/g, "")}`).join("  |  ");
    controls.W.disabled = !shown.some((s) => s.m.split);
    drawnWidth = out.clientWidth;
    const width = Math.max(600, drawnWidth || 1200);
    out.replaceChildren(summary(data, shown), legend(shown.map((s) => s.m), choice));
    const span = Math.max(...shown.map((s) => s.m.step));
    const head = out.childElementCount;
    const panels = (room) => {
      while (out.childElementCount > head) out.lastChild.remove();
      const per = room / shown.length; // each schedule: its timeline (about 3/4) and its memory (1/4)
      // A device's row: whole pixels where there is room, else a fraction of one (64 devices twice, and their
      // memory, on one screen: rows share pixels rather than push the axis off the screen).
      const row = (share, most) => (share >= choice.p ? Math.min(most, Math.floor(share / choice.p)) : Math.max(0.25, share / choice.p));
      const rowH = row(0.72 * per, 60);
      const memH = row(0.28 * per, 24);
      drawn = [];
      let x = null;
      for (const s of shown) {
        const t = timeline(s.m, width, rowH, span);
        x = t.x;
        drawn.push(t.drawn);
        const title = `${s.choice.schedule}${s.v > 1 ? `, v = ${s.v}` : ""}: timeline, then activations held over time (peak ${Math.max(...s.m.peaks)})`;
        out.append(h("div", { class: "ex-panel", "data-schedule": s.choice.schedule }, h("div", { class: "ex-panel-title", text: title }), t.canvas, memoryChart(s.m, width, memH, t.x)));
      }
      out.append(axis(width, span, x, choice, shown.some((s) => s.m.split), shown[0].m.cost));
    };
    const room = Math.max(120, window.innerHeight - out.getBoundingClientRect().bottom - 46 - 26 * shown.length);
    panels(room);
    const over = document.documentElement.scrollHeight - window.innerHeight; // rounding, a wrapped line: less room
    if (over > 0 && room > 120) panels(Math.max(120, room - over - 2));
    root.dataset.ready = "true";
    return shown[0].m;
  }

  let again = () => draw(read()); // what a resize redraws: the last choice, or the link's error
  function update(fromControls) {
    clearTimeout(pending);
    again = () => draw(read());
    const choice = read();
    const result = draw(choice);
    if (fromControls) {
      const c = JSON.parse(root.dataset.choice);
      if (!c.versus) delete c.versus;
      history.replaceState(null, "", "#" + new URLSearchParams(Object.entries(c).map(([k, v]) => [k, String(v)])).toString());
    }
    return result;
  }

  // A link's choice: every key known, every value a number where one is due (else the link is named wrong).
  const fromHash = () => {
    const q = new URLSearchParams(window.location.hash.slice(1));
    const choice = { ...data.start, versus: "" };
    for (const [k, v] of q) {
      if (!(k in choice)) return { problem: `the link names "${k}", which the page does not know: it takes ${Object.keys(choice).join(", ")}` };
      const number = v.trim() === "" ? NaN : Number(v);
      choice[k] = k === "schedule" || k === "versus" || Number.isNaN(number) ? v : number; // "abc" is named as typed
    }
    return { choice };
  };
  const follow = () => {
    again = follow;
    const { choice, problem } = fromHash();
    if (problem) return fail(problem);
    set(choice);
    return draw(choice);
  };
  let drawnWidth = -1; // the width the panels were drawn for: a resize to another redraws them, once
  follow();
  window.addEventListener("hashchange", follow);
  new ResizeObserver(() => {
    if (out.clientWidth !== drawnWidth) {
      drawnWidth = out.clientWidth;
      requestAnimationFrame(() => again());
    }
  }).observe(out);

  return {
    data,
    model: (choice) => model(data, choice),
    drawn: () => drawn.map((list) => list()),
    show(choice) {
      set(choice);
      return update(true);
    },
  };
}
