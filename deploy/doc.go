// Package deploy holds Countersign's deployment files: the container image
// (Dockerfile), a Compose file for one machine, Kubernetes manifests
// (k8s/), the Slack app manifests for HTTP and Socket Mode, and an example
// policy and environment.
//
// The package has no code. Its tests parse every file here and check what
// Kubernetes, Compose and Slack need and what the bot expects: that
// selectors, ports, Secret and ConfigMap references line up, that probes
// hit /healthz and /readyz, that the Slack app has the scopes for the Web
// API methods the code calls, and that every variable the examples set is
// one the bot reads.
package deploy
