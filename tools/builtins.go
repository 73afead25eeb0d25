package tools

import "net/http"

// Builtins returns the built-in tools configured from the policy (nil
// means the default policy): http_request calls only the hosts in its
// rule's allow_hosts. client is passed to http_request; nil means a
// default client. The registry decides which of them are offered.
func Builtins(p *Policy, client *http.Client) []Tool {
	if p == nil {
		p = DefaultPolicy()
	}
	rule, _ := p.RuleFor(HTTPRequestName)
	return []Tool{
		NewHTTPRequest(HTTPOptions{AllowHosts: rule.AllowHosts, Client: client}),
	}
}
