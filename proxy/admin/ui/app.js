// chronicle audit page: plain DOM, no framework. Every call to /admin sends
// the admin token as a Bearer token; data is only ever put into the page as
// text (textContent), never as HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);
const tokenKey = "chronicle.adminToken";
let token = sessionStorage.getItem(tokenKey) || "";
let nextCursor = null;
let current = null; // {tenant, id} shown in the detail pane

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

class Unauthorized extends Error {}

async function admin(path, opts = {}) {
  const resp = await fetch("/admin" + path, {
    method: opts.method || "GET",
    headers: { Authorization: "Bearer " + token },
    cache: "no-store",
  });
  if (resp.status === 401) throw new Unauthorized();
  const body = await resp.json().catch(() => null);
  if (!resp.ok) {
    const msg = body && body.error ? body.error.message : resp.statusText;
    throw new Error(resp.status + ": " + msg);
  }
  return body;
}

function showLogin(message) {
  $("#app").hidden = true;
  $("#signout").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message || "";
  $("#token").focus();
}

function showApp() {
  $("#login").hidden = true;
  $("#app").hidden = false;
  $("#signout").hidden = false;
}

function handle(err) {
  if (err instanceof Unauthorized) {
    sessionStorage.removeItem(tokenKey);
    token = "";
    showLogin("That token was not accepted.");
    return;
  }
  $("#list-status").textContent = "Error: " + err.message;
}

// ---- thread list ----

function filterQuery() {
  const f = new FormData($("#filters"));
  const p = new URLSearchParams();
  for (const name of ["q", "tenant", "connection", "model", "status"]) {
    const v = (f.get(name) || "").trim();
    if (v) p.set(name, v);
  }
  for (const name of ["since", "until"]) {
    const v = f.get(name);
    if (v) p.set(name, new Date(v).toISOString());
  }
  return p;
}

