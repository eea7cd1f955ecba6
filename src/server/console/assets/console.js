// The steward console's only script (hand-written, no build step): keeps the page live through
// the server-sent events of /events (src/server/console/live.rs) and counts TTLs down between
// updates. Without it every page is still whole, as of when it was loaded.
(() => {
  'use strict';
  const body = document.body;
  const main = document.getElementById('main');
  const status = document.getElementById('live');
  // The node's cluster time (ms) when it was last told, and when (this page's clock).
  let told = Number(body.dataset.now);
  let toldAt = performance.now();
  const now = () => told + (performance.now() - toldAt);

  // As the server writes durations (src/server/console.rs, duration).
  const duration = (ms) => {
    ms = Math.max(0, Math.floor(ms));
    const s = Math.floor(ms / 1000);
    if (s === 0) return `${ms}ms`;
    if (s < 60) return `${s}.${Math.floor((ms % 1000) / 100)}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m${s % 60}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`;
    return `${Math.floor(s / 86400)}d${Math.floor((s % 86400) / 3600)}h`;
  };

  const tick = () => {
    const t = now();
    for (const el of main.querySelectorAll('span.ttl[data-until]')) {
      const left = Number(el.dataset.until) - t;
      el.textContent = duration(left);
      el.classList.toggle('due', left <= 0);
    }
    for (const el of main.querySelectorAll('span.since[data-since]')) {
      el.textContent = duration(t - Number(el.dataset.since));
    }
  };
  tick();
  setInterval(tick, 250);

  if (!('EventSource' in window)) return;
  // An update that arrives while a field of the page has the focus waits until it loses it,
  // so typing into a filter is never undone.
  let pending = null;
  const show = (html) => {
    const active = document.activeElement;
    if (active && active !== main && main.contains(active) && active.matches('input, select, textarea')) {
      pending = html;
      return;
    }
    pending = null;
    main.innerHTML = html;
    body.dataset.updates = String(Number(body.dataset.updates || '0') + 1);
    tick();
  };
  main.addEventListener('focusout', () => {
    if (pending !== null) setTimeout(() => { if (pending !== null) show(pending); }, 0);
  });

  // One stream per open page. A browser opens at most six HTTP/1.1 connections to one host (the
  // console over plain HTTP), and a stream holds one, so a page that is left closes its stream
  // (and opens it again if the browser brings it back from its cache).
  let source = null;
  const connect = () => {
    source = new EventSource('/events?view=' + encodeURIComponent(body.dataset.view));
    source.addEventListener('now', (e) => {
      told = Number(e.data);
      toldAt = performance.now();
    });
    source.addEventListener('page', (e) => show(e.data));
    source.addEventListener('open', () => {
      status.textContent = 'live';
      status.className = 'live on';
    });
    source.addEventListener('error', () => {
      status.textContent = 'reconnecting';
      status.className = 'live off';
    });
  };
  window.addEventListener('pagehide', () => {
    if (source) source.close();
    source = null;
    status.textContent = 'static';
    status.className = 'live';
  });
  window.addEventListener('pageshow', () => {
    if (!source) connect();
  });
  connect();
})();
