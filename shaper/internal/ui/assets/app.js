// The operator page: asks whether a token is needed, then polls the
// shaper every second (GET /v1/ui/series for the charts, GET /v1/policies
// for the figures) and keeps one card per policy.

import { api, APIError, clearToken, setToken, token } from './api.js';
import { PolicyCard } from './card.js';
import { el } from './dom.js';
import * as fmt from './format.js';

const every = 1000;
const $ = (id) => document.getElementById(id);

const cards = new Map(); // policy name → PolicyCard
const kept = new Map(); // policy name → its series, samples accumulated
let since = 0; // the last sample's time: the next poll asks for newer ones
let timer = null;
let polls = 0;
let lastOK = 0;
let inFlight = false; // one poll at a time: samples are merged once
let again = false; // a poll was asked for while one was in flight
let navSignature = ''; // the policies the nav links to, rebuilt when they change

// merge adds the newly sampled series s to what the page keeps, dropping
// samples older than the window.
function merge(s, now, windowMs) {
  const old = kept.get(s.name);
  if (!old) {
    kept.set(s.name, s);
    return s;
  }
  const cols = Object.keys(s.samples);
  const lastT = old.samples.t.length ? old.samples.t[old.samples.t.length - 1] : -1;
  let skip = 0; // samples the page has already
  while (skip < s.samples.t.length && s.samples.t[skip] <= lastT) skip++;
  for (const c of cols) old.samples[c] = (old.samples[c] || []).concat(s.samples[c].slice(skip));
  let drop = 0;
  while (drop < old.samples.t.length && old.samples.t[drop] < now - windowMs) drop++;
  if (drop) for (const c of cols) old.samples[c] = old.samples[c].slice(drop);
  old.file = s.file;
  old.deepest = s.deepest;
  old.deepest_at = s.deepest_at;
  return old;
}

function card(name) {
  let c = cards.get(name);
  if (!c) {
    c = new PolicyCard(name, () => poll());
    cards.set(name, c);
  }
  return c;
}

// arrange shows the cards of policies, in order, and the nav linking them.
function arrange(policies) {
  const names = policies.map((p) => p.name);
  const list = $('policies');
  for (const [name, c] of cards) {
    if (!names.includes(name)) {
      c.root.remove();
      cards.delete(name);
      kept.delete(name);
    }
  }
  names.forEach((name, i) => {
    const root = card(name).root;
    if (list.children[i] !== root) list.insertBefore(root, list.children[i] || null);
  });
  $('empty').hidden = names.length > 0;
  const signature = policies.map((p) => p.name + (p.override ? '*' : '')).join(' ');
  if (signature === navSignature) return;
  navSignature = signature;
  $('nav').replaceChildren(...policies.map((p) => {
    const a = el('a', { href: '#policy-' + encodeURIComponent(p.name), textContent: p.name });
    if (p.override) {
      a.className = 'override';
      a.title = 'tuned live';
    }
    return a;
  }));
}

async function poll() {
  if (inFlight) {
    again = true;
    return;
  }
  inFlight = true;
  clearTimeout(timer);
  try {
    const [series, ans] = await Promise.all([
      api('GET', 'v1/ui/series' + (since ? '?since=' + since : '')),
      api('GET', 'v1/policies'),
    ]);
    const policies = ans.policies || [];
    arrange(policies);
    for (const s of series.policies) {
      const t = s.samples.t;
      if (t.length) since = Math.max(since, t[t.length - 1]);
      const c = cards.get(s.name);
      if (c) c.showSeries(merge(s, series.now, series.window_ms), series.now, series.window_ms);
    }
    for (const p of policies) card(p.name).showPolicy(p);
    lastOK = Date.now();
    $('error').hidden = true;
    setLive(true);
  } catch (e) {
    if (e instanceof APIError && (e.status === 401 || e.status === 403)) {
      inFlight = false;
      askToken(e.message);
      return;
    }
    $('error').textContent = 'Not updated: ' + e.message;
    $('error').hidden = false;
    setLive(false);
  }
  polls++;
  document.body.dataset.polls = String(polls);
  inFlight = false;
  if (again) {
    again = false;
    poll();
    return;
  }
  timer = setTimeout(poll, every);
}

function setLive(ok) {
  const live = $('live');
  live.className = 'live ' + (ok ? 'ok' : 'stale');
  live.textContent = lastOK ? 'updated ' + fmt.clock(lastOK) : 'not connected';
}

function askToken(message) {
  clearTimeout(timer);
  clearToken();
  $('login').hidden = false;
  $('logout').hidden = true;
  $('login-error').textContent = message || '';
  $('live').className = 'live';
  $('live').textContent = 'admin token needed';
  $('token').focus();
}

function start() {
  $('login').hidden = true;
  $('logout').hidden = !token();
  poll();
}

$('login-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const t = $('token').value.trim();
  if (!t) return;
  setToken(t);
  $('token').value = '';
  start();
});
$('logout').addEventListener('click', () => {
  clearToken();
  for (const c of cards.values()) c.root.remove();
  cards.clear();
  kept.clear();
  since = 0;
  navSignature = '';
  $('nav').replaceChildren();
  askToken('');
});

// With a token configured and none kept in this tab, ask for it before any
// call that would be refused.
api('GET', 'v1/ui/access').then((access) => {
  if (access.token && !token()) askToken('');
  else start();
}).catch((e) => {
  $('error').textContent = 'The shaper did not answer: ' + e.message;
  $('error').hidden = false;
});
