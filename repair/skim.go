package repair

// SkimGemini skims one Gemini content (one element of contents).
func SkimGemini(content []byte) Skim { return SkimOf(geminiRules{}, content) }

// SkimResponses skims one Responses input item.
func SkimResponses(item []byte) Skim { return SkimOf(responsesRules{}, item) }

// ValidGeminiSkims is ValidSkims.
func ValidGeminiSkims(skims []Skim) bool { return ValidSkims(skims) }

// ValidGeminiSkimsAt is ValidSkimsAt.
func ValidGeminiSkimsAt(n int, at func(int) *Skim) bool { return ValidSkimsAt(n, at) }

// ValidResponsesSkims is ValidSkims.
func ValidResponsesSkims(skims []Skim) bool { return ValidSkims(skims) }

// ValidResponsesSkimsAt is ValidSkimsAt.
func ValidResponsesSkimsAt(n int, at func(int) *Skim) bool { return ValidSkimsAt(n, at) }
