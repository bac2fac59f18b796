package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// storeFaultMetrics count what the store's faults did to turns: the turns
// whose end the client was told was not kept, and the turns acknowledged
// although they were kept nowhere (a relay that had already sent the
// answer's end when its finish failed); the second must stay 0.
type storeFaultMetrics struct {
	refused prometheus.Counter
	unacked prometheus.Counter
}

func (m *serverMetrics) registerStoreFaults() {
	m.faults.refused = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_turns_not_stored_total",
		Help: "Turns the upstream answered whole that could be neither stored nor spooled; each client was told (an error event or a 503)."})
	m.faults.unacked = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_turns_acknowledged_not_stored_total",
		Help: "Turns whose clients received a clean end although they were stored and spooled nowhere; must stay 0."})
	m.reg.MustRegister(m.faults.refused, m.faults.unacked)
}

// countTurnRefused counts a whole answer whose turn could not be kept, and
// whose client is told so.
func (m *serverMetrics) countTurnRefused() { m.faults.refused.Inc() }

// countAckedNotStored counts a turn whose client saw a clean end that is
// stored nowhere.
func (m *serverMetrics) countAckedNotStored() { m.faults.unacked.Inc() }
