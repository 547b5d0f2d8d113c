// kvcap plan explorer. Plain ES module, no dependencies: the page asks kvcap's public API and draws SVG.
// Nothing here computes a capacity figure: every number shown is a field of an API response (the browser only
// lays them out). The page state lives in the URL query, so a view can be shared as a link.

const CONFIG = JSON.parse(document.getElementById("kvcap-config").textContent);
const SVG_NS = "http://www.w3.org/2000/svg";
const GiB = 1024 ** 3;

const PLAN_FIELDS = [
  "model", "gpu", "engine", "tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "kv_cache_dtype",
  "quantization", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "enforce_eager",
];
const WORKLOAD_FIELDS = ["requests_per_second", "prompt_tokens", "output_tokens", "ttft_ms", "tpot_ms"];
const INTEGER_FIELDS = new Set([
  "tensor_parallel_size", "pipeline_parallel_size", "max_num_seqs", "max_num_batched_tokens", "prompt_tokens",
  "output_tokens",
]);
// Where the API names a field that the form shows under another name.
const FIELD_ALIASES = { ttft_p95_seconds: "ttft_ms", tpot_seconds: "tpot_ms", workload: "requests_per_second" };

const $ = (id) => document.getElementById(id);
const form = $("plan-form");

// ---------------------------------------------------------------------------------------------------- helpers

