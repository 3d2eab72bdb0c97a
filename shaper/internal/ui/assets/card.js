// One policy's card: its live figures (GET /v1/policies), its charts and
// deepest keys (GET /v1/ui/series), its tuning form and its dead letters.

import { Chart } from './chart.js';
import { DeadLetters } from './dead.js';
import { el } from './dom.js';
import * as fmt from './format.js';
import { overridden, Tuner } from './tune.js';

// freshMs is how old a sample of a time in queue or lateness may be and
// still be shown: older, the card says nothing was delivered lately.
const freshMs = 10000;

// The series of each chart: keys of GET /v1/ui/series's samples.
const charts = {
  rates: [['admitted', 'admitted'], ['rejected', 'rejected'], ['deferred', 'deferred'],
    ['delivered', 'delivered'], ['failed', 'failed'], ['rate', 'adapted rate']],
  depth: [['queued', 'queued'], ['deferred_queued', 'deferred']],
  in_queue: [['in_queue_p50_ms', 'p50'], ['in_queue_p99_ms', 'p99']],
  lateness: [['lateness_p99_ms', 'p99']],
};
const chartFormat = { rates: fmt.plain, depth: fmt.plain, in_queue: fmt.ms, lateness: fmt.ms };

export class PolicyCard {
  // changed() asks the page for fresh figures after an action.
  constructor(name, changed) {
    this.name = name;
    this.root = document.getElementById('policy-card').content.firstElementChild.cloneNode(true);
    this.root.id = 'policy-' + name;
    this.root.dataset.policy = name;
    this.root.querySelector('.name').textContent = name;
    this.charts = {};
    for (const [kind, series] of Object.entries(charts)) {
      const fig = this.root.querySelector(`[data-chart="${kind}"]`);
      this.charts[kind] = new Chart(fig, series.map(([key, label]) => ({ key, label })), chartFormat[kind]);
    }
    this.tuner = new Tuner(this.root.querySelector('.tune'), name, (p) => { this.showPolicy(p); changed(); });
    this.dead = new DeadLetters(this.root.querySelector('.dead'), name, changed);
    this.policy = null;
    this.series = null;
  }

  figure(name, value, sub, shown = true) {
    const f = this.root.querySelector(`[data-figure="${name}"]`);
    f.hidden = !shown;
    const v = f.querySelector('.value');
    v.textContent = value;
    f.querySelector('.sub').textContent = sub;
    return v;
  }

