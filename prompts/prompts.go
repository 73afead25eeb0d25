// Package prompts holds the text the agent sends to the model, as templates
// embedded in the binary and rendered with text/template. It owns wording
// only; it does not call models or know about Slack.
package prompts

import (
	"bytes"
	"embed"
	"fmt"
	"text/template"
	"time"
)

//go:embed *.tmpl
var files embed.FS

var templates = template.Must(template.ParseFS(files, "*.tmpl"))

// Tool is what the system prompt says about one tool.
type Tool struct {
	Name        string
	Description string
}

// System is the data of the system prompt.
type System struct {
	// Requester is who wrote the message the model answers, and Channel
	// where: IDs (Slack's, or whatever the front end uses), named in
	// plain words, never as the markup of a front end. Empty when unknown.
	Requester string
	Channel   string
	Tools     []Tool
	Now       time.Time
}

// RenderSystem renders the system prompt.
func RenderSystem(data System) (string, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, "system.tmpl", data); err != nil {
		return "", fmt.Errorf("render system prompt: %w", err)
	}
	return b.String(), nil
}
