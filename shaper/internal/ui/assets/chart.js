// A line chart drawn in SVG: one path per series over the time window,
// the y axis from zero to a round maximum. Colours come from the CSS
// classes s-<series key>.

import { el } from './dom.js';
import { last } from './format.js';

const svgNS = 'http://www.w3.org/2000/svg';
const width = 600;
const height = 120;
const pad = 3; // keeps a line at zero or at the top visible
const minSpan = 60000; // a chart spans at least a minute, even just after start

function svg(name, attrs) {
  const e = document.createElementNS(svgNS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

// roundUp returns the smallest of 1, 2, 2.5, 5 times a power of ten at
// least v.
export function roundUp(v) {
  if (!(v > 0)) return 0;
  const e = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * e >= v) return m * e;
  return 10 * e;
}

export class Chart {
  // root is the chart's <figure>; series are {key, label}; format formats
  // a value for the axis and the legend.
  constructor(root, series, format) {
    this.series = series;
    this.format = format;
    const s = svg('svg', { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: 'none', role: 'img' });
    s.setAttribute('aria-label', root.querySelector('figcaption').textContent);
    for (const y of [pad, height / 2]) {
      s.append(svg('line', { class: 'grid', x1: 0, x2: width, y1: y, y2: y, 'vector-effect': 'non-scaling-stroke' }));
    }
    this.paths = series.map((l) => {
      const p = svg('path', { class: 's-' + l.key, 'vector-effect': 'non-scaling-stroke', 'data-series': l.key });
      s.append(p);
      return p;
    });
    this.top = el('span', { className: 'y y-top' });
    this.mid = el('span', { className: 'y y-mid' });
    this.xLeft = el('span', {});
    const legend = el('ul', { className: 'legend' });
    this.values = series.map((l) => {
      const v = el('span', { className: 'v' });
      legend.append(el('li', { className: 's-' + l.key },
        el('span', { className: 'swatch' }), el('span', { textContent: l.label }), v));
      return v;
    });
    root.append(el('div', { className: 'plot' }, s, this.top, this.mid),
      el('div', { className: 'x' }, this.xLeft, el('span', { textContent: 'now' })), legend);
  }

  // show shows or hides the series key (its line and its legend).
  show(key, shown) {
    const j = this.series.findIndex((l) => l.key === key);
    this.paths[j].classList.toggle('off', !shown);
    this.values[j].parentElement.hidden = !shown;
    this.series[j].hidden = !shown;
  }

  // update draws the samples s (columns: t and one array per series key)
  // from the first sample (at most windowMs, at least a minute ago) to now.
  update(s, now, windowMs) {
    const t = s.t || [];
    const span = Math.min(windowMs, Math.max(minSpan, t.length ? now - t[0] : 0));
    const from = now - span;
    let max = 0;
    for (const l of this.series) {
      if (l.hidden) continue;
      for (const v of s[l.key] || []) if (v != null && v > max) max = v;
    }
    const top = roundUp(max) || 1;
    this.series.forEach((l, j) => {
      const ys = s[l.key] || [];
      let d = '';
      let pen = false;
      for (let i = 0; i < t.length; i++) {
        const v = ys[i];
        if (v == null || t[i] < from) { pen = false; continue; }
        const x = ((t[i] - from) / span) * width;
        const y = pad + (height - 2 * pad) * (1 - v / top);
        d += (pen ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
        pen = true;
      }
      this.paths[j].setAttribute('d', d);
      this.values[j].textContent = this.format(last(ys));
    });
    this.top.textContent = this.format(top);
    this.mid.textContent = this.format(top / 2);
    this.xLeft.textContent = span >= 90000 ? `−${Math.round(span / 60000)} min` : `−${Math.round(span / 1000)} s`;
  }
}
