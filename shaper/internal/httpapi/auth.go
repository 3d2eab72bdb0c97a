package httpapi

import (
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

// Guard is a route's access rule: it wraps a handler so that only allowed
// requests reach it.
type Guard func(http.HandlerFunc) http.HandlerFunc

// Open lets every request through.
func Open(h http.HandlerFunc) http.HandlerFunc { return h }

// Bearer returns the guard of routes that need token: a request must carry
// "Authorization: Bearer <token>" (compared in constant time); one without
// is answered 401, one with another token 403. With an empty token only
// loopback clients are let through (403 for the others).
func Bearer(token, what string) Guard { return bearer(what, token) }

// AnyBearer is Bearer of a route that takes any of tokens (the empty ones
// left out): job status takes the submit token and the admin one, so that
// an operator can look a job up. With none, it is Bearer's loopback rule.
func AnyBearer(what string, tokens ...string) Guard {
	var set []string
	for _, t := range tokens {
		if t != "" {
			set = append(set, t)
		}
	}
	return bearer(what, set...)
}

func bearer(what string, tokens ...string) Guard {
	token := ""
	if len(tokens) > 0 {
		token = tokens[0]
	}
	return func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if token == "" {
				if !Loopback(r.RemoteAddr) {
					Error(w, http.StatusForbidden, what+" is open to loopback clients only on this shaper (it has no token configured)")
					return
				}
				h(w, r)
				return
			}
			auth := r.Header.Get("Authorization")
			got, ok := bearerToken(auth)
			switch {
			case !ok:
				w.Header().Set("WWW-Authenticate", `Bearer realm="shaper"`)
				why := "no Authorization header"
				if auth != "" {
					why = "the Authorization header is not of the Bearer scheme"
				}
				Error(w, http.StatusUnauthorized, what+" needs a bearer token (Authorization: Bearer …): "+why)
			case !anyToken(got, tokens):
				Error(w, http.StatusForbidden, "wrong bearer token for "+what)
			default:
				h(w, r)
			}
		}
	}
}

// anyToken reports whether got is one of tokens, each compared in
// constant time.
func anyToken(got string, tokens []string) bool {
	match := 0
	for _, t := range tokens {
		match |= subtle.ConstantTimeCompare([]byte(got), []byte(t))
	}
	return match == 1
}

// bearerToken returns the token of an Authorization header value of the
// Bearer scheme, whose name is case-insensitive (RFC 9110, 11.1):
// "Bearer t", "bearer t"; false when there is none.
func bearerToken(v string) (string, bool) {
	scheme, token, ok := strings.Cut(v, " ")
	token = strings.TrimLeft(token, " ")
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// Loopback reports whether addr ("host:port" or a host) is a loopback address.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
