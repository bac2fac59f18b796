package redistest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// DumpAll reads every key on every master c reaches (SCAN) with its whole
// value, whatever its type: strings, hashes (fields and values), lists,
// sets, sorted sets (members), streams (ids, fields and values). Each
// value is its parts joined by NUL. Tests scan it for what must not be
// stored in clear.
func DumpAll(t testing.TB, c redis.UniversalClient) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	var mu sync.Mutex // masters are dumped in parallel
	dump := func(ctx context.Context, n redis.Cmdable) error {
		it := n.Scan(ctx, 0, "*", 1000).Iterator()
		for it.Next(ctx) {
			k := it.Val()
			var parts []string
			typ, err := n.Type(ctx, k).Result()
			if err != nil {
				return err
			}
			switch typ {
			case "string":
				v, err := n.Get(ctx, k).Result()
				if err != nil {
					return err
				}
				parts = append(parts, v)
			case "hash":
				m, err := n.HGetAll(ctx, k).Result()
				if err != nil {
					return err
				}
				for f, v := range m {
					parts = append(parts, f, v)
				}
			case "list":
				if parts, err = n.LRange(ctx, k, 0, -1).Result(); err != nil {
					return err
				}
			case "set":
				if parts, err = n.SMembers(ctx, k).Result(); err != nil {
					return err
				}
			case "zset":
				if parts, err = n.ZRange(ctx, k, 0, -1).Result(); err != nil {
					return err
				}
			case "stream":
				msgs, err := n.XRange(ctx, k, "-", "+").Result()
				if err != nil {
					return err
				}
				for _, m := range msgs {
					parts = append(parts, m.ID)
					for f, v := range m.Values {
						s, _ := v.(string)
						parts = append(parts, f, s)
					}
				}
			default:
				t.Errorf("DumpAll: key %q has type %q", k, typ)
			}
			mu.Lock()
			out[k] = strings.Join(parts, "\x00")
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return dump(ctx, n) })
	} else {
		err = dump(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}
