package slackui

// Text from the model, from tools and MCP servers, and from people
// reaches Slack only escaped by this package for the exact format it
// is sent in: mrkdwn for a message's text and section blocks
// (Mrkdwn for an answer, slackEscape for a piece of the bot's
// own lines and code blocks), Markdown for the markdown_text of streamed
// answers (Markdown; package handlers' stream.go), plain text for headers and
// buttons. Whatever a fetched page or a model writes, no <!here>,
// <!channel>, <@…>, <#…>, <url|label> or [label](target) of its own
// becomes live, and an unclosed code fence cannot swallow what the bot
// posts after it. The bot's own markup — the requester's mention on the
// root message, "Approved by <@…>" on cards — is added around the
// escaped text, never taken from it.
