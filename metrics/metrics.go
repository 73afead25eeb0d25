// Package metrics holds Countersign's Prometheus metrics: a
// runner.Observer that counts runs, decisions and tool executions, a
// checkpoint store wrapper that times saves, and an HTTP middleware that
// times Slack acknowledgements. It knows nothing of Slack or Redis
// beyond the interfaces it wraps.
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/interrupt"
)

// Metrics are the bot's Prometheus metrics. It implements
// runner.Observer; Instrument wraps the Slack handler to time
// acknowledgements, and InstrumentStore the checkpoint store to time
// saves.
type Metrics struct {
	reg       *prometheus.Registry
	runs      *prometheus.CounterVec
	decisions *prometheus.CounterVec
	tools     *prometheus.CounterVec
	ack       *prometheus.HistogramVec
	saveTime  prometheus.Histogram
	saveBytes prometheus.Histogram
}

// New registers the metrics. pending, if not nil, reports the
// number of calls waiting for a person across all replicas; it is asked
// at each scrape.
func New(pending func(ctx context.Context) (int, error)) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_runs_total",
			Help: "Agent runs by event: started (a run began or resumed), paused, done, failed.",
		}, []string{"event"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_decisions_total",
			Help: "Decisions on tool calls by kind (approve, edit, reject, respond, mark_done, expire).",
		}, []string{"kind"}),
		tools: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_tool_executions_total",
			Help: "Tool executions by tool and outcome (done, failed).",
		}, []string{"tool", "outcome"}),
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
	m.reg.MustRegister(m.runs, m.decisions, m.tools, m.ack, m.saveTime, m.saveBytes,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	if pending != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "countersign_pending_approvals",
			Help: "Tool calls waiting for a person's decision, in all threads.",
		}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			n, err := pending(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		}))
	}
	return m
}

// Handler serves the metrics in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Instrument times how long next takes to answer each request, which for
// the Slack endpoints is the acknowledgement.
func (m *Metrics) Instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		next.ServeHTTP(w, r)
		m.ack.WithLabelValues(r.URL.Path).Observe(time.Since(start).Seconds())
	})
}

// RunStarted implements runner.Observer.
func (m *Metrics) RunStarted() { m.runs.WithLabelValues("started").Inc() }

// RunStopped implements runner.Observer.
func (m *Metrics) RunStopped(s graph.Status) { m.runs.WithLabelValues(s.String()).Inc() }

// Decided implements runner.Observer.
func (m *Metrics) Decided(k interrupt.Kind) { m.decisions.WithLabelValues(k.String()).Inc() }

// ToolFinished implements runner.Observer.
func (m *Metrics) ToolFinished(tool string, s agent.CallStatus) {
	m.tools.WithLabelValues(tool, s.String()).Inc()
}

// InstrumentStore times every checkpoint save of store and counts its
// bytes.
func (m *Metrics) InstrumentStore(store graph.Store) graph.Store {
	return timedStore{Store: store, m: m}
}

type timedStore struct {
	graph.Store
	m *Metrics
}

func (t timedStore) Save(ctx context.Context, cp *graph.Checkpoint) error {
	start := time.Now()
	err := t.Store.Save(ctx, cp)
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
