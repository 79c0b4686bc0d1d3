// ykshm's own web UI: one vanilla module, read-only, talking only to this origin's REST.
// Views are rendered from /ws/v1/...; the event feed reads /ws/v1/events/stream (NDJSON) with
// fetch + ReadableStream and, after a reconnect, resumes at `start=` the last id seen + 1.

const API = "/ws/v1";
const LABEL = "kubernetes.io/label/";
const feed = { events: [], lastId: null, skipTo: null, instance: null, state: "connecting" };
let partition = "default";

const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const get = async (path) => {
  const r = await fetch(API + path, { headers: { Accept: "application/json" } });
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
};
const fmtRes = (res) => Object.entries(res || {})
  .map(([k, v]) => `${k}: ${k === "memory" ? (v / 2 ** 20).toFixed(0) + "Mi" : k === "vcore" ? v + "m" : v}`)
  .join(", ");
const table = (head, rows) => rows.length
  ? `<table><tr>${head.map((h) => `<th>${esc(h)}</th>`).join("")}</tr>${rows.map((r) => `<tr>${r.map((c) => `<td>${c}</td>`).join("")}</tr>`).join("")}</table>`
  : `<p class="muted">none</p>`;
const bar = (used, max) => {
  if (!max) return `<span class="muted">no limit</span>`;
  const pct = Math.min(100, Math.round((100 * (used || 0)) / max));
  return `<meter min="0" max="100" high="85" value="${pct}"></meter> ${pct}%`;
};
const when = (ns) => (ns ? new Date(ns / 1e6).toLocaleTimeString() : "");

function usage(alloc, max) {
  return ["vcore", "memory"].map((k) => `${k}: ${bar(alloc?.[k], max?.[k])}`).join("<br>");
}

function flatQueues(q, depth = 0, out = []) {
  out.push([q, depth]);
  (q.children || []).forEach((c) => flatQueues(c, depth + 1, out));
  return out;
}

const views = {
  async queues() {
    const parts = await get("/partitions");
    let html = `<h2>Partitions</h2>` + table(["partition", "state", "nodes", "applications", "capacity used"],
      parts.map((p) => [esc(p.name), esc(p.state), esc(p.totalNodes ?? 0), esc(p.applications?.total),
        usage(p.capacity?.usedCapacity, p.capacity?.capacity)]));
    for (const p of parts) {
      const root = await get(`/partition/${encodeURIComponent(p.name)}/queues`);
      html += `<h2>Queues of ${esc(p.name)}</h2>` + table(["queue", "running apps", "allocated", "guaranteed", "usage against max"],
        flatQueues(root).map(([q, d]) => [`<span class="depth-${Math.min(d, 6)}">${esc(q.queuename)}</span>`,
          esc(q.runningApps ?? 0), esc(fmtRes(q.allocatedResource)), esc(fmtRes(q.guaranteedResource)),
          usage(q.allocatedResource, q.maxResource)]));
    }
    return html;
  },
  async apps() {
    const apps = await get(`/partition/${partition}/applications`);
    return `<h2>Applications (${apps.length})</h2>` + table(["application", "queue", "user", "state", "used", "allocations"],
      apps.map((a) => [esc(a.applicationID), esc(a.queueName), esc(a.user),
        `<span class="state-${esc(a.applicationState)}">${esc(a.applicationState)}</span>`, esc(fmtRes(a.usedResource)),
        (a.allocations || []).map((x) => `<span class="mono">${esc(x.allocationTags?.["kubernetes.io/meta/podName"] || x.allocationKey)} → ${esc(x.nodeId)}</span>`).join("<br>")]));
  },
  async nodes() {
    const nodes = await get(`/partition/${partition}/nodes`);
    return `<h2>Nodes (${nodes.length})</h2>` + table(["node", "ready", "schedulable", "allocated", "usage against capacity"],
      nodes.map((n) => [esc(n.nodeID), esc(n.attributes?.ready ?? "true"), esc(n.schedulable), esc(fmtRes(n.allocated)), usage(n.allocated, n.capacity)]));
  },
  async usage() {
    const [users, groups] = await Promise.all([get(`/partition/${partition}/usage/users`), get(`/partition/${partition}/usage/groups`)]);
    const rows = (list, key) => list.flatMap((u) => flatQueues(u.queues || {}).map(([q, d]) => [esc(u[key]),
      `<span class="depth-${Math.min(d, 6)}">${esc(q.queuePath)}</span>`, esc(fmtRes(q.resourceUsage)),
      esc((q.runningApplications || []).length)]));
    return `<h2>Usage per user</h2>` + table(["user", "queue", "usage", "running apps"], rows(users, "userName")) +
      `<h2>Usage per group</h2>` + (groups.length ? table(["group", "queue", "usage", "running apps"], rows(groups, "groupName"))
        : `<p class="muted">No group is tracked: as in YuniKorn, a group's usage is tracked only when a limit names it.</p>`);
  },
  async events() {
    return `<h2>Live events <span class="muted">(${esc(feed.state)}; last id ${esc(feed.lastId ?? "-")})</span></h2>` +
      table(["id", "time", "type", "object", "change", "message"], feed.events.slice().reverse().map((e) => [esc(e.id),
        esc(when(e.timestampNano)), esc(["unknown", "request", "app", "node", "queue", "user/group"][e.type] ?? e.type),
        `<span class="mono">${esc(e.objectID)}</span>`, esc(["none", "set", "add", "remove"][e.eventChangeType] ?? e.eventChangeType),
        esc(e.message)]));
  },
  async streams() {
    // What the web can read of Streams: PE pods are allocations labelled streams.ibm.com/job|pe
    // (the shim sends pod labels as allocation tags); `streams.ibm.com/cr` says a PE is in a
    // consistent region. The jobs' own CRs live in the Kubernetes API, outside this REST.
    const apps = await get(`/partition/${partition}/applications`);
    const jobs = new Map();
    for (const a of apps) for (const x of a.allocations || []) {
      const t = x.allocationTags || {};
      const job = t[LABEL + "streams.ibm.com/job"];
      if (!job || !((LABEL + "streams.ibm.com/pe") in t)) continue; // the region operator's pod is no PE
      const key = `${t["kubernetes.io/meta/namespace"]}/${job}`;
      if (!jobs.has(key)) jobs.set(key, { app: a, pes: [] });
      jobs.get(key).pes.push([Number(t[LABEL + "streams.ibm.com/pe"]), t, x]);
    }
    if (!jobs.size) return `<h2>Streams jobs</h2><p class="muted">No Streams job has PEs running.</p>`;
    let html = "";
    for (const [key, { app, pes }] of jobs) {
      pes.sort((a, b) => a[0] - b[0]);
      html += `<h2>Streams job ${esc(key)} <span class="muted">(application ${esc(app.applicationID)}, ${esc(app.applicationState)}, queue ${esc(app.queueName)})</span></h2>` +
        table(["PE", "pod", "launch", "node", "consistent region", "resources"], pes.map(([pe, t, x]) => [esc(pe),
          `<span class="mono">${esc(t["kubernetes.io/meta/podName"])}</span>`, esc(t[LABEL + "streams.ibm.com/launch-count"]),
          esc(x.nodeId), t[LABEL + "streams.ibm.com/cr"] === "true" ? "yes" : "no", esc(fmtRes(x.resource))]));
    }
    return html;
  },
};

