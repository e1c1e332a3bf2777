// The schedule explorer's summary table (explorer.js shows it above the timelines): a column per schedule shown,
// a row per figure (the bubble as idle / busy and as idle / total, measured and in closed form, the peak
// activations, the step time).
// A plain script part of one ES module (see assets.py), after dom.js, schedules.js and explorer_model.js.

const round = (x) => Number(x.toPrecision(3)).toString();

// Per device where they differ, else once; a long list (p > 8) as its range.
function perDevice(values, show = round) {
  if (values.every((r) => Math.abs(r - values[0]) < 1e-12)) return `${show(values[0])} on every device`;
  if (values.length > 8) {
    const lo = Math.min(...values);
    const hi = Math.max(...values);
    return `${show(lo)} to ${show(hi)} (device ${values.indexOf(hi)} the most)`;
  }
  return values.map((r, i) => `${i}: ${show(r)}`).join(", ");
}

// The summary: a column per schedule shown, a row per figure, each with its formula.
function summary(data, shown) {
  const cell = (text, attrs = {}) => h("td", { class: "ex-value", ...attrs, text });
  const rows = [
    ["", (s) => h("th", { text: s.choice.schedule + (s.v > 1 ? ` (v = ${s.v})` : "") })],
    ["bubble, idle / busy (measured)", (s) => cell(perDevice(s.m.ratio), { "data-ratio": JSON.stringify(s.m.ratio), "data-step": s.m.step })],
    [
      "closed form",
      (s) => {
        const f = s.m.case.formula;
        const text = f ? `${s.meta.formula} = ${f[0]}/${f[1]} = ${round(f[0] / f[1])}` : `${s.meta.formula}: not stated for these p and m`;
        return cell(text, { "data-formula": f ? `${f[0]}/${f[1]}` : "" });
      },
    ],
    ["bubble, idle / total step (measured)", (s) => cell(perDevice(s.m.share), { "data-share": JSON.stringify(s.m.share) })],
    [
      "closed form",
      (s) => {
        const f = s.m.case.formula;
        const d = f ? gcd(f[0], f[0] + f[1]) : 1;
        const text = f ? `x / (1 + x), x = idle / busy: ${f[0] / d}/${(f[0] + f[1]) / d} = ${round(f[0] / (f[0] + f[1]))}` : "x / (1 + x), x = idle / busy";
        return cell(text, { "data-total-formula": f ? `${f[0] / d}/${(f[0] + f[1]) / d}` : "" });
      },
    ],
    [
      "peak activations (microbatches' forwards)",
      (s) => cell(`${perDevice(s.m.peaks, String)}${s.v > 1 ? `, each 1/${s.v} of a device's work` : ""}, of m = ${s.choice.m}`, { "data-peaks": JSON.stringify(s.m.peaks) }),
    ],
    ["step time", (s) => cell(`${fmt(s.m.step)} units; busy ${perDevice(s.m.busy, fmt)}`)],
  ];
  const table = h("table", { class: "ex-summary" });
  for (const [name, make] of rows) table.append(h("tr", {}, h("td", { class: "ex-what", text: name }), ...shown.map(make)));
  return table;
}
