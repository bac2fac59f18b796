package repair

// SkimResponses skims one Responses input item.
func SkimResponses(item []byte) Skim { return SkimOf(responsesRules{}, item) }

// ValidResponsesSkims is ValidSkims.
func ValidResponsesSkims(skims []Skim) bool { return ValidSkims(skims) }

// ValidResponsesSkimsAt is ValidSkimsAt.
func ValidResponsesSkimsAt(n int, at func(int) *Skim) bool { return ValidSkimsAt(n, at) }