function current() {
  const name = location.hash.slice(1);
  return views[name] ? name : "queues";
}

async function render() {
  const name = current();
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.view === name));
  const main = document.getElementById("view");
  try {
    const html = await views[name]();
    if (name === current()) { main.innerHTML = html; main.dataset.view = name; }
  } catch (err) {
    main.innerHTML = `<p class="state-Failed">${esc(err.message)}</p>`;
  }
}

function setFeed(state) {
  feed.state = state;
  document.getElementById("feed-state").textContent = `events: ${state}`;
}

function take(line) {
  const e = JSON.parse(line);
  if ("InstanceUUID" in e) {
    if (feed.instance && feed.instance !== e.InstanceUUID) { // a new engine: ids restart at 0
      feed.instance = e.InstanceUUID;
      Object.assign(feed, { events: [], lastId: null, skipTo: null });
      throw new Error("new engine instance");
    }
    feed.instance = e.InstanceUUID;
  } else if ("status_code" in e) {
    if (e.status_code === 410) Object.assign(feed, { skipTo: feed.lastId, lastId: null }); // fell a ring behind
    throw new Error(e.message);                 // 503 (web or engine going away): resume where we were
  } else if (feed.skipTo === null || e.id > feed.skipTo) {
    feed.lastId = e.id;
    feed.events.push(e);
    if (feed.events.length > 200) feed.events.shift();
  }
}

async function follow() {
  for (;;) {
    const from = feed.lastId === null ? "count=50" : `start=${feed.lastId + 1}`;
    try {
      const r = await fetch(`${API}/events/stream?${from}`);
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      setFeed("live");
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let rest = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const lines = (rest + value).split("\n");
        rest = lines.pop();
        lines.filter((l) => l.trim()).forEach(take);
        if (current() === "events") render();
      }
      setFeed("reconnecting");
    } catch (err) {
      setFeed(`reconnecting (${err.message})`);
    }
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}

window.addEventListener("hashchange", render);
render();
setInterval(() => { if (current() !== "events") render(); }, 3000);
follow();
