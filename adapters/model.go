package adapters

import (
	"strings"

	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// ResponseModel is the model an answer names (Turn.Model) from its raw
// JSON value v, copied: "" unless v is a string.
func ResponseModel(v string) string {
	if !rawjson.IsString(v) {
		return ""
	}
	return strings.Clone(rawjson.String(v))
}

// AppendResponseModel keeps the first model a stream names: dst, or when
// dst is empty the text of the raw JSON string v. An assembler calls it
// with the model member of each chunk that has one; it allocates only
// while dst grows to the model's length, once per reused assembler.
func AppendResponseModel(dst []byte, v string) []byte {
	if len(dst) > 0 || !rawjson.IsString(v) {
		return dst
	}
	return append(dst, rawjson.String(v)...)
}
