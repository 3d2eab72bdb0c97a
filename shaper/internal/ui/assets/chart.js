// A line chart drawn in SVG: one path per series over the time window,
// the y axis from zero to a round maximum. Colours come from the CSS
// classes s-<series key>.

const svgNS = 'http://www.w3.org/2000/svg';
const width = 600;
const height = 120;
const pad = 3; // keeps a line at zero or at the top visible
const minSpan = 60000; // a chart spans at least a minute, even just after start

function svg(name, attrs) {
  const el = document.createElementNS(svgNS, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
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
    const plot = document.createElement('div');
    plot.className = 'plot';
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
    this.top = Object.assign(document.createElement('span'), { className: 'y y-top' });
    this.mid = Object.assign(document.createElement('span'), { className: 'y y-mid' });
    plot.append(s, this.top, this.mid);
    this.xLeft = document.createElement('span');
    const x = document.createElement('div');
    x.className = 'x';
    x.append(this.xLeft, Object.assign(document.createElement('span'), { textContent: 'now' }));
    const legend = document.createElement('ul');
    legend.className = 'legend';
    this.values = series.map((l) => {
      const li = document.createElement('li');
      li.className = 's-' + l.key;
      const v = Object.assign(document.createElement('span'), { className: 'v' });
      li.append(Object.assign(document.createElement('span'), { className: 'swatch' }),
        Object.assign(document.createElement('span'), { textContent: l.label }), v);
      legend.append(li);
      return v;
    });
    root.append(plot, x, legend);
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
      let lastValue = null;
      for (let i = ys.length - 1; i >= 0; i--) if (ys[i] != null) { lastValue = ys[i]; break; }
      this.values[j].textContent = this.format(lastValue);
    });
    this.top.textContent = this.format(top);
    this.mid.textContent = this.format(top / 2);
    this.xLeft.textContent = span >= 90000 ? `−${Math.round(span / 60000)} min` : `−${Math.round(span / 1000)} s`;
  }
}
