// Package slacksim is a Slack simulator for trying Countersign in a
// browser, with no Slack workspace: a web page that looks and behaves like
// one Slack channel, and the Slack side of the conversation behind it.
//
// The Simulator plays Slack's part and nothing else. When a person types
// in the page, it sends the bot what Slack would send — a signed slash
// command, a signed Events API callback, a signed block_actions or
// view_submission payload — over HTTP to the bot's real /slack/*
// endpoints. And it is the Web API the bot's Slack client calls (point
// SLACK_API_URL at APIHandler): it keeps the messages, ephemeral messages
// and open modals the bot posts, and streams every change to the page
// with server-sent events. All of the bot's behaviour comes from the
// handlers package; none of it is reimplemented here.
//
// Slack's behaviour the simulator reproduces:
//
//   - Slash commands: the text is sent with &, < and > escaped; the
//     command's immediate response (a JSON body or plain text) is shown to
//     the person as an ephemeral message; a failed or slow response
//     (Slack waits 3 seconds) becomes Slackbot's "failed with the error"
//     message. Commands other than the configured one are refused as Slack
//     refuses them. A command carries no thread: typed in a thread, it
//     still starts at the channel's top level, as in Slack.
//   - Messages people type are posted as theirs and delivered as
//     "message" events (and "app_mention" events when they mention the
//     bot, typed as @Countersign or <@U…>), with &, < and > escaped,
//     @names turned into <@U…> and bare URLs into <…> links. The bot's own
//     messages are not delivered back to it.
//   - Every trigger_id is single-use and expires after 3 seconds; a modal
//     opened with it belongs to the person who clicked.
//   - A view_submission answered with an empty body closes the modal;
//     response_action "errors" shows the errors under the inputs,
//     "update", "push" and "clear" do what they say; anything else shows
//     Slack's "trouble connecting" error in the modal. A view's hash
//     changes whenever the view changes, errors included.
//   - The app's Home tab: opening it sends the bot app_home_opened, the
//     view the bot publishes (views.publish) is shown to that person
//     alone, and a click on its buttons is a block_actions payload that
//     names the view and no channel. Everyone is a member of the one
//     channel (conversations.members).
//   - Timestamps are unique and increasing; trigger, event and view IDs
//     are random.
//
// What it leaves out: one team, one public channel the bot is in, no user
// groups (usergroups.users.list answers every group with no members),
// no Socket Mode, no response_url, no retries of failed deliveries, no
// files, reactions or message edits by people. Slack's text limits are
// not enforced beyond a sanity check of the blocks' shape.
//
// The page is one embedded HTML file with plain JavaScript and CSS (under
// static/), no build step. It renders the Block Kit the bot sends —
// header, section (text, fields), context, actions with buttons, divider,
// modals with plain_text_input, and the Home tab — and Slack's mrkdwn,
// always through the DOM's text nodes, never as HTML, because the bot's
// text carries model and tool output.
//
// The /ui/* endpoints act for whoever the page says is typing: anyone who
// reaches the page can act as any of the playground's users. So the page
// is served only to a browser that opened PageURL, whose random token
// only the person who started the playground is shown; any other process
// on the machine gets 403 from the page and from /ui/*. The endpoints
// accept only JSON from the page's own origin, so that another web site
// cannot drive them from a visitor's browser. Serve the playground on
// loopback.
package slacksim
