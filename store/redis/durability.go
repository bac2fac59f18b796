package redisstore

import (
	"context"
	"fmt"
	"strings"
)

// Durability reads the server's persistence settings and says what they
// guarantee for a finish Redis acknowledged (see docs/store-faults.md).
// On a Cluster it reads them from one node.
func (s *Store) Durability(ctx context.Context) (string, error) {
	cfg, err := s.c.ConfigGet(ctx, "append*").Result()
	if err != nil {
		return "", mapErr(err)
	}
	var min string
	if m, err := s.c.ConfigGet(ctx, "min-replicas-to-write").Result(); err == nil {
		min = m["min-replicas-to-write"]
	}
	var out string
	switch aof, fsync := cfg["appendonly"], cfg["appendfsync"]; {
	case aof != "yes":
		out = "redis: appendonly no: a restart of redis-server loses every stored turn"
	case fsync == "always":
		out = "redis: appendonly yes, appendfsync always: an acknowledged turn is on Redis's disk"
	case s.waitAOF.Load() == 1:
		out = fmt.Sprintf("redis: appendonly yes, appendfsync %s, WAITAOF: each finish waits for its fsync", fsync)
	default:
		out = fmt.Sprintf("redis: appendonly yes, appendfsync %s: a redis-server crash loses nothing acknowledged, a machine crash up to a second", fsync)
	}
	if min != "" && min != "0" {
		out += "; min-replicas-to-write " + min
	}
	return strings.TrimSpace(out), nil
}
