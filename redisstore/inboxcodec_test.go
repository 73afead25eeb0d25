package redisstore

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
)

// A thread's inbox entry reads back as it was written, in its compact
// form, and one written in the earlier form (objects with named fields,
// by a bot before this one) still reads.
func TestWaitingCallsEncoding(t *testing.T) {
	t.Parallel()
	const thread = "T0TEAM:C0CHANNEL:1700000000.000100"
	since := time.Date(2026, 11, 26, 9, 53, 57, 503626813, time.UTC)
	tests := []struct {
		name  string
		calls []runner.InboxEntry
	}{
		{"one call in its thread's channel", []runner.InboxEntry{{Thread: thread, Call: "0.0", Tool: "http_request", Requester: "U0ALICE",
			Team: "T0TEAM", Channel: "C0CHANNEL", Since: since, Expires: since.Add(24 * time.Hour), SelfApproval: true}}},
		{"two calls, approvers, a later round, another team", []runner.InboxEntry{
			{Thread: thread, Call: "0.0", Round: 2, Tool: "deploy", Team: "T9", Channel: "C0CHANNEL", Approvers: []string{"U0BOB", "S0OPS"}},
			{Thread: thread, Call: "0.1", Tool: "http_request", Team: "", Channel: ""},
		}},
		{"a call of another thread", []runner.InboxEntry{{Thread: "T1:C1:1.2", Call: "0.0", Tool: "x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := encodeWaiting(thread, tt.calls)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeWaiting(thread, raw)
			if err != nil || !reflect.DeepEqual(got, tt.calls) {
				t.Errorf("decodeWaiting(encodeWaiting()) = %+v, %v; want %+v", got, err, tt.calls)
			}
			earlier, _ := json.Marshal(tt.calls)
			if len(raw) > len(earlier) {
				t.Errorf("compact form is %d bytes, the earlier %d", len(raw), len(earlier))
			}
			got, err = decodeWaiting(thread, earlier)
			if err != nil || !reflect.DeepEqual(got, tt.calls) {
				t.Errorf("decodeWaiting(the earlier form) = %+v, %v; want %+v", got, err, tt.calls)
			}
		})
	}
}

// FuzzDecodeWaiting: whatever a thread's inbox entry holds, reading it
// never panics, counting its calls without reading them gives as many as
// reading them does, and calls of the thread read back as they were
// written.
func FuzzDecodeWaiting(f *testing.F) {
	f.Add("T1:C1:1.2", []byte(`[["0.0",0,"x","U1",null,null,1,2,null,true]]`), "0.0", "T1", 3, int64(5))
	f.Add("T1:C1:1.2", []byte(`[{"thread":"T1:C1:1.2","call":"0.0","tool":"x"}]`), "", "", 0, int64(0))
	f.Add("x", []byte(`[[`), "a:b", "C", -1, int64(-1))
	f.Add("T1:C1:1.2", []byte(`[["0.0",0,"x","U1",null,null,1,2,null,true]]`), "0.0", "T1", 3, int64(5))
	f.Add("T1:C1:1.2", []byte(` [ [ "0.0" , 2 , "x\u00e9", null, "T2", "C\n", -1764150837503626813, 0, ["U1", "S2"], false ], ["0.1",0,"y","",null,null,0,0,[],null]] `), "", "", 0, int64(0))
	f.Add("T1:C1:1.2", []byte(`[["0.0",1.0,"x","U1",null,null,1,2,null,true]]`), "", "", 0, int64(0))
	f.Add("T1:C1:1.2", []byte(`[["0.0",0,"x","U1",null,null,1,2,["a",null],true]]`), "", "", 0, int64(0))
	f.Add("T1:C1:1.2", []byte(`[["0.0",0,"x","U1",null,null,1,2,null,true,null]]`), "", "", 0, int64(0))
	f.Fuzz(func(t *testing.T, thread string, raw []byte, call, team string, round int, at int64) {
		// The compact form reads as encoding/json reads it, whoever
		// reads it.
		if bytes.HasPrefix(raw, []byte("[[")) {
			got, gerr := decodeWaiting(thread, raw)
			want, werr := unmarshalWaiting(thread, raw)
			if (gerr == nil) != (werr == nil) || gerr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeWaiting(%q) = %+v, %v; encoding/json reads %+v, %v", raw, got, gerr, want, werr)
			}
		}
		if calls, err := decodeWaiting(thread, raw); err == nil {
			if n, err := countWaiting(raw); err != nil || n != len(calls) {
				t.Errorf("countWaiting(%q) = %d, %v; want %d, as read", raw, n, err, len(calls))
			}
		}
		if !utf8.ValidString(thread) || !utf8.ValidString(call) || !utf8.ValidString(team) {
			return // JSON carries text: invalid bytes become U+FFFD, in either form
		}
		want := []runner.InboxEntry{{Thread: thread, Call: call, Round: round, Tool: call, Requester: team, Team: team,
			Channel: call, Since: fromUnixNano(at), Approvers: []string{team}}}
		stored, err := encodeWaiting(thread, want)
		if err != nil {
			t.Fatal(err)
		}
		if marshalled := marshalWaiting(thread, want); string(stored) != string(marshalled) {
			t.Fatalf("encodeWaiting(%+v) = %s; json.Marshal of its rows: %s", want, stored, marshalled)
		}
		got, err := decodeWaiting(thread, stored)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeWaiting(encodeWaiting(%+v)) = %+v, %v", want, got, err)
		}
		if n, err := countWaiting(stored); err != nil || n != 1 {
			t.Errorf("countWaiting(encodeWaiting(one call)) = %d, %v; want 1", n, err)
		}
	})
}