function fmtTime(s) {
  if (!s) return "";
  return s.replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function badge(status) {
  return el("span", "badge " + (status || ""), status || "–");
}

// A parked run whose calls all got their results (or were dropped as the
// thread moved on) waits for nothing: it is stored "interrupted", but shows
// as resumed (resolved, when no run names it as its resumer), not in the
// yellow of a run still waiting for tool results.
function runBadge(r) {
  const waiting = r.interrupts.some((x) => x.status === "pending");
  if (r.status !== "interrupted" || waiting || r.interrupts.length === 0 && !r.resumed_by) return badge(r.status);
  const b = el("span", "badge resumed", r.resumed_by ? "resumed" : "resolved");
  b.title = "parked as interrupted; every call it waited on has been answered";
  return b;
}

async function loadThreads(append) {
  const p = filterQuery();
  p.set("limit", "50");
  if (append && nextCursor) p.set("cursor", nextCursor);
  const tbody = $("#threads tbody");
  if (!append) tbody.textContent = "";
  $("#list-status").textContent = "Loading…";
  try {
    const page = await admin("/threads?" + p.toString());
    showApp();
    for (const t of page.threads) tbody.appendChild(threadRow(t));
    nextCursor = page.next_cursor;
    $("#more").hidden = !nextCursor;
    const n = tbody.children.length;
    $("#list-status").textContent = n === 0 && !nextCursor ? "No threads match." :
      n + " thread" + (n === 1 ? "" : "s") + (nextCursor ? " (more available)" : "");
  } catch (err) {
    handle(err);
  }
}

function threadRow(t) {
  const tr = el("tr");
  tr.dataset.tenant = t.tenant;
  tr.dataset.id = t.id;
  tr.appendChild(el("td", "mono", fmtTime(t.updated_at)));
  tr.appendChild(el("td", "mono", t.tenant));
  tr.appendChild(el("td", "mono", t.id));
  tr.appendChild(el("td", "", t.connection));
  tr.appendChild(el("td", "", t.model));
  tr.appendChild(el("td", "", t.runs));
  const st = el("td");
  st.appendChild(badge(t.last_status));
  tr.appendChild(st);
  tr.appendChild(el("td", "mono", t.usage.input_tokens + " / " + t.usage.output_tokens));
  tr.appendChild(el("td", "mono", t.parent ? t.parent + " @" + t.fork_point.at_message : ""));
  tr.addEventListener("click", () => openThread(t.tenant, t.id));
  return tr;
}

// ---- one thread ----

// Each thread has a URL: /ui#/t/{tenant}/{thread} (each part
// URL-escaped), which opens it on load, in the history and after a reload.
function threadHash(tenant, id) {
  return "#/t/" + encodeURIComponent(tenant) + "/" + encodeURIComponent(id);
}

function hashThread() {
  const m = /^#\/t\/([^/]+)\/([^/]+)$/.exec(location.hash);
  if (!m) return null;
  try {
    return { tenant: decodeURIComponent(m[1]), id: decodeURIComponent(m[2]) };
  } catch (_) {
    return null;
  }
}

async function openThread(tenant, id) {
  try {
    const th = await admin("/threads/" + encodeURIComponent(tenant) + "/" + encodeURIComponent(id));
    current = { tenant, id };
    if (location.hash !== threadHash(tenant, id)) history.pushState(null, "", threadHash(tenant, id));
    renderThread(th);
    showApp();
    $("#list-pane").hidden = true;
    $("#detail-pane").hidden = false;
    document.title = "chronicle — " + tenant + " / " + id;
    window.scrollTo(0, 0);
  } catch (err) {
    handle(err);
    if (!(err instanceof Unauthorized)) {
      showApp();
      showList();
      $("#list-status").textContent = "Thread " + tenant + " / " + id + ": " + err.message;
    }
  }
}

function showList() {
  current = null;
  $("#detail-pane").hidden = true;
  $("#list-pane").hidden = false;
  document.title = "chronicle — audit";
}

// route shows what the URL names: a thread, or the list.
function route() {
  const t = hashThread();
  if (t) {
    if (!current || current.tenant !== t.tenant || current.id !== t.id) openThread(t.tenant, t.id);
    return;
  }
  showList();
}

function renderThread(th) {
  $("#detail-title").textContent = th.tenant + " / " + th.id;
  const meta = $("#detail-meta");
  meta.textContent = "";
  const total = { input_tokens: 0, output_tokens: 0, cached_tokens: 0, reasoning_tokens: 0 };
  for (const r of th.runs) if (r.usage) for (const k in total) total[k] += r.usage[k] || 0;
  const rows = [
    ["connection", th.connection], ["format", th.format], ["created", fmtTime(th.created_at)],
    ["updated", fmtTime(th.updated_at)], ["version", th.version], ["messages", th.messages.length],
    ["usage (all runs)", usageText(total)],
  ];
  rows.push(["retention", th.kept_until ? "kept until " + fmtTime(th.kept_until) + " (" + th.retention + " after its last update)" : "kept forever"]);
  for (const [k, v] of rows) {
    meta.appendChild(el("dt", "", k));
    meta.appendChild(el("dd", "", v));
  }
  if (th.parent) {
    // A fork: a link to its parent, and where it was taken.
    meta.appendChild(el("dt", "", "forked from"));
    const dd = el("dd");
    const a = el("a", "mono", th.parent);
    a.id = "parent-link";
    a.href = threadHash(th.tenant, th.parent);
    dd.appendChild(a);
    let at = " at message " + th.fork_point.at_message;
    if (th.fork_point.at_run) at += " (the end of run " + th.fork_point.at_run + ")";
    dd.appendChild(document.createTextNode(at));
    meta.appendChild(dd);
  }
  const tbody = $("#runs tbody");
  tbody.textContent = "";
  for (const r of th.runs) tbody.appendChild(runRow(r));
  const list = $("#transcript");
  list.textContent = "";
  for (const b of systemBlocks(th.system)) list.appendChild(block(b, "system"));
  th.messages.forEach((m, i) => {
    for (const b of blocks(th.format, m)) list.appendChild(block(b, i));
  });
}

function usageText(u) {
  if (!u) return "–";
  let s = "in " + u.input_tokens + " · out " + u.output_tokens;
  if (u.cached_tokens) s += " · cached " + u.cached_tokens;
  if (u.reasoning_tokens) s += " · reasoning " + u.reasoning_tokens;
  return s;
}

function duration(r) {
  if (!r.finished_at) return "running";
  const ms = Date.parse(r.finished_at) - Date.parse(r.started_at);
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(2) + " s";
}

function runRow(r) {
  const tr = el("tr");
  tr.appendChild(el("td", "mono", r.id));
  const st = el("td");
  const b = runBadge(r);
  st.appendChild(b);
  if (b.textContent !== r.status) st.appendChild(el("div", "muted", "parked as " + r.status));
  if (r.reason) st.appendChild(el("div", "muted", r.reason));
  tr.appendChild(st);
  tr.appendChild(el("td", "", r.model || ""));
  tr.appendChild(el("td", "mono", fmtTime(r.started_at)));
  tr.appendChild(el("td", "", duration(r)));
  tr.appendChild(el("td", "", usageText(r.usage)));
  const changed = [];
  if (r.repairs.length) changed.push("repairs: " + r.repairs.map((x) => x.kind + (x.call_id ? " " + x.call_id : "")).join(", "));
  if (r.restored.length) changed.push("restored: " + r.restored.map((x) => x.field + " @" + x.message_index).join(", "));
  if (r.interrupted_calls.length) changed.push("answered: " + r.interrupted_calls.map((x) => x.name || x.call_id).join(", "));
  if (r.redactions.length) changed.push("redacted: " + r.redactions.map((x) => x.rule + " ×" + x.count).join(", "));
  if (r.session_id) changed.push("session " + r.session_id);
  if (r.resumed_by) changed.push("resumed by " + r.resumed_by);
  tr.appendChild(el("td", "", changed.join("\n") || "–"));
  tr.appendChild(el("td", "", r.interrupts.map((x) => x.name + " (" + x.status + ")").join(", ") || "–"));
  return tr;
}

// A block is {kind, label, text, code}: kind picks the styling (user,
// assistant, reasoning, tool-call, tool-result, system, other).
function blocks(format, m) {
  if (format === "gemini") return geminiParts(m, m.role === "model" ? "assistant" : m.role || "user");
  if (format === "openai-responses") return responsesItem(m);
  if (format === "anthropic-messages") return anthropicBlocks(m);
  return chatMessage(m);
}

// systemBlocks renders a thread's system: Gemini's systemInstruction
// (parts), or Anthropic's system (a string or text blocks).
function systemBlocks(sys) {
  if (!sys) return [];
  if (typeof sys === "string") return [{ kind: "system", label: "system", text: sys }];
  if (Array.isArray(sys)) return sys.map((b) => ({ kind: "system", label: "system", text: b.text !== undefined ? b.text : pretty(b), code: b.text === undefined }));
  return geminiParts(sys, "system");
}

// anthropicBlocks renders an Anthropic message's content blocks: text,
// thinking (its signature is not shown), redacted thinking, tool_use,
// tool_result, and any other block as its JSON.
function anthropicBlocks(m) {
  const role = m.role || "other";
  const kind = role === "user" ? "user" : role === "assistant" ? "assistant" : "other";
  if (typeof m.content === "string") return [{ kind, label: role, text: m.content }];
  const out = [];
  for (const b of m.content || []) {
    switch (b.type) {
      case "text": out.push({ kind, label: role, text: b.text }); break;
      case "thinking": out.push({ kind: "reasoning", label: "thinking", text: b.thinking || "[signed thinking, text omitted]" }); break;
      case "redacted_thinking": out.push({ kind: "reasoning", label: "redacted thinking", text: "[encrypted reasoning]" }); break;
      case "tool_use": out.push({ kind: "tool-call", label: "tool call · " + b.name + " · " + (b.id || ""), text: pretty(b.input || {}), code: true }); break;
      case "tool_result": out.push({ kind: "tool-result", label: "tool result · " + (b.tool_use_id || "") + (b.is_error ? " · error" : ""), text: pretty(textOf(b.content)), code: true }); break;
      default: out.push({ kind: "other", label: role + " · " + (b.type || "block"), text: pretty(b), code: true });
    }
  }
  return out;
}

function textOf(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((p) => (typeof p === "string" ? p : p.text !== undefined ? p.text : p.refusal !== undefined ? p.refusal : "[" + (p.type || "part") + "]")).join("\n");
  }
  return JSON.stringify(content);
}

