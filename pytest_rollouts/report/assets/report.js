// The rollouts report: draws the summary, the charts (inline SVG), the rollouts table and one
// rollout's details from the JSON embedded in this file. Every text from the run is inserted as
// text (textContent, createTextNode), never as markup.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  let DETAILS = null; // parsed on the first rollout opened: most visits never need it
  const SVGNS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2b6cb0", "#dd6b20", "#2f855a", "#805ad5", "#c53030", "#2c7a7b", "#b7791f", "#d53f8c", "#4a5568", "#38a169"];
  const PAGE = 50;
  // Each outcome's colour by its name, the same in every run: a failure class's from a palette of
  // warm colours by a hash of its name (never the scored blue), so a chart's colours mean one thing.
  const OUTCOME_COLORS = { scored: "#2b6cb0", mask_sample: "#a0aec0", no_reward: "#b7791f", "no row": "#4a5568" };
  const FAILURE_COLORS = ["#c53030", "#dd6b20", "#805ad5", "#d53f8c", "#9c4221", "#2c7a7b", "#6b46c1", "#e53e3e", "#975a16", "#b83280"];
  function outcomeColor(name) {
    if (OUTCOME_COLORS[name]) return OUTCOME_COLORS[name];
    let h = 0;
    for (const ch of name) h = (h * 31 + ch.codePointAt(0)) >>> 0;
    return FAILURE_COLORS[h % FAILURE_COLORS.length];
  }
  const byPosition = (names) => names.map((_, i) => COLORS[i % COLORS.length]);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
    }
    return node;
  }
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  const fmt = (v, digits = 4) => (v === null || v === undefined ? "-" : typeof v === "number" ? v.toFixed(digits) : String(v));
  const secs = (v) => (v === null || v === undefined ? "-" : v < 10 ? v.toFixed(3) + "s" : v.toFixed(1) + "s");
  const count = (n) => Number(n).toLocaleString("en-US");

  // ---- summary ----------------------------------------------------------------------------
  function header() {
    const s = DATA.summary;
    const passed = s.gates.exit_code === 0;
    return el("header", {},
      el("h1", {}, DATA.title, " ", el("span", { class: "badge " + (passed ? "pass" : "fail"), id: "verdict" }, passed ? "passed" : "exit " + s.gates.exit_code)),
      el("div", { class: "muted mono" }, DATA.out, " · generated ", DATA.generated),
      el("div", { class: "headline" },
        el("div", {}, el("div", { class: "muted" }, "mean reward"), el("div", { class: "big" }, fmt(s.mean_reward))),
        el("div", {}, el("div", { class: "muted" }, "coverage"), el("div", { class: "cov", id: "coverage-line" }, s.outcomes))),
      el("p", { class: "muted" }, "The mean reward averages the rewards of the scored rollouts, per group (",
        el("a", { href: "#metrics" }, "metrics"), "), measured against every rollout the run meant to make (",
        el("a", { href: "#coverage" }, "coverage"), "). ",
        el("button", { id: "show-wrong", onclick: showWrong }, "Show the wrong answers"), " lists the scored rollouts with a reward of 0 or less (not masked ones); click one to read it."));
  }
  function showWrong() {
    resetFilters();
    controls.reward.value = "zero";
    refresh();
    document.getElementById("rollouts").scrollIntoView();
  }

  function coverageCard() {
    const cov = DATA.summary.coverage;
    const names = Object.keys(cov);
    const rows = [["expected", "materialized rollouts: the denominator"], ["completed", "a result row"], ["scored", "in the mean (results with a reward, plus zeros a policy added)"],
      ["missing", "expected minus scored"], ["masked", "mask_sample results"], ["unrewarded", "results without a numeric reward"], ["failed", "failed (latest attempt) or without a reward"],
      ["counted_as_zero", "failures counted as 0 by policy"], ["imputed_zero", "missing rollouts counted as 0 by policy"]];
    const table = el("table", { id: "coverage" },
      el("thead", {}, el("tr", {}, el("th", {}, "count"), ...names.map((n) => el("th", { class: "num" }, n === "all" ? "whole run" : n)), el("th", {}, "what it counts"))),
      el("tbody", {}, rows.map(([key, what]) => el("tr", {}, el("td", {}, key), ...names.map((n) => el("td", { class: "num" }, count(cov[n][key]))), el("td", { class: "muted" }, what)))));
    const failed = cov.all.failed_by_class || {};
    const classes = Object.keys(failed).length ? el("p", {}, "Failed by class: " + Object.entries(failed).map(([k, v]) => k + " " + v).join(", ")) : null;
    return el("section", { class: "card" }, el("h2", {}, "Coverage and its denominators"), table, classes,
      el("h3", {}, "As the run's summary says it"), el("pre", { class: "lines", id: "score-lines" }, DATA.summary.lines.join("\n")));
  }

  function metricsCard() {
    const groups = DATA.summary.groups;
    const passKeys = [...new Set(groups.flatMap((g) => Object.keys(g.key_metrics).filter((k) => k.startsWith("pass@"))))];
    const head = ["group", "mean reward", "± se", ...passKeys.map((k) => k.split("/")[0]), "95% CI", "Manski bounds", "tokens / rollout", "source"];
    const body = groups.map((g) => {
      const st = g.statistics || {};
      const ci = st["ci_95/reward"], mb = st["manski_bounds/reward"];
      return el("tr", {}, el("td", {}, g.name), el("td", { class: "num" }, fmt(g.mean_reward)), el("td", { class: "num" }, fmt(g.key_metrics["sem_clustered/reward"])),
        ...passKeys.map((k) => el("td", { class: "num" }, fmt(g.key_metrics[k]))),
        el("td", { class: "num" }, ci ? `[${fmt(ci[0])}, ${fmt(ci[1])}] ${st.ci_method || ""}` : "-"),
        el("td", { class: "num" }, mb ? `[${fmt(mb[0])}, ${fmt(mb[1])}]` : "-"),
        el("td", { class: "num" }, g.usage["mean/total_tokens"] !== undefined ? fmt(g.usage["mean/total_tokens"], 1) : "-"),
        el("td", {}, g.source + (g.note ? " (" + g.note + ")" : "")));
    });
    const file = DATA.summary.metrics_file ? el("p", { class: "muted" }, "From the metrics file ", el("span", { class: "mono" }, DATA.summary.metrics_file), ".") : el("p", { class: "muted" }, "No metrics file: the run wrote none.");
    return el("section", { class: "card" }, el("h2", {}, "Metrics per group"), el("table", { id: "metrics" }, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))), el("tbody", {}, body)), file);
  }

  function gatesCard() {
    const g = DATA.summary.gates;
    const lines = g.measures.length ? el("pre", { class: "lines" }, g.measures.join("\n")) : el("p", { class: "muted" }, "No gate asked beyond the default (some rollout must produce a reward).");
    return el("section", { class: "card", id: "gates" }, el("h2", {}, "Gates: exit ", String(g.exit_code)), lines, g.problems.map((p) => el("p", { class: "problem" }, p)));
  }

  // ---- charts -----------------------------------------------------------------------------
  const W = 560, H = 230, M = { l: 54, r: 12, t: 10, b: 34 }; // room for "0.025" beside the axis title
  // A tick step of 1, 2, 2.5 or 5 times a power of ten giving at most 5 intervals up to yMax
  // (whole counts: a whole step), and the decimals that write each tick exactly.
  function niceTicks(yMax, whole) {
    const top = yMax > 0 ? yMax : 1;
    let step = null;
    for (let p = Math.floor(Math.log10(top / 5)) - 1; step === null; p++) {
      for (const m of [1, 2, 2.5, 5]) {
        const s = m * Math.pow(10, p);
        if ((!whole || Number.isInteger(s)) && s * 5 >= top) { step = s; break; }
      }
    }
    let decimals = 0;
    while (decimals < 6 && Math.abs(Math.round(step * 10 ** decimals) - step * 10 ** decimals) > 1e-9) decimals++;
    const n = Math.ceil(top / step - 1e-9);
    return { max: n * step, ticks: Array.from({ length: n + 1 }, (_, i) => i * step), decimals };
  }
  function tickLabel(v, decimals) {
    return v >= 10000 && decimals === 0 ? (v / 1000).toLocaleString("en-US") + "k" : v.toFixed(decimals);
  }
  function frame(id, xLabel, yLabel, yMax, whole) {
    const root = svg("svg", { class: "chart", id, viewBox: `0 0 ${W} ${H}`, role: "img" });
    const nice = niceTicks(yMax, whole);
    const y = (v) => M.t + (H - M.t - M.b) * (1 - v / nice.max);
    for (const v of nice.ticks) {
      root.appendChild(svg("line", { class: "gridline", x1: M.l, x2: W - M.r, y1: y(v), y2: y(v) }));
      root.appendChild(svg("text", { class: "ytick", x: M.l - 4, y: y(v) + 4, "text-anchor": "end" }, tickLabel(v, nice.decimals)));
    }
    root.appendChild(svg("line", { class: "axis", x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b }));
    root.appendChild(svg("text", { x: (W + M.l) / 2, y: H - 4, "text-anchor": "middle" }, xLabel));
    root.appendChild(svg("text", { x: 10, y: M.t + 4, transform: `rotate(-90 10 ${M.t + 4})`, "text-anchor": "end" }, yLabel));
    return { root, y, x0: M.l, x1: W - M.r, base: H - M.b };
  }
  function legend(names, colors) {
    return el("div", { class: "legend" }, names.map((n, i) => { const s = el("span", {}, n); s.style.setProperty("--c", colors[i]); return s; }));
  }
  function chartCard(title, note, chart, names, colors) {
    return el("section", { class: "card" }, el("h2", {}, title), chart, names ? legend(names, colors || byPosition(names)) : null, el("div", { class: "muted" }, note));
  }
  function bars(id, labels, series, xLabel, yLabel, stacked, colors, names) {
    const totals = labels.map((_, i) => (stacked ? series.reduce((a, s) => a + s[i], 0) : Math.max(...series.map((s) => s[i]))));
    const f = frame(id, xLabel, yLabel, Math.max(1, ...totals), true);
    colors = colors || byPosition(series);
    const slot = (f.x1 - f.x0) / Math.max(1, labels.length);
    const every = Math.ceil(labels.length / 12);
    labels.forEach((label, i) => {
      let top = 0;
      series.forEach((s, j) => {
        const w = stacked ? slot * 0.8 : (slot * 0.8) / series.length;
        const x = f.x0 + slot * i + slot * 0.1 + (stacked ? 0 : w * j);
        const y0 = f.y(top), y1 = f.y(top + s[i]);
        if (s[i] > 0) {
          const r = svg("rect", { class: "mark", x, y: y1, width: Math.max(1, w - 1), height: Math.max(0.5, y0 - y1), fill: colors[j] });
          r.appendChild(svg("title", {}, `${names ? names[j] + " · " : ""}${label}: ${s[i]}`));
          f.root.appendChild(r);
        }
        if (stacked) top += s[i];
      });
      if (i % every === 0) f.root.appendChild(svg("text", { x: f.x0 + slot * (i + 0.5), y: f.base + 13, "text-anchor": "middle" }, label));
    });
    return f.root;
  }
  function lines(id, series, xMax, yMax, xLabel, yLabel, xTicks) {
    const f = frame(id, xLabel, yLabel, yMax);
    const x = (v) => f.x0 + (f.x1 - f.x0) * (xMax > 1 ? (v - 1) / (xMax - 1) : 0.5);
    series.forEach((points, j) => {
      if (!points.length) return;
      const d = points.map(([a, b], i) => (i ? "L" : "M") + x(a).toFixed(1) + " " + f.y(b).toFixed(1)).join(" ");
      f.root.appendChild(svg("path", { class: "mark", d, fill: "none", stroke: COLORS[j % COLORS.length], "stroke-width": 2 }));
      points.forEach(([a, b]) => { const c = svg("circle", { class: "mark", cx: x(a), cy: f.y(b), r: 2.5, fill: COLORS[j % COLORS.length] }); c.appendChild(svg("title", {}, `${a}: ${fmt(b)}`)); f.root.appendChild(c); });
    });
    (xTicks || []).forEach((t) => f.root.appendChild(svg("text", { x: x(t[0]), y: f.base + 13, "text-anchor": "middle" }, t[1])));
    return f.root;
  }

  function chartsGrid() {
    const c = DATA.charts;
    const cards = [];
    const groups = Object.keys(c.rewards);
    if (groups.length) {
      const labels = c.rewards[groups[0]].labels;
      cards.push(chartCard("Reward distribution per group", "Scored results (a reward, not masked) by reward value.", bars("chart-rewards", labels, groups.map((g) => c.rewards[g].counts), "reward", "rollouts", false), groups));
    }
    const pk = Object.keys(c.pass_k);
    if (pk.length) {
      const kMax = Math.max(...pk.map((g) => c.pass_k[g][c.pass_k[g].length - 1][0]));
      const ticks = [...new Set(pk.flatMap((g) => c.pass_k[g].map((p) => p[0])))].filter((k, i, all) => all.length <= 12 || (k & (k - 1)) === 0).map((k) => [k, String(k)]);
      cards.push(chartCard("pass@k", "Unbiased estimator over tasks with at least k scored rollouts (full reward counts as a pass).", lines("chart-passk", pk.map((g) => c.pass_k[g].map((p) => [p[0], p[1]])), kMax, 1, "k", "pass@k", ticks), pk));
    }
    const lat = c.latency;
    if (lat.n) {
      const labels = lat.edges.slice(0, -1).map((e) => e.toFixed(e < 1 ? 3 : 1)).concat(["≥p99"]);
      cards.push(chartCard("Latency", `${count(lat.n)} results: p50 ${secs(lat.p50)}, p90 ${secs(lat.p90)}, p99 ${secs(lat.p99)}, max ${secs(lat.max)}. Bars up to p99, the slower in the last.`, bars("chart-latency", labels, [lat.counts], "seconds", "results", false)));
      const run = c.latency_over_run, pts = run.points;
      const yMax = Math.max(...pts.map((p) => p[3]));
      const end = (p) => Math.min(p[0] + run.size, run.n); // a bucket's point at its last result
      cards.push(chartCard("Latency over the run", `Results in the order they completed, in buckets of ${count(run.size)}, each drawn at its last result: p50, p90 and slowest.`,
        lines("chart-latency-run", [1, 2, 3].map((j) => pts.map((p) => [end(p), p[j]])), Math.max(2, run.n), yMax || 1, "completed results", "seconds",
          [[1, "1"], [run.n, count(run.n)]]), ["p50", "p90", "max"]));
    }
    const oc = c.outcomes_over_run;
    if (oc.n) {
      const labels = oc.buckets.map((_, i) => count(i * oc.size + 1));
      const series = oc.statuses.map((_, j) => oc.buckets.map((b) => b[j]));
      const colors = oc.statuses.map(outcomeColor);
      cards.push(chartCard("Outcomes and failures by class over the run", `Rollouts in dispatch order (the materialized inputs'), in buckets of ${count(oc.size)}.`, bars("chart-outcomes", labels, series, "rollout (dispatch order)", "rollouts", true, colors, oc.statuses), oc.statuses, colors));
    }
    const cl = c.concurrency;
    if (cl && cl.series.length) {
      const refused = cl.retries_refused ? ` The retry budget refused ${count(cl.retries_refused)} retries.` : "";
      cards.push(chartCard("Concurrency limit over the run", `Each agent's adaptive limit on requests in flight (at most ${cl.ceiling}), from the start of its dispatch.${refused}`,
        lines("chart-concurrency", cl.series.map((s) => s.points.map((p) => [p[0] + 1, p[1]])), cl.seconds + 1, cl.ceiling, "seconds", "limit",
          [[1, "0"], [cl.seconds + 1, secs(cl.seconds)]]), cl.series.map((s) => s.name)));
    }
    return el("div", { class: "grid", id: "charts" }, cards);
  }

  // ---- the rollouts table -----------------------------------------------------------------
  const COL = Object.fromEntries(DATA.columns.map((c, i) => [c, i]));
  const state = { sort: null, desc: false, page: 0, view: DATA.rows.map((_, i) => i) };
  const controls = {};
  function tableCard() {
    controls.reward = el("select", { id: "f-reward", onchange: refresh }, [["any", "any reward"], ["full", "reward ≥ 1 (right)"], ["partial", "0 < reward < 1"], ["zero", "scored, reward ≤ 0 (wrong)"], ["none", "no reward"]].map(([v, t]) => el("option", { value: v }, t)));
    controls.status = el("select", { id: "f-status", onchange: refresh }, el("option", { value: "" }, "any outcome"), DATA.statuses.map((s, i) => el("option", { value: String(i) }, s)));
    controls.group = el("select", { id: "f-group", onchange: refresh }, el("option", { value: "" }, "any group"), DATA.groups.map((g, i) => el("option", { value: String(i) }, g)));
    controls.text = el("input", { id: "f-text", type: "search", placeholder: "search answers, groups, outcomes; task:12", oninput: refresh });
    controls.info = el("span", { class: "muted", id: "t-count" });
    controls.body = el("tbody", {});
    controls.prev = el("button", { id: "t-prev", onclick: () => { state.page--; draw(); } }, "‹ prev");
    controls.next = el("button", { id: "t-next", onclick: () => { state.page++; draw(); } }, "next ›");
    controls.pageInfo = el("span", { class: "muted", id: "t-page" });
    const heads = [["task", "task"], ["rollout", "rollout"], ["group", "group"], ["reward", "reward"], ["status", "outcome"], ["latency", "latency"], ["attempts", "attempts"], ["answer", "final answer"]];
    const numeric = new Set(["task", "rollout", "reward", "latency", "attempts"]);
    controls.heads = heads.map(([c, t]) => el("th", { "data-col": c, class: numeric.has(c) ? "num" : "", onclick: () => sortBy(c) }, t));
    return el("section", { class: "card" }, el("h2", {}, "Rollouts"),
      el("div", { class: "filters" }, controls.reward, controls.status, controls.group, controls.text, controls.info),
      el("table", { id: "rollouts" }, el("thead", {}, el("tr", {}, controls.heads)), controls.body),
      el("div", { class: "pager" }, controls.prev, controls.pageInfo, controls.next),
      el("p", { class: "muted" }, "Click a rollout to open it. Texts longer than " + count(DATA.text_cap) + " characters are cut, with a marker."));
  }
  function matches(row, reward, status, group, text, task) {
    const r = row[COL.reward];
    if (reward === "full" && !(r !== null && r >= 1)) return false;
    if (reward === "partial" && !(r !== null && r > 0 && r < 1)) return false;
    if (reward === "zero" && !(r !== null && r <= 0 && DATA.statuses[row[COL.status]] === "scored")) return false; // masked: not the policy's
    if (reward === "none" && r !== null) return false;
    if (status !== "" && row[COL.status] !== Number(status)) return false;
    if (group !== "" && row[COL.group] !== Number(group)) return false;
    if (task !== null) return row[COL.task] === task;
    if (text) {
      const hay = (row[COL.answer] + " " + DATA.groups[row[COL.group]] + " " + DATA.statuses[row[COL.status]]).toLowerCase();
      if (!hay.includes(text)) return false;
    }
    return true;
  }
  function resetFilters() {
    controls.reward.value = "any";
    controls.status.value = "";
    controls.group.value = "";
    controls.text.value = "";
  }
  function refresh() {
    const text = controls.text.value.trim().toLowerCase();
    const m = /^task:\s*(\d+)$/.exec(text);
    const task = m ? Number(m[1]) : null;
    const [reward, status, group] = [controls.reward.value, controls.status.value, controls.group.value];
    state.view = [];
    DATA.rows.forEach((row, i) => { if (matches(row, reward, status, group, text, task)) state.view.push(i); });
    applySort();
    state.page = 0;
    draw();
  }
  function sortBy(col) {
    state.desc = state.sort === col ? !state.desc : false;
    state.sort = col;
    applySort();
    state.page = 0;
    draw();
  }
  function applySort() {
    if (state.sort === null) return;
    const c = COL[state.sort], sign = state.desc ? -1 : 1;
    const key = state.sort === "group" ? (i) => DATA.groups[DATA.rows[i][c]] : state.sort === "status" ? (i) => DATA.statuses[DATA.rows[i][c]] : (i) => DATA.rows[i][c];
    state.view.sort((a, b) => {
      const x = key(a), y = key(b);
      if (x === y) return a - b;
      if (x === null) return 1; // nothing sorts last either way
      if (y === null) return -1;
      return (x < y ? -1 : 1) * sign;
    });
  }
  function draw() {
    const pages = Math.max(1, Math.ceil(state.view.length / PAGE));
    state.page = Math.min(Math.max(0, state.page), pages - 1);
    const shown = state.view.slice(state.page * PAGE, (state.page + 1) * PAGE);
    controls.body.replaceChildren(...shown.map((i) => {
      const row = DATA.rows[i], status = DATA.statuses[row[COL.status]];
      const cls = status === "scored" ? "scored" : ["no row", "mask_sample", "no_reward"].includes(status) ? "" : "failed";
      return el("tr", { "data-index": String(i), onclick: () => openRollout(i) },
        el("td", { class: "num" }, String(row[COL.task])), el("td", { class: "num" }, String(row[COL.rollout])), el("td", {}, DATA.groups[row[COL.group]]),
        el("td", { class: "num" }, row[COL.reward] === null ? "-" : fmt(row[COL.reward], 3)), el("td", {}, el("span", { class: "status " + cls }, status)),
        el("td", { class: "num" }, secs(row[COL.latency])), el("td", { class: "num" }, String(row[COL.attempts])), el("td", { class: "answer", title: row[COL.answer] }, row[COL.answer]));
    }));
    controls.info.textContent = `${count(state.view.length)} of ${count(DATA.rows.length)} rollouts`;
    controls.pageInfo.textContent = `page ${state.page + 1} of ${count(pages)}`;
    controls.prev.disabled = state.page === 0;
    controls.next.disabled = state.page >= pages - 1;
    controls.heads.forEach((h) => { h.textContent = h.textContent.replace(/ [▲▼]$/, "") + (h.dataset.col === state.sort ? (state.desc ? " ▼" : " ▲") : ""); });
  }

  // ---- one rollout ------------------------------------------------------------------------
  function fields(pairs) {
    return el("dl", { class: "fields" }, pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, el("pre", {}, v))]));
  }
  function turns(items) {
    const out = [];
    let turn = null, n = 0, afterResult = false;
    for (const [kind, label, text] of items) {
      if (!turn || (afterResult && kind !== "result")) { turn = el("div", { class: "turn" }, el("div", { class: "muted" }, "turn " + ++n)); out.push(turn); }
      const title = kind === "call" ? "tool call " + label : kind === "result" ? "tool result " + label : kind === "message" ? label || "message"
        : kind === "raw" ? "response as returned (not Responses-shaped: no output list)" : kind;
      turn.appendChild(el("div", { class: "item " + kind }, el("div", { class: "kind" }, title), el("pre", {}, text)));
      afterResult = kind === "result";
    }
    return out;
  }
  function openRollout(i) {
    if (DETAILS === null) DETAILS = JSON.parse(document.getElementById("report-details").textContent);
    const row = DATA.rows[i], [items, verifier, failure] = DETAILS.rollouts[i];
    const [prompt, taskFields] = DETAILS.tasks[String(row[COL.task])] || [[], []];
    const messages = items.filter((it) => it[0] === "message");
    const answer = messages.length ? messages[messages.length - 1][2] : null;
    const drawer = document.getElementById("drawer");
    drawer.replaceChildren(...[
      el("button", { class: "close", id: "drawer-close", onclick: () => { drawer.hidden = true; } }, "close ✕"),
      el("h2", { id: "drawer-title" }, `Task ${row[COL.task]}, rollout ${row[COL.rollout]} · ${DATA.groups[row[COL.group]]} · ${DATA.statuses[row[COL.status]]}`),
      el("p", { class: "muted" }, `reward ${row[COL.reward] === null ? "none" : fmt(row[COL.reward], 4)} · latency ${secs(row[COL.latency])} · ${row[COL.attempts]} attempt(s) recorded`),
      el("h3", {}, "Prompt"), el("div", { id: "drawer-prompt" }, prompt.length ? prompt.map(([role, text]) => el("div", { class: "item" }, el("div", { class: "kind" }, role), el("pre", {}, text)))
        : el("p", { class: "muted" }, "no prompt (the row has no responses_create_params)")),
      taskFields.length ? [el("h3", {}, "Dataset fields"), fields(taskFields)] : null,
      el("h3", {}, "Turns"), items.length ? el("div", { id: "drawer-turns" }, turns(items)) : el("p", { class: "muted" }, "No output recorded."),
      el("h3", {}, "Final answer"), el("div", { class: "answer-box", id: "drawer-answer" }, el("pre", {}, answer !== null ? answer : items.some((it) => it[0] === "raw") ? "(no assistant message: the response is shown as returned, above)" : "(no assistant message)")),
      verifier.length ? [el("h3", {}, "Verifier and agent fields"), el("div", { id: "drawer-verifier" }, fields(verifier))] : null,
      failure.length ? [el("h3", {}, "Failure (its latest failed attempt)"), el("div", { class: "failure-box", id: "drawer-failure" }, fields(failure))] : null,
    ].flat().filter((node) => node !== null));
    drawer.hidden = false;
    drawer.scrollTop = 0;
  }

  // ---- the baseline -----------------------------------------------------------------------
  function baselineCard() {
    const b = DATA.summary.baseline;
    if (b === null || b === undefined) return null;
    if (typeof b === "string") return el("section", { class: "card", id: "baseline" }, el("h2", {}, "Baseline"), el("p", { class: "problem" }, b));
    const rows = b.groups.map((g) => el("tr", {}, el("td", {}, g.group), el("td", { class: "num" }, String(g.num_tasks)), el("td", { class: "num" }, fmt(g["baseline_mean/reward"])), el("td", { class: "num" }, fmt(g["candidate_mean/reward"])),
      el("td", { class: "num" }, fmt(g["difference/reward"])), el("td", { class: "num" }, g["ci_95/difference"] ? `[${fmt(g["ci_95/difference"][0])}, ${fmt(g["ci_95/difference"][1])}]` : "-"), el("td", {}, g.test ? `${g.test} p=${fmt(g.p_value)}` : "-"),
      el("td", { class: "num" }, g.p_value_adjusted == null ? "-" : `${b.correction} ${fmt(g.p_value_adjusted)}`)));
    const flips = b.groups.map((g) => el("div", {}, el("h3", {}, `${g.group}: ${g.fixed.length} fixed, ${g.broke.length} broke`),
      el("table", { class: "flips" }, el("thead", {}, el("tr", {}, el("th", {}, "task"), el("th", {}, "change"), el("th", { class: "num" }, "baseline"), el("th", { class: "num" }, "this run"))),
        el("tbody", {}, [...g.broke.map((f) => ["broke", f]), ...g.fixed.map((f) => ["fixed", f])].map(([how, [label, base, cand]]) =>
          el("tr", {}, el("td", {}, el("span", { class: "flip", onclick: () => showTask(label) }, label)), el("td", {}, el("span", { class: "status " + (how === "broke" ? "failed" : "scored") }, how)), el("td", { class: "num" }, fmt(base, 3)), el("td", { class: "num" }, fmt(cand, 3))))))));
    return el("section", { class: "card", id: "baseline" }, el("h2", {}, "Compared with the baseline"), el("p", { class: "muted mono" }, b.baseline, " (baseline), paired by ", b.paired_by),
      el("table", {}, el("thead", {}, el("tr", {}, ["group", "tasks", "baseline", "this run", "difference", "95% CI", "test", "adjusted p"].map((h) => el("th", {}, h)))), el("tbody", {}, rows)),
      el("pre", { class: "lines" }, b.lines.join("\n")), el("h3", {}, "Flipped tasks"), flips);
  }
  function showTask(label) {
    resetFilters();
    const index = DATA.task_labels[label];
    controls.text.value = index === undefined ? label : "task:" + index;
    refresh();
    document.getElementById("rollouts").scrollIntoView();
  }

  const app = document.getElementById("app");
  app.append(header(), gatesCard(), coverageCard(), metricsCard(), chartsGrid());
  const base = baselineCard();
  if (base) app.append(base);
  app.append(tableCard());
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") document.getElementById("drawer").hidden = true; });
  refresh();
})();
