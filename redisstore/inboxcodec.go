package redisstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

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

// encodeWaiting returns the stored form of thread's waiting calls.
func encodeWaiting(thread string, calls []runner.InboxEntry) ([]byte, error) {
	team, channel := threadPlace(thread)
	rows := make([][]any, 0, len(calls))
	for _, c := range calls {
		if c.Thread != thread {
			return json.Marshal(calls)
		}
		row := []any{c.Call, c.Round, c.Tool, c.Requester, c.Team, c.Channel, unixNano(c.Since), unixNano(c.Expires), c.Approvers, c.SelfApproval}
		if c.Team == team && c.Channel == channel && team != "" {
			row[4], row[5] = nil, nil
		}
		if len(c.Approvers) == 0 {
			row[8] = nil
		}
		rows = append(rows, row)
	}
	return json.Marshal(rows)
}

// decodeWaiting reads a stored entry of thread (either form).
func decodeWaiting(thread string, raw []byte) ([]runner.InboxEntry, error) {
	if !bytes.HasPrefix(raw, []byte("[[")) {
		var calls []runner.InboxEntry
		err := json.Unmarshal(raw, &calls)
		return calls, err
	}
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