function el(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

const fmtInt = (n) => Number(n).toLocaleString("en-US", { maximumFractionDigits: 0 });
const fmtNum = (n, digits = 2) => Number(n).toLocaleString("en-US", { maximumFractionDigits: digits });
const fmtGiB = (bytes) => `${(bytes / GiB).toFixed(2)} GiB`;

class ApiError extends Error {
  constructor(status, body) {
    super(body?.detail || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(path, body) {
  const response = await fetch(path, body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  let data = null;
  try { data = await response.json(); } catch { data = null; }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

// ------------------------------------------------------------------------------------------------ form state

function readForm() {
  const state = {};
  for (const name of [...PLAN_FIELDS, ...WORKLOAD_FIELDS, "hf_config"]) {
    const input = form.elements[name];
    if (!input) continue;
    if (input.type === "checkbox") { if (input.checked) state[name] = "1"; continue; }
    const value = input.value.trim();
    if (value !== "") state[name] = value;
  }
  return state;
}

function writeForm(state) {
  for (const name of [...PLAN_FIELDS, ...WORKLOAD_FIELDS, "hf_config"]) {
    const input = form.elements[name];
    if (!input || !(name in state)) continue;
    if (input.type === "checkbox") input.checked = state[name] === "1" || state[name] === "true";
    else {
      if (input.tagName === "SELECT" && ![...input.options].some((o) => o.value === state[name])) {
        input.append(el("option", { value: state[name], text: state[name] }));
      }
      input.value = state[name];
    }
  }
  if (state.hf_config) $("config-details").open = true;
}

function stateToQuery(state) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(state)) {
    params.set(key, key === "hf_config" ? btoa(unescape(encodeURIComponent(value))) : value);
  }
  return params.toString();
}

function queryToState(query) {
  const state = {};
  for (const [key, value] of new URLSearchParams(query)) {
    if (key === "hf_config") {
      try { state[key] = decodeURIComponent(escape(atob(value))); } catch { /* a mangled link: ignore it */ }
    } else state[key] = value;
  }
  return state;
}

class FieldError extends Error {
  constructor(field, message) { super(message); this.field = field; }
}

function numberOf(state, name) {
  if (!(name in state)) return undefined;
  const value = Number(state[name]);
  if (!Number.isFinite(value)) throw new FieldError(name, `${name}: not a number`);
  if (INTEGER_FIELDS.has(name) && !Number.isInteger(value)) throw new FieldError(name, `${name}: a whole number`);
  return value;
}

// The /v1/plans body for a state (the same field names as `vllm serve` and the API).
function planBody(state, overrides = {}) {
  const body = {};
  if (state.hf_config) {
    try { body.model = { hf_config: JSON.parse(state.hf_config) }; } catch (exc) {
      throw new FieldError("hf_config", `config.json is not valid JSON: ${exc.message}`);
    }
  } else body.model = state.model;
  if (state.gpu) body.gpu = state.gpu;
  for (const name of ["engine", "kv_cache_dtype", "quantization"]) if (state[name]) body[name] = state[name];
  for (const name of ["tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization", "max_num_seqs",
    "max_num_batched_tokens"]) {
    const value = numberOf(state, name);
    if (value !== undefined) body[name] = value;
  }
  if (state.max_model_len) {
    body.max_model_len = state.max_model_len === "auto" ? "auto" : numberOf(state, "max_model_len");
  }
  if (state.enforce_eager) body.enforce_eager = true;
  return { ...body, ...overrides };
}

function workloadBody(state) {
  const workload = {
    requests_per_second: numberOf(state, "requests_per_second") ?? 1,
    prompt_tokens: numberOf(state, "prompt_tokens") ?? 1024,
    output_tokens: numberOf(state, "output_tokens") ?? 256,
  };
  const ttft = numberOf(state, "ttft_ms");
  const tpot = numberOf(state, "tpot_ms");
  if (ttft !== undefined) workload.ttft_p95_seconds = ttft / 1000;
  if (tpot !== undefined) workload.tpot_seconds = tpot / 1000;
  return workload;
}

// --------------------------------------------------------------------------------------------- field errors

function clearErrors() {
  for (const node of document.querySelectorAll(".error")) node.textContent = "";
  for (const node of document.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
  $("form-errors").textContent = "";
}

function showFieldError(field, message) {
  const name = FIELD_ALIASES[field] || field;
  const input = form.elements[name] || $(`f-${name}`);
  const slot = $(`err-${name}`);
  if (input && slot) {
    input.setAttribute("aria-invalid", "true");
    slot.textContent = message;
    if (name === "hf_config") $("config-details").open = true;
    return true;
  }
  return false;
}

// 422 bodies name the field in ``errors[].loc`` (["body", "workload", "tpot_seconds"]).
function showApiError(error) {
  if (error instanceof FieldError) {
    if (!showFieldError(error.field, error.message)) $("form-errors").textContent = error.message;
    return;
  }
  const problems = error.body?.errors || [];
  let shown = false;
  for (const problem of problems) {
    const loc = (problem.loc || []).filter((part) => part !== "body" && typeof part === "string");
    const field = loc.length ? loc[loc.length - 1] : null;
    const top = loc.length ? loc[0] : null;
    const message = problem.msg || error.message;
    shown = (field && showFieldError(field, `${loc.join(".")}: ${message}`)) ||
      (top && showFieldError(top, `${loc.join(".")}: ${message}`)) || shown;
  }
  if (!shown) $("form-errors").textContent = error.message;
}

// -------------------------------------------------------------------------------------------------- charts

// A line chart with optional log axes, vertical marks and horizontal SLO lines. Each point carries its value
// in data attributes and a <title> for hover.
function lineChart({ series, xLabel, yLabel, xLog = false, yLog = false, marks = [], hlines = [], id }) {
  const width = 640, height = 300, left = 62, right = 16, top = 14, bottom = 42;
  const points = series.flatMap((s) => s.points);
  const svg = el("svg:svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${yLabel} vs ${xLabel}`, id });
  if (!points.length) {
    svg.append(el("svg:text", { x: width / 2, y: height / 2, "text-anchor": "middle", text: "no data" }));
    return svg;
  }
  const xs = points.map((p) => p.x).concat(marks.map((m) => m.x));
  const ys = points.map((p) => p.y).concat(hlines.map((h) => h.y));
  const tx = xLog ? Math.log2 : (v) => v;
  const ty = yLog ? Math.log10 : (v) => v;
  const positive = (v) => (yLog ? v > 0 : true);
  let [x0, x1] = [Math.min(...xs.map(tx)), Math.max(...xs.map(tx))];
  const yVals = ys.filter(positive).map(ty);
  let [y0, y1] = [yLog ? Math.min(...yVals) : Math.min(0, ...yVals), Math.max(...yVals)];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 1; y1 += 1; }
  if (yLog) { y0 = Math.floor(y0); y1 = Math.ceil(y1); } else { y1 *= 1.08; }
  const sx = (v) => left + ((tx(v) - x0) / (x1 - x0)) * (width - left - right);
  const sy = (v) => top + (1 - (ty(v) - y0) / (y1 - y0)) * (height - top - bottom);
  svg.append(el("svg:line", { class: "axis", x1: left, y1: height - bottom, x2: width - right, y2: height - bottom }));
  svg.append(el("svg:line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom }));
  const yTicks = yLog ? range(y0, y1).map((e) => 10 ** e) : niceTicks(y0, y1);
  for (const t of yTicks) {
    svg.append(el("svg:line", { class: "grid", x1: left, x2: width - right, y1: sy(t), y2: sy(t) }));
    svg.append(el("svg:text", { x: left - 6, y: sy(t) + 4, "text-anchor": "end", text: shortNum(t) }));
  }
  const xTicks = xLog ? [...new Set(points.map((p) => p.x))] : niceTicks(x0, x1);
  for (const t of xTicks) {
    svg.append(el("svg:text", { x: sx(t), y: height - bottom + 15, "text-anchor": "middle", text: shortNum(t) }));
  }
  svg.append(el("svg:text", { x: (left + width - right) / 2, y: height - 6, "text-anchor": "middle", text: xLabel }));
  svg.append(el("svg:text", { x: 12, y: top + (height - top - bottom) / 2, "text-anchor": "middle",
    transform: `rotate(-90 12 ${top + (height - top - bottom) / 2})`, text: yLabel }));
  for (const h of hlines) {
    svg.append(el("svg:line", { class: "slo", x1: left, x2: width - right, y1: sy(h.y), y2: sy(h.y), "data-slo": h.y }));
    svg.append(el("svg:text", { class: "mark-label", x: width - right - 4, y: sy(h.y) - 4, "text-anchor": "end", text: h.label }));
  }
  for (const m of marks) {
    svg.append(el("svg:line", { class: "mark", x1: sx(m.x), x2: sx(m.x), y1: top, y2: height - bottom, "data-mark": m.x },
      el("svg:title", { text: m.title || m.label })));
    svg.append(el("svg:text", { class: "mark-label", x: sx(m.x) - 4, y: top + 10, "text-anchor": "end", text: m.label }));
  }
  series.forEach((s, i) => {
    const drawn = s.points.filter((p) => positive(p.y));
    if (drawn.length > 1) {
      const d = drawn.map((p, j) => `${j ? "L" : "M"}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" ");
      svg.append(el("svg:path", { class: `line series-${i}`, d }));
    }
    for (const p of drawn) {
      const circle = el("svg:circle", { class: `point series-${i}${p.current ? " current-point" : ""}`, cx: sx(p.x),
        cy: sy(p.y), r: p.current ? 6 : 3.5, "data-series": s.name, "data-x": p.x, "data-y": p.y },
      el("svg:title", { text: p.title }));
      svg.append(circle);
      if (p.current) svg.append(el("svg:circle", { class: "current", cx: sx(p.x), cy: sy(p.y), r: 9 }));
    }
  });
  const legend = el("svg:g", {});
  series.forEach((s, i) => {
    legend.append(el("svg:rect", { class: `series-${i}`, x: left + 10 + i * 170, y: top, width: 10, height: 10 }));
    legend.append(el("svg:text", { x: left + 24 + i * 170, y: top + 9, text: s.name }));
  });
  svg.append(legend);
  return svg;
}

function range(a, b) { const out = []; for (let v = a; v <= b; v += 1) out.push(v); return out; }

function niceTicks(a, b) {
  const step = 10 ** Math.floor(Math.log10((b - a) / 4 || 1));
  const k = [1, 2, 5, 10].find((m) => (b - a) / (m * step) <= 6) * step;
  const out = [];
  for (let v = Math.ceil(a / k) * k; v <= b + 1e-9; v += k) out.push(Number(v.toPrecision(12)));
  return out;
}

function shortNum(v) {
  const a = Math.abs(v);
  if (a >= 1e6) return `${fmtNum(v / 1e6, 1)}M`;
  if (a >= 1024 && Number.isInteger(Math.log2(a))) return `${fmtNum(v / 1024, 0)}k`;
  if (a >= 1e4) return `${fmtNum(v / 1e3, 0)}k`;
  return fmtNum(v, a < 1 ? 3 : 1);
}

// ------------------------------------------------------------------------------------------- memory picture

const SEGMENTS = [
  ["weights", "weights_bytes", "weights"],
  ["activation", "activation_bytes", "activation_peak"],
  ["non_torch", "non_torch_bytes", "non_torch"],
  ["cudagraph", "cudagraph_bytes", "cudagraph"],
  ["kv", "kv_cache_bytes", "kv_cache_memory"],
];
const SEGMENT_NAMES = {
  weights: "weights", activation: "activation peak", non_torch: "non-torch", cudagraph: "CUDA graphs",
  kv: "KV cache", unused: "unused (outside gpu_memory_utilization)",
};

function renderMemory(plan) {
  const memory = plan.memory;
  const formulas = Object.fromEntries((plan.breakdown || []).map((t) => [t.name, t.formula]));
  const segments = SEGMENTS.map(([key, field, term]) => ({
    key, bytes: Math.max(0, memory[field]), formula: formulas[term] || "",
  }));
  const used = segments.reduce((sum, s) => sum + s.bytes, 0);
  segments.push({ key: "unused", bytes: Math.max(0, memory.total_bytes - used),
    formula: `total ${fmtGiB(memory.total_bytes)} − budget ${fmtGiB(memory.budget_bytes)} (and what the budget leaves)` });
  const width = 640, height = 56;
  const svg = el("svg:svg", { viewBox: `0 0 ${width} ${height}`, role: "img", id: "memory-svg",
    "aria-label": `memory of one GPU: ${segments.map((s) => `${SEGMENT_NAMES[s.key]} ${fmtGiB(s.bytes)}`).join(", ")}` });
  let x = 0;
  for (const s of segments) {
    const w = (s.bytes / memory.total_bytes) * width;
    const rect = el("svg:rect", { class: `segment seg-${s.key}`, x: x.toFixed(2), y: 0, width: Math.max(0, w).toFixed(2),
      height: 40, "data-segment": s.key, "data-bytes": s.bytes, tabindex: 0 },
    el("svg:title", { text: `${SEGMENT_NAMES[s.key]}: ${fmtInt(s.bytes)} bytes (${fmtGiB(s.bytes)})\n${s.formula}` }));
    svg.append(rect);
    if (w > 46) svg.append(el("svg:text", { x: x + 4, y: 25, fill: "#fff", style: "fill:#fff;font-size:11px",
      text: `${SEGMENT_NAMES[s.key].split(" ")[0]} ${(s.bytes / GiB).toFixed(1)}G` }));
    x += w;
  }
  const budgetX = (memory.budget_bytes / memory.total_bytes) * width;
  svg.append(el("svg:line", { class: "mark", x1: budgetX, x2: budgetX, y1: 0, y2: 48 }));
  svg.append(el("svg:text", { x: Math.min(budgetX, width - 4), y: 54, "text-anchor": "end",
    text: `budget ${fmtGiB(memory.budget_bytes)} of ${fmtGiB(memory.total_bytes)}` }));
  $("memory-bar").replaceChildren(svg);
  const table = $("memory-table");
  table.replaceChildren(el("caption", { class: "sr-only", text: "Memory per GPU, by term" }),
    el("tr", {}, el("th", { text: "term" }), el("th", { text: "bytes" }), el("th", { text: "GiB" }),
      el("th", { text: "formula" })));
  for (const s of segments) {
    table.append(el("tr", { "data-segment": s.key },
      el("td", {}, el("span", { class: `legend-swatch`, style: `background: var(--${s.key === "kv" ? "kv" : s.key})` }),
        SEGMENT_NAMES[s.key]),
      el("td", { class: "bytes", text: fmtInt(s.bytes) }), el("td", { text: (s.bytes / GiB).toFixed(2) }),
      el("td", { class: "formula", text: s.formula })));
  }
}

function renderVerdict(plan) {
  const kv = plan.kv_cache;
  const verdict = $("verdict");
  verdict.className = `verdict ${plan.fits ? "ok" : "bad"}`;
  verdict.dataset.fits = String(plan.fits);
  verdict.textContent = plan.fits
    ? `${plan.model.name} on ${plan.gpu?.name ?? "the GPU"} (${plan.settings.engine}, TP ${plan.settings.tensor_parallel_size}) will start: ` +
      `${fmtInt(kv.num_gpu_blocks)} blocks of ${kv.block_size} tokens, ${fmtInt(kv.kv_cache_size_tokens)} KV tokens, ` +
      `${fmtNum(kv.max_concurrency)}× concurrency at ${fmtInt(plan.settings.max_model_len)} tokens.`
    : `${plan.model.name} on ${plan.gpu?.name ?? "the GPU"} will not start.`;
  const list = $("messages");
  list.replaceChildren(...plan.messages.map((m) => el("li", { class: `${m.level}-msg`, "data-code": m.code, text: m.text })));
}

// ------------------------------------------------------------------------------------------- capacity curve

function curveLengths(modelMax) {
  const out = [];
  for (let length = 512; length < modelMax; length *= 2) out.push(length);
  out.push(modelMax);
  return out;
}

async function renderCapacity(state, plan, defaultPlan) {
  const modelMax = Math.max(defaultPlan.settings.max_model_len, plan.settings.max_model_len);
  const lengths = curveLengths(modelMax);
  const current = plan.settings.kv_cache_dtype;
  const alternative = current === "auto" || current === plan.settings.dtype ? "fp8" : "auto";
  const dtypes = [state.kv_cache_dtype || "auto", alternative];
  const plans = await Promise.all(dtypes.map((dtype) => Promise.all(lengths.map((length) =>
    api("/v1/plans", planBody(state, { max_model_len: length, kv_cache_dtype: dtype })).catch(() => null)))));
  const series = dtypes.map((dtype, i) => ({
    name: `kv_cache_dtype ${dtype}`,
    points: plans[i].flatMap((p, j) => (p && p.fits ? [{
      x: lengths[j], y: p.kv_cache.max_concurrency, current: i === 0 && lengths[j] === plan.settings.max_model_len,
      title: `${fmtInt(lengths[j])} tokens: ${fmtNum(p.kv_cache.max_concurrency)} requests at once (${dtype})`,
    }] : [])),
  }));
  if (!series[0].points.some((p) => p.current) && plan.fits) {
    series[0].points.push({ x: plan.settings.max_model_len, y: plan.kv_cache.max_concurrency, current: true,
      title: `current setting: ${fmtNum(plan.kv_cache.max_concurrency)} requests of ${fmtInt(plan.settings.max_model_len)}` });
    series[0].points.sort((a, b) => a.x - b.x);
  }
  const marks = [];
  const refused = plans[0].find((p) => p && !p.fits);
  if (refused) {
    const reason = refused.messages.find((m) => m.level === "error");
    const limit = refused.max_model_len_that_fits;
    marks.push({ x: Math.max(limit, lengths[0]), label: `refuses above ${fmtInt(limit)}`, title: reason ? reason.text : "" });
  }
  const chart = lineChart({ series, xLabel: "max_model_len (tokens)", yLabel: "requests at once", xLog: true,
    yLog: true, marks, id: "capacity-svg" });
  $("capacity-chart").replaceChildren(chart);
  if (refused) {
    const reason = refused.messages.find((m) => m.level === "error");
    $("capacity-chart").append(el("p", { class: "hint", id: "refusal-message", text: reason ? reason.text : "" }));
  }
  await renderAlternatives(state, plan);
}

async function renderAlternatives(state, plan) {
  const tps = [1, 2, 4, 8];
  const dtypes = ["auto", "fp8"];
  const table = $("alternatives-table");
  const answers = await Promise.all(dtypes.map((dtype) => Promise.all(tps.map((tp) =>
    api("/v1/plans", planBody(state, { tensor_parallel_size: tp, kv_cache_dtype: dtype,
      max_model_len: plan.settings.max_model_len })).catch(() => null)))));
  table.replaceChildren(el("caption", { text: `Requests of ${fmtInt(plan.settings.max_model_len)} tokens at once, by TP and KV dtype` }),
    el("tr", {}, el("th", { text: "kv_cache_dtype" }), ...tps.map((tp) => el("th", { text: `TP ${tp}` }))));
  dtypes.forEach((dtype, i) => {
    table.append(el("tr", {}, el("td", { text: dtype }), ...answers[i].map((p, j) => el("td", {
      "data-tp": tps[j], "data-dtype": dtype, "data-concurrency": p && p.fits ? p.kv_cache.max_concurrency : "",
      text: p ? (p.fits ? `${fmtNum(p.kv_cache.max_concurrency)}×` : "won't start") : "n/a",
    }))));
  });
}

// ----------------------------------------------------------------------------------------------- load curve

const LOAD_CONCURRENCIES = [1, 2, 4, 8, 16, 32, 64, 128, 256];

async function renderLoad(state, plan) {
  const workload = workloadBody(state);
  const gpus = plan.settings.tensor_parallel_size * plan.settings.pipeline_parallel_size;
  const limit = plan.settings.max_num_seqs;
  const levels = LOAD_CONCURRENCIES.filter((c) => c <= Math.max(1, limit));
  const runs = await Promise.all(levels.map((concurrency) => api("/v1/simulations", {
    ...planBody(state),
    benchmark: {
      dataset_name: "random", num_prompts: Math.min(400, Math.max(20, concurrency * 3)), request_rate: "inf",
      max_concurrency: concurrency, random_input_len: workload.prompt_tokens,
      random_output_len: workload.output_tokens, seed: 0,
    },
  }).then((answer) => ({ concurrency, answer })).catch((error) => ({ concurrency, error }))));
  const ok = runs.filter((r) => r.answer);
  const point = (r, key) => ({
    x: r.answer.result.output_throughput / gpus, y: r.answer.result[key], concurrency: r.concurrency,
    title: `concurrency ${r.concurrency}: ${fmtNum(r.answer.result.output_throughput / gpus, 0)} tok/s per GPU, ` +
      `median TTFT ${fmtNum(r.answer.result.median_ttft_ms, 0)} ms, median TPOT ${fmtNum(r.answer.result.median_tpot_ms, 1)} ms`,
  });
  const ttft = lineChart({ series: [{ name: "median TTFT (ms)", points: ok.map((r) => point(r, "median_ttft_ms")) },
    { name: "p99 TTFT (ms)", points: ok.map((r) => point(r, "p99_ttft_ms")) }],
  xLabel: "output tokens/s per GPU", yLabel: "TTFT (ms)", yLog: true,
  hlines: workload.ttft_p95_seconds ? [{ y: workload.ttft_p95_seconds * 1000, label: "TTFT SLO" }] : [], id: "load-ttft-svg" });
  const tpot = lineChart({ series: [{ name: "median TPOT (ms)", points: ok.map((r) => point(r, "median_tpot_ms")) },
    { name: "p99 TPOT (ms)", points: ok.map((r) => point(r, "p99_tpot_ms")) }],
  xLabel: "output tokens/s per GPU", yLabel: "TPOT (ms)",
  hlines: workload.tpot_seconds ? [{ y: workload.tpot_seconds * 1000, label: "TPOT SLO" }] : [], id: "load-tpot-svg" });
  $("load-ttft-chart").replaceChildren(ttft);
  $("load-tpot-chart").replaceChildren(tpot);
  const failed = runs.find((r) => r.error);
  if (!ok.length && failed) $("load-ttft-chart").append(el("p", { class: "error", text: failed.error.message }));
}

async function renderRecommendation(state) {
  const box = $("recommendation");
  box.textContent = "";
  if (!state.gpu) return;
  try {
    const answer = await api("/v1/plans/recommend", { ...planBody(state), workload: workloadBody(state) });
    const best = answer.recommended;
    box.replaceChildren(best
      ? el("p", { id: "recommended", "data-max-num-seqs": best.max_num_seqs, "data-replicas": best.replicas,
        text: `Recommended: TP ${best.tensor_parallel_size}, max_num_seqs ${fmtInt(best.max_num_seqs)}, ` +
          `${fmtInt(best.replicas)} replica(s) (${fmtInt(best.gpus)} GPUs) for ${workloadBody(state).requests_per_second} req/s` +
          (best.cost_per_hour_usd ? `, $${fmtNum(best.cost_per_hour_usd)}/h` : "") })
      : el("p", { id: "recommended", text: "No option on this GPU starts and meets the SLO." }));
  } catch (error) {
    showApiError(error);
  }
}

// ------------------------------------------------------------------------------------------- GPU comparison

async function renderComparison(state) {
  const table = $("compare-table");
  let answer;
  try {
    answer = await api("/v1/plans/sweep", { ...planBody(state), workload: workloadBody(state), limit: 40,
      gpu: undefined, tensor_parallel_size: undefined });
  } catch (error) {
    table.replaceChildren();
    showApiError(error);
    return;
  }
  const head = el("tr", {}, ...["GPU", "TP", "KV dtype", "quantisation", "replicas", "GPUs", "$/h",
    "$ per M output tokens", "max_num_seqs", "verdict"].map((t) => el("th", { text: t })));
  table.replaceChildren(el("caption", { class: "sr-only", text: "GPU comparison" }), head);
  for (const option of answer.options) {
    table.append(el("tr", { class: option.feasible ? "feasible" : "rejected", "data-gpu": option.gpu,
      "data-cost": option.cost_per_million_output_tokens_usd ?? "" },
    el("td", { text: option.gpu }), el("td", { text: option.tensor_parallel_size }),
    el("td", { text: option.kv_cache_dtype }), el("td", { text: option.quantization ?? "—" }),
    el("td", { text: option.feasible ? option.replicas : "" }), el("td", { text: option.feasible ? option.gpus : "" }),
    el("td", { text: option.cost_per_hour_usd == null ? "" : fmtNum(option.cost_per_hour_usd) }),
    el("td", { class: "cost", text: option.cost_per_million_output_tokens_usd == null ? "" : fmtNum(option.cost_per_million_output_tokens_usd, 3) }),
    el("td", { text: option.feasible ? option.max_num_seqs : "" }),
    el("td", { class: "formula", text: option.feasible ? "within SLO" : option.rejection || option.reasons.join("; ") })));
  }
  const priced = answer.options.filter((o) => o.feasible && o.cost_per_million_output_tokens_usd != null).slice(0, 12);
  const width = 640, row = 20, left = 210;
  const max = Math.max(...priced.map((o) => o.cost_per_million_output_tokens_usd), 1e-9);
  const svg = el("svg:svg", { viewBox: `0 0 ${width} ${priced.length * row + 8}`, role: "img", id: "compare-svg",
    "aria-label": "cost per million output tokens of the cheapest feasible options" });
  priced.forEach((o, i) => {
    const w = (o.cost_per_million_output_tokens_usd / max) * (width - left - 70);
    svg.append(el("svg:text", { x: left - 6, y: i * row + 14, "text-anchor": "end",
      text: `${o.gpu} TP${o.tensor_parallel_size} ${o.kv_cache_dtype}${o.quantization ? ` ${o.quantization}` : ""}` }));
    svg.append(el("svg:rect", { class: "series-0", x: left, y: i * row + 3, width: w, height: row - 6,
      "data-cost": o.cost_per_million_output_tokens_usd }, el("svg:title", { text: `$${o.cost_per_million_output_tokens_usd} per M tokens` })));
    svg.append(el("svg:text", { x: left + w + 4, y: i * row + 14, text: `$${fmtNum(o.cost_per_million_output_tokens_usd, 3)}` }));
  });
  $("compare-chart").replaceChildren(svg);
}

// ------------------------------------------------------------------------------------------ manifest check

async function checkManifest(event) {
  event.preventDefault();
  const text = $("f-manifest").value;
  $("err-manifest").textContent = "";
  $("f-manifest").removeAttribute("aria-invalid");
  const out = $("manifest-results");
  if (!text.trim()) {
    $("f-manifest").setAttribute("aria-invalid", "true");
    $("err-manifest").textContent = "manifest: paste a Deployment, StatefulSet, LeaderWorkerSet or KServe YAML";
    return;
  }
  let report;
  try {
    report = await api("/v1/checks", { manifest: text });
  } catch (error) {
    $("err-manifest").textContent = error.message;
    return;
  }
  out.replaceChildren(...report.results.map((result) => {
    const item = el("div", { class: "check-result", "data-verdict": result.verdict },
      el("p", {}, el("strong", { class: `verdict-${result.verdict}`, text: result.verdict.replace("_", " ") }),
        ` ${result.kind || "document"} ${result.namespace ? `${result.namespace}/` : ""}${result.name || ""}: ${result.reason}`));
    for (const warning of result.warnings) item.append(el("p", { class: "hint", text: `warning: ${warning}` }));
    for (const plan of result.plans) {
      const button = el("button", { type: "button", class: "show-plan", text: `Show ${plan.model} on ${plan.gpu}` });
      button.addEventListener("click", () => {
        writeForm({ model: plan.model, gpu: plan.gpu, engine: plan.engine, tensor_parallel_size: String(plan.tensor_parallel_size),
          pipeline_parallel_size: String(plan.pipeline_parallel_size), max_model_len: String(plan.max_model_len),
          kv_cache_dtype: plan.kv_cache_dtype === "auto" ? "" : plan.kv_cache_dtype, quantization: plan.quantization || "",
          hf_config: "" });
        $("f-hf_config").value = "";
        submitPlan();
        $("summary").scrollIntoView();
      });
      item.append(button);
    }
    return item;
  }));
}

// ------------------------------------------------------------------------------------- registered fleet

async function renderFleet() {
  const box = $("fleet");
  let registered, live;
  try {
    [registered, live] = await Promise.all([api("/v1/deployments?limit=100"), api("/v1/live/deployments")]);
  } catch (error) {
    box.replaceChildren(el("p", { class: "hint", text: `registry not available: ${error.message}` }));
    return;
  }
  const items = registered.items || [];
  if (!items.length) {
    box.replaceChildren(el("p", { class: "hint", text: "No deployments registered (POST /v1/deployments)." }));
    return;
  }
  const byKey = Object.fromEntries((live.items || []).map((d) => [`${d.namespace}/${d.name}`, d]));
  const table = el("table", { class: "numbers wide-table", id: "fleet-table" },
    el("tr", {}, ...["deployment", "model", "GPU", "replicas", "predicted blocks", "observed blocks", "error",
      "KV usage", "running", "waiting", "headroom", ""].map((t) => el("th", { text: t }))));
  for (const d of items) {
    const key = `${d.namespace}/${d.name}`;
    const l = byKey[key] || {};
    const pct = (v) => (v == null ? "—" : `${fmtNum(v * 100, 1)} %`);
    const link = CONFIG.grafana_url
      ? el("a", { href: `${CONFIG.grafana_url}${CONFIG.grafana_url.includes("?") ? "&" : "?"}var-namespace=${encodeURIComponent(d.namespace)}&var-deployment=${encodeURIComponent(d.name)}`, text: "Grafana" })
      : "";
    table.append(el("tr", { "data-deployment": key },
      el("td", { text: key }), el("td", { text: typeof d.model === "string" ? d.model : "inline" }),
      el("td", { text: typeof d.gpu === "string" ? d.gpu : "inline" }), el("td", { text: d.replicas ?? "" }),
      el("td", { text: l.predicted_kv_cache_blocks == null ? "—" : fmtInt(l.predicted_kv_cache_blocks) }),
      el("td", { text: l.observed_kv_cache_blocks == null ? "—" : fmtInt(l.observed_kv_cache_blocks) }),
      el("td", { text: pct(l.prediction_error_ratio) }), el("td", { text: pct(l.observed_kv_cache_usage_ratio) }),
      el("td", { text: l.observed_requests_running ?? "—" }), el("td", { text: l.observed_requests_waiting ?? "—" }),
      el("td", { text: pct(l.capacity_headroom_ratio) }), el("td", {}, link)));
  }
  box.replaceChildren(table);
}

// ------------------------------------------------------------------------------------------------- driving

let generation = 0;

async function submitPlan() {
  clearErrors();
  const state = readForm();
  history.replaceState(null, "", `?${stateToQuery(state)}`);
  $("share-link").href = location.href;
  const mine = ++generation;
  const button = $("plan-button");
  button.disabled = true;
  document.body.dataset.state = "loading";
  try {
    const body = planBody(state);
    const [plan, defaultPlan] = await Promise.all([
      api("/v1/plans", body),
      state.max_model_len ? api("/v1/plans", { ...body, max_model_len: undefined }) : null,
    ]);
    if (mine !== generation) return;
    renderVerdict(plan);
    renderMemory(plan);
    document.body.dataset.state = "planned";
    if (mine === 1) performance.mark("kvcap-first-render");
    await Promise.all([
      renderCapacity(state, plan, defaultPlan || plan),
      plan.fits ? renderLoad(state, plan) : Promise.resolve(clearLoad()),
      renderRecommendation(state),
      renderComparison(state),
    ]);
    if (mine === generation) document.body.dataset.state = "ready";
  } catch (error) {
    if (mine !== generation) return;
    showApiError(error);
    document.body.dataset.state = "error";
  } finally {
    if (mine === generation) button.disabled = false;
  }
}

function clearLoad() {
  $("load-ttft-chart").replaceChildren(el("p", { class: "hint", text: "vLLM would not start: nothing to load." }));
  $("load-tpot-chart").replaceChildren();
}

function init() {
  const models = $("models");
  for (const name of CONFIG.models) models.append(el("option", { value: name }));
  const gpus = $("f-gpu");
  for (const gpu of CONFIG.gpus) {
    gpus.append(el("option", { value: gpu.name, text: `${gpu.name} — ${gpu.display_name || ""} (${fmtGiB(gpu.memory_bytes)})` }));
  }
  gpus.value = CONFIG.gpus.some((g) => g.name === "h100-sxm-80gb") ? "h100-sxm-80gb" : gpus.value;
  const state = queryToState(location.search);
  writeForm(state);
  form.addEventListener("submit", (event) => { event.preventDefault(); submitPlan(); });
  $("manifest-form").addEventListener("submit", checkManifest);
  submitPlan();
  renderFleet();
}

init();
