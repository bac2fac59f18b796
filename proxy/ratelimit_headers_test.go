package proxy

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/limiter"
)

// TestRateLimitHeaders: every rate limit chronicle enforces (a
// connection's rpm and tpm, limits.per_tenant's rpm and tpm) is reported
// in the IETF form (RateLimit-Policy, RateLimit; draft-ietf-httpapi-
// ratelimit-headers-11) beside the x-ratelimit-* one, on an admitted
// request and on the 429 that refuses one. The limiter's clock stands
// still, so every value is exact; streams are held open on a mock gate
// where a settlement (which gives unused tokens back) would otherwise race
// the next request.
//
// The arithmetic (limiter.gcra): a request costs 1 of rpm and body/4 +
// max_tokens of tpm (chatBody 16 + 200, streamBody 19 + 200); with limit L
// one unit is 60s/L, r is L less what is charged, t the charge's time in
// whole seconds rounded up, and on a 429 at most Retry-After.
func TestRateLimitHeaders(t *testing.T) {
	type step struct {
		stream bool // streamBody held open on the gate, else chatBody
		status int
		want   map[string]string // "" = absent
	}
	cases := []struct {
		name  string
		cfg   string
		steps []step
	}{
		{
			name: "connection requests",
			cfg: `
connections:
  - {name: a, provider: openai, base_url: "${MOCK}", rate: {rpm: 2}}
`,
			steps: []step{
				{status: 200, want: map[string]string{
					"RateLimit-Policy":               `"requests";q=2;w=60`,
					"RateLimit":                      `"requests";r=1;t=30`,
					"X-Ratelimit-Remaining-Requests": "1",
					"X-Ratelimit-Reset-Requests":     "30s",
				}},
				{status: 200, want: map[string]string{
					"RateLimit-Policy": `"requests";q=2;w=60`,
					"RateLimit":        `"requests";r=0;t=60`,
				}},
				// Refused: the next request passes in 30s, so t says 30,
				// not the minute until the bucket is full.
				{status: 429, want: map[string]string{
					"Retry-After":                    "30",
					"RateLimit-Policy":               `"requests";q=2;w=60`,
					"RateLimit":                      `"requests";r=0;t=30`,
					"X-Ratelimit-Remaining-Requests": "0",
					"X-Ratelimit-Reset-Requests":     "1m0s",
				}},
			},
		},
		{
			name: "connection tokens",
			cfg: `
connections:
  - {name: a, provider: openai, base_url: "${MOCK}", rate: {tpm: 500, default_max_tokens: 200}}
`,
			steps: []step{
				// 219 tokens at 0.12s each: 26.28s.
				{stream: true, status: 200, want: map[string]string{
					"RateLimit-Policy":             `"tokens";q=500;qu="tokens";w=60`,
					"RateLimit":                    `"tokens";r=281;t=27`,
					"X-Ratelimit-Remaining-Tokens": "281",
					"X-Ratelimit-Limit-Requests":   "",
				}},
				{stream: true, status: 200, want: map[string]string{
					"RateLimit-Policy": `"tokens";q=500;qu="tokens";w=60`,
					"RateLimit":        `"tokens";r=62;t=53`,
				}},
				// 657 > 500: passes once 157 tokens came back, 18.84s.
				{stream: true, status: 429, want: map[string]string{
					"Retry-After":      "19",
					"RateLimit-Policy": `"tokens";q=500;qu="tokens";w=60`,
					"RateLimit":        `"tokens";r=62;t=19`,
				}},
			},
		},
		{
			name: "connection requests and tokens",
			cfg: `
connections:
  - {name: a, provider: openai, base_url: "${MOCK}", rate: {rpm: 60, tpm: 1000, default_max_tokens: 200}}
`,
			steps: []step{
				{stream: true, status: 200, want: map[string]string{
					"RateLimit-Policy": `"requests";q=60;w=60, "tokens";q=1000;qu="tokens";w=60`,
					"RateLimit":        `"requests";r=59;t=1, "tokens";r=781;t=14`,
				}},
			},
		},
		{
			name: "tenant requests beside the connection's",
			cfg: `
limits: {per_tenant: {rpm: 1}}
connections:
  - {name: a, provider: openai, base_url: "${MOCK}", rate: {rpm: 10}}
`,
			steps: []step{
				{status: 200, want: map[string]string{
					"RateLimit-Policy":           `"requests";q=10;w=60, "tenant-requests";q=1;w=60`,
					"RateLimit":                  `"requests";r=9;t=6, "tenant-requests";r=0;t=60`,
					"X-Ratelimit-Limit-Requests": "10",
				}},
				// The tenant refuses (the connection's request is given
				// back): the 429 names the limit that refused.
				{status: 429, want: map[string]string{
					"Retry-After":                "60",
					"RateLimit-Policy":           `"tenant-requests";q=1;w=60`,
					"RateLimit":                  `"tenant-requests";r=0;t=60`,
					"X-Ratelimit-Limit-Requests": "1",
				}},
			},
		},
		{
			name: "tenant tokens alone",
			cfg: `
limits: {per_tenant: {tpm: 1000}}
connections:
  - {name: a, provider: openai, base_url: "${MOCK}", rate: {default_max_tokens: 200}}
`,
			steps: []step{
				// 216 tokens at 0.06s each: 12.96s. The connection has no
				// limit, so no x-ratelimit-* (they speak of one key only).
				{status: 200, want: map[string]string{
					"RateLimit-Policy":           `"tenant-tokens";q=1000;qu="tokens";w=60`,
					"RateLimit":                  `"tenant-tokens";r=784;t=13`,
					"X-Ratelimit-Limit-Tokens":   "",
					"X-Ratelimit-Limit-Requests": "",
				}},
			},
		},
		{
			name: "no limits",
			cfg: `
connections:
  - {name: a, provider: openai, base_url: "${MOCK}"}
`,
			steps: []step{
				{status: 200, want: map[string]string{"RateLimit-Policy": "", "RateLimit": ""}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := startMock(t)
			t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
			rates := limiter.NewLocalRateLimiter(limiter.WithClock(func() time.Time { return t0 }))
			p := startProxyOpts(t, m, tc.cfg, Options{Rates: rates})
			defer m.Release("held")
			for i, st := range tc.steps {
				var resp *http.Response
				var body []byte
				if st.stream {
					resp = send(t, "POST", p.URL+"/a/v1/chat/completions", streamBody, "Authorization", "Bearer k", "X-Mock-Gate", "held")
					if resp.StatusCode != 200 {
						body, _ = io.ReadAll(resp.Body)
					}
					defer resp.Body.Close() // held open until the case ends
				} else {
					resp, body = do(t, "POST", p.URL+"/a/v1/chat/completions", chatBody, "Authorization", "Bearer k")
				}
				if resp.StatusCode != st.status {
					t.Fatalf("step %d: status %d, want %d: %s", i, resp.StatusCode, st.status, body)
				}
				for name, want := range st.want {
					got := resp.Header.Values(name)
					switch {
					case want == "" && len(got) > 0:
						t.Errorf("step %d: %s = %q, want none", i, name, got)
					case want != "" && (len(got) != 1 || got[0] != want):
						t.Errorf("step %d: %s = %q, want %q", i, name, got, want)
					}
				}
			}
		})
	}
}
