// The memory calculator (simulator/views/web/memory_page.py writes the page): what one device of the first
// pipeline stage holds at its fullest, by kind, as the model and the layout change. The tables come from the
// what-if (simulator/parallel/whatif/memory.py); `memoryOf` finishes them as device_memory does, and the tests
// hold the two to each other. The last part of one ES module, after dom.js.

const GB = 1e9;

// device_memory's arithmetic on the page's tables: bytes of weights, gradients, optimizer state, activations.
function memoryOf(data, choice) {
  const model = data.models.find((m) => m.name === choice.model);
  if (!model) return { error: `there is no model named "${choice.model}": choose one of ${data.models.map((m) => m.name).join(", ")}` };
  for (const [k, values] of Object.entries(data.choices))
    if (!values.includes(choice[k])) return { error: `${k} = ${String(choice[k])} is not offered: choose one of ${values.join(", ")}` };
  const problem = model.problems[`${choice.tp}|${choice.pp}|${choice.cp}|${choice.zero}`];
  if (problem) return { error: problem };
  const [dense, experts, layer] = model.table[`${choice.tp}|${choice.pp}`];
  const sp = choice.sp && choice.tp > 1 ? 1 : 0;
  // what lives only while a microbatch runs, on the first and on the last stage: without and with sharded gradients
  const [total, , first, last, firstSharded, lastSharded] = model.acts[`${choice.tp}|${choice.cp}|${choice.recompute}|${sp}|${choice.microbatch}`];
  const { weights: wb, grads: gb, optimizer: ob } = data.bytes;
  const shards = choice.dp * choice.cp; // ZeRO shards over the data-parallel (and context-parallel) ranks
  const params = dense + experts;
  const sharded = dense / shards + experts / Math.max(1, shards);
  const zero = choice.zero;
  const weights = wb * (zero >= 3 ? sharded : params) + (zero >= 3 ? 2 * wb * layer : 0);
  const grads = gb * (zero >= 2 ? sharded : params);
  const optimizer = ob * (zero >= 1 ? sharded : params);
  // 1F1B with m = pp microbatches: the first stage holds pp microbatches' activations of its layers/pp layers
  const perChunk = Math.floor(model.layers / choice.pp);
  let held = 0;
  let peak = 0;
  for (let k = 0; k < choice.pp; k++) peak = Math.max(peak, (held += perChunk * total)); // the warm-up's forwards
  const activations = peak + (zero >= 2 ? (choice.pp === 1 ? lastSharded : firstSharded) : choice.pp === 1 ? last : first);
  return { params, sharded, layer, weights, grads, optimizer, activations, perChunk, total: weights + grads + optimizer + activations, capacity: data.capacity };
}

const gb = (bytes) => `${(bytes / GB).toFixed(bytes >= 10 * GB ? 1 : 2)} GB`;
const count = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} billion` : `${(n / 1e6).toFixed(1)} million`);

// Each bar's words: what it is, and how the choice made it this size.
function explain(data, c, m) {
  const { weights: wb, grads: gbytes, optimizer: ob } = data.bytes;
  const shards = c.dp * c.cp;
  const onDevice = `${count(m.params)} parameters on this device (the first stage's ${m.perChunk} layers and the embedding, split over tp = ${c.tp})`;
  const zeroed = (stage) => (c.zero >= stage ? `ZeRO-${c.zero} shards them over dp x cp = ${shards} devices: ${count(m.sharded)} each` : `not sharded (ZeRO-${stage} would split them over dp x cp = ${shards})`);
  const acts = {
    none: "every tensor the backward reads",
    selective: "all but attention's softmax and its inputs, recomputed in the backward",
    full: "only each layer's input: the backward recomputes the layer",
  }[c.recompute];
  return {
    weights: `${wb} bytes each (bf16) x ${onDevice}; ${zeroed(3)}${c.zero >= 3 ? ", plus two layers gathered while they run" : ""}.`,
    grads: `${gbytes} bytes each (fp32 main gradients) x the same parameters; ${zeroed(2)}.`,
    optimizer: `${ob} bytes each (Adam's fp32 weights, m and v) x the same parameters; ${zeroed(1)}.`,
    activations: `1F1B: the first stage holds pp = ${c.pp} microbatches at once, each of ${c.microbatch} sequence${c.microbatch > 1 ? "s" : ""} through ${m.perChunk} layers, keeping ${acts}${c.cp > 1 ? `; cp = ${c.cp} splits each sequence` : ""}${c.tp > 1 ? `; tp = ${c.tp} splits the layer${c.sp && c.tp > 1 ? " and sequence parallelism the rest" : ""}` : ""}${c.zero >= 2 ? "; while a layer's backward ends its whole gradient waits to be reduce-scattered" : ""}.`,
  };
}

const KINDS = [
  ["weights", "parameters", "#3f6fb5"],
  ["grads", "gradients", "#d06a22"],
  ["optimizer", "optimizer state", "#3a9a5b"],
  ["activations", "activations", "#8e5bb5"],
];