function pretty(s) {
  if (typeof s !== "string") return JSON.stringify(s, null, 2);
  try { return JSON.stringify(JSON.parse(s), null, 2); } catch (_) { return s; }
}

function chatMessage(m) {
  const out = [];
  const role = m.role || "other";
  if (role === "tool") {
    out.push({ kind: "tool-result", label: "tool result · " + (m.tool_call_id || ""), text: pretty(textOf(m.content)), code: true });
    return out;
  }
  if (m.reasoning_content) out.push({ kind: "reasoning", label: "reasoning", text: m.reasoning_content });
  if (m.reasoning && typeof m.reasoning === "string") out.push({ kind: "reasoning", label: "reasoning", text: m.reasoning });
  const text = textOf(m.content);
  const kind = role === "system" || role === "developer" ? "system" : role === "user" ? "user" : role === "assistant" ? "assistant" : "other";
  if (text || !(m.tool_calls && m.tool_calls.length)) out.push({ kind, label: role, text });
  for (const c of m.tool_calls || []) {
    const f = c.function || {};
    out.push({ kind: "tool-call", label: "tool call · " + (f.name || "?") + " · " + (c.id || ""), text: pretty(f.arguments || ""), code: true });
  }
  return out;
}

function geminiParts(m, role) {
  const out = [];
  const kind = role === "assistant" ? "assistant" : role === "system" ? "system" : role === "user" ? "user" : "other";
  const label = role === "assistant" ? "model" : role;
  for (const p of m.parts || []) {
    if (p.thought === true && p.text !== undefined) out.push({ kind: "reasoning", label: "thought", text: p.text });
    else if (p.text !== undefined) out.push({ kind, label, text: p.text });
    else if (p.functionCall) out.push({ kind: "tool-call", label: "tool call · " + p.functionCall.name + (p.functionCall.id ? " · " + p.functionCall.id : ""), text: pretty(p.functionCall.args || {}), code: true });
    else if (p.functionResponse) out.push({ kind: "tool-result", label: "tool result · " + p.functionResponse.name + (p.functionResponse.id ? " · " + p.functionResponse.id : ""), text: pretty(p.functionResponse.response || {}), code: true });
    else out.push({ kind: "other", label: label + " · " + Object.keys(p).join(","), text: pretty(p), code: true });
  }
  return out;
}

