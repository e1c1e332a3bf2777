// The timeline under the cards: one row per device, ops as blocks coloured by their pass (forward,
// backward, weight gradients; other work grey) and labelled with pass and microbatch ("F3", "B3") where
// they have room, messages as lines from the sender at its send time to the receiver at its arrival,
// a legend of what appears, and a cursor on the current event. Drawn once on a canvas (fast for tens
// of thousands of events); a second canvas on top holds the cursor, redrawn at every step.

function makeTimeline(doc, marks, onPick, { present = false } = {}) {
  const events = doc.events;
  const base = doc.base;
  const devices = doc.devices;
  const rowH = present // a fifth of the screen's height (the cards have the most of it), at most 26 px a row
    ? clamp(Math.floor((0.2 * (window.innerHeight || 720)) / devices), 3, 26)
    : devices <= 8 ? 22 : Math.max(4, Math.floor(360 / devices));
  const font = present ? 13 : 11;
  const left = present ? 74 : 64;
  const top = 4;
  const axis = present ? 20 : 18;
  const height = top + devices * rowH + axis;
  let t0 = Infinity;
  let t1 = -Infinity;
  for (const e of events) {
    t0 = Math.min(t0, e.t);
    t1 = Math.max(t1, e.t1 ?? e.t);
  }
  if (!(t1 > t0)) t1 = t0 + 1;
  const blocks = mergedBlocks(events);
  const backCanvas = h("canvas", { class: "psv-timeline-back" });
  const frontCanvas = h("canvas", { class: "psv-timeline-front" });
  const box = h("div", { class: "psv-timeline-box", style: `height: ${height}px` }, backCanvas, frontCanvas);
  const node = h(
    "div",
    { class: "psv-timeline", "data-cursor": -1 },
    h(
      "div",
      { class: "psv-timeline-head" },
      h("span", { class: "psv-timeline-title", text: `timeline (${doc.time.unit}); click to jump` }),
      legend(events, marks),
    ),
    box,
  );
  let width = 0;
  let current = -1;
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - 8);
  const y = (r) => top + r * rowH + rowH / 2;

  function size(canvas) {
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.max(1, Math.round(width * ratio));
    canvas.height = Math.round(height * ratio);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    return ctx;
  }

  function draw() {
    width = box.clientWidth || 800;
    const ctx = size(backCanvas);
    ctx.font = `${font}px sans-serif`;
    ctx.textBaseline = "middle";
    const every = Math.ceil(devices / Math.floor((devices * rowH) / (font + 3)));
    for (let r = 0; r < devices; r++) {
      if (r % 2) {
        ctx.fillStyle = "rgba(128,128,128,0.08)";
        ctx.fillRect(left, top + r * rowH, width - left, rowH);
      }
      if (r % every === 0) {
        ctx.fillStyle = "#444";
        ctx.fillText(`device ${r}`, 4, y(r));
      }
    }
    const gap = rowH >= 12 ? 2 : 0;
    for (let i = 0; i < events.length; i++) {
      const e = events[i];
      if (e.k === "op") {
        ctx.fillStyle = marks.has(i) ? BAD_COLOUR : e.tg ? PASS_COLOURS[e.tg[0]] : OTHER_COLOUR;
        ctx.fillRect(x(e.t), top + e.r * rowH + gap, Math.max(1, x(e.t1) - x(e.t)), rowH - 2 * gap);
      } else if (e.k === "send") {
        ctx.strokeStyle = marks.has(i) ? BAD_COLOUR : "rgba(70,70,70,0.55)";
        ctx.lineWidth = marks.has(i) ? 2.5 : 1;
        ctx.beginPath();
        ctx.moveTo(x(e.t), y(e.r));
        ctx.lineTo(x(e.t1 ?? e.t), y(e.o));
        ctx.stroke();
        ctx.lineWidth = 1;
      }
    }
    if (rowH >= 14) {
      ctx.fillStyle = "#fff";
      for (const b of blocks) {
        const w = x(b.t1) - x(b.t0);
        if (w < ctx.measureText(b.label).width + 6) continue;
        ctx.save();
        ctx.beginPath();
        ctx.rect(x(b.t0), top + b.r * rowH, w, rowH);
        ctx.clip();
        ctx.textAlign = "center";
        ctx.fillText(b.label, x(b.t0) + w / 2, y(b.r));
        ctx.restore();
      }
    }
    ctx.fillStyle = "#444";
    ctx.textBaseline = "alphabetic";
    ctx.textAlign = "center";
    const axisY = top + devices * rowH + axis - 5;
    const tick = niceStep((t1 - t0) / (present ? 8 : 6));
    for (let t = Math.ceil(t0 / tick) * tick; t <= t1 + tick * 1e-9; t += tick) {
      ctx.fillRect(x(t), top + devices * rowH, 1, 3);
      ctx.fillText(fmt(Number(t.toPrecision(12))), clamp(x(t), left, width - 20), axisY);
    }
    drawCursor();
  }

  function drawCursor() {
    const ctx = size(frontCanvas);
    node.dataset.cursor = current;
    if (current < 0) return;
    const e = events[current];
    ctx.strokeStyle = marks.has(current) ? BAD_COLOUR : "#111";
    ctx.lineWidth = 2;
    if (e.k === "op") ctx.strokeRect(x(e.t) - 1, top + e.r * rowH + 1, Math.max(2, x(e.t1) - x(e.t)) + 2, rowH - 2);
    if (e.k === "send") {
      ctx.beginPath();
      ctx.moveTo(x(e.t), y(e.r));
      ctx.lineTo(x(e.t1 ?? e.t), y(e.o));
      ctx.stroke();
    }
    ctx.strokeStyle = "#e08a00";
    ctx.beginPath();
    ctx.moveTo(x(e.t), top);
    ctx.lineTo(x(e.t), top + devices * rowH);
    ctx.stroke();
  }

  frontCanvas.addEventListener("click", (ev) => {
    const rect = frontCanvas.getBoundingClientRect();
    const t = t0 + ((ev.clientX - rect.left - left) / (width - left - 8)) * (t1 - t0);
    let pick = 0; // the step after the last event at or before the clicked time
    for (let i = base; i < events.length; i++) if (events[i].t <= t) pick = i - base + 1;
    onPick(pick);
  });

  return {
    node,
    draw,
    cursor(i) {
      current = i;
      if (width) drawCursor();
    },
  };
}

