package llmtest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm/llmtest"
)

func post(t *testing.T, url string, header http.Header, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST %s: answer %q is not JSON: %v", url, raw, err)
	}
	return resp.StatusCode, out
}

// errorMessage reads error.message, which both providers use.
func errorMessage(t *testing.T, body map[string]any) string {
	t.Helper()
	e, ok := body["error"].(map[string]any)
	if !ok {
		t.Fatalf("answer %v has no error object", body)
	}
	msg, _ := e["message"].(string)
	if _, ok := e["type"].(string); !ok || msg == "" {
		t.Fatalf("error %v lacks type or message", e)
	}
	return msg
}

const (
	oaTool      = `{"type":"function","function":{"name":"http_request","parameters":{"type":"object","properties":{}}}}`
	oaCalls     = `{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"http_request","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"http_request","arguments":"{}"}}]}`
	oaResultA   = `{"role":"tool","tool_call_id":"a","content":"ra"}`
	oaResultB   = `{"role":"tool","tool_call_id":"b","content":"rb"}`
	oaUser      = `{"role":"user","content":"hi"}`
	oaUserParts = `{"role":"user","content":[{"type":"text","text":"hi"}]}`
)

// pngData is a PNG of one grey pixel, in base64; pngB64 is it as a
// data: URL.
const (
	pngData = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAADklEQVR4nGJiAAQAAP//AAYAA/rQWa4AAAAASUVORK5CYII="
	pngB64  = "data:image/png;base64," + pngData
)

// brokenPNGData is a PNG's signature and nothing after it: its first
// bytes are a PNG's, but it is no image.
const brokenPNGData = "iVBORw0KGgo="

// oaImage is a user message with an image.
func oaImage(url string) string {
	return `{"role":"user","content":[{"type":"text","text":"the screenshot:"},{"type":"image_url","image_url":{"url":"` + url + `"}}]}`
}

func oaRequest(msgs ...string) string {
	return `{"model":"m","tools":[` + oaTool + `],"messages":[` + strings.Join(msgs, ",") + `]}`
}

