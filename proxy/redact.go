package proxy

import "regexp"

// Credentials as they can appear in text fasthttp logs about a request it
// could not read: header lines (raw, or quoted with \r\n escapes), the
// request line's query, a bare bearer token. Each value ends at a line
// end, an escape, a quote or whitespace where a header ends.
var (
	credentialHeader = regexp.MustCompile(`(?i)\b((?:proxy-)?authorization|x-api-key|x-goog-api-key|api-key)(\s*:?\s*)(?:(?:bearer|basic)\s+)?[^\\\r\n"\s]*`)
	credentialQuery  = regexp.MustCompile(`(?i)([?&](?:key|api_key|api-key|access_token)=)[^&\s"\\#]*`)
	bearerToken      = regexp.MustCompile(`(?i)\b(bearer\s+)[^\\\r\n"\s]+`)
)

// redactCredentials replaces every client credential in s with
// [redacted]: the values of Authorization, x-api-key and x-goog-api-key
// headers, ?key= in a URL, and any "Bearer <token>". It is for log lines
// only (fasthttp's), never the request path.
func redactCredentials(s string) string {
	s = credentialHeader.ReplaceAllString(s, "${1}${2}[redacted]")
	s = credentialQuery.ReplaceAllString(s, "${1}[redacted]")
	s = bearerToken.ReplaceAllString(s, "${1}[redacted]")
	return s
}
