// muster dashboard. Hand-written, no build step, no dependencies.
//
// Data flow: the page loads the model's recent events, opens the
// server-sent-event stream (cookie-authenticated, same origin) and, once it
// is open, fetches the full status. After that it never polls: a "machines"
// message names the machines that changed and only those are refetched
// (GET …/status?machines=1,2,3), batched and throttled to at most one
// request per FETCH_GAP_MS; log events go to the feed.
//
// Scale: all machines live in one Map; counts per state and per zone are
// recomputed in one pass per render (cheap at 10,000). Renders are batched
// to at most one per RENDER_GAP_MS, only columns whose machines changed are
// rebuilt, and a column draws at most TILE_CAP tiles — problems first
// (provisioning error, agent error, down, allocating, pending), then by id —
// and sums up the rest in text. Any machine can be opened by id.
'use strict';

(function () {
  const FETCH_GAP_MS = 500;     // at most ~2 status requests per second
  const RENDER_GAP_MS = 200;
  const BATCH_IDS = 1000;       // ids per filtered status request (the server's limit)
  const FULL_REFRESH_OVER = 3000; // more pending ids than this: one full status
  const TILE_CAP = 300;         // tiles drawn per zone column
  const FEED_CAP = 200;         // events kept in the feed
  const NO_ZONE = '';           // column of machines without an instance yet

  // States in display order, each with a text label and an icon so that
  // colour is never the only cue.
  const STATES = [
    { key: 'pending', label: 'pending', icon: '○' },
    { key: 'allocating', label: 'allocating', icon: '◐' },
    { key: 'running', label: 'running', icon: '▶' },
    { key: 'started', label: 'started', icon: '✓' },
    { key: 'down', label: 'down', icon: '▼' },
    { key: 'error', label: 'agent error', icon: '!' },
    { key: 'perror', label: 'provisioning error', icon: '✕' },
  ];
  const STATE = Object.fromEntries(STATES.map((s) => [s.key, s]));
  // Problems first when a column has more machines than tiles.
  const PRIORITY = { perror: 0, error: 1, down: 2, allocating: 3, pending: 4, running: 5, started: 6 };

  function stateOf(m) {
    const is = m['instance-status'];
    if (is === 'provisioning error') return 'perror';
    if (m.status === 'down') return 'down';
    if (m.status === 'error') return 'error';
    if (m.status === 'started') return 'started';
    if (is === 'running') return 'running';
    if (is === 'allocating') return 'allocating';
    return 'pending';
  }

  const $ = (id) => document.getElementById(id);
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = v;
        else e.setAttribute(k, v === true ? '' : v);
      }
    }
    for (const k of kids) {
      if (k === null || k === undefined) continue;
      e.append(k instanceof Node ? k : String(k));
    }
    return e;
  }
  function idCmp(a, b) {
    return (a.length - b.length) || (a < b ? -1 : a > b ? 1 : 0);
  }

  const S = {
    gen: 0, // bumped when the model changes; stale answers are dropped
    model: '',
    machines: new Map(), // id → MachineStatus
    col: new Map(), // id → column key it was drawn in
    zones: {}, // name → {available}
    harvest: '', provider: '', perror: '',
    es: null, lastSeq: 0,
    pending: new Set(), wantFull: false, wantMeta: false,
    fetching: false, lastFetch: 0, fetchTimer: 0,
    dirtyCols: new Set(), allDirty: true, renderTimer: 0, lastRender: 0,
    feed: [], feedNew: [],
    openId: '',
  };

  // ---- API ----------------------------------------------------------------
  function mpath(rest) {
    return '/v1/models/' + encodeURIComponent(S.model) + '/' + rest;
  }
  async function api(path) {
    const r = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
    if (r.status === 401) {
      // Session over: the page reloads into the sign-in page.
      location.reload();
      throw new Error('signed out');
    }
    if (!r.ok) {
      let msg = r.status + ' ' + r.statusText;
      try { msg = (await r.json()).error.message; } catch (_) { /* keep */ }
      throw new Error(msg);
    }
    return r.json();
  }
  function problem(msg) {
    const b = $('problem');
    b.textContent = msg || '';
    b.hidden = !msg;
  }
  function setConn(text, cls) {
    const c = $('conn');
    c.textContent = text;
    c.className = 'conn ' + (cls || '');
  }

  // ---- model selection and the stream ------------------------------------
  async function start() {
    $('model').addEventListener('change', (e) => selectModel(e.target.value));
    $('find').addEventListener('submit', (e) => {
      e.preventDefault();
      const id = $('find-id').value.trim();
      if (/^[0-9]+$/.test(id)) openDetails(id);
    });
    $('d-close').addEventListener('click', closeDetails);
    $('details').addEventListener('close', () => { S.openId = ''; });
    $('zones').addEventListener('click', (e) => {
      const t = e.target.closest('[data-id]');
      if (t) openDetails(t.dataset.id);
    });
    $('events').addEventListener('click', (e) => {
      const t = e.target.closest('[data-id]');
      if (t) openDetails(t.dataset.id);
    });
    let models;
    try {
      models = await api('/v1/models');
    } catch (err) {
      problem('Cannot list models: ' + err.message);
      return;
    }
    const sel = $('model');
    for (const m of models) sel.append(el('option', { value: m.name, text: m.name }));
    const want = new URLSearchParams(location.hash.slice(1)).get('model');
    const names = models.map((m) => m.name);
    const name = names.includes(want) ? want : names.includes('default') ? 'default' : names[0];
    if (!name) {
      problem('This controller has no models.');
      return;
    }
    sel.value = name;
    selectModel(name);
  }

  async function selectModel(name) {
    const gen = ++S.gen;
    if (S.es) S.es.close();
    clearTimeout(S.fetchTimer);
    Object.assign(S, {
      model: name, machines: new Map(), col: new Map(), zones: {}, harvest: '', provider: '', perror: '',
      es: null, lastSeq: 0, pending: new Set(), wantFull: false, wantMeta: false, fetching: false,
      fetchTimer: 0, allDirty: true, dirtyCols: new Set(), feed: [], feedNew: [],
    });
    $('zones').replaceChildren();
    $('events').replaceChildren();
    history.replaceState(null, '', '#model=' + encodeURIComponent(name));
    problem('');
    setConn('connecting…');
    scheduleRender();
    try {
      // The feed starts with the latest events; the stream resumes after them.
      const evs = await api(mpath('events?limit=100'));
      if (gen !== S.gen) return;
      for (const e of evs) addEvent(e);
    } catch (err) {
      if (gen !== S.gen) return;
      problem('Cannot read events: ' + err.message);
    }
    connect(gen);
  }

  function connect(gen) {
    const es = new EventSource(mpath('events/stream?after=' + S.lastSeq), { withCredentials: true });
    S.es = es;
    es.onopen = () => {
      if (gen !== S.gen) return;
      setConn('live', 'live');
      // Everything may have changed while we were not listening.
      S.wantFull = true;
      scheduleFetch();
    };
    es.onmessage = (m) => {
      if (gen !== S.gen) return;
      let e;
      try { e = JSON.parse(m.data); } catch (_) { return; }
      addEvent(e);
      if (!e.machine) { S.wantMeta = true; scheduleFetch(); } // model-level: harvest mode, config
    };
    es.addEventListener('machines', (m) => {
      if (gen !== S.gen) return;
      let ids = [];
      try { ids = JSON.parse(m.data).machines || []; } catch (_) { return; }
      for (const id of ids) S.pending.add(String(id));
      scheduleFetch();
    });
    es.onerror = () => {
      if (gen !== S.gen) return;
      if (es.readyState === EventSource.CONNECTING) {
        setConn('reconnecting…', 'down');
        return;
      }
      // Closed for good (an error status): find out why, then start over.
      setConn('disconnected', 'down');
      es.close();
      api('/v1/models').then(() => {
        setTimeout(() => { if (gen === S.gen) connect(gen); }, 3000);
      }, (err) => problem('Connection lost: ' + err.message));
    };
  }

  // ---- fetching changed machines (batched, throttled) ---------------------
  function scheduleFetch() {
    if (S.fetching || S.fetchTimer) return;
    const wait = Math.max(0, S.lastFetch + FETCH_GAP_MS - Date.now());
    S.fetchTimer = setTimeout(flushFetch, wait);
  }

  async function flushFetch() {
    S.fetchTimer = 0;
    const gen = S.gen;
    if (!S.wantFull && !S.wantMeta && S.pending.size === 0) return;
    S.fetching = true;
    S.lastFetch = Date.now();
    try {
      if (S.wantFull || S.pending.size > FULL_REFRESH_OVER) {
        S.wantFull = false; S.wantMeta = false;
        S.pending.clear();
        const st = await api(mpath('status'));
        if (gen !== S.gen) return;
        applyStatus(st, null);
        if (S.openId) refreshDetails();
      } else {
        const ids = [];
        for (const id of S.pending) {
          ids.push(id);
          if (ids.length >= BATCH_IDS) break;
        }
        for (const id of ids) S.pending.delete(id);
        S.wantMeta = false;
        const st = await api(mpath('status?machines=' + ids.join(',')));
        if (gen !== S.gen) return;
        applyStatus(st, ids);
        if (S.openId && ids.includes(S.openId)) refreshDetails();
      }
      problem('');
    } catch (err) {
      if (gen !== S.gen) return;
      problem('Cannot read status: ' + err.message);
      S.wantFull = true;
      S.lastFetch = Date.now() + 5000; // back off before trying again
    } finally {
      if (gen === S.gen) {
        S.fetching = false;
        if (S.wantFull || S.wantMeta || S.pending.size) scheduleFetch();
      }
    }
  }

  function colOf(m) {
    return m.zone || NO_ZONE;
  }

  // applyStatus merges a status answer: ids null means the full status,
  // else only those machines (an id missing from the answer was removed).
  function applyStatus(st, ids) {
    S.provider = st.provider;
    S.harvest = st['harvest-mode'];
    S.perror = st['provisioner-error'] || '';
    S.remediation = st.remediation || [];
    const wasReplacing = S.replacing || {};
    S.replacing = st.replacing || {};
    for (const id of new Set([...Object.keys(wasReplacing), ...Object.keys(S.replacing)])) {
      if (wasReplacing[id] !== S.replacing[id] && S.col.has(id)) S.dirtyCols.add(S.col.get(id));
    }
    for (const [name, z] of Object.entries(st.zones || {})) {
      if (!S.zones[name] || S.zones[name].available !== z.available) S.allDirty = true;
      S.zones[name] = { available: z.available };
    }
    const touch = (id, m) => {
      const old = S.col.get(id);
      if (old !== undefined) S.dirtyCols.add(old);
      if (m) {
        S.machines.set(id, m);
        const c = colOf(m);
        S.col.set(id, c);
        S.dirtyCols.add(c);
      } else {
        S.machines.delete(id);
        S.col.delete(id);
      }
    };
    if (ids === null) {
      const seen = st.machines || {};
      for (const id of [...S.machines.keys()]) if (!(id in seen)) touch(id, null);
      for (const [id, m] of Object.entries(seen)) touch(id, m);
      S.allDirty = true;
    } else {
      for (const id of ids) touch(id, (st.machines || {})[id] || null);
    }
    scheduleRender();
  }

  // ---- events -------------------------------------------------------------
  function addEvent(e) {
    if (e.seq <= S.lastSeq) return;
    S.lastSeq = e.seq;
    S.feedNew.push(e);
    scheduleRender();
  }

  function eventItem(e) {
    const t = new Date(e.time);
    const bad = /error|fail|down/i.test(e.kind) || /error/i.test(e.message);
    return el('li', null,
      el('time', { datetime: e.time, text: isNaN(t) ? '' : t.toLocaleTimeString() }),
      el('span', { class: 'kind' + (bad ? ' bad' : ''), text: e.kind }),
      e.machine ? el('button', { type: 'button', class: 'mid', 'data-id': e.machine, 'aria-label': 'machine ' + e.machine, text: '#' + e.machine }) : null,
      el('span', { class: 'msg', text: e.message }));
  }

  // ---- rendering ----------------------------------------------------------
  function scheduleRender() {
    if (S.renderTimer) return;
    const wait = Math.max(0, S.lastRender + RENDER_GAP_MS - Date.now());
    S.renderTimer = setTimeout(() => {
      S.renderTimer = 0;
      requestAnimationFrame(render);
    }, wait);
  }

  function render() {
    S.lastRender = Date.now();
    // One pass: counts overall and per column, members per column.
    const total = Object.fromEntries(STATES.map((s) => [s.key, 0]));
    const cols = new Map();
    for (const z of Object.keys(S.zones)) cols.set(z, []);
    let alive = 0;
    for (const [id, m] of S.machines) {
      const st = stateOf(m);
      total[st]++;
      if (m.life === 'alive') alive++;
      const c = colOf(m);
      if (!cols.has(c)) cols.set(c, []);
      cols.get(c).push([id, m, st]);
    }
    const n = S.machines.size;
    const up = total.running + total.started;

    $('f-model').textContent = S.model || '–';
    $('f-provider').textContent = S.provider || '–';
    $('f-harvest').textContent = S.harvest || '–';
    $('f-machines').textContent = String(n);
    const p = $('progress');
    p.max = Math.max(n, 1);
    p.value = up;
    const pct = n ? Math.floor((100 * up) / n) : 100;
    $('progress-text').textContent = n === 0 ? 'No machines yet'
      : up === n ? `All ${n} machines running`
        : `${up} of ${n} machines running (${pct}%)`;
    const counts = $('counts');
    counts.replaceChildren(...STATES.map((s) => el('li', { class: 's-' + s.key, 'data-state': s.key },
      el('span', { class: 'ic', 'aria-hidden': 'true', text: s.icon }), ' ', s.label, el('b', { text: String(total[s.key]) }))));
    const pe = $('perror');
    pe.textContent = S.perror ? 'Provisioner error: ' + S.perror : '';
    pe.hidden = !S.perror;
    // Groups whose health remediation the breaker paused (R3).
    const rem = $('remediation');
    rem.textContent = (S.remediation || []).map((r) => `${r.group ? 'group ' + r.group : 'machines without a group'}: ` +
      `remediation paused: ${r.unhealthy} of ${r.total} unhealthy`).join(' · ');
    rem.hidden = !rem.textContent;

    renderColumns(cols);
    renderFeed();
    S.allDirty = false;
    S.dirtyCols.clear();
  }

  function columnOrder(cols) {
    const names = [...cols.keys()].filter((k) => k !== NO_ZONE).sort();
    return cols.has(NO_ZONE) && cols.get(NO_ZONE).length ? [NO_ZONE, ...names] : names;
  }

  function renderColumns(cols) {
    const box = $('zones');
    const order = columnOrder(cols);
    const existing = new Map([...box.children].map((c) => [c.dataset.zone, c]));
    const focusId = document.activeElement && document.activeElement.closest && document.activeElement.closest('.tile')
      ? document.activeElement.dataset.id : '';
    const frag = [];
    for (const name of order) {
      let c = existing.get(name);
      if (!c || S.allDirty || S.dirtyCols.has(name)) c = buildColumn(name, cols.get(name));
      frag.push(c);
    }
    // Replace only when something changed, to keep scroll positions.
    const same = frag.length === box.children.length && frag.every((c, i) => box.children[i] === c);
    if (!same) box.replaceChildren(...frag);
    if (focusId) {
      const t = box.querySelector('.tile[data-id="' + CSS.escape(focusId) + '"]');
      if (t && document.activeElement !== t) t.focus({ preventScroll: true });
    }
  }

  function buildColumn(name, members) {
    const z = S.zones[name];
    const title = name === NO_ZONE ? 'Not placed yet' : 'Zone ' + name;
    const per = {};
    for (const [, , st] of members) per[st] = (per[st] || 0) + 1;
    const old = $('zones').querySelector('.zone[data-zone="' + CSS.escape(name) + '"] .tiles');
    const scroll = old ? old.scrollTop : 0;

    const sorted = members.length > TILE_CAP
      ? members.slice().sort((a, b) => (PRIORITY[a[2]] - PRIORITY[b[2]]) || idCmp(a[0], b[0])).slice(0, TILE_CAP)
      : members;
    sorted.sort((a, b) => idCmp(a[0], b[0]));
    const tiles = el('div', { class: 'tiles' });
    for (const [id, m, st] of sorted) tiles.append(tile(id, m, st));
    tiles.scrollTop = scroll;

    const head = el('h3', null, title, el('span', { class: 'n', text: members.length + (members.length === 1 ? ' machine' : ' machines') }),
      z && !z.available ? el('span', { class: 'unavail', text: '⚠ unavailable' }) : null);
    const zc = el('p', { class: 'zc' });
    for (const s of STATES) {
      if (per[s.key]) zc.append(el('span', { 'data-state': s.key }, el('span', { class: 'ic t-' + s.key, 'aria-hidden': 'true', text: s.icon }), ' ' + per[s.key] + ' ' + s.label));
    }
    const col = el('section', { class: 'zone', 'data-zone': name, 'aria-label': title }, head, zc, tiles);
    if (members.length > sorted.length) {
      const hidden = {};
      const shown = new Set(sorted.map((x) => x[0]));
      for (const [id, , st] of members) if (!shown.has(id)) hidden[st] = (hidden[st] || 0) + 1;
      const parts = STATES.filter((s) => hidden[s.key]).map((s) => hidden[s.key] + ' ' + s.label);
      col.append(el('p', { class: 'more', text: `${members.length - sorted.length} more not drawn (${parts.join(', ')}); open any machine by id above.` }));
    }
    return col;
  }

  function tile(id, m, st) {
    const s = STATE[st];
    const life = m.life !== 'alive' ? m.life : '';
    const group = m.group || 'no group';
    const msg = m['instance-message'] || m['status-message'] || '';
    // A replacement in flight (R1–R5) says so on its tile, with its reason.
    const repl = (S.replacing || {})[id] || '';
    return el('button', {
      type: 'button', class: 'tile s-' + st, 'data-id': id, 'data-state': st,
      title: `machine ${id} · ${group} · ${s.label}${msg ? ' · ' + msg : ''}`,
      'aria-label': `machine ${id}, ${group}, ${s.label}${life ? ', ' + life : ''}`,
    },
    el('span', { class: 'tid', text: id }),
    el('span', { class: 'tgrp', text: group }),
    el('span', { class: 'tst' }, el('span', { class: 'ic', 'aria-hidden': 'true', text: s.icon }), ' ' + s.label),
    life ? el('span', { class: 'tlife', text: life }) : null,
    repl ? el('span', { class: 'trepl', text: '⟳ ' + repl }) : null);
  }

  function renderFeed() {
    if (!S.feedNew.length) return;
    const list = $('events');
    const items = S.feedNew.slice(-FEED_CAP).reverse().map(eventItem);
    S.feedNew = [];
    list.prepend(...items);
    while (list.children.length > FEED_CAP) list.lastElementChild.remove();
  }

  // ---- machine details ----------------------------------------------------
  function openDetails(id) {
    S.openId = id;
    const d = $('details');
    $('d-title').textContent = 'Machine ' + id;
    $('d-body').replaceChildren(el('p', { text: 'Loading…' }));
    if (!d.open) d.showModal();
    refreshDetails();
  }
  function closeDetails() {
    $('details').close();
  }

  async function refreshDetails() {
    const id = S.openId;
    const gen = S.gen;
    if (!id) return;
    let md;
    try {
      md = await api(mpath('machines/' + encodeURIComponent(id)));
    } catch (err) {
      if (S.openId === id && gen === S.gen) $('d-body').replaceChildren(el('p', { class: 'msg-bad', text: err.message }));
      return;
    }
    if (S.openId !== id || gen !== S.gen) return;
    $('d-body').replaceChildren(...detailsView(md));
  }

  function detailsView(md) {
    const m = md.machine;
    const st = stateOf({ status: m.status, 'instance-status': m['instance-status'] });
    const s = STATE[st];
    const inst = m.instance || {};
    const kv = el('dl', { class: 'kv' });
    const opt = (k, v) => { if (v) row(k, v); }; // only when set
    const row = (k, v, cls) => kv.append(el('dt', { text: k }), el('dd', cls ? { class: cls } : null, v === '' || v === undefined || v === null ? '–' : v));
    row('State', el('span', { class: 'badge s-' + st, 'data-state': st }, el('span', { class: 'ic', 'aria-hidden': 'true', text: s.icon }), ' ' + s.label));
    row('Life', m.life);
    row('Machine status', m.status + (m['status-message'] ? ' — ' + m['status-message'] : ''), m.status === 'error' || m.status === 'down' ? 'msg-bad' : '');
    row('Instance status', (m['instance-status'] || 'none yet') + (m['instance-message'] ? ' — ' + m['instance-message'] : ''),
      m['instance-status'] === 'provisioning error' ? 'msg-bad' : '');
    row('Instance id', inst['instance-id'] || '');
    row('Zone', inst.zone || (inst.hardware || {})['availability-zone'] || '');
    row('Group', m.group);
    row('Constraints', m.constraints);
    row('Base', m.base);
    opt('Placement', m.placement);
    row('Hardware', m.hardware);
    row('Addresses', (inst.addresses || []).join(', '));
    opt('Storage', (m.storage || []).join('; '));
    opt('Volumes', (m.volumes || []).map((v) => (v.name ? v.name + ' ' : '') + (v['volume-id'] || '')).join(', '));
    row('Keep instance', m['keep-instance'] ? 'yes' : 'no');
    row('Automatic retries', String(m['auto-retries']));
    opt('Next retry', m['next-retry'] ? new Date(m['next-retry']).toLocaleString() : '');
    row('Created', new Date(m.created).toLocaleString());
    row('Updated', new Date(m.updated).toLocaleString());

    const out = [kv, el('h3', { text: 'Events' })];
    if (!md.events.length) {
      out.push(el('p', { text: 'No events yet.' }));
    } else {
      const tb = el('tbody');
      for (const e of md.events.slice().reverse()) {
        tb.append(el('tr', null,
          el('td', null, el('time', { datetime: e.time, text: new Date(e.time).toLocaleTimeString() })),
          el('td', { text: e.kind }), el('td', { text: e.actor }), el('td', { text: e.message })));
      }
      out.push(el('table', { class: 'timeline' },
        el('thead', null, el('tr', null, el('th', { text: 'Time' }), el('th', { text: 'Kind' }), el('th', { text: 'By' }), el('th', { text: 'Message' }))), tb));
    }
    return out;
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