func TestOpenAIServerValidates(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantErr string // part of the error message; "" for a valid request
	}{
		{"plain", oaRequest(oaUser), ""},
		{"content parts", oaRequest(oaUserParts), ""},
		{"two calls answered", oaRequest(oaUser, oaCalls, oaResultA, oaResultB), ""},
		{"answered in any order", oaRequest(oaUser, oaCalls, oaResultB, oaResultA, oaUser), ""},
		{"one call unanswered", oaRequest(oaUser, oaCalls, oaResultA), "did not have response messages: b"},
		{"user before the results", oaRequest(oaUser, oaCalls, oaResultA, oaUser, oaResultB), "did not have response messages: b"},
		{"tool message without a call", oaRequest(oaUser, oaResultA), "must be a response to a preceeding message with 'tool_calls'"},
		{"answered twice", oaRequest(oaUser, oaCalls, oaResultA, oaResultA, oaResultB), "must be a response to a preceeding"},
		{"wrong call type", oaRequest(oaUser, `{"role":"assistant","tool_calls":[{"id":"a","type":"","function":{"name":"f","arguments":"{}"}}]}`, oaResultA), "Supported values are: 'function'"},
		{"call without id", oaRequest(oaUser, `{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}`), "tool_calls[0].id"},
		{"arguments not a string", oaRequest(oaUser, `{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":{}}}]}`, oaResultA), "could not parse"},
		{"unknown role", oaRequest(`{"role":"robot","content":"x"}`), "Supported values are"},
		{"user without content", oaRequest(`{"role":"user"}`), "content"},
		{"no messages", `{"model":"m","messages":[]}`, "too short"},
		{"no model", `{"messages":[` + oaUser + `]}`, "'model'"},
		{"bad tool name", `{"model":"m","tools":[{"type":"function","function":{"name":"a b"}}],"messages":[` + oaUser + `]}`, "pattern"},
		{"null schema", `{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":[]}}],"messages":[` + oaUser + `]}`, "schema"},
		{"not JSON", `{`, "could not parse"},
		{"object without properties", `{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"messages":[` + oaUser + `]}`, "object schema missing properties"},
		{"nested object without properties", `{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"o":{"type":"object"}}}}}],"messages":[` + oaUser + `]}`, "object schema missing properties"},
		{"top-level oneOf", `{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"oneOf":[{"type":"object","properties":{}}]}}}],"messages":[` + oaUser + `]}`, "must be a JSON Schema of 'type: \"object\"'"},
		{"temperature for o4-mini", `{"model":"o4-mini","temperature":0,"messages":[` + oaUser + `]}`, "Only the default (1) value is supported"},
		{"temperature for gpt-4o", `{"model":"gpt-4o","temperature":0,"messages":[` + oaUser + `]}`, ""},
		{"no temperature for o1", `{"model":"o1","messages":[` + oaUser + `]}`, ""},
		{"max_tokens for o3", `{"model":"o3","max_tokens":10,"messages":[` + oaUser + `]}`, "max_completion_tokens"},
		{"top_p for gpt-5", `{"model":"gpt-5","top_p":0.5,"messages":[` + oaUser + `]}`, "'top_p' is not supported"},
		{"image after the results", oaRequest(oaUser, oaCalls, oaResultA, oaResultB, oaImage(pngB64)), ""},
		{"image said to be another type", oaRequest(oaUser, oaImage(strings.Replace(pngB64, "image/png", "image/jpeg", 1))), "does not match"},
		{"image whose data is broken", oaRequest(oaUser, oaImage("data:image/png;base64,"+brokenPNGData)), "Could not process image"},
		{"image that is not base64", oaRequest(oaUser, oaImage("data:image/png;base64,%%%")), "not valid base64"},
		{"image of another type", oaRequest(oaUser, oaImage("data:image/svg+xml;base64,PHN2Zy8+")), "Invalid image"},
		{"image in a tool message", oaRequest(oaUser, oaCalls, oaResultA, `{"role":"tool","tool_call_id":"b","content":[{"type":"image_url","image_url":{"url":"`+pngB64+`"}}]}`), "array of text parts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewOpenAIServer(t, llmtest.Reply("ok"))
			status, body := post(t, srv.URL()+"/chat/completions", http.Header{"Content-Type": {"application/json"}}, tt.body)
			if tt.wantErr == "" {
				if status != http.StatusOK {
					t.Fatalf("POST %s = %d %v, want 200", tt.body, status, body)
				}
				return
			}
			if status != http.StatusBadRequest {
				t.Fatalf("POST %s = %d, want 400", tt.body, status)
			}
			if msg := errorMessage(t, body); !strings.Contains(msg, tt.wantErr) {
				t.Errorf("POST %s: error %q, want it to mention %q", tt.body, msg, tt.wantErr)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 || reqs[0].Status != http.StatusBadRequest || reqs[0].Problem == "" {
				t.Errorf("Requests() = %+v, want one rejected request with its problem", reqs)
			}
			if srv.Remaining() != 1 {
				t.Errorf("Remaining() = %d, want the reply kept for a valid request", srv.Remaining())
			}
		})
	}
}

