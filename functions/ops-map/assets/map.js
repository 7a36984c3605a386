// The live operations map: reads the server-sent events of ./stream with fetch() (so the ops token
// travels in the Authorization header, which EventSource cannot set), draws each snapshot over the
// offline backdrop and shows its counts. See the package comment of functions/ops-map.
(() => {
  'use strict';
  const base = location.pathname.endsWith('/') ? location.pathname : location.pathname + '/';
  const TOKEN_KEY = 'flagdown-ops-token';
  const COLOURS = { available: '#3fb950', offered: '#d29922', to_pickup: '#58a6ff', on_trip: '#bc8cff',
    REQUESTED: '#f85149', ACCEPTED: '#58a6ff', IN_PROGRESS: '#bc8cff' };
  const $ = (s) => document.querySelector(s);
  const canvas = $('#map');
  const ctx = canvas.getContext('2d');
  const backdrop = new Image();
  let bounds = null;     // backdrop.json: south, west, north, east (degrees), width, height (pixels)
  let snap = null;       // the last snapshot applied
  let applied = 0;       // how many snapshots this page applied
  let selected = null;   // ride id whose timeline is shown
  const view = { zoom: 1, panX: 0, panY: 0 };

  // --- token handover: fragment or form → sessionStorage → Authorization header ---
  function takeToken() {
    const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (m) {
      sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
      history.replaceState(null, '', location.pathname + location.search);
    }
    return sessionStorage.getItem(TOKEN_KEY);
  }
  function askToken(why) {
    sessionStorage.removeItem(TOKEN_KEY);
    $('#login-error').textContent = why || '';
    $('#login').hidden = false;
    setConn('error', why || 'no token');
  }
  $('#login').addEventListener('submit', (e) => {
    e.preventDefault();
    const t = $('#token').value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    $('#token').value = '';
    $('#login').hidden = true;
    run();
  });
  function authed(path) {
    return fetch(base + path, { headers: { Authorization: 'Bearer ' + sessionStorage.getItem(TOKEN_KEY) }, cache: 'no-store' });
  }
  function setConn(state, text) {
    const c = $('#conn');
    c.dataset.state = state;
    c.textContent = text;
  }

  // --- the stream ---
  let running = false;
  async function run() {
    if (running) return;
    running = true;
    for (;;) {
      if (!sessionStorage.getItem(TOKEN_KEY)) { running = false; askToken(); return; }
      try {
        const res = await authed('stream');
        if (res.status === 401 || res.status === 403) {
          let msg = 'token refused (HTTP ' + res.status + ')';
          try { msg = (await res.json()).error.message; } catch (_) { /* keep the status */ }
          running = false;
          askToken(msg);
          return;
        }
        if (!res.ok || !res.body) throw new Error('HTTP ' + res.status);
        setConn('live', 'live');
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            onEvent(buf.slice(0, i));
            buf = buf.slice(i + 2);
          }
        }
        setConn('idle', 'reconnecting…');
      } catch (e) {
        setConn('error', 'reconnecting (' + e.message + ')');
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  function onEvent(block) {
    let type = 'message';
    const data = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let v = c < 0 ? '' : line.slice(c + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (field === 'event') type = v;
      else if (field === 'data') data.push(v);
    }
    if (type === 'snapshot' && data.length) apply(JSON.parse(data.join('\n')));
    else if (type === 'unavailable') setConn('error', 'stores unavailable, retrying');
  }

  // --- applying a snapshot ---
  function apply(s) {
    snap = s;
    applied++;
    for (const el of document.querySelectorAll('[data-count]')) el.textContent = String(s.counts[el.dataset.count]);
    const m = s.metrics;
    $('#window').textContent = String(Math.round(m.window_s / 60));
    $('[data-metric=requested]').textContent = String(m.requested);
    $('[data-metric=matched]').textContent = String(m.matched);
    $('[data-metric=unmatched]').textContent = String(m.unmatched);
    $('[data-metric=match_rate]').textContent = m.requested ? (100 * m.match_rate).toFixed(1) + ' %' : '–';
    $('[data-metric=wait_p50_s]').textContent = m.matched ? m.wait_p50_s.toFixed(1) + ' s' : '–';
    $('#capped').hidden = !(s.drivers_capped || s.rides_capped || s.offers_capped);
    $('#seq').textContent = String(s.seq);
    $('#at').textContent = new Date(s.at).toLocaleTimeString();
    document.body.dataset.seq = String(s.seq);
    document.body.dataset.applied = String(applied);
    draw();
  }

  // --- drawing ---
  function fit() {
    const r = canvas.getBoundingClientRect();
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.max(1, Math.round(r.width * dpr));
    canvas.height = Math.max(1, Math.round(r.height * dpr));
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return r;
  }
  function frame() {
    const r = canvas.getBoundingClientRect();
    const s = Math.min(r.width / bounds.width, r.height / bounds.height) * view.zoom;
    return { s, x0: (r.width - bounds.width * s) / 2 + view.panX, y0: (r.height - bounds.height * s) / 2 + view.panY };
  }
  function project(f, p) {
    return [f.x0 + (p.lng - bounds.west) / (bounds.east - bounds.west) * bounds.width * f.s,
      f.y0 + (bounds.north - p.lat) / (bounds.north - bounds.south) * bounds.height * f.s];
  }
  function draw() {
    const r = fit();
    ctx.fillStyle = '#0d1117';
    ctx.fillRect(0, 0, r.width, r.height);
    if (!bounds) return;
    const f = frame();
    if (backdrop.complete && backdrop.naturalWidth) {
      // Added onto the background: black (no trips) leaves it as it is, so no edge shows.
      ctx.globalCompositeOperation = 'lighter';
      ctx.globalAlpha = 0.5;
      ctx.drawImage(backdrop, f.x0, f.y0, bounds.width * f.s, bounds.height * f.s);
      ctx.globalAlpha = 1;
      ctx.globalCompositeOperation = 'source-over';
    }
    if (!snap) return;
    ctx.lineWidth = 1;
    ctx.strokeStyle = 'rgba(210,153,34,0.8)';
    ctx.beginPath();
    for (const o of snap.offers) {
      if (!o.driver) continue;
      const [x1, y1] = project(f, o.driver);
      const [x2, y2] = project(f, o.pickup);
      ctx.moveTo(x1, y1);
      ctx.lineTo(x2, y2);
    }
    ctx.stroke();
    let rides = 0;
    for (const ride of snap.rides) {
      const [x, y] = project(f, ride.status === 'IN_PROGRESS' ? ride.dropoff : ride.pickup);
      ctx.strokeStyle = COLOURS[ride.status];
      ctx.lineWidth = ride.id === selected ? 3 : 1.5;
      ctx.beginPath();
      ctx.arc(x, y, ride.id === selected ? 7 : 4, 0, 2 * Math.PI);
      ctx.stroke();
      rides++;
    }
    let drivers = 0;
    for (const d of snap.drivers) {
      const [x, y] = project(f, d);
      ctx.fillStyle = COLOURS[d.state];
      ctx.fillRect(x - 1.5, y - 1.5, 3, 3);
      drivers++;
    }
    const sel = selected && snap.rides.find((x) => x.id === selected);
    if (sel) {
      const [x1, y1] = project(f, sel.pickup);
      const [x2, y2] = project(f, sel.dropoff);
      ctx.setLineDash([4, 3]);
      ctx.strokeStyle = '#e6edf3';
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      ctx.moveTo(x1, y1);
      ctx.lineTo(x2, y2);
      ctx.stroke();
      ctx.setLineDash([]);
    }
    canvas.dataset.drawnDrivers = String(drivers);
    canvas.dataset.drawnRides = String(rides);
  }

  // --- zoom, pan, click ---
  let drag = null;
  canvas.addEventListener('wheel', (e) => {
    e.preventDefault();
    const r = canvas.getBoundingClientRect();
    const k = e.deltaY < 0 ? 1.25 : 0.8;
    const cx = e.clientX - r.left - r.width / 2, cy = e.clientY - r.top - r.height / 2;
    view.panX = cx - (cx - view.panX) * k;
    view.panY = cy - (cy - view.panY) * k;
    view.zoom *= k;
    draw();
  }, { passive: false });
  canvas.addEventListener('mousedown', (e) => { drag = { x: e.clientX, y: e.clientY, moved: false }; });
  window.addEventListener('mousemove', (e) => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 2) drag.moved = true;
    if (!drag.moved) return;
    view.panX += dx;
    view.panY += dy;
    drag.x = e.clientX;
    drag.y = e.clientY;
    draw();
  });
  window.addEventListener('mouseup', (e) => {
    const d = drag;
    drag = null;
    if (d && !d.moved && e.target === canvas) pick(e);
  });
  function pick(e) {
    if (!snap || !bounds) return;
    const r = canvas.getBoundingClientRect();
    const f = frame();
    let best = null, bestD = 10;
    for (const ride of snap.rides) {
      for (const p of [ride.pickup, ride.status === 'IN_PROGRESS' ? ride.dropoff : null, ride.driver]) {
        if (!p) continue;
        const [x, y] = project(f, p);
        const dist = Math.hypot(x - (e.clientX - r.left), y - (e.clientY - r.top));
        if (dist < bestD) { best = ride; bestD = dist; }
      }
    }
    if (best) showTimeline(best.id);
  }
  async function showTimeline(id) {
    selected = id;
    draw();
    const box = $('#timeline');
    box.hidden = false;
    $('#tl-id').textContent = id;
    $('#tl-summary').textContent = 'loading…';
    $('#tl-events').replaceChildren();
    try {
      const res = await authed('rides/' + encodeURIComponent(id));
      const body = await res.json();
      if (!res.ok) throw new Error(body.error ? body.error.message : 'HTTP ' + res.status);
      const r = body.ride;
      $('#tl-summary').textContent = r.status + (r.driver_id ? ' · driver ' + r.driver_id : '') + ' · rider ' + r.rider_id +
        ' · ' + (r.est_distance_m / 1000).toFixed(1) + ' km, $' + (r.fare_estimate_cents / 100).toFixed(2) +
        ' · ' + r.offers + ' offer(s), ' + r.match_attempts + ' attempt(s)' + (r.match_note ? ' · ' + r.match_note : '');
      const items = body.events.map((ev) => {
        const li = document.createElement('li');
        const t = document.createElement('time');
        t.dateTime = ev.at;
        t.textContent = new Date(ev.at).toLocaleTimeString() + ' ';
        li.append(t, ev.kind.replace(/_/g, ' ') + (ev.driver_id ? ' · ' + ev.driver_id : '') +
          (ev.distance_m ? ' · ' + Math.round(ev.distance_m) + ' m' : '') + (ev.detail ? ' · ' + ev.detail : ''));
        return li;
      });
      $('#tl-events').replaceChildren(...items);
    } catch (e) {
      $('#tl-summary').textContent = 'timeline unavailable: ' + e.message;
    }
  }

  // For the browser test and the console: where a position is drawn, in client pixels.
  window.flagdownMap = {
    // rides: the rides of the applied snapshot where they are drawn (id, status, x, y).
    rides() {
      if (!bounds || !snap) return [];
      const r = canvas.getBoundingClientRect();
      const f = frame();
      return snap.rides.map((ride) => {
        const [x, y] = project(f, ride.status === 'IN_PROGRESS' ? ride.dropoff : ride.pickup);
        return { id: ride.id, status: ride.status, x: r.left + x, y: r.top + y };
      });
    },
  };

  window.addEventListener('resize', draw);
  backdrop.addEventListener('load', draw);
  fetch(base + 'backdrop.json').then((r) => r.json()).then((b) => {
    bounds = b;
    backdrop.src = base + 'backdrop.png';
    draw();
  });
  takeToken();
  draw();
  run();
})();