// marshalWaiting is the compact form as json.Marshal writes it, the
// rows as lists of values: the bytes encodeWaiting must write.
func marshalWaiting(thread string, calls []runner.InboxEntry) []byte {
	team, channel := threadPlace(thread)
	rows := make([][]any, 0, len(calls))
	for _, c := range calls {
		row := []any{c.Call, c.Round, c.Tool, c.Requester, c.Team, c.Channel, unixNano(c.Since), unixNano(c.Expires), c.Approvers, c.SelfApproval}
		if c.Team == team && c.Channel == channel && team != "" {
			row[4], row[5] = nil, nil
		}
		if len(c.Approvers) == 0 {
			row[8] = nil
		}
		rows = append(rows, row)
	}
	b, _ := json.Marshal(rows)
	return b
}

// The compact form is written byte for byte as json.Marshal wrote it,
// and read without encoding/json.
func TestWaitingCallsCompactForm(t *testing.T) {
	t.Parallel()
	const thread = "T0TEAM:C0CHANNEL:1700000000.000100"
	since := time.Date(2026, 11, 26, 9, 53, 57, 503626813, time.UTC)
	calls := []runner.InboxEntry{
		{Thread: thread, Call: "0.0", Round: 2, Tool: "deploy <prod> & \"more\"", Requester: "U0ALICE", Team: "T0TEAM", Channel: "C0CHANNEL",
			Since: since, Expires: since.Add(time.Hour), Approvers: []string{"U0BOB", "S0OPS"}, SelfApproval: true},
		{Thread: thread, Call: "0.1", Tool: "http_request", Team: "T9", Channel: "C9", Approvers: []string{}},
	}
	raw, err := encodeWaiting(thread, calls)
	if err != nil {
		t.Fatal(err)
	}
	if want := marshalWaiting(thread, calls); string(raw) != string(want) {
		t.Errorf("encodeWaiting = %s, want %s", raw, want)
	}
	got, ok := readWaiting(thread, raw)
	calls[1].Approvers = nil // stored as null: none
	if !ok || !reflect.DeepEqual(got, calls) {
		t.Errorf("readWaiting(%s) = %+v, %v; want %+v", raw, got, ok, calls)
	}
}

// A person's recent decisions are stored as json.Marshal writes them,
// whatever the text, the kind or the time: they are read back by
// encoding/json.
func FuzzEncodeDecided(f *testing.F) {
	f.Add("T1:C1:1.2", "0.0", "deploy", "", "", "U1", "", 0, 0, int64(1764150837503626813))
	f.Add("T1:C1:1.2", "0.1", "x<y>&\u2028", "T2", "C\n\"", "U1", "no\xff", 3, 2, int64(-1))
	f.Add("", "", "", "", "", "", "", -1, 99, int64(0))
	f.Add("t", "c", "tool", "T", "C", "S1", "because", 1, 6, int64(253402300800000000))
	f.Fuzz(func(t *testing.T, thread, call, tool, team, channel, by, reason string, round, kind int, at int64) {
		d := runner.DecisionRecord{Thread: thread, Call: call, Round: round, Tool: tool, Team: team,
			Channel: channel, By: by, Kind: agent.Kind(kind), At: time.Unix(0, at).UTC(), Reason: reason}
		if at%7 == 0 {
			d.At = time.Unix(at, 0).In(time.FixedZone("x", int(at%86400)))
		}
		want, werr := json.Marshal(d)
		got, gerr := encodeDecided(d)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("encodeDecided(%+v) = %s, %v; json.Marshal: %s, %v", d, got, gerr, want, werr)
		}
		if gerr == nil && string(got) != string(want) {
			t.Fatalf("encodeDecided(%+v) =\n%s\njson.Marshal:\n%s", d, got, want)
		}
	})
}