func TestOpenAIServerScript(t *testing.T) {
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("text", llmtest.Call("", "f", `{"a":1}`)))
	srv.FailNext(2, http.StatusServiceUnavailable)
	h := http.Header{"Content-Type": {"application/json"}}
	for i := range 2 {
		if status, body := post(t, srv.URL()+"/chat/completions", h, oaRequest(oaUser)); status != http.StatusServiceUnavailable {
			t.Fatalf("request %d = %d %v, want 503", i, status, body)
		}
	}
	status, body := post(t, srv.URL()+"/chat/completions", h, oaRequest(oaUser))
	if status != http.StatusOK {
		t.Fatalf("third request = %d %v, want 200", status, body)
	}
	choice := body["choices"].([]any)[0].(map[string]any)
	msg := choice["message"].(map[string]any)
	call := msg["tool_calls"].([]any)[0].(map[string]any)
	if msg["content"] != "text" || call["id"] != "call_3_0" || choice["finish_reason"] != "tool_calls" {
		t.Errorf("reply = %v, want text and a call named after the request", body)
	}
	status, body = post(t, srv.URL()+"/chat/completions", h, oaRequest(oaUser))
	if status != http.StatusBadRequest || !strings.Contains(errorMessage(t, body), "script exhausted") {
		t.Errorf("request after the script = %d %v, want 400 script exhausted", status, body)
	}
	if status, _ := post(t, srv.URL()+"/embeddings", h, `{}`); status != http.StatusNotFound {
		t.Errorf("POST /v1/embeddings = %d, want 404", status)
	}
}

const (
	anTool     = `{"name":"http_request","input_schema":{"type":"object"}}`
	anUser     = `{"role":"user","content":"hi"}`
	anCalls    = `{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"tool_use","id":"a","name":"http_request","input":{}},{"type":"tool_use","id":"b","name":"http_request","input":{"x":1}}]}`
	anResults  = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"ra"},{"type":"tool_result","tool_use_id":"b","content":[{"type":"text","text":"rb"}]},{"type":"text","text":"and then?"}]}`
	anResultA  = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"ra"}]}`
	anResultB  = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"b","content":"rb"}]}`
	anAnswer   = `{"role":"assistant","content":"fine"}`
	anTextLast = `{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"a","content":"ra"},{"type":"tool_result","tool_use_id":"b","content":"rb"}]}`
)

// anImageResult answers anCalls, the first result with an image.
func anImageResult(mediaType, data string) string {
	return `{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":"ra"},` +
		`{"type":"image","source":{"type":"base64","media_type":"` + mediaType + `","data":"` + data + `"}}]},{"type":"tool_result","tool_use_id":"b","content":"rb"}]}`
}

func anRequest(msgs ...string) string {
	return `{"model":"m","max_tokens":100,"system":"sys","tools":[` + anTool + `],"messages":[` + strings.Join(msgs, ",") + `]}`
}

