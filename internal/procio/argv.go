package procio

import "strings"

// QuoteArgv renders argv for a log as a POSIX shell would read it back:
// words with spaces or shell syntax single-quoted.
func QuoteArgv(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`;&|<>*?()[]{}#~!") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
