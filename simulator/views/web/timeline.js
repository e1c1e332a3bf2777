// The timeline under the cards: one row per device, ops as blocks coloured by their pass (forward,
// backward, weight gradients; other work grey) and labelled with pass and microbatch ("F3", "B3") where
// they have room, messages as lines from the sender at its send time to the receiver at its arrival,
// a legend of what appears, and a cursor on the current event. Drawn once on a canvas (fast for tens
// of thousands of events); a second canvas on top holds the cursor, redrawn at every step.

// Ops without a pass (no "F3" tag) by what they are: attention's (scores, softmax, the ring's steps: what a
// context-parallel page is about) apart from the rest, so that a cp timeline is not all grey.
const ATTENTION_OP = /(^|\.)(q|k|v|scores|probs|softmax|attn\w*|ring_\w+|dscores|dprobs)(\.|$)/;
const ATTENTION_COLOUR = "#8e5bb5";

function opColour(e, bad) {
  if (bad) return BAD_COLOUR;
  if (e.tg) return PASS_COLOURS[e.tg[0]];
  return ATTENTION_OP.test(e.n || "") ? ATTENTION_COLOUR : OTHER_COLOUR;
}

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
  const title = h("span", { class: "psv-timeline-title", text: `timeline (${doc.time.unit}); click to jump` });
  const node = h(
    "div",
    { class: "psv-timeline", "data-cursor": -1 },
    h(
      "div",
      { class: "psv-timeline-head" },
      title,
      legend(events, marks),
    ),
    box,
  );
  let width = 0;
  let current = -1;
  // The window of time drawn: the whole run, or on a projector, where the blocks are too thin to label at full
  // width, a window around now, wide enough for the typical block to carry its label; it follows the cursor.
  let w0 = t0;
  let w1 = t1;
  const x = (t) => left + ((t - w0) / (w1 - w0)) * (width - left - 8);
  const labelWidth = (label) => 0.62 * font * label.length + 6;

  function zoomSpan() {
    if (!present || rowH < 14 || !blocks.length) return t1 - t0;
    const perUnit = (width - left - 8) / (t1 - t0);
    const labelled = blocks.filter((b) => (b.t1 - b.t0) * perUnit >= labelWidth(b.label)).length;
    if (labelled >= 0.5 * blocks.length) return t1 - t0;
    // the zoom that labels the blocks holding half of the busy time (long blocks first: the passes, not the
    // many short ops between them), at most 16 times: a window of a sixteenth of the run still shows its shape
    const need = blocks.map((b) => [labelWidth(b.label) / ((b.t1 - b.t0) * perUnit), b.t1 - b.t0]).sort((a, b) => a[0] - b[0]);
    const busy = need.reduce((sum, [, d]) => sum + d, 0);
    let factor = 1;
    for (let k = 0, sum = 0; k < need.length && sum < busy / 2; k++) [factor, sum] = [need[k][0], sum + need[k][1]];
    return (t1 - t0) / clamp(factor, 1, 16);
  }

  function centre(t) {
    const span = zoomSpan();
    if (span >= t1 - t0) {
      [w0, w1] = [t0, t1];
      return;
    }
    w0 = clamp(t - span / 2, t0, t1 - span);
    w1 = w0 + span;
  }
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
    centre(current >= 0 ? events[current].t : t0);
    const zoomed = w1 - w0 < t1 - t0;
    node.dataset.window = zoomed ? `${w0} ${w1}` : "";
    title.textContent = zoomed
      ? `timeline (${doc.time.unit}), a window around now (${Math.round((100 * (w1 - w0)) / (t1 - t0))}% of the run); click to jump`
      : `timeline (${doc.time.unit}); click to jump`;
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
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, 0, width - left, top + devices * rowH); // a window's blocks stop at its edges
    ctx.clip();
    for (let i = 0; i < events.length; i++) {
      const e = events[i];
      if (e.k === "op") {
        ctx.fillStyle = opColour(e, marks.has(i));
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
    let labels = 0;
    if (rowH >= 14) {
      ctx.fillStyle = "#fff";
      for (const b of blocks) {
        const a = Math.max(x(b.t0), left); // the part of the block in the window
        const w = Math.min(x(b.t1), width - 8) - a;
        if (w < ctx.measureText(b.label).width + 6) continue;
        ctx.save();
        ctx.beginPath();
        ctx.rect(a, top + b.r * rowH, w, rowH);
        ctx.clip();
        ctx.textAlign = "center";
        ctx.fillText(b.label, a + w / 2, y(b.r));
        ctx.restore();
        labels++;
      }
    }
    ctx.restore();
    node.dataset.labels = labels;
    ctx.fillStyle = "#444";
    ctx.textBaseline = "alphabetic";
    ctx.textAlign = "center";
    const axisY = top + devices * rowH + axis - 5;
    const tick = niceStep((w1 - w0) / (present ? 8 : 6));
    for (let t = Math.ceil(w0 / tick) * tick; t <= w1 + tick * 1e-9; t += tick) {
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
    const t = w0 + ((ev.clientX - rect.left - left) / (width - left - 8)) * (w1 - w0);
    let pick = 0; // the step after the last event at or before the clicked time
    for (let i = base; i < events.length; i++) if (events[i].t <= t) pick = i - base + 1;
    onPick(pick);
  });

  return {
    node,
    draw,
    cursor(i) {
      current = i;
      if (!width) return;
      const now = i >= 0 ? events[i].t : t0;
      const span = w1 - w0;
      const zoomed = span < t1 - t0;
      if (zoomed && (now < w0 + 0.15 * span || now > w1 - 0.15 * span)) draw(); // keep now in the window
      else drawCursor();
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
  let attention = false;
  let messages = false;
  for (const e of events) {
    if (e.k === "op") {
      if (e.tg) kinds.add(e.tg[0]);
      else if (ATTENTION_OP.test(e.n || "")) attention = true;
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
  if (attention) items.push(entry(ATTENTION_COLOUR, "attention (scores, softmax, ring steps)"));
  if (other) items.push(entry(OTHER_COLOUR, letters.length || attention ? "other work" : "op"));
  if (messages) items.push(entry("rgba(70,70,70,0.7)", "message", true));
  if (marks.size) items.push(entry(BAD_COLOUR, "first divergence"));
  items.push(entry("#e08a00", "now", true));
  return h("span", { class: "psv-legend", "data-kinds": letters.join("") + (attention ? "A" : "") }, ...items);
}
