// The shaper's HTTP API as the page uses it: every call sends the admin
// token kept in this tab (sessionStorage) as a bearer token.

const tokenKey = 'shaper-admin-token';

export function token() { return sessionStorage.getItem(tokenKey) || ''; }
export function setToken(t) { sessionStorage.setItem(tokenKey, t); }
export function clearToken() { sessionStorage.removeItem(tokenKey); }

// APIError is an answer other than 2xx, with the problem's detail.
export class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// api calls method on path (relative to the API root, e.g. "v1/policies")
// with body as JSON when given, and returns the decoded answer.
export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(new URL('../' + path, document.baseURI), init);
  } catch (e) {
    throw new APIError(0, 'the shaper is not reachable (' + e.message + ')');
  }
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!res.ok) {
    const detail = data && (data.detail || data.title);
    throw new APIError(res.status, detail || res.status + ' ' + res.statusText);
  }
  return data;
}

// path joins URL path segments, escaping each.
export function path(...segments) { return segments.map(encodeURIComponent).join('/'); }
