package redisstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/jsonform"
	"github.com/countersign/countersign/runner"
)

// A thread's entry in the inbox's calls hash is kept for as long as its
// calls wait, days perhaps, one per paused thread: it is written without
// what the hash's field already says or what repeats on every entry. Each
// call is a JSON array of its fields in a fixed order,
//
//	[call, round, tool, requester, team, channel, since, expires, approvers, self_approval]
//
// with the thread left out (it is the hash's field), team and channel null
// when they are the thread's own (team:channel:ts), and the times in Unix
// nanoseconds (0: none). A value of objects with named fields (the
// earlier form: `[{"thread":…}]`) is still read. A list whose calls are
// not all the field's thread's is written in that earlier form.

// encodeWaiting returns the stored form of thread's waiting calls: what
// json.Marshal writes for the rows, written field by field.
func encodeWaiting(thread string, calls []runner.InboxEntry) ([]byte, error) {
	team, channel := threadPlace(thread)
	b := make([]byte, 0, 128*len(calls))
	b = append(b, '[')
	for i, c := range calls {
		if c.Thread != thread {
			return json.Marshal(calls)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = jsonform.AppendString(b, c.Call)
		b = strconv.AppendInt(append(b, ','), int64(c.Round), 10)
		b = jsonform.AppendString(append(b, ','), c.Tool)
		b = jsonform.AppendString(append(b, ','), c.Requester)
		if c.Team == team && c.Channel == channel && team != "" {
			b = append(b, ",null,null"...)
		} else {
			b = jsonform.AppendString(append(b, ','), c.Team)
			b = jsonform.AppendString(append(b, ','), c.Channel)
		}
		b = strconv.AppendInt(append(b, ','), unixNano(c.Since), 10)
		b = strconv.AppendInt(append(b, ','), unixNano(c.Expires), 10)
		if len(c.Approvers) == 0 {
			b = append(b, ",null"...)
		} else {
			b = jsonform.AppendStrings(append(b, ','), c.Approvers)
		}
		b = strconv.AppendBool(append(b, ','), c.SelfApproval)
		b = append(b, ']')
	}
	return append(b, ']'), nil
}

// encodeDecided returns what json.Marshal writes for d, written field by
// field: every decision adds one to its maker's list of recent decisions
// (a session's close, in its script).
func encodeDecided(d runner.DecisionRecord) ([]byte, error) {
	kind, err := d.Kind.MarshalText()
	if err != nil {
		return nil, fmt.Errorf("decision of %s: %w", d.Thread, err)
	}
	b := make([]byte, 0, 192+len(d.Reason))
	b = append(b, '{')
	b = jsonform.AppendString(jsonform.AppendKey(b, "thread"), d.Thread)
	b = jsonform.AppendString(jsonform.AppendKey(b, "call"), d.Call)
	b = jsonform.AppendIntField(b, "round", d.Round)
	b = jsonform.AppendString(jsonform.AppendKey(b, "tool"), d.Tool)
	b = jsonform.AppendStringField(b, "team", d.Team)
	b = jsonform.AppendStringField(b, "channel", d.Channel)
	b = jsonform.AppendString(jsonform.AppendKey(b, "by"), d.By)
	b = jsonform.AppendString(jsonform.AppendKey(b, "kind"), string(kind))
	if b, err = jsonform.AppendTime(jsonform.AppendKey(b, "at"), d.At); err != nil {
		return nil, fmt.Errorf("decision of %s: %w", d.Thread, err)
	}
	b = jsonform.AppendStringField(b, "reason", d.Reason)
	return append(b, '}'), nil
}

// decodeWaiting reads a stored entry of thread (either form). The
// compact form as encodeWaiting writes it is read by a jsonform.Reader;
// anything else, by encoding/json.
func decodeWaiting(thread string, raw []byte) ([]runner.InboxEntry, error) {
	if !bytes.HasPrefix(raw, []byte("[[")) {
		var calls []runner.InboxEntry
		err := json.Unmarshal(raw, &calls)
		return calls, err
	}
	if calls, ok := readWaiting(thread, raw); ok {
		return calls, nil
	}
	return unmarshalWaiting(thread, raw)
}

// readWaiting reads the compact form with a jsonform.Reader, as
// unmarshalWaiting does, and gives up on anything the Reader does not
// read: null for any field leaves it as it is, as json.Unmarshal does.
func readWaiting(thread string, raw []byte) ([]runner.InboxEntry, bool) {
	team, channel := threadPlace(thread)
	calls := make([]runner.InboxEntry, 0, 1)
	r := jsonform.NewReader(raw)
	ok := r.Array(func() bool {
		c := runner.InboxEntry{Thread: thread, Team: team, Channel: channel}
		field := 0
		ok := r.Array(func() bool {
			field++
			if r.Null() {
				return field <= 10
			}
			var ok bool
			switch field {
			case 1:
				c.Call, ok = r.StrOrUnmarshal()
			case 2:
				c.Round, ok = r.Int()
			case 3:
				c.Tool, ok = r.StrOrUnmarshal()
			case 4:
				c.Requester, ok = r.StrOrUnmarshal()
			case 5:
				c.Team, ok = r.StrOrUnmarshal()
			case 6:
				c.Channel, ok = r.StrOrUnmarshal()
			case 7, 8:
				var n int64
				n, ok = r.Int64()
				if field == 7 {
					c.Since = fromUnixNano(n)
				} else {
					c.Expires = fromUnixNano(n)
				}
			case 9:
				c.Approvers, ok = r.Strings()
			case 10:
				c.SelfApproval, ok = r.Boolean()
			}
			return ok
		})
		calls = append(calls, c)
		return ok && field == 10
	})
	return calls, ok && r.End()
}

// unmarshalWaiting reads the compact form with encoding/json.
func unmarshalWaiting(thread string, raw []byte) ([]runner.InboxEntry, error) {
	var rows [][]json.RawMessage
	if err := json.Unmarshal(raw, &rows); err != nil {
		return nil, err
	}
	team, channel := threadPlace(thread)
	calls := make([]runner.InboxEntry, len(rows))
	for i, row := range rows {
		if len(row) != 10 {
			return nil, fmt.Errorf("inbox call %d has %d fields, want 10", i, len(row))
		}
		c := runner.InboxEntry{Thread: thread, Team: team, Channel: channel}
		var since, expires int64
		for j, dst := range []any{&c.Call, &c.Round, &c.Tool, &c.Requester, &c.Team, &c.Channel, &since, &expires, &c.Approvers, &c.SelfApproval} {
			// null leaves the field as it is: team and channel the
			// thread's, approvers none.
			if err := json.Unmarshal(row[j], dst); err != nil {
				return nil, fmt.Errorf("inbox call %d, field %d: %w", i, j, err)
			}
		}
		c.Since, c.Expires = fromUnixNano(since), fromUnixNano(expires)
		calls[i] = c
	}
	return calls, nil
}

// countWaiting returns how many calls a stored entry (either form)
// holds: the length of its list, whose items it does not decode.
func countWaiting(raw []byte) (int, error) {
	if len(raw) == 0 {
		return 0, nil
	}
	var calls []json.RawMessage
	if err := json.Unmarshal(raw, &calls); err != nil {
		return 0, err
	}
	return len(calls), nil
}

// threadPlace is the team and channel a thread's name (team:channel:ts)
// holds, or "" and "" if it is not such a name.
func threadPlace(thread string) (team, channel string) {
	parts := strings.SplitN(thread, ":", 3)
	if len(parts) != 3 {
		return "", ""
	}
	return parts[0], parts[1]
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
