package metrics

import (
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/prometheus/client_golang/prometheus"
)

// storeFaultMetrics count what the store's faults did to turns.
type storeFaultMetrics struct {
	refused prometheus.Counter
}

func (m *Metrics) registerStoreFaults() {
	m.faults.refused = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_turns_not_stored_total",
		Help: "Turns the upstream answered whole that could be neither stored nor spooled; each client was told (an error event, a 503, an unclosed array)."})
	m.reg.MustRegister(m.faults.refused)
}

// CountTurnRefused counts a whole answer whose turn could not be kept, and
// whose client is told so.
func (m *Metrics) CountTurnRefused() { m.faults.refused.Inc() }

// RegisterSpool exposes the local journal's state when the store has one
// (a store.Journal, such as store/spool), and the turns acknowledged but
// kept nowhere: a relay never sends an answer's end before its turn is
// recorded, so those are only spooled finishes the store refused on replay
// (fenced by a newer lease); 0 without a spool.
func (m *Metrics) RegisterSpool(st store.Store) {
	sp, ok := st.(store.Journal)
	lost := func() float64 { return 0 }
	if ok {
		lost = func() float64 { return float64(sp.Stats().Lost) }
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "chronicle_turns_acknowledged_not_stored_total",
		Help: "Turns whose clients read a clean end that are kept nowhere (spooled finishes the store refused on replay); must stay 0."}, lost))
	if !ok {
		return
	}
	gauge := func(name, help string, f func(store.JournalStats) float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(sp.Stats()) }))
	}
	counter := func(name, help string, f func(store.JournalStats) float64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(sp.Stats()) }))
	}
	gauge("chronicle_spool_entries", "Writes in the local journal waiting for the store.", func(s store.JournalStats) float64 { return float64(s.Entries) })
	gauge("chronicle_spool_bytes", "Size of the writes waiting in the local journal.", func(s store.JournalStats) float64 { return float64(s.Bytes) })
	gauge("chronicle_spool_oldest_age_seconds", "Age of the oldest write waiting in the local journal (0 when none).", func(s store.JournalStats) float64 {
		if s.Oldest.IsZero() {
			return 0
		}
		return time.Since(s.Oldest).Seconds()
	})
	counter("chronicle_spool_spooled_total", "Writes the store could not take that went to the local journal.", func(s store.JournalStats) float64 { return float64(s.Spooled) })
	counter("chronicle_spool_replayed_total", "Journal writes applied to the store once it was back.", func(s store.JournalStats) float64 { return float64(s.Replayed) })
	counter("chronicle_spool_replay_conflicts_total", "Journal writes the store refused on replay (a newer lease took the thread); dropped and logged.", func(s store.JournalStats) float64 { return float64(s.Conflicts) })
	counter("chronicle_spool_full_total", "Writes refused by a full journal (their turns were not acknowledged).", func(s store.JournalStats) float64 { return float64(s.Full) })
}
