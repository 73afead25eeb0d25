// Package metrics holds Countersign's Prometheus metrics: a
// runner.Observer that counts runs, decisions and tool executions, a
// checkpoint store wrapper that times saves, a go-redis hook that counts
// what the bot asks of Redis, and an HTTP middleware that times Slack
// acknowledgements. It knows nothing of Slack, and of Redis only the
// client's hook interface.
package metrics

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
)

// Metrics are the bot's Prometheus metrics. It implements
// runner.Observer; Instrument wraps the Slack handler to time
// acknowledgements, InstrumentStore the checkpoint store to time saves,
// and ModelCalled times model calls. Every series a dashboard sums exists
// from the start, at zero. It is safe for concurrent use.
type Metrics struct {
	reg       *prometheus.Registry
	started   prometheus.Counter
	resumed   prometheus.Counter
	finished  *prometheus.CounterVec
	decisions *prometheus.CounterVec
	wait      prometheus.Histogram
	tools     *prometheus.CounterVec
	model     *prometheus.HistogramVec
	tokens    *prometheus.CounterVec
	ack       *prometheus.HistogramVec
	saveTime  prometheus.Histogram
	saveBytes prometheus.Histogram

	// The series updated at every run, decision, call and request,
	// looked up once (WithLabelValues hashes the labels at each call):
	// built by New and only read after, but for toolSeries.
	stoppedBy           map[graph.Status]prometheus.Counter
	decidedBy           map[agent.Kind]prometheus.Counter
	modelOK, modelError prometheus.Observer
	tokensIn, tokensOut prometheus.Counter
	ackBy               map[string]prometheus.Observer
	// toolSeries holds, by toolOutcome, each tool's execution counter:
	// MCP servers' tools come and go.
	toolSeries sync.Map
}

// toolOutcome labels a tool execution series.
type toolOutcome struct {
	tool   string
	status agent.CallStatus
}

// Options describe what the metrics are about.
type Options struct {
	// Version, Revision and GoVersion label countersign_build_info.
	Version, Revision, GoVersion string
	// Tools are the offered tools, whose execution series exist from the
	// start.
	Tools []string
	// Redis, if set, is the Redis client's cost hook, exported with the
	// rest.
	Redis *RedisCost
	// Now is the clock of the pending-approvals count's freshness; nil
	// means time.Now.
	Now func() time.Time
}

// New registers the metrics. pending, if not nil, reports the
// number of calls waiting for a person across all replicas; it is asked
// at a scrape, and its count stands for pendingFresh (see pendingGauge).
func New(pending func(ctx context.Context) (int, error), opts Options) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		started: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "countersign_runs_started_total",
			Help: "Agent runs begun: a request or a new turn in a thread.",
		}),
		resumed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "countersign_runs_resumed_total",
			Help: "Agent runs resumed: after decisions, a retry, a crash, a note.",
		}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_runs_stopped_total",
			Help: "Agent runs that stopped, by status: paused (for approval), done, failed.",
		}, []string{"status"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_decisions_total",
			Help: "Decisions on tool calls by kind (approve, edit, reject, respond, mark_done, expire).",
		}, []string{"kind"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "countersign_approval_wait_seconds",
			Help:    "How long a tool call waited for a person's decision, from its card to the decision.",
			Buckets: []float64{5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 7 * 86400},
		}),
		tools: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_tool_executions_total",
			Help: "Tool executions by tool and outcome (done, failed).",
		}, []string{"tool", "outcome"}),
		model: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "countersign_model_call_seconds",
			Help:    "Time of one model call (retries included), by outcome: ok or error.",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 20, 40, 80},
		}, []string{"outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_model_tokens_total",
			Help: "Tokens the model provider reported, by kind: input (the prompt) or output (the reply).",
		}, []string{"kind"}),
		ack: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "countersign_slack_ack_seconds",
			Help:    "Time to acknowledge a Slack request, by endpoint.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 3},
		}, []string{"endpoint"}),
		saveTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "countersign_checkpoint_save_seconds",
			Help:    "Time of one checkpoint save.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
		saveBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "countersign_checkpoint_save_bytes",
			Help:    "Bytes of state and new messages sent by one checkpoint save.",
			Buckets: prometheus.ExponentialBuckets(256, 2, 12),
		}),
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "countersign_build_info",
		Help:        "The running build: always 1, labelled with its version.",
		ConstLabels: prometheus.Labels{"version": opts.Version, "revision": opts.Revision, "goversion": opts.GoVersion},
	})
	info.Set(1)
	m.reg.MustRegister(m.started, m.resumed, m.finished, m.decisions, m.wait, m.tools, m.model, m.tokens, m.ack, m.saveTime, m.saveBytes, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every label value a dashboard sums over, at zero from the start;
	// those updated often are kept.
	m.stoppedBy = map[graph.Status]prometheus.Counter{}
	for _, s := range []graph.Status{graph.Paused, graph.Done, graph.Failed} {
		m.stoppedBy[s] = m.finished.WithLabelValues(s.String())
	}
	m.decidedBy = map[agent.Kind]prometheus.Counter{}
	for _, k := range []agent.Kind{agent.Approve, agent.Edit, agent.Reject, agent.Respond, agent.MarkDone, agent.Expire} {
		m.decidedBy[k] = m.decisions.WithLabelValues(k.String())
	}
	for _, t := range opts.Tools {
		m.toolCounter(t, agent.Done)
		m.toolCounter(t, agent.Failed)
	}
	m.ackBy = map[string]prometheus.Observer{}
	for _, r := range []string{"/slack/commands", "/slack/events", "/slack/interactions", "other"} {
		m.ackBy[r] = m.ack.WithLabelValues(r)
	}
	m.modelOK, m.modelError = m.model.WithLabelValues("ok"), m.model.WithLabelValues("error")
	m.tokensIn, m.tokensOut = m.tokens.WithLabelValues("input"), m.tokens.WithLabelValues("output")
	if r := opts.Redis; r != nil {
		m.reg.MustRegister(r.commands, r.roundTrips, r.bytes)
	}
	if pending != nil {
		now := opts.Now
		if now == nil {
			now = time.Now
		}
		m.reg.MustRegister(&pendingGauge{pending: pending, now: now, desc: prometheus.NewDesc("countersign_pending_approvals",
			"Tool calls waiting for a person's decision, in all threads.", nil, nil)})
	}
	return m
}

