package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/internal/termtext"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackdir"
	"github.com/countersign/countersign/tools"
)

const approvalsUsage = "approvals list [--user U…] [--wide|--json]"

// approvalRow is one call of "bot approvals list".
type approvalRow struct {
	Thread       string          `json:"thread"`
	Call         string          `json:"call"`
	Round        int             `json:"round"`
	Tool         string          `json:"tool"`
	Requester    string          `json:"requester,omitempty"`
	Team         string          `json:"team,omitempty"`
	Channel      string          `json:"channel,omitempty"`
	Since        time.Time       `json:"since,omitzero"`
	Expires      time.Time       `json:"expires,omitzero"`
	Approvers    []string        `json:"approvers"`
	SelfApproval bool            `json:"self_approval"`
	Args         json.RawMessage `json:"args,omitempty"`
	Hash         string          `json:"hash"`
	Reason       string          `json:"reason,omitempty"`
	// For are the users asked about (--user) whom the call waits for.
	For []string `json:"for,omitempty"`
}

// userList is a flag that may be given several times, or with commas.
type userList []string

func (u *userList) String() string { return strings.Join(*u, ",") }

func (u *userList) Set(v string) error {
	for _, id := range strings.Split(v, ",") {
		if id = strings.TrimSpace(id); id != "" {
			*u = append(*u, id)
		}
	}
	return nil
}

// runApprovals prints the calls that wait for a decision: all of them,
// or those one of the users given may decide, by the same rules as the
// Slack Home tab.
func runApprovals(ctx context.Context, args []string, e env) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		args = []string{"list", "--help"} // the one subcommand's help
	}
	if len(args) == 0 || args[0] != "list" {
		return fmt.Errorf("approvals: the subcommand is list (usage: bot %s)", approvalsUsage)
	}
	fs := flags("approvals list", approvalsUsage, e)
	var users userList
	fs.Var(&users, "user", "only the calls this Slack user may decide (repeat it, or separate IDs with commas, for several)")
	asJSON := fs.Bool("json", false, "print JSON")
	wide := fs.Bool("wide", false, "print every column whole instead of fitting the terminal")
	if err := parse(fs, args[1:], e); err != nil {
		return err
	}
	width := termWidth(e.getenv)
	if *wide {
		width = 0
	}
	if err := needRedis(e, "approvals list"); err != nil {
		return err
	}
	e, flush := escapedTerminal(e)
	defer flush()
	log, err := newLogger(e.getenv, e.stderr, logrus.WarnLevel)
	if err != nil {
		return err
	}
	// Whom a call waits for may depend on Slack: user groups, and the
	// members of a channel where anyone may decide.
	var groups runner.Groups
	if token := e.getenv("SLACK_BOT_TOKEN"); token != "" {
		var opts []slack.Option
		if u := e.getenv("SLACK_API_URL"); u != "" {
			opts = append(opts, slack.OptionAPIURL(u))
		}
		groups = slackdir.NewGroups(slack.New(token, opts...), 0, nil)
	} else if len(users) > 0 {
		fmt.Fprintln(e.stderr, "bot approvals list: SLACK_BOT_TOKEN is not set, so user groups and channel members cannot be asked: "+
			"calls that wait for a user group, or for anyone in their channel, are left out for --user.")
	}
	quiet := runner.ReporterFunc(func(context.Context, runner.Event) error { return nil })
	svc, err := newService(ctx, e.getenv, log, nil, groups, func(*redisstore.Store) runner.Reporter { return quiet })
	if err != nil {
		return err
	}
	defer svc.Close()

	all, err := svc.Runner.WaitingCalls(ctx, runner.InboxQuery{})
	if err != nil {
		return err
	}
	rows := make([]approvalRow, 0, len(all))
	for _, w := range all {
		row := approvalRow{Thread: w.Thread, Call: w.Call, Round: w.Round, Tool: w.Tool, Requester: w.Requester, Team: w.Team,
			Channel: w.Channel, Since: w.Since, Expires: w.Expires, Approvers: w.Approvers, SelfApproval: w.SelfApproval,
			Args: tools.MaskSecrets(w.Tool, w.AgentCall.RunArgs()), Hash: w.AgentCall.RunHash(), Reason: w.AgentCall.Reason}
		if row.Approvers == nil {
			row.Approvers = []string{}
		}
		for _, u := range users {
			ok, err := svc.Runner.WaitsFor(ctx, w.InboxEntry, u)
			if err != nil {
				fmt.Fprintf(e.stderr, "bot approvals list: whether %s waits for %s: %v\n", w.Call, u, err)
			}
			if ok {
				row.For = append(row.For, u)
			}
		}
		if len(users) > 0 && len(row.For) == 0 {
			continue
		}
		rows = append(rows, row)
	}
	if *asJSON {
		return writeJSONTo(e.stdout, rows)
	}
	if len(rows) == 0 {
		if len(users) > 0 {
			fmt.Fprintf(e.stdout, "No calls wait for %s.\n", strings.Join(users, ", "))
		} else {
			fmt.Fprintln(e.stdout, "No calls wait for a decision.")
		}
		return nil
	}
	header := []string{"WAITING", "TOOL", "TARGET", "REQUESTER", "APPROVERS", "THREAD", "CALL"}
	if len(users) > 0 {
		header = append(header, "FOR")
	}
	tab := newTable(header...).shrinks(2, 3, 4).endShrinks(5)
	if len(users) > 0 {
		tab.shrinks(7)
	}
	now := time.Now()
	for _, r := range rows {
		cells := []string{waitedText(now, r.Since), r.Tool, callTarget(r.Tool, r.Args), orNone(r.Requester), approversText(r), r.Thread, r.Call}
		if len(users) > 0 {
			cells = append(cells, strings.Join(r.For, ","))
		}
		for i, c := range cells {
			cells[i] = termtext.Line(c)
		}
		tab.add(cells...)
	}
	return tab.write(e.stdout, width)
}

// approversText says who may decide a call, for the table. A call whose
// rule lists nobody waits for anyone in its channel; a terminal chat's
// thread has no channel, and anyone at the terminal may decide.
func approversText(r approvalRow) string {
	approvers := strings.Join(r.Approvers, ",")
	switch {
	case approvers != "":
	case r.Channel == "":
		approvers = "anyone (terminal chat)"
	default:
		approvers = "anyone in " + r.Channel
	}
	if !r.SelfApproval {
		approvers += " (not the requester)"
	}
	return approvers
}

// waitedText is how long a call has waited, to the minute.
func waitedText(now, since time.Time) string {
	if since.IsZero() {
		return "-"
	}
	d := now.Sub(since).Round(time.Minute)
	if d < time.Minute {
		return "<1m"
	}
	return strings.TrimSuffix(d.String(), "0s")
}

// callTarget is a call's arguments in one short line: an HTTP request's
// method and URL, any other tool's JSON.
func callTarget(tool string, args json.RawMessage) string {
	if tool == tools.HTTPRequestName {
		var a struct{ Method, URL string }
		if json.Unmarshal(args, &a) == nil && a.URL != "" {
			return oneLine(a.Method+" "+a.URL, 80)
		}
	}
	return oneLine(string(args), 60)
}
