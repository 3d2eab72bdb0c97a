// Number and time formats of the page.

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const oneDecimal = new Intl.NumberFormat('en-US', { maximumFractionDigits: 1 });

// count formats a whole number with thousands separators.
export function count(n) { return n == null ? '–' : integer.format(n); }

// plural formats n things: "1 key", "3 keys".
export function plural(n, thing) { return count(n) + ' ' + thing + (n === 1 ? '' : 's'); }

// when formats unix ms or an RFC 3339 time as a time of day, with the
// date when it is not today.
export function when(t) {
  const d = new Date(t);
  const time = d.toLocaleTimeString('en-GB');
  return d.toDateString() === new Date().toDateString() ? time : d.toLocaleDateString('en-GB') + ' ' + time;
}

// rate formats a per-second rate.
export function rate(n) { return n == null ? '–' : oneDecimal.format(n) + '/s'; }

// plain formats a number for an axis or a legend.
export function plain(n) {
  if (n == null) return '–';
  if (Math.abs(n) >= 1e6) return oneDecimal.format(n / 1e6) + 'M';
  if (Math.abs(n) >= 1e4) return oneDecimal.format(n / 1e3) + 'k';
  return oneDecimal.format(n);
}

// ms formats a duration given in milliseconds.
export function ms(n) {
  if (n == null) return '–';
  if (n < 1) return oneDecimal.format(n * 1000) + ' µs';
  if (n < 1000) return oneDecimal.format(n) + ' ms';
  if (n < 60000) return oneDecimal.format(n / 1000) + ' s';
  if (n < 3600000) return oneDecimal.format(n / 60000) + ' min';
  return oneDecimal.format(n / 3600000) + ' h';
}

// ago says how long before now (unix ms) t was.
export function ago(t, now) {
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return s + ' s ago';
  return Math.round(s / 60) + ' min ago';
}

// clock formats unix ms as a local time of day.
export function clock(t) { return new Date(t).toLocaleTimeString('en-GB'); }

// lastWithin returns the last value of xs that is not null and was sampled
// (at ts, in ms) at most ms before the newest sample, or null.
export function lastWithin(xs, ts, ms) {
  xs = xs || [];
  ts = ts || [];
  const newest = ts.length ? ts[ts.length - 1] : 0;
  for (let i = xs.length - 1; i >= 0 && newest - ts[i] <= ms; i--) if (xs[i] != null) return xs[i];
  return null;
}

// last returns the last value of xs that is not null, or null.
export function last(xs) {
  for (let i = (xs || []).length - 1; i >= 0; i--) if (xs[i] != null) return xs[i];
  return null;
}