// pendingGauge is countersign_pending_approvals, counted at a scrape.
// When the count cannot be had (Redis does not answer) the scrape has no
// sample of it, rather than a number that is not one: a made-up -1 or 0
// would read as "nothing waits" on a dashboard or an alert, where a gap
// (absent() in PromQL) says what happened.
//
// /metrics answers whoever reaches the bot's port, and a count reads the
// whole inbox (one HVALS, about 90 bytes a waiting thread): it is not
// counted anew for every request. Scrapes at once share one count, and
// a count, or a failure to get one, stands for pendingFresh after it:
// however many requests come, the gauge costs Redis one read per
// pendingFresh, well within any scrape interval.
type pendingGauge struct {
	pending func(ctx context.Context) (int, error)
	now     func() time.Time
	desc    *prometheus.Desc

	mu   sync.Mutex // held while counting: scrapes at once wait for one count
	at   time.Time  // when the last count was had (zero: never)
	n    int
	okay bool // the last count was had; if not, no sample until it is stale
}

// pendingFresh is how long a count of the waiting calls stands.
const pendingFresh = 5 * time.Second

func (g *pendingGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *pendingGauge) Collect(ch chan<- prometheus.Metric) {
	n, ok := g.count()
	if ok {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(n))
	}
}

// count returns the last count while it stands, or counts again.
func (g *pendingGauge) count() (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := g.now(); g.at.IsZero() || now.Sub(g.at) >= pendingFresh || now.Before(g.at) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n, err := g.pending(ctx)
		cancel()
		g.at, g.n, g.okay = g.now(), n, err == nil
	}
	return g.n, g.okay
}

// Background exports busy as countersign_background_jobs: the jobs the
// Slack front end acknowledged and has not finished. Call it once.
func (m *Metrics) Background(busy func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "countersign_background_jobs",
		Help: "Work the Slack front end acknowledged and has not finished (runs, resumes, answers to clicks), queued or running.",
	}, func() float64 { return float64(busy()) }))
}

// Handler serves the metrics in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Instrument times how long next takes to answer each request, which for
// the Slack endpoints is the acknowledgement. The endpoint label is one
// of a fixed set (see routeLabel), so that requests to made-up paths
// cannot add series.
func (m *Metrics) Instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		next.ServeHTTP(w, r)
		m.ackBy[routeLabel(r.URL.Path)].Observe(time.Since(start).Seconds())
	})
}