// Consecutive ops of one device with the same label that touch, as one labelled block: a stage's
// forward over several layers is one "F3". Ops of other work keep their own names.
function mergedBlocks(events) {
  const open = new Map(); // device -> its last block
  const out = [];
  for (const e of events) {
    if (e.k !== "op" || !(e.t1 > e.t)) continue;
    const label = e.tg || e.n || "";
    const last = open.get(e.r);
    if (last && last.label === label && e.t - last.t1 <= 1e-9 * Math.max(1, Math.abs(e.t))) {
      last.t1 = Math.max(last.t1, e.t1);
      continue;
    }
    const b = { r: e.r, t0: e.t, t1: e.t1, label };
    open.set(e.r, b);
    out.push(b);
  }
  return out;
}

// What the colours mean, listing only what the run has: its passes, other work, messages, the first
// divergence, and the cursor.
function legend(events, marks) {
  const kinds = new Set();
  let other = false;
  let messages = false;
  for (const e of events) {
    if (e.k === "op") {
      if (e.tg) kinds.add(e.tg[0]);
      else other = true;
    } else if (e.k === "send") messages = true;
  }
  const entry = (colour, text, line = false) =>
    h(
      "span",
      { class: "psv-legend-entry" },
      h("span", { class: line ? "psv-legend-line" : "psv-legend-swatch", style: `--swatch: ${colour}` }),
      text,
    );
  const items = [];
  const letters = ["F", "B", "I", "W"].filter((k) => kinds.has(k));
  for (const k of letters) items.push(entry(PASS_COLOURS[k], `${k} ${PASS_WORDS[k]}`));
  if (letters.length) items.push(h("span", { class: "psv-legend-note", text: `(${letters[0]}3: of microbatch 3)` }));
  if (other) items.push(entry(OTHER_COLOUR, letters.length ? "other work" : "op"));
  if (messages) items.push(entry("rgba(70,70,70,0.7)", "message", true));
  if (marks.size) items.push(entry(BAD_COLOUR, "first divergence"));
  items.push(entry("#e08a00", "now", true));
  return h("span", { class: "psv-legend", "data-kinds": letters.join("") }, ...items);
}
