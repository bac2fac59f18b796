package proxy

import (
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/spool"
	"github.com/prometheus/client_golang/prometheus"
)

// storeFaultMetrics count what the store's faults did to turns.
type storeFaultMetrics struct {
	refused prometheus.Counter
}

func (m *serverMetrics) registerStoreFaults() {
	m.faults.refused = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_turns_not_stored_total",
		Help: "Turns the upstream answered whole that could be neither stored nor spooled; each client was told (an error event, a 503, an unclosed array)."})
	m.reg.MustRegister(m.faults.refused)
}

// countTurnRefused counts a whole answer whose turn could not be kept, and
// whose client is told so.
func (m *serverMetrics) countTurnRefused() { m.faults.refused.Inc() }

// registerSpool exposes the local journal's state when the store has one,
// and the turns acknowledged but kept nowhere: a relay never sends an
// answer's end before its turn is recorded, so those are only spooled
// finishes the store refused on replay (fenced by a newer lease); 0
// without a spool.
func (m *serverMetrics) registerSpool(st store.Store) {
	sp, ok := st.(interface{ Stats() spool.Stats })
	lost := func() float64 { return 0 }
	if ok {
		lost = func() float64 { return float64(sp.Stats().Lost) }
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "chronicle_turns_acknowledged_not_stored_total",
		Help: "Turns whose clients read a clean end that are kept nowhere (spooled finishes the store refused on replay); must stay 0."}, lost))
	if !ok {
		return
	}
	gauge := func(name, help string, f func(spool.Stats) float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(sp.Stats()) }))
	}
	counter := func(name, help string, f func(spool.Stats) float64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(sp.Stats()) }))
	}
	gauge("chronicle_spool_entries", "Writes in the local journal waiting for the store.", func(s spool.Stats) float64 { return float64(s.Entries) })
	gauge("chronicle_spool_bytes", "Size of the writes waiting in the local journal.", func(s spool.Stats) float64 { return float64(s.Bytes) })
	gauge("chronicle_spool_oldest_age_seconds", "Age of the oldest write waiting in the local journal (0 when none).", func(s spool.Stats) float64 {
		if s.Oldest.IsZero() {
			return 0
		}
		return time.Since(s.Oldest).Seconds()
	})
	counter("chronicle_spool_spooled_total", "Writes the store could not take that went to the local journal.", func(s spool.Stats) float64 { return float64(s.Spooled) })
	counter("chronicle_spool_replayed_total", "Journal writes applied to the store once it was back.", func(s spool.Stats) float64 { return float64(s.Replayed) })
	counter("chronicle_spool_replay_conflicts_total", "Journal writes the store refused on replay (a newer lease took the thread); dropped and logged.", func(s spool.Stats) float64 { return float64(s.Conflicts) })
	counter("chronicle_spool_full_total", "Writes refused by a full journal (their turns were not acknowledged).", func(s spool.Stats) float64 { return float64(s.Full) })
}