// routeLabel is the endpoint label of a request path: the path of one of
// the Slack endpoints, or "other" for any other path.
func routeLabel(path string) string {
	switch path {
	case "/slack/commands", "/slack/events", "/slack/interactions":
		return path
	}
	return "other"
}

// RunStarted implements runner.Observer.
func (m *Metrics) RunStarted(resumed bool) {
	if resumed {
		m.resumed.Inc()
	} else {
		m.started.Inc()
	}
}

// RunStopped implements runner.Observer.
func (m *Metrics) RunStopped(s graph.Status) {
	c, ok := m.stoppedBy[s]
	if !ok {
		c = m.finished.WithLabelValues(s.String())
	}
	c.Inc()
}

// Decided implements runner.Observer.
func (m *Metrics) Decided(k agent.Kind, waited time.Duration) {
	c, ok := m.decidedBy[k]
	if !ok {
		c = m.decisions.WithLabelValues(k.String())
	}
	c.Inc()
	if waited > 0 {
		m.wait.Observe(waited.Seconds())
	}
}

// ModelCalled is the agent's OnModel hook: it times a model call and
// counts its tokens.
func (m *Metrics) ModelCalled(took time.Duration, usage *llm.Usage, err error) {
	series := m.modelOK
	if err != nil {
		series = m.modelError
	}
	series.Observe(took.Seconds())
	if usage != nil {
		m.tokensIn.Add(float64(usage.Input))
		m.tokensOut.Add(float64(usage.Output))
	}
}

// ToolFinished implements runner.Observer.
func (m *Metrics) ToolFinished(tool string, s agent.CallStatus) { m.toolCounter(tool, s).Inc() }

// toolCounter returns the execution counter of tool with outcome s,
// making its series if it does not exist yet.
func (m *Metrics) toolCounter(tool string, s agent.CallStatus) prometheus.Counter {
	key := toolOutcome{tool, s}
	if c, ok := m.toolSeries.Load(key); ok {
		return c.(prometheus.Counter)
	}
	c, _ := m.toolSeries.LoadOrStore(key, m.tools.WithLabelValues(tool, s.String()))
	return c.(prometheus.Counter)
}

// InstrumentStore times every checkpoint save of store and counts its
// bytes. The store it returns keeps the optional interfaces of store:
// when store is a graph.TailLoader, so is the instrumented one, and the
// engine still loads only the tail of a thread it has seen.
func (m *Metrics) InstrumentStore(store graph.Store) graph.Store {
	ts := timedStore{store: store, m: m}
	if tl, ok := store.(graph.TailLoader); ok {
		return timedTailStore{timedStore: ts, tail: tl}
	}
	return ts
}

// timedStore is a graph.Store whose saves are timed. It forwards the
// methods of graph.Store only, so it hides every optional interface of
// the store it wraps: timedTailStore forwards the one the engine looks
// for.
type timedStore struct {
	store graph.Store
	m     *Metrics
}

// Load implements graph.Store.
func (t timedStore) Load(ctx context.Context, thread string) (*graph.Checkpoint, error) {
	return t.store.Load(ctx, thread)
}

// History implements graph.Store.
func (t timedStore) History(ctx context.Context, thread string) ([]*graph.Checkpoint, error) {
	return t.store.History(ctx, thread)
}

// Journal implements graph.Store.
func (t timedStore) Journal(ctx context.Context, thread string, n int) ([]json.RawMessage, error) {
	return t.store.Journal(ctx, thread, n)
}

// timedTailStore is a timedStore over a graph.TailLoader.
type timedTailStore struct {
	timedStore
	tail graph.TailLoader
}

var (
	_ graph.Store      = timedStore{}
	_ graph.TailLoader = timedTailStore{}
)

// LoadTail implements graph.TailLoader by forwarding to the wrapped store.
func (t timedTailStore) LoadTail(ctx context.Context, thread, id string, seq int64, from int) (*graph.Checkpoint, error) {
	return t.tail.LoadTail(ctx, thread, id, seq, from)
}

func (t timedStore) Save(ctx context.Context, cp *graph.Checkpoint) error {
	start := time.Now()
	err := t.store.Save(ctx, cp)
	t.m.saveTime.Observe(time.Since(start).Seconds())
	if err == nil {
		n := len(cp.State)
		for _, e := range cp.Journal {
			n += len(e)
		}
		t.m.saveBytes.Observe(float64(n))
	}
	return err
}