export function calculate(el, data) {
  const controls = {};
  const select = (name, label, values, show = String) => {
    const s = h("select", { "data-control": name, "aria-label": label, onchange: () => update(true) });
    s.append(...values.map((v) => h("option", { value: String(v), text: show(v) })));
    controls[name] = s;
    return h("label", { class: "mc-control" }, h("span", { text: label }), s);
  };
  const bar = h(
    "div",
    { class: "mc-controls" },
    select("model", "model", data.models.map((m) => m.name)),
    select("zero", "ZeRO stage", data.choices.zero),
    select("recompute", "recompute", data.choices.recompute),
    select("tp", "TP", data.choices.tp),
    select("pp", "PP", data.choices.pp),
    select("dp", "DP", data.choices.dp),
    select("cp", "CP", data.choices.cp),
    select("microbatch", "microbatch", data.choices.microbatch),
    select("sp", "sequence parallel", data.choices.sp, (v) => (v ? "on" : "off")),
  );
  const out = h("div", { class: "mc-out" });
  const root = h("div", { class: "mc" }, h("h1", { text: "Memory per device: what takes the room" }), bar, out);
  el.append(root);

  const read = () => {
    const c = {};
    for (const [k, s] of Object.entries(controls)) c[k] = k === "model" || k === "recompute" ? s.value : k === "sp" ? s.value === "true" : Number(s.value);
    return c;
  };
  const set = (c) => {
    for (const [k, v] of Object.entries(c)) if (controls[k]) controls[k].value = String(v);
  };

  function draw(c) {
    root.dataset.choice = JSON.stringify(c);
    const m = memoryOf(data, c);
    if (m.error) {
      out.replaceChildren(h("div", { class: "mc-error", role: "alert", text: m.error }));
      root.dataset.ready = "true";
      return m;
    }
    const words = explain(data, c, m);
    const scale = Math.max(m.total, m.capacity) * 1.02;
    const stack = h("div", { class: "mc-stack" });
    for (const [k, , colour] of KINDS) stack.append(h("div", { class: "mc-part", style: `width: ${(100 * m[k]) / scale}%; background: ${colour}`, title: `${k}: ${gb(m[k])}` }));
    stack.append(h("div", { class: "mc-capacity", style: `left: ${(100 * m.capacity) / scale}%`, title: "H100 80GB: 85.5 GB usable (79.6 GiB)" }));
    const fits = m.total <= m.capacity;
    const verdict = h("p", { class: `mc-verdict ${fits ? "mc-fits" : "mc-over"}`, "data-total": m.total, text: `${gb(m.total)} on each device of the first pipeline stage: ${fits ? `fits an H100 80GB (${gb(m.capacity)} usable), ${gb(m.capacity - m.total)} to spare` : `${gb(m.total - m.capacity)} over an H100 80GB (${gb(m.capacity)} usable)`}` });
    const rows = KINDS.map(([k, name, colour]) =>
      h(
        "div",
        { class: "mc-row", "data-kind": k, "data-bytes": m[k] },
        h("span", { class: "mc-name" }, h("span", { class: "mc-swatch", style: `background: ${colour}` }), name),
        h("span", { class: "mc-bar" }, h("span", { class: "mc-fill", style: `width: ${(100 * m[k]) / scale}%; background: ${colour}` })),
        h("span", { class: "mc-size", text: gb(m[k]) }),
        h("span", { class: "mc-why", text: words[k] }),
      ),
    );
    out.replaceChildren(verdict, stack, ...rows, h("p", { class: "mc-note", text: "bf16 weights, fp32 gradients and Adam state (18 bytes a parameter before sharding); FlashAttention; the 1F1B schedule with one microbatch per stage (m = pp); the what-if's model (docs/whatif.md). Not in the bars: the CUDA context and NCCL's buffers, a GB or two more, which python -m simulator whatif counts." }));
    root.dataset.ready = "true";
    return m;
  }

  function update(fromControls) {
    const c = read();
    const m = draw(c);
    if (fromControls) history.replaceState(null, "", "#" + new URLSearchParams(Object.entries(c).map(([k, v]) => [k, String(v)])).toString());
    return m;
  }

  const fromHash = () => {
    const q = new URLSearchParams(window.location.hash.slice(1));
    const c = { ...data.start };
    for (const [k, v] of q) {
      if (!(k in c)) return { error: `the link names "${k}", which the page does not know: it takes ${Object.keys(c).join(", ")}` };
      c[k] = k === "model" || k === "recompute" ? v : k === "sp" ? v === "true" : Number(v);
    }
    return { c };
  };
  const follow = () => {
    const { c, error } = fromHash();
    if (error) {
      out.replaceChildren(h("div", { class: "mc-error", role: "alert", text: error }));
      root.dataset.ready = "true";
      return;
    }
    set(c);
    draw(c);
  };
  follow();
  window.addEventListener("hashchange", follow);
  return {
    data,
    memory: (c) => memoryOf(data, c),
    show(c) {
      set(c);
      return update(true);
    },
  };
}
