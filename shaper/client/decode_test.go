package client

import (
	"encoding/json"
	"reflect"
	"testing"
)

var decodeSeeds = []string{
	`{"id":"dn2hhalst0lg-2","policy":"bulk","key":"k1","queued":1,"eta_ms":0}` + "\n",
	`{"id":"x","policy":"p","key":"a/b é","queued":12,"eta_ms":3500,"duplicate":true}`,
	`{"status":"deferred","id":"j","policy":"p","key":"k","queued":0,"eta_ms":0,"retry_after_ms":1500,"deferred":true,"code":429}`,
	`{"status":"error","queued":0,"eta_ms":0,"deferred":false,"code":404,"error":"unknown policy \"x\""}`,
	`{"status":"rejected","policy":"p","key":"\u003c\u003e","queued":5,"eta_ms":0,"retry_after_ms":1,"deferred":false,"code":429,"error":"queue of key \"\u003c\u003e\" is full"}`,
	` { "ID" : "upper" , "queued" : -0 } `, `{}`, `{"queued":1.0}`, `{"queued":01}`, `{"queued":1e3}`, `{"id":null}`,
	`{"id":"a","id":"b"}`, `{"status":"maybe"}`, `{"duplicate":truex}`, `{"code":99999999999999999999}`, "{\"key\":\"\xff\"}",
	`{"key":"a"`, `[1]`, `{"x":{"y":1}}`, `{"eta_ms":-5,}`,
}

// The fast path decodes exactly what encoding/json does, or leaves the
// answer to it.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast, std Accepted
		errFast, errStd := decodeAccepted(b, &fast), json.Unmarshal(b, &std)
		if (errFast == nil) != (errStd == nil) || errStd == nil && fast != std {
			t.Errorf("decodeAccepted(%q) = %+v, %v; json.Unmarshal: %+v, %v", b, fast, errFast, std, errStd)
		}
		var fastReply, stdReply Reply
		errFast, errStd = decodeReply(b, &fastReply), json.Unmarshal(b, &stdReply)
		if (errFast == nil) != (errStd == nil) || errStd == nil && !reflect.DeepEqual(fastReply, stdReply) {
			t.Errorf("decodeReply(%q) = %+v, %v; json.Unmarshal: %+v, %v", b, fastReply, errFast, stdReply, errStd)
		}
	})
}

func BenchmarkDecodeAccepted(b *testing.B) {
	body := []byte(decodeSeeds[0])
	b.ReportAllocs()
	for b.Loop() {
		var a Accepted
		if err := decodeAccepted(body, &a); err != nil {
			b.Fatal(err)
		}
	}
}
