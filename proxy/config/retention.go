package config

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Retention is the top-level `retention` section: how long a thread is
// kept after its last update, per tenant, before the background pass
// deletes it with everything it owns. A connection's own `retention`
// shortens it for the threads of that connection: a thread is kept for
// the shorter of its tenant's period (or Default) and its connection's.
type Retention struct {
	// Default applies to tenants not named in Tenants (default forever).
	Default Period `yaml:"default"`
	// Tenants are per-tenant periods, by tenant name (the clients'
	// tenant, or k-… derived from a key without clients).
	Tenants map[string]Period `yaml:"tenants"`
	// Interval is how often the pass runs (default 1h); one replica at a
	// time runs it, holding a lease in the store.
	Interval Duration `yaml:"interval"`
}

// Period is a retention period: a duration, or `forever` (0).
type Period time.Duration

// Forever keeps threads until they are deleted by hand.
const Forever Period = 0

// UnmarshalYAML parses "forever" or a duration such as 720h.
func (p *Period) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("want a duration such as 720h, or forever")
	}
	s = strings.TrimSpace(s)
	if s == "forever" {
		*p = Forever
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return fmt.Errorf("want a positive duration such as 720h, or forever, got %q", s)
	}
	*p = Period(v)
	return nil
}

// D is the period as a duration; 0 means forever.
func (p Period) D() time.Duration { return time.Duration(p) }

func (p Period) String() string {
	if p == Forever {
		return "forever"
	}
	return time.Duration(p).String()
}

// shorter is the shorter of a and b, forever being the longest.
func shorter(a, b Period) Period {
	switch {
	case a == Forever:
		return b
	case b == Forever:
		return a
	case b < a:
		return b
	}
	return a
}

// RetentionFor is how long a thread of tenant on connection is kept
// after its last update: the shorter of the tenant's period (or
// retention.default) and the connection's retention; Forever when both
// are forever. A connection the config does not name (it was renamed
// since) counts as forever.
func (c *Config) RetentionFor(tenant, connection string) Period {
	p, ok := c.Retention.Tenants[tenant]
	if !ok {
		p = c.Retention.Default
	}
	for i := range c.Connections {
		if cn := &c.Connections[i]; cn.Name == connection && cn.Retention != nil {
			p = shorter(p, *cn.Retention)
		}
	}
	return p
}

// ShortestRetention is the shortest period any thread of tenant can have
// (over its own period and every connection's), Forever when all are:
// the pass need look only at threads last updated before now minus it.
func (c *Config) ShortestRetention(tenant string) Period {
	p, ok := c.Retention.Tenants[tenant]
	if !ok {
		p = c.Retention.Default
	}
	for i := range c.Connections {
		if r := c.Connections[i].Retention; r != nil {
			p = shorter(p, *r)
		}
	}
	return p
}

// RetentionOn reports whether any thread can expire (some period is not
// forever): only then does the pass run.
func (c *Config) RetentionOn() bool {
	if c.Retention.Default != Forever {
		return true
	}
	for _, p := range c.Retention.Tenants {
		if p != Forever {
			return true
		}
	}
	for i := range c.Connections {
		if r := c.Connections[i].Retention; r != nil && *r != Forever {
			return true
		}
	}
	return false
}

// validateRetention checks the retention keys, naming each.
func (c *Config) validateRetention(bad func(key, format string, args ...any)) {
	const min = Period(time.Minute)
	check := func(key string, p Period) {
		if p != Forever && p < min {
			bad(key, "must be at least 1m (or forever), got %v", p)
		}
	}
	check("retention.default", c.Retention.Default)
	for t, p := range c.Retention.Tenants {
		if t == "" || strings.ContainsAny(t, " {}") {
			bad("retention.tenants", "%q is not a tenant name (no spaces or braces)", t)
		}
		check("retention.tenants."+t, p)
	}
	if d := c.Retention.Interval.D(); d < time.Minute || d > 24*time.Hour {
		bad("retention.interval", "must be between 1m and 24h, got %v", d)
	}
	for i := range c.Connections {
		if r := c.Connections[i].Retention; r != nil {
			check(fmt.Sprintf("connections[%d] (%s).retention", i, c.Connections[i].Name), *r)
		}
	}
}