function responsesItem(m) {
  const type = m.type || (m.role ? "message" : "");
  switch (type) {
    case "message": {
      const role = m.role || "other";
      const kind = role === "system" || role === "developer" ? "system" : role === "user" ? "user" : role === "assistant" ? "assistant" : "other";
      return [{ kind, label: role, text: textOf(m.content) }];
    }
    case "function_call":
      return [{ kind: "tool-call", label: "tool call · " + m.name + " · " + (m.call_id || ""), text: pretty(m.arguments || ""), code: true }];
    case "function_call_output":
      return [{ kind: "tool-result", label: "tool result · " + (m.call_id || ""), text: pretty(textOf(m.output)), code: true }];
    case "reasoning": {
      const text = (m.summary || []).map((s) => s.text).join("\n") || (m.content || []).map((s) => s.text).join("\n");
      return [{ kind: "reasoning", label: "reasoning", text: text || (m.encrypted_content ? "[encrypted reasoning]" : "") }];
    }
    default:
      return [{ kind: "other", label: type || "item", text: pretty(m), code: true }];
  }
}

function block(b, index) {
  const li = el("li", "msg " + b.kind);
  li.dataset.kind = b.kind;
  li.appendChild(el("span", "idx", index === "system" ? "system" : "#" + index));
  // The label's first part names the kind ("tool call") and is styled in
  // capitals; what follows (tool names, call ids) is case-sensitive and
  // shown exactly as stored.
  const label = el("span", "label");
  const cut = b.label.indexOf(" · ");
  label.appendChild(el("span", "kind", cut < 0 ? b.label : b.label.slice(0, cut)));
  if (cut >= 0) label.appendChild(el("span", "ids", b.label.slice(cut)));
  li.appendChild(label);
  li.appendChild(el(b.code ? "pre" : "p", "body", b.text));
  return li;
}

// ---- wiring ----

$("#login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  token = $("#token").value.trim();
  sessionStorage.setItem(tokenKey, token);
  $("#token").value = "";
  start();
});
$("#filters").addEventListener("submit", (e) => {
  e.preventDefault();
  nextCursor = null;
  loadThreads(false);
});
$("#more").addEventListener("click", () => loadThreads(true));
$("#back").addEventListener("click", () => {
  history.pushState(null, "", location.pathname + location.search);
  showList();
});
window.addEventListener("popstate", route);
window.addEventListener("hashchange", route);
$("#signout").addEventListener("click", () => {
  sessionStorage.removeItem(tokenKey);
  token = "";
  showLogin("");
});
$("#delete").addEventListener("click", async () => {
  if (!current || !confirm("Delete " + current.tenant + " / " + current.id + " and all its runs?")) return;
  try {
    await admin("/threads/" + encodeURIComponent(current.tenant) + "/" + encodeURIComponent(current.id), { method: "DELETE" });
    history.pushState(null, "", location.pathname + location.search);
    showList();
    loadThreads(false);
  } catch (err) {
    handle(err);
  }
});

// start loads the list, and the thread the URL names, if any.
function start() {
  loadThreads(false);
  if (hashThread()) route();
}

if (token) start();
else showLogin("");
