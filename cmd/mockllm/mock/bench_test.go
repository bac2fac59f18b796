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
	for _, chunks := range []int{10, 200} {
		b.Run("openai/chunks="+strconv.Itoa(chunks), func(b *testing.B) {
			s, err := Start("127.0.0.1:0", Options{MaxRecorded: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			body := []byte(`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, s.URL()+pathChat, bytes.NewReader(body))
					req.Header.Set("Authorization", "Bearer k")
					req.Header.Set("X-Mock-Scenario", "synthetic")
					req.Header.Set("X-Mock-Chunks", strconv.Itoa(chunks))
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
