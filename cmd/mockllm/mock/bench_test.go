package mock

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// BenchmarkSyntheticStream measures the mock serving synthetic streams over
// loopback (client included), so a load benchmark can tell how much of its
// budget the mock takes.
func BenchmarkSyntheticStream(b *testing.B) {
	flavours := []struct {
		name, path string
		body       []byte
		header     []string
	}{
		{"openai", pathChat, []byte(`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`), nil},
		{"anthropic", pathAnthropic, []byte(`{"model":"claude-sonnet-4-5-20250929","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"hi"}]}`),
			[]string{"anthropic-version", "2023-06-01"}},
	}
	for _, fl := range flavours {
		for _, chunks := range []int{10, 200} {
			b.Run(fl.name+"/chunks="+strconv.Itoa(chunks), func(b *testing.B) {
				s, err := Start("127.0.0.1:0", Options{MaxRecorded: 1})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, s.URL()+fl.path, bytes.NewReader(fl.body))
						req.Header.Set("Authorization", "Bearer k")
						req.Header.Set("X-Mock-Scenario", "synthetic")
						req.Header.Set("X-Mock-Chunks", strconv.Itoa(chunks))
						for i := 0; i < len(fl.header); i += 2 {
							req.Header.Set(fl.header[i], fl.header[i+1])
						}
						resp, err := client.Do(req)
						if err != nil {
							b.Fatal(err)
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
			})
		}
	}
}
