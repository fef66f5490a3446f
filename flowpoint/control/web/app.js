/* flowpoint's dashboard, served by `flowpoint ui`: one plain script, no build step.
 *
 * Pages (a hash router): #/overview, #/jobs/<jid>, #/jobs/<jid>/checkpoints[/summary|/config],
 * #/jobs/<jid>/exceptions. The page polls the REST API (Flink's routes plus a few flowpoint
 * extras) every refresh-interval from /config and redraws only what changed.
 *
 * Safety: every string from the server reaches the DOM through the `h` template, which escapes
 * whatever it interpolates unless it is markup `h` built itself; links to other servers (Spark's
 * UI) must be http(s). A job or operator named `<script>` shows as that text.
 * Defensive: an ended job is served from an archive and may lack any extra; a field that is
 * missing shows as a dash and a route that is missing leaves its section empty.
 */
'use strict';

(() => {
  // ---------------------------------------------------------------------------------------------
  // Markup that escapes what it interpolates

  class Safe {
    constructor(s) { this.s = s; }
    toString() { return this.s; }
  }

  const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };
  const esc = (v) => String(v).replace(/[&<>"'`]/g, (c) => ESCAPES[c]);

  function piece(v) {
    if (v === null || v === undefined || v === false) return '';
    if (v instanceof Safe) return v.s;
    if (Array.isArray(v)) return v.map(piece).join('');
    return esc(v);
  }

  /** h`<b>${text}</b>`: a Safe whose interpolated values are escaped (Safe values and arrays of
   * them are kept). Attribute values must be quoted in the template. */
  function h(strings, ...values) {
    let out = strings[0];
    for (let i = 0; i < values.length; i++) out += piece(values[i]) + strings[i + 1];
    return new Safe(out);
  }

  /** An http(s) URL, or null (a `javascript:` or relative URL from the server is not a link). */
  function safeUrl(url) {
    if (typeof url !== 'string') return null;
    try {
      const u = new URL(url);
      return u.protocol === 'http:' || u.protocol === 'https:' ? u.href : null;
    } catch (e) {
      return null;
    }
  }

  /** Replace an element's content only when it changed (keeps focus, selection and scroll). */
  function setHtml(el, safe) {
    if (!el) return;
    const s = piece(safe);
    if (el.__html !== s) {
      el.innerHTML = s;
      el.__html = s;
    }
  }

  const $ = (sel, root = document) => root.querySelector(sel);

  // ---------------------------------------------------------------------------------------------
  // Formatting

  const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  const DASH = '–';
  const MIN_WATERMARK = -9223372036854775000; // Long.MIN_VALUE as JSON numbers arrive

  const fmt = {
    time(ms, withMs = false) {
      if (!isNum(ms) || ms <= 0) return DASH;
      const d = new Date(ms);
      const s = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
        `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
      return withMs ? `${s}.${pad(d.getMilliseconds(), 3)}` : s;
    },
    clock(ms) {
      if (!isNum(ms) || ms <= 0) return DASH;
      const d = new Date(ms);
      return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    },
    duration(ms) {
      if (!isNum(ms) || ms < 0) return DASH;
      if (ms < 1000) return `${Math.round(ms)}ms`;
      if (ms < 10000) return `${(ms / 1000).toFixed(1)}s`;
      let s = Math.floor(ms / 1000);
      const d = Math.floor(s / 86400); s %= 86400;
      const hh = Math.floor(s / 3600); s %= 3600;
      const m = Math.floor(s / 60); s %= 60;
      if (d) return `${d}d ${hh}h`;
      if (hh) return `${hh}h ${m}m`;
      if (m) return `${m}m ${s}s`;
      return `${s}s`;
    },
    ago(ms, now = Date.now()) {
      if (!isNum(ms) || ms <= 0) return DASH;
      const d = Math.max(0, now - ms);
      return d < 1000 ? 'just now' : `${fmt.duration(d)} ago`;
    },
    count(n) {
      return isNum(n) ? Math.round(n).toLocaleString('en-US') : DASH;
    },
    short(n) {
      if (!isNum(n)) return DASH;
      const a = Math.abs(n);
      if (a >= 1e9) return `${(n / 1e9).toFixed(1)}G`;
      if (a >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
      if (a >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
      return a < 10 && a % 1 ? n.toFixed(1) : String(Math.round(n));
    },
    rate(n) {
      if (!isNum(n)) return DASH;
      return n < 10 ? `${n.toFixed(1)}/s` : `${Math.round(n).toLocaleString('en-US')}/s`;
    },
    bytes(n) {
      if (!isNum(n) || n < 0) return DASH;
      const units = ['B', 'KB', 'MB', 'GB', 'TB'];
      let i = 0;
      while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
      return i === 0 ? `${n} B` : `${n.toFixed(n < 10 ? 2 : 1)} ${units[i]}`;
    },
    /** a time in ms per second (Flink's busyTimeMsPerSecond) as a percentage */
    pct(msPerSecond) {
      return isNum(msPerSecond) ? `${Math.round(Math.min(1000, Math.max(0, msPerSecond)) / 10)}%` : DASH;
    },
    watermark(ms) {
      if (!isNum(ms) || ms <= MIN_WATERMARK) return 'no watermark';
      if (ms >= 9223372036854775000) return 'end of input';
      if (ms <= 1e11) return fmt.count(ms); // not a time since 1970: the number itself
      const d = new Date(ms);
      const today = new Date();
      const sameDay = d.toDateString() === today.toDateString();
      return sameDay ? `${fmt.clock(ms)}.${pad(d.getMilliseconds(), 3)}` : fmt.time(ms, true);
    },
  };

  const sum = (xs) => xs.filter(isNum).reduce((a, b) => a + b, 0);
  const arr = (v) => (Array.isArray(v) ? v : []);
  const obj = (v) => (v && typeof v === 'object' && !Array.isArray(v) ? v : {});
  const first = (...vs) => vs.find((v) => v !== undefined && v !== null);

  // ---------------------------------------------------------------------------------------------
  // The REST API

  class ApiError extends Error {
    constructor(status, messages) {
      super(messages.join('; '));
      this.status = status;
      this.messages = messages;
    }
  }

  /** One request with the session cookie; JSON in and out; {"errors": [...]} becomes ApiError. */
  async function api(path, { method = 'GET', body } = {}) {
    const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
    if (method !== 'GET') init.headers['Content-Type'] = 'application/json';
    if (body !== undefined) init.body = JSON.stringify(body);
    let r;
    try {
      r = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, [`cannot reach the flowpoint ui server (${e.message})`]);
    }
    const text = await r.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch (e) { data = null; }
    }
    if (!r.ok) {
      const errors = data && Array.isArray(data.errors) && data.errors.length
        ? data.errors.map(String) : [`${method} ${path}: HTTP ${r.status} ${r.statusText}`];
      throw new ApiError(r.status, errors);
    }
    return data === null ? {} : data;
  }

  /** A route that may not exist (an extra an archive lacks): its data, or null on 404/501. */
  async function optional(path) {
    try {
      return await api(path);
    } catch (e) {
      if (e instanceof ApiError && (e.status === 404 || e.status === 501)) return null;
      throw e;
    }
  }

  const jobPath = (jid, rest = '') => `/jobs/${encodeURIComponent(jid)}${rest}`;
  const jobHash = (jid, rest = '') => `#/jobs/${encodeURIComponent(jid)}${rest}`;

  // ---------------------------------------------------------------------------------------------
  // Small pieces of markup

  const TERMINAL = new Set(['FINISHED', 'FAILED', 'CANCELED', 'LOST']);

  function badge(state) {
    const s = String(state || 'UNKNOWN').toUpperCase();
    return h`<span class="badge badge-${s.toLowerCase().replace(/[^a-z_]/g, '')}">${s}</span>`;
  }

  function empty(text) {
    return h`<div class="empty">${text}</div>`;
  }

  function errorBox(e) {
    const msgs = e instanceof ApiError ? e.messages : [String(e && e.message ? e.message : e)];
    return h`<div class="error-box">${msgs.map((m) => h`<div>${m}</div>`)}</div>`;
  }

  function meter(msPerSecond, kind) {
    if (!isNum(msPerSecond)) return DASH;
    const p = Math.min(100, Math.max(0, msPerSecond / 10));
    return h`<span class="meter meter-${kind}" title="${fmt.pct(msPerSecond)} of the time ${kind}">\
<span class="meter-fill" style="width:${p.toFixed(1)}%;background:${kind === 'busy' ? busyColor(msPerSecond) : '#434343'}"></span></span><span class="meter-num">${fmt.pct(msPerSecond)}</span>`;
  }

  /** A time in a table cell: it may break between the date and the time of day, nowhere else. */
  function timeCell(ms) {
    const [date, time] = fmt.time(ms).split(' ');
    return time ? h`<span class="nowrap">${date}</span> <span class="nowrap">${time}</span>` : date;
  }

  /** A watermark in a table cell: the time of day, the date under it when it is not today. */
  function watermarkCell(ms) {
    const text = fmt.watermark(ms);
    const m = text.match(/^(\d{4}-\d{2}-\d{2}) (.*)$/);
    return m ? h`${m[2]}<div class="sub">${m[1]}</div>` : text;
  }

  function kv(rows) {
    return h`<dl class="kv">${rows.map(([k, v]) => h`<dt>${k}</dt><dd>${v}</dd>`)}</dl>`;
  }

  // ---------------------------------------------------------------------------------------------
  // What a job's details say (Flink's JobDetailsInfo plus the "flowpoint" extras)

  function operatorsOf(details) {
    return arr(obj(obj(details).flowpoint).operators).filter((o) => o && typeof o === 'object');
  }

  const metricsOf = (o) => obj(o && o.metrics);

  /** What a job commits in, as its header and checkpoints say it: an epoch, or (the continuous
   *  runtime) a segment up to a checkpoint barrier; ``fp``: a "flowpoint" object. */
  function unitLabel(fp) {
    const unit = fp.unit || (fp.runtime === 'continuous' ? 'segment' : 'epoch');
    return unit === 'segment' ? 'Segment' : 'Epoch';
  }

  /** RocksDB's own figures of an operator (summed over its subtasks; the block cache, shared by
   *  a worker's DBs, its largest), in a row under the operator's. */
  function rocksdbRow(m, columns) {
    const r = obj(m.rocksdb);
    if (!Object.keys(r).length) return '';
    const parts = [];
    if (isNum(r['rocksdb.cur-size-all-mem-tables'])) parts.push(['memtables', fmt.bytes(r['rocksdb.cur-size-all-mem-tables'])]);
    if (isNum(r['rocksdb.block-cache-usage'])) parts.push(['block cache', fmt.bytes(r['rocksdb.block-cache-usage'])]);
    if (isNum(r['rocksdb.live-sst-files-size'])) parts.push(['SST', `${fmt.bytes(r['rocksdb.live-sst-files-size'])}${isNum(r['rocksdb.live-sst-files']) ? ` in ${fmt.count(r['rocksdb.live-sst-files'])} files` : ''}`]);
    if (isNum(r['rocksdb.estimate-pending-compaction-bytes'])) parts.push(['pending compaction', fmt.bytes(r['rocksdb.estimate-pending-compaction-bytes'])]);
    const title = Object.keys(r).sort().map((k) => `${k}: ${r[k]}`).join('\n');
    return h`<tr class="op-sub rocksdb-figures"><td colspan="${columns}"><span class="sub" title="${title}">RocksDB: ${parts.map(([k, v], i) => h`${i ? ' · ' : ''}${k} <b>${v}</b>`)}</span></td></tr>`;
  }

  function planNodes(details) {
    const nodes = arr(obj(obj(details).plan).nodes).filter((n) => n && n.id !== undefined);
    if (nodes.length) return nodes;
    // no plan (an archive without it): the vertices, unconnected
    return arr(obj(details).vertices).map((v) => ({ id: v.id, parallelism: v.parallelism, description: v.name, inputs: [] }));
  }

  /** Records the job read from its sources and wrote into its sinks. */
  function jobRecords(details) {
    const fp = obj(obj(details).flowpoint);
    const ops = operatorsOf(details);
    const vertices = arr(obj(details).vertices);
    const nodes = planNodes(details);
    const hasInputs = new Set(nodes.filter((n) => arr(n.inputs).length).map((n) => String(n.id)));
    const feeds = new Set(nodes.flatMap((n) => arr(n.inputs).map((i) => String(i.id))));
    let recordsIn = isNum(fp['records-read']) ? fp['records-read'] : null;
    const sources = ops.filter((o) => /source/i.test(String(o.kind)));
    if (recordsIn === null && sources.length) recordsIn = sum(sources.map((o) => metricsOf(o).numRecordsOut));
    if (recordsIn === null && vertices.length) {
      recordsIn = sum(vertices.filter((v) => !hasInputs.has(String(v.id))).map((v) => obj(v.metrics)['write-records']));
    }
    let recordsOut = null;
    const sinks = ops.filter((o) => /sink/i.test(String(o.kind)));
    if (sinks.length) recordsOut = sum(sinks.map((o) => metricsOf(o).numRecordsIn));
    else if (vertices.length) {
      recordsOut = sum(vertices.filter((v) => !feeds.has(String(v.id))).map((v) => obj(v.metrics)['read-records']));
    }
    return { recordsIn, recordsOut };
  }

  function lastCompleted(checkpoints) {
    return obj(obj(obj(checkpoints).latest).completed);
  }

  // ---------------------------------------------------------------------------------------------
  // Application state, polling, routing

  const app = {
    config: {},
    refreshMs: 2000,
    view: null,
    timer: null,
    generation: 0,
    jobs: [], // the last /jobs/overview
    summaries: new Map(), // jid -> {recordsIn, recordsOut, restarts, lastCheckpoint, at}
    ops: new Map(), // jid -> [{id, kind, status, location, error, at}] savepoint/stop/cancel operations
    expanded: new Set(), // keys of expanded rows (checkpoint history, exceptions)
    vertex: new Map(), // jid -> the id of the vertex whose subtasks show
    throughput: new Map(), // jid -> samples collected here when the server has no throughput route
  };

  function parseRoute() {
    const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map((p) => {
      try { return decodeURIComponent(p); } catch (e) { return p; }
    });
    if (parts[0] === 'jobs' && parts[1]) {
      const tab = ['checkpoints', 'exceptions'].includes(parts[2]) ? parts[2] : 'overview';
      return { name: 'job', jid: parts[1], tab, sub: parts[3] || '' };
    }
    return { name: 'overview' };
  }

  function navigate() {
    const route = parseRoute();
    if (app.view && app.view.destroy) app.view.destroy();
    app.generation++;
    clearTimeout(app.timer);
    const root = $('#view');
    root.__html = undefined;
    root.innerHTML = '';
    app.view = route.name === 'job' ? new JobView(root, route) : new OverviewView(root);
    document.querySelectorAll('.side-jobs a, .side-nav a').forEach((a) => a.classList.remove('active'));
    tick(app.generation);
  }

  async function tick(generation) {
    if (generation !== app.generation) return;
    if (!document.hidden) {
      try {
        await refreshJobs();
        if (generation !== app.generation) return;
        await app.view.refresh();
        if (generation !== app.generation) return;
        setLive(true);
        setBanner(null);
      } catch (e) {
        if (generation !== app.generation) return;
        setLive(false);
        setBanner(e);
      }
    }
    if (generation === app.generation) app.timer = setTimeout(() => tick(generation), app.refreshMs);
  }

  function setLive(ok) {
    const live = $('#live');
    live.classList.toggle('live-down', !ok);
    $('#live-text').textContent = ok ? `live · ${fmt.clock(Date.now())}` : 'not connected';
  }

  function setBanner(e) {
    const el = $('#banner');
    if (!e) { setHtml(el, ''); return; }
    let hint = '';
    if (e instanceof ApiError && (e.status === 401 || e.status === 403)) {
      hint = 'Open the signed-in link (the one with ?token=) that `flowpoint list` or `flowpoint ui` prints to sign this browser in.';
    }
    setHtml(el, h`<div class="banner">${e.messages ? e.messages.join('; ') : String(e)}${hint ? h` <span class="banner-hint">${hint}</span>` : ''}</div>`);
  }

  // the job list (sidebar, overview): /jobs/overview each tick
  async function refreshJobs() {
    const data = await api('/jobs/overview');
    app.jobs = arr(data.jobs).filter((j) => j && j.jid);
    app.jobs.sort((a, b) => (b['start-time'] || 0) - (a['start-time'] || 0));
    renderSidebar();
  }

  function renderSidebar() {
    const route = parseRoute();
    const item = (j) => h`<li><a href="${jobHash(j.jid)}" class="${route.jid === j.jid ? 'active' : ''}" title="${j.name || j.jid}">\
<span class="dot dot-${String(j.state || '').toLowerCase()}"></span><span class="side-job-name">${j.name || j.jid}</span></a></li>`;
    const running = app.jobs.filter((j) => !TERMINAL.has(String(j.state)));
    const ended = app.jobs.filter((j) => TERMINAL.has(String(j.state))).slice(0, 30);
    setHtml($('#nav-running'), running.length ? running.map(item) : h`<li class="side-none">none</li>`);
    setHtml($('#nav-completed'), ended.length ? ended.map(item) : h`<li class="side-none">none</li>`);
    $('#nav-overview').classList.toggle('active', route.name === 'overview');
  }

  function setCrumbs(items) {
    setHtml($('#crumbs'), items.map((it, i) => (i < items.length - 1
      ? h`<a href="${it.href}">${it.text}</a><span class="crumb-sep">›</span>`
      : h`<span class="crumb-here">${it.text}</span>`)));
  }

  // ---------------------------------------------------------------------------------------------
  // Overview: every job in the registry, running and ended

  /** A job's records in/out, last checkpoint and restarts: from the job list's "flowpoint"
   * extras where the server adds them, else from the job's details and checkpoints (running
   * jobs every tick, an ended job once). */
  async function jobSummary(job) {
    const extra = obj(job.flowpoint);
    const ended = TERMINAL.has(String(job.state));
    const known = app.summaries.get(job.jid);
    if (known && ended && known.ended) return known;
    const summary = {
      recordsIn: first(extra['records-in'], extra['records-read']),
      recordsOut: first(extra['records-out'], extra['records-written']),
      restarts: extra.restarts,
      lastCheckpoint: extra['last-checkpoint'] ? obj(extra['last-checkpoint']) : undefined,
      ended,
    };
    const needDetails = summary.recordsIn === undefined || summary.recordsOut === undefined || summary.restarts === undefined;
    const [details, checkpoints] = await Promise.all([
      needDetails ? optional(jobPath(job.jid)).catch(() => null) : null,
      summary.lastCheckpoint === undefined ? optional(jobPath(job.jid, '/checkpoints')).catch(() => null) : null,
    ]);
    if (details) {
      const rec = jobRecords(details);
      if (summary.recordsIn === undefined) summary.recordsIn = rec.recordsIn;
      if (summary.recordsOut === undefined) summary.recordsOut = rec.recordsOut;
      if (summary.restarts === undefined) summary.restarts = obj(details.flowpoint).restarts;
    }
    if (summary.lastCheckpoint === undefined && checkpoints) {
      const c = lastCompleted(checkpoints);
      summary.lastCheckpoint = c.id !== undefined ? { id: c.id, time: first(c.latest_ack_timestamp, c.trigger_timestamp) } : null;
    }
    app.summaries.set(job.jid, summary);
    return summary;
  }

  async function mapLimited(items, limit, fn) {
    const out = new Array(items.length);
    let next = 0;
    const worker = async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]);
      }
    };
    await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
    return out;
  }

  class OverviewView {
    constructor(root) {
      this.root = root;
      setCrumbs([{ text: 'Overview' }]);
      document.title = 'Overview · flowpoint';
      setHtml(root, h`
        <section class="cards" id="ov-cards"></section>
        <section class="panel"><h2>Running jobs</h2><div id="ov-running"></div></section>
        <section class="panel"><h2>Completed jobs</h2><div id="ov-completed"></div></section>`);
    }

    async refresh() {
      const overview = await optional('/overview').catch(() => null);
      const jobs = app.jobs;
      const shown = jobs.slice(0, 100);
      const summaries = await mapLimited(shown, 4, (j) => jobSummary(j).catch(() => ({})));
      const byJid = new Map(shown.map((j, i) => [j.jid, summaries[i]]));
      this.render(obj(overview), jobs, byJid);
    }

    render(overview, jobs, byJid) {
      const count = (states) => jobs.filter((j) => states.includes(String(j.state))).length;
      const running = jobs.filter((j) => !TERMINAL.has(String(j.state)));
      const ended = jobs.filter((j) => TERMINAL.has(String(j.state)));
      const card = (label, value, cls) => h`<div class="card ${cls}"><div class="card-value">${value}</div><div class="card-label">${label}</div></div>`;
      setHtml($('#ov-cards', this.root), [
        card('Running', first(overview['jobs-running'], running.length), 'card-running'),
        card('Finished', first(overview['jobs-finished'], count(['FINISHED'])), 'card-finished'),
        card('Canceled', first(overview['jobs-cancelled'], count(['CANCELED'])), 'card-canceled'),
        card('Failed', first(overview['jobs-failed'], count(['FAILED'])), 'card-failed'),
        count(['LOST']) ? card('Lost', count(['LOST']), 'card-lost') : '',
      ]);
      const table = (list, withEnd) => {
        if (!list.length) return empty(withEnd ? 'No completed jobs in the registry.' : 'No running jobs.');
        return h`<table class="table jobs-table"><thead><tr>
          <th>Job name</th><th>Status</th><th>Start time</th>${withEnd ? h`<th>End time</th>` : ''}<th>Duration</th>
          <th class="num">Records in</th><th class="num">Records out</th><th>Last checkpoint</th><th class="num">Restarts</th>
          </tr></thead><tbody>${list.map((j) => {
            const s = obj(byJid.get(j.jid));
            const c = s.lastCheckpoint;
            return h`<tr class="job-row" data-href="${jobHash(j.jid)}" data-jid="${j.jid}">
              <td><a class="job-link" href="${jobHash(j.jid)}">${j.name || '(unnamed)'}</a><div class="sub mono" title="${j.jid}">${clip(j.jid, 13)}</div></td>
              <td>${badge(j.state)}</td>
              <td>${timeCell(j['start-time'])}</td>
              ${withEnd ? h`<td>${timeCell(j['end-time'])}</td>` : ''}
              <td>${fmt.duration(j.duration)}</td>
              <td class="num">${fmt.count(s.recordsIn)}</td>
              <td class="num">${fmt.count(s.recordsOut)}</td>
              <td>${c && c.id !== undefined ? h`<span class="mono">#${c.id}</span> <span class="sub">${fmt.ago(c.time)}</span>` : DASH}</td>
              <td class="num">${isNum(s.restarts) ? h`<span class="${s.restarts ? 'warn' : ''}">${s.restarts}</span>` : DASH}</td>
            </tr>`;
          })}</tbody></table>`;
      };
      setHtml($('#ov-running', this.root), table(running, false));
      setHtml($('#ov-completed', this.root), table(ended, true));
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Charts (uPlot, vendored)

  class Chart {
    constructor(el, options, height = 220) {
      this.el = el;
      this.options = options;
      this.height = height;
      this.plot = null;
      this.observer = window.ResizeObserver ? new ResizeObserver(() => this.resize()) : null;
      if (this.observer) this.observer.observe(el);
    }

    width() { return Math.max(200, this.el.clientWidth || 600); }

    set(data) {
      if (!window.uPlot) {
        this.el.textContent = 'the chart library did not load';
        return;
      }
      if (!this.plot) {
        this.plot = new window.uPlot({ ...this.options, width: this.width(), height: this.height }, data, this.el);
      } else {
        this.plot.setData(data);
      }
    }

    resize() {
      if (this.plot && Math.abs(this.plot.width - this.width()) > 2) this.plot.setSize({ width: this.width(), height: this.height });
    }

    destroy() {
      if (this.observer) this.observer.disconnect();
      if (this.plot) this.plot.destroy();
      this.plot = null;
    }
  }

  const COLORS = { in: '#1677ff', out: '#52c41a', size: '#91caff', incremental: '#1677ff', duration: '#fa8c16' };

  function throughputChart(el) {
    return new Chart(el, {
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
      series: [
        { value: (u, v) => (isNum(v) ? fmt.clock(v * 1000) : DASH) },
        { label: 'records in/s', stroke: COLORS.in, width: 2, fill: 'rgba(22,119,255,0.08)', value: (u, v) => fmt.rate(v) },
        { label: 'records out/s', stroke: COLORS.out, width: 2, value: (u, v) => fmt.rate(v) },
      ],
      axes: [
        { stroke: '#666', grid: { stroke: '#f0f0f0' }, values: (u, ticks) => ticks.map((t) => fmt.clock(t * 1000)) },
        { stroke: '#666', grid: { stroke: '#f0f0f0' }, size: 56, values: (u, ticks) => ticks.map((t) => fmt.short(t)) },
      ],
      cursor: { drag: { x: false, y: false } },
    });
  }

  function checkpointChart(el) {
    const bars = window.uPlot && window.uPlot.paths && window.uPlot.paths.bars ? window.uPlot.paths.bars({ size: [0.7, 28], gap: 2 }) : undefined;
    return new Chart(el, {
      scales: {
        x: { time: false, range: (u, min, max) => [min - 0.6, max + 0.6] },
        bytes: { range: (u, min, max) => [0, Math.max(1, max * 1.15)] },
        ms: { range: (u, min, max) => [0, Math.max(1, max * 1.15)] },
      },
      series: [
        { label: 'checkpoint', value: (u, v) => (isNum(v) ? `#${v}` : DASH) },
        { label: 'state size', scale: 'bytes', stroke: COLORS.size, fill: 'rgba(145,202,255,0.55)', width: 1, paths: bars, points: { show: false }, value: (u, v) => fmt.bytes(v) },
        { label: 'incremental size', scale: 'bytes', stroke: COLORS.incremental, width: 2, dash: [4, 3], points: { show: true, size: 5 }, value: (u, v) => fmt.bytes(v) },
        { label: 'end to end duration', scale: 'ms', stroke: COLORS.duration, width: 2, points: { show: true, size: 6 }, value: (u, v) => fmt.duration(v) },
      ],
      axes: [
        { stroke: '#666', grid: { show: false }, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000], values: (u, ticks) => ticks.map((t) => `#${t}`) },
        { scale: 'bytes', stroke: '#666', grid: { stroke: '#f0f0f0' }, size: 70, values: (u, ticks) => ticks.map((t) => fmt.bytes(t)) },
        { scale: 'ms', side: 1, stroke: '#666', grid: { show: false }, size: 60, values: (u, ticks) => ticks.map((t) => fmt.duration(t)) },
      ],
      cursor: { drag: { x: false, y: false } },
    }, 240);
  }

  // ---------------------------------------------------------------------------------------------
  // The job graph: one box per vertex (a chain of operators), arrows labelled with the
  // partitioning, laid out left to right by topological depth

  const GRAPH = { w: 196, nameLine: 16, line: 17, foot: 60, gapX: 100, gapY: 28, pad: 20, nameChars: 21 };

  /** A vertex name on at most two lines of GRAPH.nameChars (Flink names a chain "A -> B -> C"). */
  function nameLines(name) {
    const size = GRAPH.nameChars;
    const words = String(name).split(/\s+/).filter(Boolean)
      .flatMap((w) => (w.length <= size ? [w] : w.match(new RegExp(`.{1,${size}}`, 'g'))));
    const lines = [''];
    words.forEach((w) => {
      const cur = lines[lines.length - 1];
      if (!cur || cur.length + 1 + w.length <= GRAPH.nameChars) lines[lines.length - 1] = cur ? `${cur} ${w}` : w;
      else lines.push(w);
    });
    if (lines.length <= 2) return lines.map((l) => clip(l, GRAPH.nameChars));
    return [clip(lines[0], GRAPH.nameChars), clip(`${lines.slice(1).join(' ')}`, GRAPH.nameChars)];
  }

  const headHeight = (name) => 28 + nameLines(name).length * GRAPH.nameLine;

  function layoutGraph(details) {
    const nodes = planNodes(details);
    const byId = new Map(nodes.map((n) => [String(n.id), n]));
    const depth = new Map();
    const depthOf = (id, seen = new Set()) => {
      if (depth.has(id)) return depth.get(id);
      if (seen.has(id)) return 0; // a cycle: should not happen, do not loop
      seen.add(id);
      const ins = arr(byId.get(id) && byId.get(id).inputs).map((i) => String(i.id)).filter((i) => byId.has(i));
      const d = ins.length ? 1 + Math.max(...ins.map((i) => depthOf(i, seen))) : 0;
      depth.set(id, d);
      return d;
    };
    if (arr(obj(obj(details).plan).nodes).length) nodes.forEach((n) => depthOf(String(n.id)));
    else nodes.forEach((n, i) => depth.set(String(n.id), i)); // no plan: the vertices in their order, unconnected
    const vertices = new Map(arr(obj(details).vertices).map((v) => [String(v.id), v]));
    const ops = operatorsOf(details);
    const opsByVertex = new Map();
    ops.forEach((o) => {
      const k = String(o['vertex-id']);
      if (!opsByVertex.has(k)) opsByVertex.set(k, []);
      opsByVertex.get(k).push(o);
    });
    const columns = [];
    nodes.forEach((n) => {
      const d = depth.get(String(n.id));
      (columns[d] = columns[d] || []).push(n);
    });
    const boxes = new Map();
    let height = 0;
    const colHeights = columns.map((col, d) => {
      if (d > 0) { // order by where the inputs are: fewer crossings
        const y = (n) => {
          const ys = arr(n.inputs).map((i) => boxes.get(String(i.id))).filter(Boolean).map((b) => b.order);
          return ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : 0;
        };
        col.sort((a, b) => y(a) - y(b));
      }
      let y = 0;
      col.forEach((n, i) => {
        const id = String(n.id);
        const chain = chainOrder(opsByVertex.get(id) || []);
        const vertex = vertices.get(id) || {};
        const name = first(vertex.name, n.description, n.operator, `vertex ${n.id}`);
        const head = headHeight(name);
        const hgt = head + 8 + Math.max(1, chain.length) * GRAPH.line + GRAPH.foot;
        boxes.set(id, { node: n, vertex, name, head, ops: chain, x: GRAPH.pad + d * (GRAPH.w + GRAPH.gapX), y, h: hgt, order: i });
        y += hgt + GRAPH.gapY;
      });
      return y - GRAPH.gapY;
    });
    height = Math.max(0, ...colHeights);
    columns.forEach((col, d) => { // centre each column
      const off = GRAPH.pad + (height - colHeights[d]) / 2;
      col.forEach((n) => { boxes.get(String(n.id)).y += off; });
    });
    const width = GRAPH.pad * 2 + columns.length * GRAPH.w + Math.max(0, columns.length - 1) * GRAPH.gapX;
    return { boxes, width, height: height + GRAPH.pad * 2 };
  }

  /** The operators of a chain, head first, following chained-to. */
  function chainOrder(ops) {
    const uids = new Set(ops.map((o) => o.uid));
    const next = new Map();
    const heads = [];
    ops.forEach((o) => {
      const to = o['chained-to'];
      if (to !== null && to !== undefined && uids.has(to)) next.set(to, [...(next.get(to) || []), o]);
      else heads.push(o);
    });
    const out = [];
    const seen = new Set();
    const walk = (o) => {
      if (seen.has(o.uid)) return;
      seen.add(o.uid);
      out.push(o);
      (next.get(o.uid) || []).forEach(walk);
    };
    heads.forEach(walk);
    ops.forEach(walk); // anything left (a broken chain reference) still shows
    return out;
  }

  const clip = (s, n) => {
    const t = String(s === undefined || s === null ? '' : s);
    return t.length > n ? `${t.slice(0, n - 1)}…` : t;
  };

  /** Flink colours a vertex by how busy it is: blue idle, red busy; black backpressured. */
  function busyColor(busy, backpressured) {
    if (isNum(backpressured) && backpressured > 500) return '#262626';
    if (!isNum(busy)) return '#8c8c8c';
    const t = Math.min(1, Math.max(0, busy / 1000));
    const idle = [40, 110, 220];
    const hot = [214, 36, 48];
    const c = idle.map((v, i) => Math.round(v + (hot[i] - v) * t));
    return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
  }

  function graphSvg(details, selected) {
    const { boxes, width, height } = layoutGraph(details);
    if (!boxes.size) return empty('The job has no graph to show.');
    const edges = [];
    boxes.forEach((b) => {
      const inputs = arr(b.node.inputs);
      inputs.forEach((inp, i) => {
        const from = boxes.get(String(inp.id));
        if (!from) return;
        const x1 = from.x + GRAPH.w;
        const y1 = from.y + from.h / 2;
        const x2 = b.x - 4;
        const y2 = b.y + (b.h * (i + 1)) / (inputs.length + 1);
        const mx = (x1 + x2) / 2;
        const label = String(inp.ship_strategy || inp.exchange || '').toUpperCase() || '?';
        const lw = Math.max(44, label.length * 7.2 + 14);
        const ly = (y1 + y2) / 2;
        edges.push(h`<g class="edge" data-from="${inp.id}" data-to="${b.node.id}" data-partitioning="${label}">
          <path d="M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}" marker-end="url(#arrow)"/>
          <rect class="edge-label-bg" x="${mx - lw / 2}" y="${ly - 10}" width="${lw}" height="20" rx="10"/>
          <text class="edge-label" x="${mx}" y="${ly + 4}" text-anchor="middle">${label}</text></g>`);
      });
    });
    const vboxes = [];
    let index = 0;
    boxes.forEach((b) => {
      const clipId = `vclip-${index++}`;
      const v = b.vertex;
      const vm = obj(v.metrics);
      const busy = Math.max(...b.ops.map((o) => metricsOf(o).busyTimeMsPerSecond).filter(isNum), -1);
      const bp = Math.max(...b.ops.map((o) => metricsOf(o).backPressuredTimeMsPerSecond).filter(isNum), -1);
      const name = b.name;
      const par = first(b.node.parallelism, v.parallelism);
      const color = busyColor(busy >= 0 ? busy : undefined, bp >= 0 ? bp : undefined);
      const inRate = b.ops.length ? metricsOf(b.ops[0]).numRecordsInPerSecond : undefined;
      const outRate = b.ops.length ? metricsOf(b.ops[b.ops.length - 1]).numRecordsOutPerSecond : undefined;
      const top = b.y + b.head + 8;
      const lines = b.ops.length ? b.ops.map((o, i) => h`
          <text class="op-line" x="${b.x + 12}" y="${top + 12 + i * GRAPH.line}"><tspan class="op-uid">${clip(o.uid, 18)}</tspan><tspan class="op-kind" dx="6">${clip(o.kind, 14)}</tspan><title>${o.name || o.uid} (uid ${o.uid})</title></text>`)
        : h`<text class="op-line op-none" x="${b.x + 12}" y="${top + 12}">${clip(b.node.description || '', 26)}</text>`;
      const footY = b.y + b.h - GRAPH.foot;
      const recIn = first(vm['read-records'], b.ops.length ? metricsOf(b.ops[0]).numRecordsIn : undefined);
      const recOut = first(vm['write-records'], b.ops.length ? metricsOf(b.ops[b.ops.length - 1]).numRecordsOut : undefined);
      vboxes.push(h`<g class="vertex ${String(b.node.id) === selected ? 'selected' : ''}" data-vertex-id="${b.node.id}">
        <title>${name}</title>
        <clipPath id="${clipId}"><rect x="${b.x + 4}" y="${b.y}" width="${GRAPH.w - 10}" height="${b.h}"/></clipPath>
        <rect class="vertex-box" x="${b.x}" y="${b.y}" width="${GRAPH.w}" height="${b.h}" rx="6"/>
        <rect class="vertex-head" x="${b.x}" y="${b.y}" width="${GRAPH.w}" height="${b.head}" rx="6" fill="${color}"/>
        <rect x="${b.x}" y="${b.y + b.head - 8}" width="${GRAPH.w}" height="8" fill="${color}"/>
        <g clip-path="url(#${clipId})">${nameLines(name).map((line, i) => h`<text class="vertex-name" x="${b.x + 11}" y="${b.y + 18 + i * GRAPH.nameLine}">${line}</text>`)}
        <text class="vertex-sub" x="${b.x + 11}" y="${b.y + b.head - 9}">Parallelism ${isNum(par) ? par : DASH}</text>
        ${lines}</g>
        <line class="vertex-rule" x1="${b.x + 10}" x2="${b.x + GRAPH.w - 10}" y1="${footY + 4}" y2="${footY + 4}"/>
        <text class="vertex-metrics" x="${b.x + 11}" y="${footY + 20}">in ${fmt.short(recIn)} · out ${fmt.short(recOut)}</text>
        <text class="vertex-metrics" x="${b.x + 11}" y="${footY + 36}">${fmt.rate(inRate)} in · ${fmt.rate(outRate)} out</text>
        <text class="vertex-metrics" x="${b.x + 11}" y="${footY + 52}">busy ${busy >= 0 ? fmt.pct(busy) : DASH} · backpressured ${bp >= 0 ? fmt.pct(bp) : DASH}</text>
      </g>`);
    });
    // scaled down to the panel's width, to 75% at most; a larger graph scrolls
    return h`<svg class="job-graph" xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" style="min-width:${Math.round(width * 0.75)}px" role="img" aria-label="job graph">
      <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrow-head"/></marker></defs>
      ${edges}${vboxes}</svg>`;
  }

  // ---------------------------------------------------------------------------------------------
  // The job pages: a header (status, times, actions) and three tabs

  class JobView {
    constructor(root, route) {
      this.root = root;
      this.jid = route.jid;
      this.tab = route.tab;
      this.sub = route.sub;
      this.details = null;
      this.charts = [];
      const tabs = [['overview', 'Overview', ''], ['checkpoints', 'Checkpoints', '/checkpoints'], ['exceptions', 'Exceptions', '/exceptions']];
      setHtml(root, h`
        <section class="job-head" id="job-head"><div id="job-title"></div><div id="job-facts"></div></section>
        <div id="job-ops"></div>
        <nav class="tabs" id="job-tabs">${tabs.map(([k, label, rest]) => h`<a href="${jobHash(this.jid, rest)}" class="tab ${k === this.tab ? 'active' : ''}" data-tab="${k}">${label}</a>`)}</nav>
        <div id="tab-body">${this.skeleton()}</div>`);
      if (this.tab === 'overview') {
        this.throughput = throughputChart($('#throughput-chart', root));
        this.charts.push(this.throughput);
      } else if (this.tab === 'checkpoints') {
        this.ckChart = checkpointChart($('#checkpoint-chart', root));
        this.charts.push(this.ckChart);
      }
      this.renderOps();
    }

    skeleton() {
      if (this.tab === 'overview') {
        return h`
          <section class="panel"><h2>Job graph</h2><div class="graph-wrap" id="job-graph"></div>
            <div class="legend"><span class="legend-swatch legend-idle"></span>idle<span class="legend-swatch legend-busy"></span>busy<span class="legend-swatch legend-bp"></span>backpressured<span class="legend-hint">click a box for its subtasks</span></div>
            <div id="vertex-detail"></div></section>
          <section class="panel"><h2>Operators</h2><div id="job-operators"></div></section>
          <div class="two-col">
            <section class="panel"><h2>Throughput</h2><div class="chart" id="throughput-chart"></div><div id="throughput-note"></div></section>
            <section class="panel"><h2 id="job-epochs-title">Epochs</h2><div id="job-epochs"></div></section>
          </div>
          <section class="panel"><h2>Workers</h2><div id="job-workers"></div></section>`;
      }
      if (this.tab === 'checkpoints') {
        const subs = [['', 'History'], ['summary', 'Summary'], ['config', 'Configuration']];
        return h`
          <section class="cards" id="ck-counts"></section>
          <div class="two-col two-col-wide">
            <section class="panel"><h2>Size and duration per checkpoint</h2><div class="chart" id="checkpoint-chart"></div><div id="checkpoint-chart-note"></div></section>
            <section class="panel"><h2>Latest</h2><div id="ck-latest"></div></section>
          </div>
          <section class="panel">
            <nav class="subtabs">${subs.map(([k, label]) => h`<a href="${jobHash(this.jid, k ? `/checkpoints/${k}` : '/checkpoints')}" class="subtab ${k === (['summary', 'config'].includes(this.sub) ? this.sub : '') ? 'active' : ''}">${label}</a>`)}</nav>
            <div id="ck-body"></div>
          </section>`;
      }
      return h`<section class="cards" id="ex-cards"></section>
        <section class="panel"><h2>Root exception</h2><div id="ex-root"></div></section>
        <section class="panel"><h2>Exception history</h2><div id="ex-history"></div></section>`;
    }

    destroy() {
      this.charts.forEach((c) => c.destroy());
    }

    async refresh() {
      const jid = this.jid;
      // the header shows the last checkpoint on every tab
      const checkpoints = optional(jobPath(jid, '/checkpoints'));
      const tabData = this.tab === 'overview'
        ? Promise.all([optional(jobPath(jid, '/throughput')).catch(() => null), optional(jobPath(jid, '/epochs')).catch(() => null),
          app.vertex.get(jid) ? optional(jobPath(jid, `/vertices/${encodeURIComponent(app.vertex.get(jid))}`)).catch((e) => ({ error: e })) : null,
          app.vertex.get(jid) ? optional(jobPath(jid, `/vertices/${encodeURIComponent(app.vertex.get(jid))}/state`)).catch((e) => ({ error: e })) : null,
          checkpoints.catch(() => null)])
        : this.tab === 'checkpoints'
          ? Promise.all([checkpoints, this.checkpointConfig()])
          : Promise.all([optional(jobPath(jid, '/exceptions')), checkpoints.catch(() => null)]);
      let details;
      try {
        details = await api(jobPath(jid));
      } catch (e) {
        tabData.catch(() => null);
        if (e instanceof ApiError && e.status === 404) {
          setCrumbs([{ text: 'Overview', href: '#/overview' }, { text: jid }]);
          setHtml($('#job-title', this.root), h`<h1>Job ${jid}</h1>${errorBox(e)}`);
          return;
        }
        throw e;
      }
      this.details = details;
      const name = details.name || jid;
      document.title = `${name} · flowpoint`;
      const tabName = { overview: null, checkpoints: 'Checkpoints', exceptions: 'Exceptions' }[this.tab];
      setCrumbs([{ text: 'Overview', href: '#/overview' }, ...(tabName ? [{ text: name, href: jobHash(jid) }, { text: tabName }] : [{ text: name }])]);
      this.renderHead(details);
      this.renderOps();
      let data;
      try {
        data = await tabData;
      } catch (e) {
        setHtml($('#tab-body', this.root).lastElementChild, errorBox(e));
        return;
      }
      const latest = lastCompleted(this.tab === 'checkpoints' ? data[0] : data[data.length - 1]);
      if (latest.id !== undefined) {
        this.lastCheckpoint = { id: latest.id, time: first(latest.latest_ack_timestamp, latest.trigger_timestamp) };
        this.renderHead(details);
      }
      if (this.tab === 'overview') this.renderOverview(details, data[0], data[1], data[2], data[3]);
      else if (this.tab === 'checkpoints') this.renderCheckpoints(details, data[0], data[1]);
      else this.renderExceptions(details, data[0]);
    }

    async checkpointConfig() {
      // the configuration of a job does not change: once is enough
      if (this.ckConfig === undefined) this.ckConfig = await optional(jobPath(this.jid, '/checkpoints/config')).catch(() => null);
      return this.ckConfig;
    }

    renderHead(d) {
      const fp = obj(d.flowpoint);
      const running = String(d.state) === 'RUNNING';
      const rec = jobRecords(d);
      // Spark's UI lives as long as the job's process: no link once the job has ended
      const spark = TERMINAL.has(String(d.state)) ? null : safeUrl(fp['spark-ui']);
      const busy = (app.ops.get(this.jid) || []).some((o) => o.status === 'IN_PROGRESS');
      const lc = this.lastCheckpoint || obj(app.summaries.get(this.jid)).lastCheckpoint;
      const runtime = fp.runtime ? `${fp.runtime} runtime` : '';
      const actions = h`
        <div class="actions">
          <button class="btn" data-action="savepoint" ${running && !busy ? '' : 'disabled'}>Trigger savepoint</button>
          <button class="btn" data-action="stop" ${running && !busy ? '' : 'disabled'}>Stop with savepoint</button>
          <button class="btn btn-danger" data-action="cancel" ${running ? '' : 'disabled'}>Cancel job</button>
        </div>`;
      // the title and the buttons change rarely: redrawn apart from the facts, a click is not lost
      setHtml($('#job-title', this.root), h`
        <div class="job-title">
          <div class="job-title-text"><div class="job-name-line"><h1 id="job-name">${d.name || '(unnamed job)'}</h1>${badge(d.state)}</div>
            <div class="sub"><span class="mono">${d.jid || this.jid}</span>${runtime ? ` · ${runtime}` : ''}${spark ? h` · <a href="${spark}" target="_blank" rel="noopener noreferrer">Spark UI</a>` : ''}</div></div>
          ${actions}
        </div>`);
      setHtml($('#job-facts', this.root), h`
        <div class="facts">
          ${fact('Start', fmt.time(d['start-time']))}
          ${fact(TERMINAL.has(String(d.state)) ? 'End' : 'Duration', TERMINAL.has(String(d.state)) ? fmt.time(d['end-time']) : fmt.duration(d.duration))}
          ${TERMINAL.has(String(d.state)) ? fact('Duration', fmt.duration(d.duration)) : ''}
          ${fact('Records in', fmt.count(rec.recordsIn))}
          ${fact('Records out', fmt.count(rec.recordsOut))}
          ${fact('Restarts', isNum(fp.restarts) ? String(fp.restarts) : DASH)}
          ${isNum(fp.epoch) ? fact(unitLabel(fp), fmt.count(first(fp.segment, fp.epoch))) : ''}
          ${fact('Watermark', fmt.watermark(fp['current-watermark']))}
          ${lc && lc.id !== undefined ? fact('Last checkpoint', `#${lc.id} · ${fmt.ago(lc.time)}`) : ''}
        </div>`);
    }

    renderOps() {
      const all = app.ops.get(this.jid) || [];
      const list = all.filter((o) => !o.dismissed).slice(-3).reverse();
      const close = (o) => h`<button class="note-close" data-dismiss-op="${all.indexOf(o)}" title="dismiss" aria-label="dismiss">×</button>`;
      setHtml($('#job-ops', this.root), list.map((o) => {
        const what = { savepoint: 'Savepoint', stop: 'Stop with savepoint', cancel: 'Cancel' }[o.kind];
        if (o.status === 'IN_PROGRESS') return h`<div class="op-note op-progress" data-op="${o.kind}"><span class="spinner"></span>${what}: in progress (since ${fmt.clock(o.at)})</div>`;
        if (o.status === 'FAILED') return h`<div class="op-note op-failed" data-op="${o.kind}">${what} failed: ${o.error}${close(o)}</div>`;
        if (o.kind === 'cancel') return h`<div class="op-note op-done" data-op="cancel">Cancel requested at ${fmt.clock(o.at)}.${close(o)}</div>`;
        return h`<div class="op-note op-done" data-op="${o.kind}">${what} completed at ${fmt.clock(o.done)}: <code class="savepoint-path">${o.location || '(no path reported)'}</code>${close(o)}</div>`;
      }));
    }

    // -- the Overview tab ---------------------------------------------------------------------

    renderOverview(details, throughput, epochs, vertex, state) {
      if (details !== undefined) this.last = { details, throughput, epochs, vertex, state };
      const selected = app.vertex.get(this.jid);
      setHtml($('#job-graph', this.root), graphSvg(details, selected));
      this.renderVertex(details, selected, vertex);
      this.renderVertexState(details, selected, vertex, state);
      this.renderOperators(details);
      let samples = arr(obj(throughput).samples).filter((s) => s && isNum(s.time));
      let note = '';
      if (!throughput && !TERMINAL.has(String(details.state))) { // no throughput route: collect records/s from the job's details here
        samples = this.localThroughput(details);
        note = 'collected by this page while it is open';
      }
      samples.sort((a, b) => a.time - b.time);
      if (samples.length) {
        this.throughput.set([samples.map((s) => s.time / 1000), samples.map((s) => (isNum(s.in) ? s.in : null)), samples.map((s) => (isNum(s.out) ? s.out : null))]);
      }
      setHtml($('#throughput-note', this.root), samples.length ? (note ? h`<div class="note">${note}</div>` : '') : empty(TERMINAL.has(String(details.state)) ? 'No throughput samples.' : 'No throughput samples yet.'));
      this.renderEpochs(details, epochs);
      this.renderWorkers(details);
    }

    /** The selected vertex's subtasks (Flink's JobVertexDetailsInfo). */
    renderVertex(details, selected, data) {
      const el = $('#vertex-detail', this.root);
      if (!selected) { setHtml(el, ''); return; }
      const v = arr(details.vertices).find((x) => String(x.id) === selected) || {};
      const head = h`<div class="vertex-detail-head"><h3>Subtasks of ${first(v.name, obj(data).name, selected)}</h3>
        <button class="link-btn" data-vertex="${selected}">close</button></div>`;
      const state = h`<div id="vertex-state"></div>`; // renderVertexState's
      if (!data) { setHtml(el, h`${head}${empty('Loading…')}${state}`); return; }
      if (data.error) { setHtml(el, h`${head}${errorBox(data.error)}${state}`); return; }
      const subtasks = arr(data.subtasks);
      if (!subtasks.length) { setHtml(el, h`${head}${empty('No subtasks reported.')}${state}`); return; }
      setHtml(el, h`${head}<div class="table-scroll"><table class="table table-compact subtasks-table"><thead><tr>
          <th class="num">Subtask</th><th>Status</th><th class="num">Attempt</th><th>Endpoint</th><th>Duration</th>
          <th class="num">Records in</th><th class="num">Records out</th><th class="num">Busy</th><th class="num">Backpressured</th><th class="num">Idle</th>
        </tr></thead><tbody>${subtasks.map((t) => {
          const m = obj(t.metrics);
          return h`<tr class="subtask-row"><td class="num mono">${first(t.subtask, DASH)}</td><td>${badge(t.status)}</td><td class="num">${first(t.attempt, DASH)}</td>
            <td class="mono">${first(t.endpoint, t.host, DASH)}</td><td>${fmt.duration(t.duration)}</td>
            <td class="num">${fmt.count(m['read-records'])}</td><td class="num">${fmt.count(m['write-records'])}</td>
            <td class="num">${fmt.duration(m['accumulated-busy-time'])}</td><td class="num">${fmt.duration(m['accumulated-backpressured-time'])}</td><td class="num">${fmt.duration(m['accumulated-idle-time'])}</td></tr>`;
        })}</tbody></table></div>${state}`);
    }

    /** The selected vertex's keyed state in the latest completed checkpoint (flowpoint's
     * /vertices/:vid/state): per operator its states, size and a sample of keys. */
    renderVertexState(details, selected, vertex, data) {
      const el = $('#vertex-state', this.root);
      if (!el || !selected) return;
      const title = (cp) => h`<h3>State${cp ? h` <span class="sub">as of checkpoint ${cp.id}${isNum(cp.time) ? ` · ${fmt.ago(cp.time)}` : ''}</span>` : ''}</h3>`;
      if (data === undefined || (!data && !vertex)) { setHtml(el, ''); return; }
      if (!data) { // no route: an ended job's archive has no state samples
        setHtml(el, TERMINAL.has(String(details.state)) ? h`${title(null)}${empty('The state of an ended job is not kept in its archive.')}` : '');
        return;
      }
      if (data.error) { setHtml(el, h`${title(null)}${errorBox(data.error)}`); return; }
      const ops = arr(data.operators).filter((o) => o && typeof o === 'object');
      if (!data.checkpoint) { setHtml(el, h`${title(null)}${empty(data.message === 'no keyed state' || !ops.length ? 'No keyed state in this vertex.' : 'No completed checkpoint yet.')}`); return; }
      setHtml(el, h`${title(data.checkpoint)}${ops.map((o) => this.stateOperator(o))}`);
    }

    stateOperator(o) {
      const states = arr(o.states).filter((s) => s && typeof s === 'object');
      const sample = o.sample && typeof o.sample === 'object' ? o.sample : null;
      const columns = sample ? arr(sample.states).map(String) : [];
      const rows = sample ? arr(sample.rows).filter((r) => r && typeof r === 'object') : [];
      const sampleHtml = sample
        ? h`<div class="note">A sample: ${rows.length} of the ${fmt.count(sample['subtask-keys'])} keys of subtask ${first(sample.subtask, DASH)}</div>
          <div class="table-scroll"><table class="table table-compact state-sample"><thead><tr><th>Key</th>${columns.map((c) => h`<th>${c}</th>`)}</tr></thead>
          <tbody>${rows.map((r) => h`<tr><td class="mono">${first(r.key, DASH)}</td>${columns.map((c) => h`<td class="mono">${first(obj(r.values)[c], DASH)}</td>`)}</tr>`)}</tbody></table></div>`
        : h`<div class="note">${first(o['sample-skipped'], 'No sample.')}</div>`;
      return h`<div class="state-op" data-state-uid="${o.uid}">
        <div class="op-name">${first(o.name, o.uid)} <span class="sub"><span class="mono">${o.uid}</span> · ${first(o.backend, DASH)} · ${fmt.bytes(o.stateSize)}</span></div>
        <table class="table table-compact state-table"><thead><tr><th>State</th><th>Kind</th><th class="num">Keys</th></tr></thead>
        <tbody>${states.map((s) => h`<tr><td class="mono">${s.name}</td><td>${first(s.kind, DASH)}</td><td class="num">${fmt.count(s.keys)}</td></tr>`)}</tbody></table>
        ${sampleHtml}</div>`;
    }

    localThroughput(details) {
      const list = app.throughput.get(this.jid) || [];
      const ops = operatorsOf(details);
      const sources = ops.filter((o) => /source/i.test(String(o.kind)));
      const sinks = ops.filter((o) => /sink/i.test(String(o.kind)));
      if (sources.length || sinks.length) {
        list.push({ time: Date.now(), in: sum(sources.map((o) => metricsOf(o).numRecordsOutPerSecond)), out: sum(sinks.map((o) => metricsOf(o).numRecordsInPerSecond)) });
      }
      while (list.length > 600) list.shift();
      app.throughput.set(this.jid, list);
      return list.slice();
    }

    renderOperators(details) {
      const ops = operatorsOf(details);
      const el = $('#job-operators', this.root);
      if (!ops.length) {
        const vs = arr(details.vertices);
        setHtml(el, vs.length ? h`<table class="table"><thead><tr><th>Vertex</th><th class="num">Parallelism</th><th>Status</th><th class="num">Records in</th><th class="num">Records out</th><th>Duration</th></tr></thead><tbody>
          ${vs.map((v) => h`<tr><td>${v.name}</td><td class="num">${v.parallelism}</td><td>${badge(v.status)}</td><td class="num">${fmt.count(obj(v.metrics)['read-records'])}</td><td class="num">${fmt.count(obj(v.metrics)['write-records'])}</td><td>${fmt.duration(v.duration)}</td></tr>`)}
          </tbody></table>` : empty('No operator metrics.'));
        return;
      }
      const boxes = layoutGraph(details).boxes;
      const order = [];
      [...boxes.values()].sort((a, b) => a.x - b.x || a.y - b.y).forEach((b) => b.ops.forEach((o) => order.push(o)));
      ops.forEach((o) => { if (!order.includes(o)) order.push(o); });
      setHtml(el, h`<div class="table-scroll"><table class="table ops-table"><thead><tr>
          <th>Operator</th><th class="num" title="parallelism">Par.</th>
          <th class="num" title="records in">Records in</th><th class="num" title="records out">Records out</th>
          <th class="num" title="records in per second">In/s</th><th class="num" title="records out per second">Out/s</th>
          <th title="busy time (the busiest subtask)">Busy</th><th title="backpressured time (the most backpressured subtask)">Backpr.</th>
          <th title="current input watermark">Watermark</th><th class="num" title="late records dropped">Late</th><th class="num" title="state size">State</th>
        </tr></thead><tbody>${order.map((o) => {
          const m = metricsOf(o);
          return h`<tr class="op-row" data-uid="${o.uid}">
            <td><div class="op-name">${o.name || o.uid}</div><div class="sub"><span class="mono">${o.uid}</span> · ${o.kind || 'operator'}${o['chained-to'] ? h` · chained to <span class="mono">${o['chained-to']}</span>` : ''}</div></td>
            <td class="num">${isNum(o.parallelism) ? o.parallelism : DASH}</td>
            <td class="num">${fmt.count(m.numRecordsIn)}</td><td class="num">${fmt.count(m.numRecordsOut)}</td>
            <td class="num">${fmt.rate(m.numRecordsInPerSecond)}</td><td class="num">${fmt.rate(m.numRecordsOutPerSecond)}</td>
            <td class="meter-cell">${meter(m.busyTimeMsPerSecond, 'busy')}</td><td class="meter-cell">${meter(m.backPressuredTimeMsPerSecond, 'backpressured')}</td>
            <td class="nowrap">${watermarkCell(m.currentInputWatermark)}</td>
            <td class="num ${m.numLateRecordsDropped > 0 ? 'warn' : ''}">${fmt.count(m.numLateRecordsDropped)}</td>
            <td class="num">${fmt.bytes(m.stateSize)}</td></tr>${rocksdbRow(m, 11)}`;
        })}</tbody></table></div>`);
    }

    renderWorkers(details) {
      const el = $('#job-workers', this.root);
      if (!el) return;
      const workers = arr(obj(details.flowpoint).workers).filter((w) => w && typeof w === 'object');
      if (!workers.length) { setHtml(el, empty('No worker has reported.')); return; }
      const stale = (w) => w.role === 'worker' && !TERMINAL.has(String(details.state)) && isNum(w['last-report']) && Date.now() - w['last-report'] > 10000;
      setHtml(el, h`<div class="table-scroll"><table class="table table-compact workers-table"><thead><tr>
          <th>Process</th><th>Role</th><th class="num" title="Status.Python.Memory.RSS: resident memory">Memory (RSS)</th><th>Subtasks</th><th>Last report</th>
        </tr></thead><tbody>${workers.map((w) => {
          const m = obj(w.metrics);
          const subtasks = arr(w.subtasks).map(String);
          // a continuous slot hosts subtask i of every stage: "subtask 0 of 2 tasks"
          const parts = [...new Set(subtasks.map((t) => t.split('.')[1]))];
          const where = parts.length === 1 ? `subtask ${parts[0]} of ${subtasks.length} task${subtasks.length === 1 ? '' : 's'}` : subtasks.join(' ');
          return h`<tr class="worker-row ${stale(w) ? 'muted' : ''}" data-worker="${w.id}"><td class="mono">${w.id}</td><td>${w.role === 'driver' ? 'driver' : 'worker'}</td>
            <td class="num">${fmt.bytes(m['Status.Python.Memory.RSS'])}</td>
            <td title="${subtasks.map((t) => `stage ${t.split('.')[0]}, subtask ${t.split('.')[1]}`).join('\n')}">${subtasks.length ? where : DASH}</td><td>${w.role === 'driver' ? 'now' : fmt.ago(w['last-report'])}</td></tr>`;
        })}</tbody></table></div>
        ${obj(details.flowpoint).runtime === 'continuous' ? '' : h`<div class="note">On the epoch runtime a worker reports when it runs one of the job's tasks; Spark may end idle workers.</div>`}`);
    }

    renderEpochs(details, data) {
      const el = $('#job-epochs', this.root);
      const fp = obj(details.flowpoint);
      const epochs = arr(obj(data).epochs).filter((e) => e && isNum(e.epoch));
      const live = !TERMINAL.has(String(details.state)); // Spark's UI went with the job's process
      const link = (url) => (live ? safeUrl(url) : null);
      const title = $('#job-epochs-title', this.root);
      if (title) title.textContent = unitLabel(fp) === 'Segment' ? 'Segments' : 'Epochs';
      if (!epochs.length) {
        setHtml(el, fp.runtime === 'continuous'
          ? h`<div class="facts">${fact('Segments committed', isNum(fp.epoch) ? fmt.count(first(fp.segment, fp.epoch)) : DASH)}</div>
            <div class="note">This job runs on the continuous runtime: one long-running Spark job, no epochs. A segment is
            the records up to a checkpoint barrier: one ends at every checkpoint (every second without checkpointing).</div>`
          : empty('No epochs yet.'));
        return;
      }
      epochs.sort((a, b) => a.epoch - b.epoch);
      const recent = epochs.slice(-60);
      const W = 560; const H = 120; const top = 8; const bottom = 18;
      const maxD = Math.max(1, ...recent.map((e) => (isNum(e.duration) ? e.duration : 0)));
      const step = W / Math.max(recent.length, 20);
      const bars = recent.map((e, i) => {
        const d = isNum(e.duration) ? e.duration : 0;
        const bh = Math.max(2, ((H - top - bottom) * d) / maxD);
        const jobs = arr(e['spark-jobs']);
        const title = `epoch ${e.epoch}: ${fmt.count(e.records)} records in ${fmt.duration(e.duration)}${jobs.length ? `, Spark job ${jobs.map((j) => j.id).join(', ')}` : ''}`;
        const rect = h`<rect class="epoch-bar ${e.records ? '' : 'epoch-idle'}" x="${i * step + 1}" y="${H - bottom - bh}" width="${Math.max(1, step - 2)}" height="${bh}"><title>${title}</title></rect>`;
        const url = jobs.length ? link(jobs[0].url) : null;
        return url ? h`<a href="${url}" target="_blank" rel="noopener noreferrer">${rect}</a>` : rect;
      });
      const svg = h`<svg class="epoch-timeline" viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" role="img" aria-label="epoch durations">
        <line class="axis" x1="0" x2="${W}" y1="${H - bottom}" y2="${H - bottom}"/>${bars}
        <text class="axis-label" x="2" y="${H - 4}">epoch ${recent[0].epoch}</text>
        <text class="axis-label" x="${W - 2}" y="${H - 4}" text-anchor="end">epoch ${recent[recent.length - 1].epoch}</text>
        <text class="axis-label" x="2" y="${top + 2}" dominant-baseline="hanging">${fmt.duration(maxD)}</text></svg>`;
      const rows = epochs.slice(-8).reverse().map((e) => h`<tr class="epoch-row">
          <td class="num mono">${e.epoch}</td><td class="num">${fmt.count(e.records)}</td><td class="num">${fmt.duration(e.duration)}</td>
          <td>${arr(e['spark-jobs']).map((j) => {
            const url = link(j.url);
            return url ? h`<a class="spark-job" href="${url}" target="_blank" rel="noopener noreferrer">job ${j.id}</a> ` : h`<span class="spark-job">job ${j.id}</span> `;
          })}</td></tr>`);
      const avg = sum(recent.map((e) => e.duration)) / recent.length;
      setHtml(el, h`<div class="note">last ${recent.length} epochs: bar height is the duration (average ${fmt.duration(avg)})${live ? '; click a bar for its Spark job' : ''}</div>${svg}
        <table class="table table-compact"><thead><tr><th class="num">Epoch</th><th class="num">Records</th><th class="num">Duration</th><th>Spark jobs</th></tr></thead><tbody>${rows}</tbody></table>`);
    }

    // -- the Checkpoints tab ------------------------------------------------------------------

    renderCheckpoints(details, stats, config) {
      const s = obj(stats);
      const counts = obj(s.counts);
      const card = (label, value, cls) => h`<div class="card ${cls}"><div class="card-value">${isNum(value) ? value : DASH}</div><div class="card-label">${label}</div></div>`;
      setHtml($('#ck-counts', this.root), [
        card('Triggered', counts.total, 'card-total'), card('In progress', counts.in_progress, 'card-progress'),
        card('Completed', counts.completed, 'card-finished'), card('Failed', counts.failed, 'card-failed'),
        card('Restored', counts.restored, 'card-restored'),
      ]);
      const history = arr(s.history).filter((c) => c && c.id !== undefined);
      const latest = obj(s.latest);
      const latestRow = (label, c, extra) => (c && c.id !== undefined ? h`<tr><th>${label}</th><td class="mono nowrap">#${c.id}</td><td>${extra}</td></tr>`
        : h`<tr><th>${label}</th><td>${DASH}</td><td></td></tr>`);
      const lc = obj(latest.completed); const ls = obj(latest.savepoint); const lf = obj(latest.failed); const lr = obj(latest.restored);
      setHtml($('#ck-latest', this.root), h`<table class="table table-compact latest"><tbody>
        ${latestRow('Completed', lc, h`${fmt.time(first(lc.latest_ack_timestamp, lc.trigger_timestamp))} · ${fmt.bytes(lc.state_size)} · ${fmt.duration(lc.end_to_end_duration)}`)}
        ${latestRow('Savepoint', ls, h`${fmt.time(first(ls.latest_ack_timestamp, ls.trigger_timestamp))}<div class="path mono">${ls.external_path || ''}</div>`)}
        ${latestRow('Failed', lf, h`${fmt.time(first(lf.failure_timestamp, lf.trigger_timestamp))}<div class="sub">${clip(lf.failure_message || '', 160)}</div>`)}
        ${latestRow('Restored', lr, h`${fmt.time(lr.restore_timestamp)}${lr.is_savepoint ? ' · savepoint' : ''}<div class="path mono">${lr.external_path || ''}</div>`)}
        </tbody></table>`);
      const done = history.filter((c) => String(c.status) === 'COMPLETED').sort((a, b) => a.id - b.id);
      if (done.length) {
        this.ckChart.set([
          done.map((c) => c.id),
          done.map((c) => (isNum(c.state_size) ? c.state_size : null)),
          done.map((c) => first(obj(c.flowpoint).incremental_size, c.checkpointed_size, null)),
          done.map((c) => (isNum(c.end_to_end_duration) ? c.end_to_end_duration : null)),
        ]);
      }
      setHtml($('#checkpoint-chart-note', this.root), done.length ? '' : empty('No completed checkpoint yet.'));
      const body = $('#ck-body', this.root);
      if (this.sub === 'summary') setHtml(body, this.summaryTable(s));
      else if (this.sub === 'config') setHtml(body, this.configTable(config));
      else setHtml(body, this.historyTable(history));
    }

    historyTable(history) {
      if (!history.length) return empty('No checkpoint has been triggered yet.');
      const rows = [...history].sort((a, b) => b.id - a.id).map((c) => {
        const fp = obj(c.flowpoint);
        const key = `ck:${this.jid}:${c.id}`;
        const open = app.expanded.has(key);
        const savepoint = c.is_savepoint || /SAVEPOINT/i.test(String(c.checkpoint_type || ''));
        const status = String(c.status || '');
        const reason = c.failure_message ? clip(c.failure_message, 90) : '';
        const row = h`<tr class="ck-row ${savepoint ? 'is-savepoint' : ''}" data-toggle="${key}" data-checkpoint-id="${c.id}">
          <td class="mono nowrap"><span class="caret">${open ? '▾' : '▸'}</span> ${c.id}${savepoint ? h` <span class="tag">savepoint</span>` : ''}</td>
          <td>${badge(status)}</td>
          <td class="num">${isNum(c.num_acknowledged_subtasks) ? `${c.num_acknowledged_subtasks}/${isNum(c.num_subtasks) ? c.num_subtasks : '?'}` : DASH}</td>
          <td class="nowrap">${fmt.time(c.trigger_timestamp)}</td>
          <td class="num">${fmt.duration(c.end_to_end_duration)}</td>
          <td class="num">${fmt.duration(fp.sync_duration)}</td>
          <td class="num">${fmt.duration(fp.async_duration)}</td>
          <td class="num">${fmt.bytes(c.state_size)}</td>
          <td class="num">${fmt.bytes(first(fp.incremental_size, c.checkpointed_size))}</td>
        </tr>${savepoint && c.external_path ? h`<tr class="ck-sub is-savepoint" data-toggle="${key}"><td></td><td colspan="8">Savepoint <code class="path savepoint-location">${c.external_path}</code></td></tr>` : ''}\
${reason ? h`<tr class="ck-sub" data-toggle="${key}"><td></td><td colspan="8"><span class="fail-reason">${reason}</span></td></tr>` : ''}`;
        if (!open) return row;
        const details = [
          ['Type', `${c.checkpoint_type || (savepoint ? 'SAVEPOINT' : 'CHECKPOINT')}${c.savepointFormat ? ` (${c.savepointFormat})` : ''}`],
          ['Path', c.external_path ? h`<code>${c.external_path}</code>` : DASH],
          ['Trigger time', fmt.time(c.trigger_timestamp, true)],
          ['Latest acknowledgement', fmt.time(c.latest_ack_timestamp, true)],
          ['End to end duration', fmt.duration(c.end_to_end_duration)],
          ['Sync / async duration', `${fmt.duration(fp.sync_duration)} / ${fmt.duration(fp.async_duration)}`],
          ['Full / incremental size', `${fmt.bytes(c.state_size)} / ${fmt.bytes(first(fp.incremental_size, c.checkpointed_size))}`],
        ];
        if (isNum(fp.epoch)) details.push([unitLabel(fp), String(first(fp.segment, fp.epoch))]);
        if (c.discarded) details.push(['Discarded', 'yes (no longer retained)']);
        if (c.failure_message) details.push(['Failure', h`<pre class="trace">${c.failure_message}</pre>`], ['Failed at', fmt.time(c.failure_timestamp, true)]);
        return h`${row}<tr class="ck-detail"><td></td><td colspan="8">${kv(details)}</td></tr>`;
      });
      return h`<div class="table-scroll"><table class="table ck-table"><thead><tr>
        <th>ID</th><th>Status</th><th class="num">Acknowledged</th><th>Trigger time</th><th class="num">End to end</th>
        <th class="num">Sync</th><th class="num">Async</th><th class="num">State size</th><th class="num">Incremental</th>
        </tr></thead><tbody>${rows}</tbody></table></div>`;
    }

    summaryTable(stats) {
      const summary = obj(stats.summary);
      const extra = obj(summary.flowpoint);
      const rows = [
        ['End to end duration', first(summary.end_to_end_duration), fmt.duration],
        ['Sync duration', first(summary.sync_duration, extra.sync_duration), fmt.duration],
        ['Async duration', first(summary.async_duration, extra.async_duration), fmt.duration],
        ['Checkpointed data size (incremental)', first(summary.checkpointed_size, extra.incremental_size), fmt.bytes],
        ['Full checkpoint data size', summary.state_size, fmt.bytes],
        ['Processed (persisted) in-flight data', summary.processed_data, fmt.bytes],
      ].filter(([, v]) => v && typeof v === 'object');
      if (!rows.length) return empty('No completed checkpoint to summarise yet.');
      const cols = [['min', 'Minimum'], ['avg', 'Average'], ['max', 'Maximum'], ['p50', 'p50'], ['p90', 'p90'], ['p99', 'p99']];
      return h`<table class="table summary-table"><thead><tr><th></th>${cols.map(([, l]) => h`<th class="num">${l}</th>`)}</tr></thead><tbody>
        ${rows.map(([label, v, f]) => h`<tr><th>${label}</th>${cols.map(([k]) => h`<td class="num">${f(v[k])}</td>`)}</tr>`)}</tbody></table>`;
    }

    configTable(config) {
      if (!config) return empty('The checkpoint configuration is not available.');
      const c = obj(config);
      const ext = obj(c.externalization);
      const ms = (v) => (isNum(v) && v >= 9.2e18 ? 'none' : fmt.duration(v));
      const known = [
        ['Checkpointing mode', c.mode ? String(c.mode).replace(/_/g, ' ') : DASH],
        ['Checkpoint interval', isNum(c.interval) && c.interval >= 9.2e18 ? 'off' : ms(c.interval)],
        ['Checkpoint timeout', ms(c.timeout)],
        ['Minimum pause between checkpoints', ms(c.min_pause)],
        ['Maximum concurrent checkpoints', first(c.max_concurrent, DASH)],
        ['Persist checkpoints externally', ext.enabled === undefined ? DASH : ext.enabled ? `enabled (${ext.delete_on_cancellation ? 'deleted' : 'retained'} on cancellation)` : 'disabled'],
        ['State backend', first(c.state_backend, DASH)],
        ['Checkpoint storage', first(c.checkpoint_storage, DASH)],
        ['Unaligned checkpoints', c.unaligned_checkpoints === undefined ? DASH : c.unaligned_checkpoints ? 'enabled' : 'disabled'],
        ['Tolerable failed checkpoints', first(c.tolerable_failed_checkpoints, DASH)],
      ];
      const shown = new Set(['mode', 'interval', 'timeout', 'min_pause', 'max_concurrent', 'externalization', 'state_backend', 'checkpoint_storage', 'unaligned_checkpoints', 'tolerable_failed_checkpoints']);
      const rest = Object.keys(c).filter((k) => !shown.has(k)).sort().map((k) => [k, typeof c[k] === 'object' && c[k] !== null ? JSON.stringify(c[k]) : String(c[k])]);
      return h`<table class="table config-table"><tbody>${[...known, ...rest].map(([k, v]) => h`<tr><th>${k}</th><td>${v}</td></tr>`)}</tbody></table>`;
    }

    // -- the Exceptions tab -------------------------------------------------------------------

    renderExceptions(details, data) {
      const fp = obj(details.flowpoint);
      const ex = obj(data);
      const entries = arr(obj(ex.exceptionHistory).entries).filter((e) => e && typeof e === 'object');
      const card = (label, value, cls) => h`<div class="card ${cls}"><div class="card-value">${value}</div><div class="card-label">${label}</div></div>`;
      setHtml($('#ex-cards', this.root), [
        card('Restarts', isNum(fp.restarts) ? fp.restarts : DASH, fp.restarts ? 'card-failed' : 'card-total'),
        card('Exceptions', entries.length, 'card-total'),
        card('Last failure', entries.length ? fmt.ago(Math.max(...entries.map((e) => e.timestamp).filter(isNum))) : DASH, 'card-total card-text'),
      ]);
      const root = ex['root-exception'];
      const rootKey = `exroot:${this.jid}`;
      const rootLine = lastLine(root);
      setHtml($('#ex-root', this.root), root
        ? h`<div class="exception exception-root">
            <div class="exception-head"><span class="exception-name">${rootLine.split(':')[0]}</span><span class="sub">${fmt.time(ex.timestamp, true)}</span></div>
            <div class="exception-message">${clip(rootLine, 600)}</div>
            ${kv([['User function', where(root, null)]])}
            <button class="link-btn" data-toggle="${rootKey}">${app.expanded.has(rootKey) ? 'Hide' : 'Show'} stack trace</button>
            ${app.expanded.has(rootKey) ? h`<pre class="trace">${root}</pre>` : ''}</div>`
        : empty(data ? 'No exception: the job has not failed or restarted.' : 'The exceptions are not available.'));
      if (!entries.length) {
        setHtml($('#ex-history', this.root), empty('No exception in the history.'));
        return;
      }
      setHtml($('#ex-history', this.root), [...entries].sort((a, b) => (b.timestamp || 0) - (a.timestamp || 0)).map((e, i) => {
        const key = `ex:${this.jid}:${e.timestamp}:${i}`;
        const open = app.expanded.has(key);
        const trace = String(e.stacktrace || '');
        const message = obj(e.flowpoint).message || lastLine(trace) || e.exceptionName || 'exception';
        const concurrent = arr(e.concurrentExceptions);
        const efp = obj(e.flowpoint);
        return h`<div class="exception" data-exception>
          <div class="exception-head">
            <span class="exception-name">${e.exceptionName || 'Exception'}</span>
            <span class="sub">${fmt.time(e.timestamp, true)}</span>
          </div>
          <div class="exception-message">${clip(message, 400)}</div>
          ${kv([
            ['Operator', efp.operator || e.taskName ? h`${efp.operator || e.taskName}${efp.uid ? h` <span class="sub">uid <span class="mono">${efp.uid}</span></span>` : ''}` : DASH],
            ['User function', where(trace, e)],
            ...(e.location && !codeLocation(e.location) ? [['Location', e.location]] : []),
            ...(Number(efp.repeatedOnSameRecord) > 1 ? [['Same record', `failed the same way on the same record ${Number(efp.repeatedOnSameRecord)} times in a row`]] : []),
            ...(typeof efp.restarted === 'boolean' ? [['Then', efp.restarted ? 'the job restarted from its last checkpoint' : 'the job failed']] : []),
            ...(arr(e.failureLabels).length || Object.keys(obj(e.failureLabels)).length ? [['Labels', JSON.stringify(e.failureLabels)]] : []),
            ...(concurrent.length ? [['Concurrent exceptions', String(concurrent.length)]] : []),
          ])}
          <button class="link-btn" data-toggle="${key}">${open ? 'Hide' : 'Show'} stack trace</button>
          ${open ? h`<pre class="trace">${trace}</pre>` : ''}
        </div>`;
      }));
    }
  }

  function fact(label, value) {
    return h`<div class="fact"><div class="fact-label">${label}</div><div class="fact-value">${value}</div></div>`;
  }

  /** A traceback's last line: the exception that ended it. */
  function lastLine(text) {
    const lines = String(text || '').split('\n').map((l) => l.trim()).filter(Boolean);
    return lines.length ? lines[lines.length - 1] : '';
  }

  function firstLine(text) {
    const lines = String(text || '').split('\n').map((l) => l.trim()).filter(Boolean);
    // a Python traceback ends with the exception: show that, not "Traceback (most recent call last):"
    if (lines.length && /^Traceback/.test(lines[0])) {
      for (let i = lines.length - 1; i >= 0; i--) if (!/^(File |\^|~)/.test(lines[i])) return lines[i];
    }
    return lines[0] || '';
  }

  /** Where the user's code failed: ``fn`` and ``at`` from flowpoint's message ("function X at
   * file:line", the function as the job defined it) or an explicit field, and ``frame``, the
   * innermost traceback frame outside flowpoint, pyspark and the standard library. A function
   * pickled by value runs as "<dynamic-code>" (cloudpickle drops its file, keeps its lines): its
   * frame gives the line, the message the file. */
  function userLocation(text, entry) {
    const fp = obj(entry && entry.flowpoint);
    // flowpoint's REST API puts the user function's file:line in Flink's "location"
    const located = entry && codeLocation(entry.location) ? entry.location : null;
    const explicit = first(fp['user-function'], fp.function, fp['user-location'], located);
    const t = `${String(text || '')}\n${String(fp.message || '')}`;
    const library = /[/\\](flowpoint|pyspark|py4j|site-packages|dist-packages|lib[/\\]python3[^/\\]*)[/\\]/;
    const frames = [...t.matchAll(/File "([^"]+)", line (\d+), in ([^\n]+)/g)]
      .map((m) => ({ file: m[1], line: m[2], name: m[3].trim() }))
      .filter((f) => !library.test(f.file) || /[/\\](tests|examples)[/\\]/.test(f.file));
    const fn = t.match(/function ([^\s(),]+) at ([^\s(),]+:\d+)/);
    const out = { fn: fn ? fn[1] : null, at: explicit ? String(explicit) : fn ? fn[2] : null, frame: frames.length ? frames[frames.length - 1] : null };
    return out.at || out.frame ? out : null;
  }

  /** A "file:line" of code (not a host:port, which Flink puts in an exception's location). */
  function codeLocation(v) {
    return typeof v === 'string' && /[/\\]|\.py:\d+/.test(v) && /:\d+$/.test(v);
  }

  function where(text, entry) {
    const loc = userLocation(text, entry);
    if (!loc) return DASH;
    const f = loc.frame;
    const real = f && !/^<.*>$/.test(f.file);
    if (!loc.at) return h`<code class="user-location">${f.file}:${f.line}</code> <span class="sub">in ${f.name}</span>`;
    const raised = f ? h` <span class="sub">raised ${real ? h`at <code>${f.file}:${f.line}</code>` : `at line ${f.line}`} in ${f.name}</span>` : '';
    return h`<code class="user-location">${loc.at}</code>${loc.fn ? h` <span class="sub">(${loc.fn})</span>` : ''}${raised}`;
  }

  // ---------------------------------------------------------------------------------------------
  // Actions: savepoint, stop with savepoint, cancel (each after a confirmation)

  function confirmDialog({ title, body, ok, danger, input }) {
    return new Promise((resolve) => {
      const modal = $('#modal');
      setHtml(modal, h`<div class="modal" role="dialog" aria-modal="true" aria-labelledby="modal-title">
        <h3 id="modal-title">${title}</h3><p>${body}</p>
        ${input ? h`<label class="field"><span>${input.label}</span><input type="text" id="modal-input" placeholder="${input.placeholder}" spellcheck="false"></label>` : ''}
        <div class="modal-actions"><button class="btn" data-modal="no">Go back</button>
        <button class="btn ${danger ? 'btn-danger' : 'btn-primary'}" data-modal="yes" id="modal-confirm">${ok}</button></div></div>`);
      modal.hidden = false;
      const done = (yes) => {
        const value = input ? $('#modal-input').value.trim() : '';
        modal.hidden = true;
        setHtml(modal, '');
        document.removeEventListener('keydown', onKey, true);
        resolve({ yes, value });
      };
      const onKey = (ev) => {
        if (ev.key === 'Escape') { ev.preventDefault(); done(false); }
        // Enter in the text field confirms; on a button it presses that button
        if (ev.key === 'Enter' && ev.target && ev.target.id === 'modal-input') { ev.preventDefault(); done(true); }
      };
      document.addEventListener('keydown', onKey, true);
      modal.onclick = (ev) => {
        const b = ev.target.closest('[data-modal]');
        if (b) done(b.dataset.modal === 'yes');
        else if (ev.target === modal) done(false);
      };
      ($('#modal-input') || $('#modal-confirm')).focus();
    });
  }

  function toast(text, kind = 'info') {
    const el = document.createElement('div');
    el.className = `toast toast-${kind}`;
    el.textContent = text;
    el.title = 'click to dismiss';
    el.addEventListener('click', () => el.remove());
    $('#toasts').appendChild(el);
    setTimeout(() => el.remove(), kind === 'error' ? 12000 : 7000);
  }

  function failureText(cause) {
    const c = obj(cause);
    const text = first(c['stack-trace'], c.message, c.class);
    return text ? firstLine(text) : JSON.stringify(cause);
  }

  async function runAction(kind) {
    const view = app.view;
    if (!(view instanceof JobView) || !view.details) return;
    const jid = view.jid;
    const name = view.details.name || jid;
    const texts = {
      savepoint: { title: 'Trigger a savepoint', body: `Write a savepoint of "${name}" while it keeps running.`, ok: 'Trigger savepoint' },
      stop: { title: 'Stop with savepoint', body: `Write a savepoint of "${name}", then stop the job. It can be started again from the savepoint (flowpoint run -s <path>).`, ok: 'Stop with savepoint', danger: true },
      cancel: { title: 'Cancel the job', body: `Cancel "${name}" now, without a savepoint. Its retained checkpoints stay (flowpoint run --resume).`, ok: 'Cancel job', danger: true },
    }[kind];
    const input = kind === 'cancel' ? null : { label: 'Target directory (optional)', placeholder: "empty: the job's state.savepoints.dir" };
    const answer = await confirmDialog({ ...texts, input });
    if (!answer.yes) return;
    const list = app.ops.get(jid) || [];
    app.ops.set(jid, list);
    const op = { kind, status: 'IN_PROGRESS', at: Date.now() };
    list.push(op);
    rerender();
    try {
      if (kind === 'cancel') {
        await api(`${jobPath(jid)}?mode=cancel`, { method: 'PATCH' });
        op.status = 'COMPLETED';
        toast(`Cancelling "${name}".`);
      } else {
        const body = kind === 'stop' ? { drain: false } : { 'cancel-job': false };
        if (answer.value) body['target-directory'] = answer.value;
        const started = await api(jobPath(jid, kind === 'stop' ? '/stop' : '/savepoints'), { method: 'POST', body });
        op.location = started.location || (await pollSavepoint(jid, started['request-id']));
        op.status = 'COMPLETED';
        op.done = Date.now();
        toast(`${kind === 'stop' ? 'Stopped with savepoint' : 'Savepoint written'}: ${op.location}`, 'success');
      }
    } catch (e) {
      op.status = 'FAILED';
      op.error = e instanceof ApiError ? e.messages.join('; ') : String(e.message || e);
      toast(op.error, 'error');
    }
    rerender();
  }

  /** Poll a savepoint (or stop) operation until it completes; its location, or throws. */
  async function pollSavepoint(jid, requestId) {
    if (!requestId) throw new Error('the server answered without a request id');
    const deadline = Date.now() + 30 * 60 * 1000;
    for (let wait = 300; Date.now() < deadline; wait = Math.min(2000, wait * 1.5)) {
      await new Promise((r) => setTimeout(r, wait));
      const r = await api(jobPath(jid, `/savepoints/${encodeURIComponent(requestId)}`));
      if (String(obj(r.status).id) !== 'COMPLETED') continue;
      const operation = obj(r.operation);
      if (operation['failure-cause']) throw new Error(failureText(operation['failure-cause']));
      return operation.location || null;
    }
    throw new Error('the savepoint did not complete within 30 minutes');
  }

  /** Redraw the current view from what it has (after a click), then poll soon. */
  function rerender() {
    const view = app.view;
    if (view instanceof JobView) {
      view.renderOps();
      if (view.details) view.renderHead(view.details);
    }
    app.generation++;
    clearTimeout(app.timer);
    tick(app.generation);
  }

  // ---------------------------------------------------------------------------------------------
  // Start

  document.addEventListener('click', (ev) => {
    const action = ev.target.closest('[data-action]');
    if (action && !action.disabled) {
      ev.preventDefault();
      runAction(action.dataset.action);
      return;
    }
    const dismiss = ev.target.closest('[data-dismiss-op]');
    if (dismiss && app.view instanceof JobView) {
      const op = (app.ops.get(app.view.jid) || [])[Number(dismiss.dataset.dismissOp)];
      if (op) op.dismissed = true;
      app.view.renderOps();
      return;
    }
    const vertex = ev.target.closest('[data-vertex-id], [data-vertex]');
    if (vertex && app.view instanceof JobView) {
      const id = vertex.dataset.vertexId || vertex.dataset.vertex;
      const jid = app.view.jid;
      if (app.vertex.get(jid) === id) app.vertex.delete(jid); else app.vertex.set(jid, id);
      const last = app.view.last;
      if (last) app.view.renderOverview(last.details, last.throughput, last.epochs, null, null);
      rerender();
      return;
    }
    const toggle = ev.target.closest('[data-toggle]');
    if (toggle && !ev.target.closest('a')) {
      const key = toggle.dataset.toggle;
      if (app.expanded.has(key)) app.expanded.delete(key); else app.expanded.add(key);
      rerender();
      return;
    }
    const row = ev.target.closest('tr[data-href]');
    if (row && !ev.target.closest('a') && !window.getSelection().toString()) location.hash = row.dataset.href;
  });

  window.addEventListener('hashchange', navigate);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) rerender(); });

  async function start() {
    try {
      app.config = await api('/config');
    } catch (e) {
      app.config = {};
      setBanner(e);
    }
    const ms = Number(app.config['refresh-interval']);
    app.refreshMs = Number.isFinite(ms) && ms >= 250 ? Math.min(ms, 60000) : 2000;
    const version = first(app.config['flowpoint-version'], '');
    setHtml($('#side-foot'), h`${version ? h`<div>flowpoint ${version}</div>` : ''}${app.config['flink-version'] ? h`<div>Flink API ${app.config['flink-version']}</div>` : ''}<div>refresh ${fmt.duration(app.refreshMs)}</div>`);
    if (!location.hash || location.hash === '#' || location.hash === '#/') history.replaceState(null, '', '#/overview');
    navigate();
  }

  start();

  // for the browser tests and the curious: the pure helpers
  window.flowpointDashboard = { h, esc, fmt, safeUrl, userLocation, chainOrder };
})();
