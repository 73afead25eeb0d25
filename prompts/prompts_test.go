package prompts_test

import (
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/prompts"
)

func TestRenderSystem(t *testing.T) {
	now := time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC)
	tests := []struct {
		name string
		data prompts.System
		want []string
	}{
		{"with tools", prompts.System{
			Requester: "U1", Channel: "C2", Now: now,
			Tools: []prompts.Tool{{Name: "http_request", Description: "Make an HTTP request."}},
		}, []string{"user U1 in channel C2", "- http_request: Make an HTTP request.", "2026-11-22 09:30 UTC", `"Rejected by"`}},
		{"no tools, no requester", prompts.System{Now: now}, []string{"No tools are available"}},
	}
	for _, tt := range tests {
		got, err := prompts.RenderSystem(tt.data)
		if err != nil {
			t.Fatalf("RenderSystem(%s) = %v", tt.name, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("RenderSystem(%s) = %q, want it to contain %q", tt.name, got, w)
			}
		}
		if strings.Contains(got, "<@") || strings.Contains(got, "<#") || strings.Contains(got, "<!") {
			t.Errorf("RenderSystem(%s) holds Slack markup: %q", tt.name, got)
		}
		if tt.data.Requester == "" && strings.Contains(got, "working for") {
			t.Errorf("RenderSystem(%s) mentions a requester: %q", tt.name, got)
		}
	}
}
