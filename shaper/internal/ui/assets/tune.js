// The live tuning form of one policy: outflow, queue, total and overflow,
// changed through PUT /v1/policies/{name} after a confirmation (a JSON
// merge patch of the fields changed; "" for total is no cap), marked
// where the live override sets a field, and reset with DELETE
// /v1/policies/{name}/override.

import { api, path } from './api.js';
import { el, say } from './dom.js';

const fields = ['outflow', 'queue', 'total', 'overflow'];

// text returns a setting as the form shows it ("" for no total cap).
function text(v) { return v == null ? '' : String(v); }

// overridden says whether setting f of the live policy p is set by its live
// override, as the shaper lists the fields overridden (a change names only
// the fields it changes); file is the policy file's settings (null when
// unknown: nothing is marked).
export function overridden(p, file, f) {
  return file != null && !!p.override && (p.overridden || []).includes(f);
}

export class Tuner {
  // form is the policy's <form class="tune">; changed(p) is called with
  // the policy as the shaper answers after a change.
  constructor(form, name, changed) {
    this.form = form;
    this.name = name;
    this.changed = changed;
    this.live = null;
    this.file = null;
    this.dirty = false;
    this.pending = null; // the request the confirmation would send
    this.confirm = form.querySelector('.confirm');
    this.result = form.querySelector('.result');
    this.resetButton = form.querySelector('.reset');
    form.addEventListener('input', () => { this.dirty = true; });
    form.addEventListener('submit', (e) => { e.preventDefault(); this.review(); });
    this.resetButton.addEventListener('click', () => this.reviewReset());
    this.confirm.querySelector('.apply').addEventListener('click', () => this.apply());
    this.confirm.querySelector('.cancel').addEventListener('click', () => this.cancel());
  }

  input(f) { return this.form.elements[f]; }

  // update shows the live policy p and the file's settings file (null
  // when unknown); it leaves what the operator is typing alone.
  update(p, file) {
    this.live = p;
    this.file = file;
    for (const f of fields) {
      const over = overridden(p, file, f);
      const field = this.form.querySelector(`[data-field="${f}"]`);
      field.classList.toggle('overridden', over);
      const mark = field.querySelector('.mark');
      mark.hidden = !over;
      if (over) mark.querySelector('b').textContent = text(file[f]) || 'none';
      if (!this.dirty && !this.confirm.contains(document.activeElement)) this.input(f).value = text(p[f]);
    }
    this.resetButton.disabled = !p.override;
  }

  // review checks the form and asks for a confirmation of what changes.
  review() {
    const change = {};
    const diff = [];
    for (const f of fields) {
      const v = this.input(f).value.trim();
      const live = text(this.live[f]);
      if (v === live) continue;
      if (f === 'queue') {
        const n = Number(v);
        if (!Number.isInteger(n) || n < 1) {
          say(this.result, 'Queue: want a whole number of at least 1.', false);
          this.input(f).focus();
          return;
        }
        change.queue = n;
      } else if (f === 'outflow' && v === '') {
        say(this.result, 'Outflow: want a rate such as 20/s.', false);
        this.input(f).focus();
        return;
      } else {
        change[f] = v;
      }
      diff.push([f, live || 'none', v || 'none']);
    }
    if (diff.length === 0) {
      say(this.result, 'Nothing to change: the form shows the live settings.', true);
      return;
    }
    this.ask(`Change ${this.name} on every shaper of the cluster?`, diff,
      () => api('PUT', path('v1', 'policies', this.name), change), 'Applied');
  }

  // reviewReset asks for a confirmation of going back to the file.
  reviewReset() {
    const diff = [];
    for (const f of fields) {
      const live = text(this.live[f]);
      const file = this.file ? text(this.file[f]) : live;
      if (live !== file) diff.push([f, live || 'none', file || 'none']);
    }
    this.ask(`Reset ${this.name} to its policy file on every shaper?`, diff,
      () => api('DELETE', path('v1', 'policies', this.name, 'override')), 'Reset to the policy file');
  }

  ask(question, diff, send, done) {
    this.pending = { send, done };
    this.confirm.querySelector('.question').textContent = question;
    const list = this.confirm.querySelector('.diff');
    list.replaceChildren(...diff.map(([f, from, to]) => {
      const li = el('li', { textContent: `${f}: ${from} → ${to}` });
      li.dataset.field = f;
      return li;
    }));
    this.confirm.hidden = false;
    this.result.textContent = '';
    this.confirm.querySelector('.apply').focus();
  }

  cancel() {
    this.pending = null;
    this.confirm.hidden = true;
    this.dirty = false;
    if (this.live) this.update(this.live, this.file);
  }

  async apply() {
    const pending = this.pending;
    if (!pending) return;
    const button = this.confirm.querySelector('.apply');
    button.disabled = true;
    try {
      const p = await pending.send();
      this.pending = null;
      this.confirm.hidden = true;
      this.dirty = false;
      say(this.result, `${pending.done}: outflow ${p.outflow}, queue ${p.queue}, overflow ${p.overflow}` +
        (p.total ? `, total ${p.total}` : ', no total cap') + '.', true);
      this.changed(p);
    } catch (e) {
      say(this.result, 'Not applied: ' + e.message, false);
    } finally {
      button.disabled = false;
    }
  }
}