  // showPolicy shows p, the policy with its figures as GET /v1/policies
  // has it.
  showPolicy(p) {
    this.policy = p;
    const s = this.series ? this.series.samples : {};
    const latest = (k) => fmt.last(s[k]);
    // A time in queue sampled long ago is no figure for now: a tour read
    // "22 s" three minutes after the policy's last delivery.
    const recent = (k) => fmt.lastWithin(s[k], s.t, freshMs);
    const set = (name, n, sub, shown) => { this.figure(name, fmt.count(n), sub, shown).dataset.value = String(n); };
    set('queued', p.queued, `${fmt.plural(p.keys, 'key')} · ${fmt.count(p.in_flight)} in flight`);
    set('admitted', p.admitted, fmt.rate(latest('admitted')));
    set('rejected', p.rejected, fmt.rate(latest('rejected')));
    const defers = p.overflow === 'defer' || p.deferred > 0 || p.deferred_queued > 0;
    this.charts.rates.show('deferred', defers);
    this.charts.depth.show('deferred_queued', defers);
    this.charts.rates.show('rate', p.adapt != null);
    set('deferred', p.deferred, `${fmt.count(p.deferred_queued)} waiting · ${fmt.rate(latest('deferred'))}`, defers);
    set('limited', p.limited, p.shadow_limited ? `${fmt.count(p.shadow_limited)} in shadow` : 'by the admission limit',
      p.admit != null || p.limited > 0);
    set('delivered', p.delivered, fmt.rate(latest('delivered')));
    set('failed', p.failed, fmt.rate(latest('failed')));
    set('dead', p.dead, p.dead > 0 ? 'see below' : '');
    this.root.querySelector('[data-figure="dead"]').classList.toggle('alert', p.dead > 0);
    const p50 = recent('in_queue_p50_ms');
    this.figure('in_queue', fmt.ms(p50), p50 == null ? 'nothing delivered lately' : 'p50 · p99 ' + fmt.ms(recent('in_queue_p99_ms')));
    const late = recent('lateness_p99_ms');
    this.figure('lateness', fmt.ms(late), late == null ? 'nothing delivered lately' : 'p99, slot to start');

    const drain = this.root.querySelector('.badge.drain');
    // A drainer that missed a renewal of its lease: lost, or cut off.
    const quiet = p.drainers_unrenewed_ms || {};
    const who = (name) => !name ? 'nobody' :
      name in quiet ? `${name} (no lease renewal for ${(quiet[name] / 1000).toFixed(1)} s)` : name;
    if (p.partitions_in_use) {
      drain.textContent = `drained in ${p.partitions_in_use} partitions by other shapers; this shaper's file says ${p.partitions}: it stands by`;
      drain.title = (p.drainers || []).map((name, i) => `partition ${i}: ${who(name)}`).join('\n');
    } else if (p.partitions > 1) {
      const here = p.draining_partitions || [];
      drain.textContent = here.length ? `drains ${here.length} of ${p.partitions} partitions here` : `${p.partitions} partitions, drained by other shapers`;
      drain.title = (p.drainers || []).map((name, i) => `partition ${i}: ${who(name)}`).join('\n');
    } else {
      drain.textContent = p.draining ? 'drained here' : 'drained by another shaper';
      drain.title = p.drainers && p.drainers[0] ? `drained by ${who(p.drainers[0])}` : '';
    }
    drain.classList.toggle('elsewhere', !p.draining);
    this.root.querySelector('.badge.override').hidden = !p.override;
    // Nobody answers this shaper's deliveries: the jobs stay queued.
    const consumer = this.root.querySelector('.badge.consumer');
    const since = p.waiting_for_consumer_since;
    consumer.hidden = !since;
    consumer.title = since ? `Since ${new Date(since).toLocaleTimeString()}, nobody answers this shaper's deliveries on ` +
      `${p.deliver.subject}.>: the jobs stay queued until a consumer subscribes` : '';
    // Another shaper's policy file sets this policy otherwise.
    const files = this.root.querySelector('.badge.files');
    const others = p.file_differs_on || [];
    files.hidden = others.length === 0;
    files.title = others.length ? `The policy file of ${others.join(', ')} sets this policy otherwise than this shaper's: ` +
      'the drainer paces its keys by its own file, each shaper answers its producers by its own. ' +
      'Give every shaper the same file and reload each.' : '';
    this.showSettings();
    this.tuner.update(p, this.series ? this.series.file : null);
    this.dead.update(p.dead);
  }

  // showSettings writes the live settings, marking those that differ from
  // the policy file.
  showSettings() {
    const p = this.policy;
    const file = this.series && this.series.file;
    const parts = [['outflow', `${p.outflow} per key`], ['queue', `queue ${p.queue}`],
      ['overflow', p.overflow], ['total', p.total ? `total ${p.total}` : 'no total cap']];
    const out = this.root.querySelector('.settings');
    out.replaceChildren();
    parts.forEach(([f, label], i) => {
      if (i) out.append(' · ');
      const span = el('span', { textContent: label });
      span.dataset.setting = f;
      if (overridden(p, file, f)) {
        span.className = 'over';
        span.title = `overridden; the policy file says ${file[f] || 'none'}`;
      }
      out.append(span);
    });
  }

  // showSeries draws the policy's series s (one entry of GET
  // /v1/ui/series, samples kept by the page) at now.
  showSeries(s, now, windowMs) {
    this.series = s;
    for (const chart of Object.values(this.charts)) chart.update(s.samples, now, windowMs);
    this.showDeepest(s, now);
    if (this.policy) this.showPolicy(this.policy);
  }

  showDeepest(s, now) {
    const panel = this.root.querySelector('.deepest');
    panel.querySelector('.when').textContent = s.deepest_at ? '· read ' + fmt.ago(s.deepest_at, now) : '· reading…';
    const keys = s.deepest || [];
    const top = keys.length ? keys[0].depth : 1;
    panel.querySelector('tbody').replaceChildren(...keys.map((k) => {
      const bar = el('div', { className: 'bar' });
      bar.style.width = Math.max(1, (100 * k.depth) / top) + '%';
      const tr = el('tr', {},
        el('td', { textContent: k.key, title: k.key }),
        el('td', { textContent: fmt.count(k.depth), className: 'num' }),
        el('td', {}, bar));
      tr.dataset.key = k.key;
      tr.dataset.depth = k.depth;
      return tr;
    }));
    panel.querySelector('.none').hidden = keys.length > 0 || !s.deepest_at;
  }
}