func TestAnthropicServerValidates(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		noVer   bool
		wantErr string
	}{
		{"plain", anRequest(anUser), false, ""},
		{"two calls answered in one turn", anRequest(anUser, anCalls, anResults, anAnswer, anUser), false, ""},
		{"results split over two turns", anRequest(anUser, anCalls, anResultA, anResultB), false, "immediately after: b"},
		{"two user turns in a row", anRequest(anUser, anUser), false, "roles must alternate"},
		{"one result missing", anRequest(anUser, anCalls, anResultA), false, "without `tool_result` blocks immediately after: b"},
		{"calls at the end", anRequest(anUser, anCalls), false, "without `tool_result` blocks immediately after: a, b"},
		{"result without a call", anRequest(anUser, anAnswer, anResultA), false, "unexpected `tool_use_id`"},
		{"text before results", anRequest(anUser, anCalls, anTextLast), false, "must come before"},
		{"system role in messages", anRequest(`{"role":"system","content":"s"}`, anUser), false, "'user' or 'assistant'"},
		{"assistant first", anRequest(anAnswer, anUser), false, "first message"},
		{"empty text", anRequest(`{"role":"user","content":[{"type":"text","text":" "}]}`), false, "non-whitespace"},
		{"empty content", anRequest(`{"role":"user","content":[]}`), false, "non-empty content"},
		{"tool_use input not an object", anRequest(anUser, `{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":"{}"}]}`, anResultA), false, "dictionary"},
		{"duplicate tool_use id", anRequest(anUser, anCalls, anResults, anCalls, anResults), false, "unique"},
		{"no max_tokens", `{"model":"m","messages":[` + anUser + `]}`, false, "max_tokens"},
		{"no model", `{"max_tokens":1,"messages":[` + anUser + `]}`, false, "model"},
		{"no version header", anRequest(anUser), true, "anthropic-version"},
		{"tool without schema", `{"model":"m","max_tokens":1,"tools":[{"name":"f"}],"messages":[` + anUser + `]}`, false, "input_schema"},
		{"top-level oneOf", `{"model":"m","max_tokens":1,"tools":[{"name":"f","input_schema":{"type":"object","oneOf":[{"properties":{}}]}}],"messages":[` + anUser + `]}`, false, "does not support oneOf, allOf, or anyOf at the top level"},
		{"top-level allOf", `{"model":"m","max_tokens":1,"tools":[{"name":"f","input_schema":{"allOf":[{"type":"object"}]}}],"messages":[` + anUser + `]}`, false, "does not support oneOf"},
		{"object without properties", `{"model":"m","max_tokens":1,"tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[` + anUser + `]}`, false, ""},
		{"temperature above 1", `{"model":"m","max_tokens":1,"temperature":1.5,"messages":[` + anUser + `]}`, false, "range: 0..1"},
		{"image in a result", anRequest(anUser, anCalls, anImageResult("image/png", pngData)), false, ""},
		{"image said to be another type", anRequest(anUser, anCalls, anImageResult("image/gif", pngData)), false, "does not match the provided media type image/gif"},
		{"image whose data is broken", anRequest(anUser, anCalls, anImageResult("image/png", brokenPNGData)), false, "Could not process image"},
		{"image of another type", anRequest(anUser, anCalls, anImageResult("image/svg+xml", "PHN2Zy8+")), false, "image/webp"},
		{"image that is not base64", anRequest(anUser, anCalls, anImageResult("image/png", "%%%")), false, "not valid base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewAnthropicServer(t, llmtest.Reply("ok"))
			h := http.Header{"Content-Type": {"application/json"}, "Anthropic-Version": {"2023-06-01"}}
			if tt.noVer {
				h.Del("Anthropic-Version")
			}
			status, body := post(t, srv.URL()+"/messages", h, tt.body)
			if tt.wantErr == "" {
				if status != http.StatusOK {
					t.Fatalf("POST %s = %d %v, want 200", tt.body, status, body)
				}
				return
			}
			if status != http.StatusBadRequest || body["type"] != "error" {
				t.Fatalf("POST %s = %d %v, want 400 in Anthropic's error shape", tt.body, status, body)
			}
			if msg := errorMessage(t, body); !strings.Contains(msg, tt.wantErr) {
				t.Errorf("POST %s: error %q, want it to mention %q", tt.body, msg, tt.wantErr)
			}
		})
	}
}

func TestAnthropicServerScript(t *testing.T) {
	srv := llmtest.NewAnthropicServer(t, llmtest.Reply("text", llmtest.Call("", "f", `{"a":1}`)))
	srv.FailNext(1, 529)
	h := http.Header{"Content-Type": {"application/json"}, "Anthropic-Version": {"2023-06-01"}}
	status, body := post(t, srv.URL()+"/messages", h, anRequest(anUser))
	if e, _ := body["error"].(map[string]any); status != 529 || e["type"] != "overloaded_error" {
		t.Fatalf("first request = %d %v, want 529 overloaded_error", status, body)
	}
	status, body = post(t, srv.URL()+"/messages", h, anRequest(anUser))
	if status != http.StatusOK {
		t.Fatalf("second request = %d %v, want 200", status, body)
	}
	content := body["content"].([]any)
	use := content[1].(map[string]any)
	if len(content) != 2 || use["id"] != "toolu_llmtest_2_0" || body["stop_reason"] != "tool_use" {
		t.Errorf("reply = %v, want text and a tool_use named after the request", body)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[1].System != "sys" || reqs[1].Messages[0].Content[0].Text != "hi" {
		t.Errorf("Requests() = %+v, want both requests parsed", reqs)
	}
}
