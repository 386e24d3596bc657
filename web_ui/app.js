// Shared helpers for the flowcd web UI. Plain ES2017, no dependencies.
'use strict';

// Fetch a JSON API path. Non-2xx responses throw with the body text so the
// page can show the daemon's actual error message instead of a bare status.
async function api(path) {
  const resp = await fetch(path, { credentials: 'same-origin' });
  if (!resp.ok) {
    const text = await resp.text().catch(() => '');
    const err = new Error(path + ': HTTP ' + resp.status + (text ? ' ' + text : ''));
    err.status = resp.status;
    throw err;
  }
  return resp.json();
}

// HTML-escape any API-provided text (model paths, errors are user data).
function esc(text) {
  return String(text === undefined || text === null ? '' : text)
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

function fmtBytes(n) {
  n = Number(n) || 0;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? String(n) : n.toFixed(1)) + ' ' + units[i];
}

function fmtSeconds(s) {
  s = Number(s) || 0;
  if (s < 1) return (s * 1000).toFixed(0) + ' ms';
  if (s < 60) return s.toFixed(1) + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm ' + Math.floor(s % 60) + 's';
  return Math.floor(m / 60) + 'h ' + (m % 60) + 'm';
}

function fmtPercent(x) {
  return (100 * (Number(x) || 0)).toFixed(1) + '%';
}

// A progress bar; pct is clamped so bad counts never overflow the layout.
function barHtml(done, total, extraClass) {
  const pct = total > 0 ? Math.max(0, Math.min(100, 100 * done / total)) : 0;
  return '<span class="bar' + (extraClass ? ' ' + extraClass : '') + '"><span style="width:' +
    pct.toFixed(1) + '%"></span></span>';
}

const NAV_LINKS = [
  ['jobs', '/', 'Jobs'],
  ['cache', '/cache.html', 'Cache'],
  ['workers', '/workers.html', 'Workers'],
  ['tuning', '/tuning.html', 'Tuning'],
  ['metrics', '/metrics', 'Metrics'],
];

// Fill <nav id="nav">; `active` is one of the keys above (or the label).
function nav(active) {
  const el = document.getElementById('nav');
  if (!el) return;
  const want = String(active || '').toLowerCase();
  el.innerHTML = '<span class="brand">flowcd</span>' + NAV_LINKS.map(([key, href, label]) =>
    '<a href="' + href + '"' + (key === want ? ' class="active"' : '') + '>' + label + '</a>'
  ).join('');
}

// Show an error in #error-banner (created if a page lacks it) rather than
// failing silently; pass null to clear it after a successful refresh.
function showError(err) {
  let el = document.getElementById('error-banner');
  if (!el) {
    el = document.createElement('div');
    el.id = 'error-banner';
    document.body.insertBefore(el, document.body.firstChild);
  }
  if (err) {
    el.textContent = 'Error: ' + (err && err.message ? err.message : String(err));
    el.classList.add('shown');
  } else {
    el.textContent = '';
    el.classList.remove('shown');
  }
}

// Run fn now and every `ms` while keepGoing() is true; errors go to the banner.
function poll(fn, ms, keepGoing) {
  const tick = async () => {
    let again = true;
    try {
      await fn();
      showError(null);
      again = keepGoing ? keepGoing() : true;
    } catch (e) {
      showError(e);
      // A 4xx will not get better by asking again (a job id that is not
      // among the daemon's jobs); a failed fetch or a 5xx may.
      again = !(e.status >= 400 && e.status < 500);
    }
    if (again) setTimeout(tick, ms);
  };
  tick();
}
