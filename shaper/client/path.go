package client

import "net/url"

// segment escapes s as one path segment that reaches the shaper's handler
// as s: url.PathEscape (which escapes '/', so a key "a/b" stays one
// segment), and "." and ".." written as "%2E" and "%2E%2E" — unescaped, a
// router cleaning the path would remove them or redirect. Any string,
// invalid UTF-8 included, makes the round trip to a Go router's path value
// but two: the empty string (an empty segment), and "/" alone in a
// single-segment wildcard ({policy}, {id}), which the router takes for a
// trailing slash (no policy or job id has either name; keys are matched by
// {key...}, which takes "/" as it is).
func segment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}
