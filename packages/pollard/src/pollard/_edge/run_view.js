(function () {
"use strict";
var D = JSON.parse(document.getElementById("pollard-data").textContent);
var N = D.n, ROW = 26, OVERSCAN = 8;
var FLAG = {refused: 1, pruned: 2, redacted: 4, dry_run: 8, failed: 16, cached: 32, retry: 64,
  under_pruned: 128, result_conflict: 256, merge_conflict: 512, confirmation: 1024, cancelled: 2048,
  cache_read: 4096, approval: 8192};
var MARKS = [["refused", "REFUSED"], ["pruned", "PRUNED"], ["redacted", "REDACTED"],
  ["dry_run", "DRY-RUN"], ["failed", "FAILED"], ["cancelled", "CANCELLED"], ["cached", "CACHED"], ["cache_read", "CACHE-READ"],
  ["retry", "RETRY"], ["result_conflict", "RESULT-CONFLICT"], ["merge_conflict", "MERGE-CONFLICT"]];
// Marks that carry a state from the step's details: [CONFIRMATION:CONFIRMED], [APPROVAL:PENDING].
var STATES = [["confirmation", "CONFIRMATION"], ["approval", "APPROVAL"]];
var USAGE = ["input", "output", "cache_read", "cache_write"];
function $(id) { return document.getElementById(id); }
function esc(s) {
  return String(s).replace(/[&<>"']/g, function (c) {
    return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
  });
}
function idOf(i) { return esc(D.ids.substr(i * 64, 64)); }
function kindOf(i) { return D.kinds[D.kind[i]]; }
function labelOf(i) {
  var base = D.strings[D.label[i]], f = D.fanout[i];
  return f >= 0 ? "#" + f + (base ? " " + base : "") : base;
}
function has(i, name) { return (D.flags[i] & FLAG[name]) !== 0; }
function detail(i) { return D.details[i] || {}; }
function num(x) {
  if (x === 0) return "0";
  var a = Math.abs(x);
  if (a >= 1000) return Math.round(x).toLocaleString("en");
  if (a >= 1) return String(Math.round(x * 100) / 100);
  return String(Number(x.toPrecision(3)));
}
function money(x) { return "$" + (Math.abs(x) >= 1 ? x.toFixed(2) : num(x)); }
function secs(ms) { return ms >= 1000 ? (ms / 1000).toFixed(ms >= 10000 ? 1 : 2) + " s" : num(ms) + " ms"; }
function amount(meter, x) { return meter === "usd" ? money(x) : num(x); }

// Roll-ups: one backward pass (a child always comes after its parent in preorder).
var sub = {}, kids = new Int32Array(N), tokens = new Float64Array(N), subTokens;
D.meters.forEach(function (m) {
  var a = Float64Array.from(D.charges[m]);
  for (var i = N - 1; i > 0; i--) { var p = D.parent[i]; if (p >= 0) a[p] += a[i]; }
  sub[m] = a;
});
var subUsage = {};
USAGE.forEach(function (u) {
  var a = Float64Array.from(D.usage[u]);
  for (var i = N - 1; i > 0; i--) { var p = D.parent[i]; if (p >= 0) a[p] += a[i]; }
  subUsage[u] = a;
});
for (var i = 0; i < N; i++) {
  tokens[i] = D.usage.input[i] + D.usage.output[i];
  if (D.parent[i] >= 0) kids[D.parent[i]]++;
}
subTokens = Float64Array.from(subUsage.input);
for (var j = 0; j < N; j++) subTokens[j] += subUsage.output[j];
var primary = D.primary, span = D.span || 0;

// ---- filters -------------------------------------------------------------------------------
var view = new Int32Array(N), viewLen = N, selected = -1;
for (var v = 0; v < N; v++) view[v] = v;
var kindSel = $("f-kind"), statusSel = $("f-status"), textIn = $("f-text"),
  minIn = $("f-min"), maxIn = $("f-max");
D.kinds.forEach(function (k, n) {
  var o = document.createElement("option"); o.value = String(n); o.textContent = k;
  kindSel.appendChild(o);
});
if (!primary) { minIn.disabled = maxIn.disabled = true; }
$("f-unit").textContent = primary ? "(" + primary + ", own)" : "(nothing charged)";
function matches(i, kind, status, text, lo, hi) {
  if (kind >= 0 && D.kind[i] !== kind) return false;
  if (status) {
    if (status === "failed") { if (!has(i, "failed") && !has(i, "cancelled")) return false; }
    else if (status === "cached") { if (!has(i, "cached") && !has(i, "cache_read")) return false; }
    else if (!has(i, status)) return false;
  }
  if (text) {
    var hay = (labelOf(i) + " " + kindOf(i)).toLowerCase();
    if (hay.indexOf(text) < 0 && idOf(i).indexOf(text) !== 0) return false;
  }
  if (lo !== null || hi !== null) {
    var c = primary ? D.charges[primary][i] : 0;
    if (lo !== null && c < lo) return false;
    if (hi !== null && c > hi) return false;
  }
  return true;
}
function numberOf(input) { var t = input.value.trim(); if (!t) return null; var x = Number(t); return isFinite(x) ? x : null; }
function applyFilters() {
  var kind = kindSel.value === "" ? -1 : Number(kindSel.value), status = statusSel.value,
    text = textIn.value.trim().toLowerCase(), lo = numberOf(minIn), hi = numberOf(maxIn), n = 0;
  var all = kind < 0 && !status && !text && lo === null && hi === null;
  for (var i = 0; i < N; i++) if (all || matches(i, kind, status, text, lo, hi)) view[n++] = i;
  viewLen = n;
  $("count").textContent = (all ? "all " : "") + n.toLocaleString("en") + " of " + N.toLocaleString("en") + " steps shown";
  $("spacer").style.height = (viewLen * ROW) + "px";
  draw(true);
}
[kindSel, statusSel].forEach(function (el) { el.addEventListener("change", applyFilters); });
[textIn, minIn, maxIn].forEach(function (el) { el.addEventListener("input", applyFilters); });

// ---- the virtual list with its waterfall lane ---------------------------------------------
var box = $("steps"), spacer = $("spacer"), drawnFirst = -1, drawnLast = -1;
function marks(i) {
  var out = "";
  MARKS.forEach(function (m) { if (has(i, m[0])) out += '<span class="mark ' + m[0] + '">[' + m[1] + "]</span>"; });
  STATES.forEach(function (m) { if (has(i, m[0])) out += '<span class="mark ' + m[0] + '">[' + m[1] + ":" + esc(String(detail(i)[m[0]] || "").toUpperCase()) + "]</span>"; });
  return out;
}
function costText(i) {
  var parts = [];
  if (tokens[i]) parts.push(num(tokens[i]) + " tok");
  if (primary && primary !== "tokens" && D.charges[primary][i]) parts.push(amount(primary, D.charges[primary][i]));
  var s = parts.join(" ");
  if (kids[i] && primary && sub[primary][i] && sub[primary][i] !== D.charges[primary][i])
    s += ' <span class="sub">\u03a3 ' + amount(primary, sub[primary][i]) + "</span>";
  return s;
}
function barHtml(i) {
  var s = D.start[i];
  if (s < 0 || !(span > 0)) return "";
  var left = s / span * 100, width = D.duration[i] / span * 100, cls = "bar", glyph = "", what = [];
  if (has(i, "refused")) { cls += " refused"; glyph = "\u2715"; what.push("refused"); }
  else if (has(i, "failed") || has(i, "cancelled")) { cls += " failed"; glyph = "!"; what.push(has(i, "failed") ? "failed" : "cancelled"); }
  if (has(i, "cached")) { cls += " cached"; what.push("served from a recording"); }
  else if (has(i, "cache_read")) what.push("cache read " + num(D.usage.cache_read[i]) + " tokens");
  if (has(i, "retry")) { cls += " retry"; glyph += "\u21bb"; what.push("retry"); }
  var title = kindOf(i) + " " + labelOf(i) + ": starts +" + secs(s) + ", takes " + secs(D.duration[i]) + (what.length ? " (" + what.join(", ") + ")" : "");
  var out = '<span class="' + cls + '" data-i="' + i + '" data-start="' + s + '" data-duration="' + D.duration[i] + '" style="left:' + left.toFixed(3) + "%;width:" + width.toFixed(3) + '%" title="' + esc(title) + '"></span>';
  if (glyph) out += '<span class="glyph" aria-hidden="true" style="left:calc(' + Math.min(left + width, 97).toFixed(3) + '% + 3px)">' + glyph + "</span>";
  return out;
}
function rowHtml(n, i, top) {
  var cls = "row k-" + esc(kindOf(i));
  if (has(i, "refused")) cls += " refused";
  if (has(i, "pruned")) cls += " pruned"; else if (has(i, "under_pruned")) cls += " under-pruned";
  if (has(i, "redacted")) cls += " redacted";
  var pad = Math.min(D.indent[i], 40) * 0.9;
  return '<div class="' + cls + '" role="treeitem" id="r-' + i + '" data-i="' + i + '" aria-level="' + (D.indent[i] + 1) + '" aria-selected="' + (i === selected) + '"' +
    ' aria-setsize="' + viewLen + '" aria-posinset="' + (n + 1) + '"' +
    (top === null ? "" : ' style="top:' + top + 'px"') + ">" +
    '<span class="tree" style="padding-left:' + pad.toFixed(1) + 'rem"><span class="kind">' + esc(kindOf(i)) + '</span> <span class="id">' + idOf(i).substr(0, 8) + "</span> " +
    '<span class="label">' + esc(labelOf(i)) + "</span>" + marks(i) + "</span>" +
    '<span class="cost">' + costText(i) + "</span>" +
    '<span class="lane">' + barHtml(i) + "</span></div>";
}
function draw(force) {
  var first = Math.max(0, Math.floor(box.scrollTop / ROW) - OVERSCAN);
  var last = Math.min(viewLen, Math.ceil((box.scrollTop + box.clientHeight) / ROW) + OVERSCAN);
  if (!force && first === drawnFirst && last === drawnLast) return;
  drawnFirst = first; drawnLast = last;
  var html = [];
  for (var n = first; n < last; n++) html.push(rowHtml(n, view[n], n * ROW));
  spacer.innerHTML = html.join("");
}
var pending = false;
box.addEventListener("scroll", function () {
  if (pending) return; pending = true;
  requestAnimationFrame(function () { pending = false; draw(false); });
});
box.addEventListener("click", function (ev) {
  var el = ev.target.closest("[data-i]");
  if (el) select(Number(el.getAttribute("data-i")), false);
});

// ---- selection, keyboard and the details panel --------------------------------------------
function positionOf(i) { for (var n = 0; n < viewLen; n++) if (view[n] === i) return n; return -1; }
function reveal(n) {
  var top = n * ROW;
  if (top < box.scrollTop) box.scrollTop = top;
  else if (top + ROW > box.scrollTop + box.clientHeight) box.scrollTop = top + ROW - box.clientHeight;
}
function select(i, scroll) {
  selected = i;
  var n = positionOf(i);
  if (n < 0 && i >= 0) { kindSel.value = ""; statusSel.value = ""; textIn.value = ""; minIn.value = ""; maxIn.value = ""; applyFilters(); n = positionOf(i); }
  if (scroll && n >= 0) reveal(n);
  draw(true);
  if (n >= 0) box.setAttribute("aria-activedescendant", "r-" + i);
  showDetail(i);
}
box.addEventListener("keydown", function (ev) {
  if (!viewLen) return;
  var n = positionOf(selected), page = Math.max(1, Math.floor(box.clientHeight / ROW) - 1), to = null;
  switch (ev.key) {
    case "ArrowDown": to = n < 0 ? 0 : Math.min(viewLen - 1, n + 1); break;
    case "ArrowUp": to = n < 0 ? 0 : Math.max(0, n - 1); break;
    case "PageDown": to = Math.min(viewLen - 1, Math.max(n, 0) + page); break;
    case "PageUp": to = Math.max(0, n - page); break;
    case "Home": to = 0; break;
    case "End": to = viewLen - 1; break;
    case "ArrowLeft": if (selected >= 0 && D.parent[selected] >= 0) { ev.preventDefault(); select(D.parent[selected], true); } return;
    case "Enter": case " ": if (selected >= 0) { ev.preventDefault(); $("detail").focus(); } return;
    default: return;
  }
  ev.preventDefault();
  select(view[to], true);
});
document.addEventListener("keydown", function (ev) {
  if (ev.key === "/" && document.activeElement.tagName !== "INPUT") { ev.preventDefault(); textIn.focus(); }
  else if (ev.key === "Escape" && document.activeElement.tagName === "INPUT") { box.focus(); }
});
function fact(k, v) { return "<dt>" + esc(k) + "</dt><dd>" + v + "</dd>"; }
function showDetail(i) {
  var el = $("detail");
  if (i < 0) { el.innerHTML = '<h2>Step details</h2><p class="legend">Select a row or a timeline bar (or use the arrow keys in the list) to see its details here.</p>'; return; }
  var d = detail(i), f = [], p = D.parent[i];
  f.push(fact("kind", esc(kindOf(i))));
  f.push(fact("label", esc(labelOf(i)) || "none"));
  if (D.fanout[i] >= 0) f.push(fact("prompt index", String(D.fanout[i])));
  f.push(fact("id", "<code>" + idOf(i) + "</code>"));
  f.push(fact("parent", p >= 0 ? '<button class="link" data-go="' + p + '">' + idOf(p).substr(0, 8) + " " + esc(kindOf(p)) + "</button>" : "none"));
  f.push(fact("attempt", String(D.attempt[i])));
  var m = marks(i); if (m) f.push(fact("markers", m));
  if (d.created_at) f.push(fact("created at", esc(d.created_at)));
  if (D.start[i] >= 0) f.push(fact("starts", "+" + secs(D.start[i]) + " after the first step"));
  if (d.duration_s !== undefined) f.push(fact("duration", esc(d.duration_s.toFixed(6)) + " s"));
  D.meters.forEach(function (meter) {
    var own = D.charges[meter][i], all = sub[meter][i];
    if (own || all) f.push(fact(meter, amount(meter, own) + (kids[i] ? ' <span class="sub">(subtree ' + amount(meter, all) + ")</span>" : "")));
  });
  USAGE.forEach(function (u) {
    var own = D.usage[u][i], all = subUsage[u][i];
    if (own || all) f.push(fact(u.replace("_", " ") + " tokens", num(own) + (kids[i] ? ' <span class="sub">(subtree ' + num(all) + ")</span>" : "")));
  });
  if (d.avoided) f.push(fact("avoided", esc(Object.keys(d.avoided).map(function (k) { return k + "=" + d.avoided[k]; }).join(" "))));
  if (d.refusal) Object.keys(d.refusal).forEach(function (k) { f.push(fact("refusal " + k, esc(d.refusal[k]))); });
  if (d.approval) f.push(fact("approval", esc(d.approval)));
  if (d.error) f.push(fact("error", esc(d.error)));
  if (d.result_conflicts) f.push(fact("result conflicts", String(d.result_conflicts)));
  if (d.merge_conflicts) f.push(fact("merge conflicts", String(d.merge_conflicts)));
  if (d.fork_depth) f.push(fact("fork depth", String(d.fork_depth)));
  if (d.actor) f.push(fact("agent", esc(d.actor)));
  if (d.agent) ["team", "role", "task"].forEach(function (k) { if (d.agent[k]) f.push(fact("agent " + k, esc(d.agent[k]))); });
  f.push(fact("children", String(kids[i])));
  var html = '<h2>Step details</h2><dl class="facts">' + f.join("") + "</dl>";
  if (D.payloads && D.content && D.content[i]) {
    html += '<h3>payload</h3><pre class="payload">' + esc(D.content[i][0]) + '</pre><h3>result</h3><pre class="result">' + esc(D.content[i][1]) + "</pre>";
  } else if (!D.payloads) {
    html += '<p class="legend">Payload and result hidden (content-free view).</p>';
  }
  el.innerHTML = html;
  el.setAttribute("data-i", String(i));
}
document.addEventListener("click", function (ev) {
  var go = ev.target.closest && ev.target.closest("[data-go]");
  if (!go) return;
  if (document.body.getAttribute("data-view") === "cost") document.body.setAttribute("data-view", "all");
  select(Number(go.getAttribute("data-go")), true);
  box.focus();
  box.scrollIntoView({block: "nearest"});
});

// ---- the time axis and the concurrency strip ----------------------------------------------
function axis() {
  var out = "";
  if (span > 0) for (var t = 0; t <= 4; t++) out += '<span style="left:' + (t * 25) + '%">' + (t === 4 ? "" : "+" + secs(span * t / 4)) + "</span>";
  else out = "<span>no timings recorded</span>";
  $("axis").innerHTML = out;
  var strip = D.strip || [], svg = "", peak = D.peak || 0;
  if (strip.length && peak) {
    var w = 100 / strip.length;
    strip.forEach(function (c, n) { if (c) svg += '<rect x="' + (n * w).toFixed(3) + '" y="' + (22 - c / peak * 20).toFixed(2) + '" width="' + w.toFixed(3) + '" height="' + (c / peak * 20).toFixed(2) + '"></rect>'; });
  }
  var el = $("strip");
  el.innerHTML = svg;
  el.setAttribute("aria-label", "steps in flight over time: at most " + peak + " at once");
  $("peak").textContent = peak ? "in flight: at most " + peak + " at once" : "";
}

// ---- cost: totals, burn-down charts, top contributors -------------------------------------
function totals() {
  var rows = [];
  USAGE.forEach(function (u) { rows.push([u.replace("_", " ") + " tokens", num(subUsageTotal(u))]); });
  D.meters.forEach(function (m) { rows.push([m + " (charged)", amount(m, total(m))]); });
  $("totals").innerHTML = "<tbody>" + rows.map(function (r) { return "<tr><th scope=\"row\">" + esc(r[0]) + '</th><td class="num">' + esc(r[1]) + "</td></tr>"; }).join("") + "</tbody>";
}
function total(m) { var s = 0, a = D.charges[m]; for (var i = 0; i < N; i++) s += a[i]; return s; }
function subUsageTotal(u) { var s = 0, a = D.usage[u]; for (var i = 0; i < N; i++) s += a[i]; return s; }
function burn() {
  var out = [];
  (D.burn || []).forEach(function (b) {
    var W = 560, H = 180, L = 56, R = 10, T = 10, B = 24;
    var top = Math.max(Number(b.total), 0), limits = b.limits || [];
    limits.forEach(function (l) { top = Math.max(top, l); });
    top = top > 0 ? top * 1.08 : 1;
    var tmax = span > 0 ? span : 1;
    function x(t) { return L + (W - L - R) * t / tmax; }
    function y(val) { return T + (H - T - B) * (1 - val / top); }
    var d = "", prev = null;
    b.points.forEach(function (pt) {
      if (prev === null) d = "M" + x(pt[0]).toFixed(1) + " " + y(pt[1]).toFixed(1);
      else d += " H" + x(pt[0]).toFixed(1) + " V" + y(pt[1]).toFixed(1);
      prev = pt;
    });
    if (prev) d += " H" + x(tmax).toFixed(1);
    var svg = '<rect class="frame" x="' + L + '" y="' + T + '" width="' + (W - L - R) + '" height="' + (H - T - B) + '"></rect>';
    svg += '<path class="spent" data-meter="' + esc(b.meter) + '" d="' + d + '"></path>';
    limits.forEach(function (l) {
      svg += '<line class="limit" data-limit="' + l + '" x1="' + L + '" x2="' + (W - R) + '" y1="' + y(l).toFixed(1) + '" y2="' + y(l).toFixed(1) + '"></line>';
      svg += '<text x="' + (W - R - 4) + '" y="' + (y(l) - 4).toFixed(1) + '" text-anchor="end">limit ' + esc(amount(b.meter, l)) + "</text>";
    });
    b.refusals.forEach(function (r) {
      var cx = x(r[0]), cy = y(r[1]);
      svg += '<g class="refusal-mark" data-at="' + r[0] + '"><title>refused at +' + esc(secs(r[0])) + " with " + esc(amount(b.meter, r[1])) + " spent</title>" +
        '<path d="M' + (cx - 4).toFixed(1) + " " + (cy - 4).toFixed(1) + " l8 8 m0 -8 l-8 8\"></path></g>";
    });
    svg += '<text x="' + (L - 4) + '" y="' + (T + 8) + '" text-anchor="end">' + esc(amount(b.meter, top)) + "</text>";
    svg += '<text x="' + (L - 4) + '" y="' + (H - B) + '" text-anchor="end">0</text>';
    svg += '<text x="' + L + '" y="' + (H - 6) + '">+0 s</text><text x="' + (W - R) + '" y="' + (H - 6) + '" text-anchor="end">+' + esc(secs(tmax)) + "</text>";
    var caption = b.meter + ": " + amount(b.meter, Number(b.total)) + " spent" +
      (limits.length ? " of a limit of " + limits.map(function (l) { return amount(b.meter, l); }).join(" / ") : " (no limit recorded)") +
      (b.refusal_count ? "; " + b.refusal_count + " refusal" + (b.refusal_count > 1 ? "s" : "") + " (\u2715)" : "; no refusals");
    out.push('<figure class="burn-down" data-meter="' + esc(b.meter) + '"><figcaption>' + esc(caption) + "</figcaption>" +
      '<svg class="burn" viewBox="0 0 ' + W + " " + H + '" role="img" aria-label="' + esc(caption) + '">' + svg + "</svg></figure>");
  });
  $("burn").innerHTML = out.length ? out.join("") : '<p class="legend">Nothing was charged over time (no timed, charged steps).</p>';
}
function top() {
  var list = D.top || [];
  if (!list.length) { $("top").innerHTML = '<p class="legend">No step was charged.</p>'; return; }
  var rows = list.map(function (i, n) {
    return "<tr><td class=\"num\">" + (n + 1) + '</td><td><button class="link" data-go="' + i + '">' + esc(kindOf(i)) + " " + idOf(i).substr(0, 8) + " " + esc(labelOf(i)) + "</button></td>" +
      '<td class="num">' + amount(primary, D.charges[primary][i]) + '</td><td class="num">' + num(tokens[i]) + "</td></tr>";
  });
  $("top").innerHTML = '<table class="top"><thead><tr><th class="num">#</th><th>step</th><th class="num">' + esc(primary) + '</th><th class="num">tokens</th></tr></thead><tbody>' + rows.join("") + "</tbody></table>";
}

// ---- the URL fragment: #n-<id> opens a step; #status=refused&kind=note&q=...&min=&max= filters
function decoded(text) { try { return decodeURIComponent(text); } catch (e) { return text; } }
function fromHash() {
  var h = location.hash.replace(/^#/, ""), target = -1, section = null;
  if (/^n-[0-9a-f]{64}$/.test(h)) { target = indexOfId(h.substr(2)); }
  else if (h === "cost" || h === "run" || h === "all") { section = h; }
  else if (h.indexOf("=") > 0) {
    h.split("&").forEach(function (pair) {
      var k = pair.split("=")[0], val = decoded(pair.substr(k.length + 1).replace(/\+/g, " "));
      if (k === "status") statusSel.value = val;
      else if (k === "kind") { var at = D.kinds.indexOf(val); kindSel.value = at < 0 ? "" : String(at); }
      else if (k === "q") textIn.value = val;
      else if (k === "min") minIn.value = val;
      else if (k === "max") maxIn.value = val;
      else if (k === "n") target = indexOfId(val);
    });
  }
  applyFilters();
  if (target >= 0) select(target, true);
  // #run and #cost show that view alone, #all (and any other fragment) both.
  document.body.setAttribute("data-view", section || "all");
}
function indexOfId(id) {
  var at = id.length === 64 ? D.ids.indexOf(id) : -1;
  while (at >= 0 && at % 64) at = D.ids.indexOf(id, at + 1);
  return at < 0 ? -1 : at / 64;
}
window.addEventListener("hashchange", fromHash);

// Printing draws every shown row in the page flow (up to a cap), then the virtual list returns.
var PRINT_CAP = 5000;
window.addEventListener("beforeprint", function () {
  var html = [], last = Math.min(viewLen, PRINT_CAP);
  for (var n = 0; n < last; n++) html.push(rowHtml(n, view[n], null));
  if (viewLen > last) html.push('<p class="legend">' + (viewLen - last) + " more rows not printed (filter the list to print them).</p>");
  spacer.innerHTML = html.join("");
});
window.addEventListener("afterprint", function () { draw(true); });

axis(); totals(); burn(); top(); showDetail(-1); fromHash();
void document.body.offsetHeight;  // lay the first screen out before it is timed
document.body.setAttribute("data-render-ms", performance.now().toFixed(1));
document.body.setAttribute("data-state", "ready");
})();
