package slacksig_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/countersign/countersign/slacksig"
)

// FuzzVerify: a request passes verification only with the signature of
// its own timestamp and body, and every refusal matches exactly one of
// the package's verification errors.
func FuzzVerify(f *testing.F) {
	f.Add(exampleTimestamp, exampleSignature, []byte(exampleBody))
	f.Add(exampleTimestamp, signV0(exampleSecret, exampleTimestamp, nil), []byte(nil))
	f.Add("", "", []byte("x"))
	f.Add("1531420618.5", "v0=", []byte("x"))
	f.Add("-9223372036854775808", "v0=zz", []byte("x"))
	f.Add("9223372036854775807", "v1=00", []byte("x"))
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		v := slacksig.NewVerifier(exampleSecret, fixedClock(exampleTime))
		err := v.Verify(signatureHeader(ts, sig), body)
		valid := ts != "" && sig == signV0(exampleSecret, ts, body)
		if valid {
			if n, perr := strconv.ParseInt(ts, 10, 64); perr != nil || n < exampleTime.Unix()-300 || n > exampleTime.Unix()+300 {
				valid = false
			}
		}
		if valid != (err == nil) {
			t.Fatalf("Verify(ts %q, sig %q, %d bytes) = %v, want valid=%v", ts, sig, len(body), err, valid)
		}
		if err != nil {
			n := 0
			for _, e := range []error{slacksig.ErrMissingSignature, slacksig.ErrBadSignature, slacksig.ErrStaleRequest} {
				if errors.Is(err, e) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("Verify error %v matches %d of the verification errors, want 1", err, n)
			}
		}
		called := false
		h := v.Middleware(func(w http.ResponseWriter, r *http.Request, b []byte) { called = true })
		req := httptest.NewRequest(http.MethodPost, "/slack/commands", bytes.NewReader(body))
		req.Header = signatureHeader(ts, sig)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if called != valid {
			t.Errorf("Middleware called next = %v for a request that is valid=%v (status %d)", called, valid, rec.Code)
		}
	})
}
