// One policy's dead letters: listed with GET /v1/dead, shown one at a time
// with GET /v1/dead/{policy}/{seq}, replayed by key or all at once with
// POST /v1/dead/replay after a confirmation.

import { api, path } from './api.js';
import { el, say } from './dom.js';
import { count, plural, when } from './format.js';

const listed = 20;

export class DeadLetters {
  constructor(root, name, changed) {
    this.root = root;
    this.name = name;
    this.changed = changed; // called after a replay
    this.total = null;
    this.letters = [];
    this.loading = false;
    this.pending = null;
    this.list = root.querySelector('.letters');
    this.none = root.querySelector('.none');
    this.detail = root.querySelector('.letter');
    this.confirm = root.querySelector('.confirm');
    this.result = root.querySelector('.result');
    this.replayAll = root.querySelector('.replay-all');
    this.replayAll.addEventListener('click', () =>
      this.ask(`Replay all ${count(this.total)} dead letters of ${this.name} through admission?`, {}));
    this.confirm.querySelector('.apply').addEventListener('click', () => this.replay());
    this.confirm.querySelector('.cancel').addEventListener('click', () => {
      this.pending = null;
      this.confirm.hidden = true;
    });
    root.querySelector('.close').addEventListener('click', () => { this.detail.hidden = true; });
  }

  // update is given the policy's dead-letter count; the list is read again
  // when it changed.
  update(total) {
    this.root.querySelector('h3 .count').textContent = total > 0 ? `(${count(total)})` : '';
    this.replayAll.disabled = !(total > 0);
    if (total === this.total) return;
    this.total = total;
    this.load();
  }

  async load() {
    if (this.loading) return;
    this.loading = true;
    try {
      const ans = this.total > 0 ? await api('GET', `v1/dead?policy=${encodeURIComponent(this.name)}&limit=${listed}`) : { dead: [] };
      this.letters = ans.dead || [];
      this.render();
    } catch (e) {
      say(this.result, 'Dead letters not read: ' + e.message, false);
    } finally {
      this.loading = false;
    }
  }

  render() {
    this.none.hidden = this.letters.length > 0;
    this.list.replaceChildren(...this.letters.map((d) => {
      const show = el('button', { type: 'button', textContent: 'Show', className: 'show' });
      show.addEventListener('click', () => this.show(d.seq));
      const replay = el('button', { type: 'button', textContent: 'Replay key…', className: 'replay' });
      replay.addEventListener('click', () =>
        this.ask(`Replay the dead letters of key “${d.key}” (${this.name}) through admission?`, { key: d.key }));
      const li = el('li', {},
        el('span', { className: 'what' }, el('code', { textContent: d.key })),
        el('span', { className: 'meta', textContent: `#${d.seq} · ${d.reason} · ${plural(d.attempts, 'attempt')} · ${when(d.at)}` }),
        el('span', { className: 'buttons' }, show, replay));
      li.dataset.seq = d.seq;
      return li;
    }));
    if (this.total > this.letters.length) {
      this.list.append(el('li', { className: 'more', textContent: `and ${count(this.total - this.letters.length)} more` }));
    }
  }

  async show(seq) {
    try {
      const d = await api('GET', path('v1', 'dead', this.name, String(seq)));
      this.detail.querySelector('h4').textContent = `Dead letter #${d.seq}`;
      const rows = [['Job', d.id], ['Key', d.key], ['Reason', d.reason], ['From', d.from],
        ['Attempts', String(d.attempts)], ['At', when(d.at)], ['Size', count(d.size) + ' bytes']];
      this.detail.querySelector('dl').replaceChildren(...rows.flatMap(([k, v]) =>
        [el('dt', { textContent: k }), el('dd', { textContent: v || '–' })]));
      this.detail.querySelector('.payload').textContent =
        d.payload != null ? d.payload : `(binary payload, ${count(d.size)} bytes)`;
      this.detail.querySelector('.history').replaceChildren(...(d.history || []).map((h) => el('li', { textContent: h })));
      this.detail.hidden = false;
    } catch (e) {
      say(this.result, 'Not shown: ' + e.message, false);
    }
  }

  ask(question, filter) {
    this.pending = filter;
    this.confirm.querySelector('.question').textContent = question;
    this.confirm.hidden = false;
    this.confirm.querySelector('.apply').focus();
  }

  async replay() {
    const filter = this.pending;
    if (!filter) return;
    let q = 'policy=' + encodeURIComponent(this.name);
    if (filter.key != null) q += '&key=' + encodeURIComponent(filter.key);
    try {
      const r = await api('POST', 'v1/dead/replay?' + q);
      this.pending = null;
      this.confirm.hidden = true;
      this.detail.hidden = true; // it may show a letter that is gone
      const ids = (r.results || []).filter((x) => x.done && x.new_id).map((x) => x.new_id);
      const shown = ids.slice(0, 3).join(', ') + (ids.length > 3 ? ', …' : '');
      say(this.result, `Replayed ${r.done} of ${r.matched}` + (ids.length ? ` (new ${ids.length > 1 ? 'ids' : 'id'} ${shown})` : '') + '.',
        r.done === r.matched);
      this.total = null; // read the list again
      this.changed();
    } catch (e) {
      say(this.result, 'Not replayed: ' + e.message, false);
    }
  }
}
