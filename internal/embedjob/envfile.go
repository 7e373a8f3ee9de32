package embedjob

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	shellquote "github.com/kballard/go-shellquote"
)

// ParseEnvFile reads the GPU host's environment file: one KEY=VALUE per line;
// blank lines and lines starting with '#' are ignored; an optional leading
// "export " is dropped; a value in single quotes is literal, a value in double
// quotes takes the escapes \\ \" \n \t \$; an unquoted value ends at " #"
// (a trailing comment) and is trimmed. Keys are [A-Za-z_][A-Za-z0-9_]*.
// Later lines override earlier ones.
func ParseEnvFile(data []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	// A command template may be long; 1 MiB per line is far more than any.
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: want KEY=VALUE", n)
		}
		k = strings.TrimSpace(k)
		if !validEnvKey(k) {
			return nil, fmt.Errorf("line %d: invalid key %q", n, k)
		}
		val, err := parseEnvValue(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("line %d (%s): %w", n, k, err)
		}
		out[k] = val
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read env file: %w", err)
	}
	return out, nil
}

func validEnvKey(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if !(r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || (i > 0 && r >= '0' && r <= '9')) {
			return false
		}
	}
	return true
}

func parseEnvValue(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	switch v[0] {
	case '\'':
		end := strings.IndexByte(v[1:], '\'')
		if end < 0 {
			return "", errors.New("unterminated single quote")
		}
		if rest := strings.TrimSpace(v[end+2:]); rest != "" && !strings.HasPrefix(rest, "#") {
			return "", fmt.Errorf("text after the closing quote: %q", rest)
		}
		return v[1 : end+1], nil
	case '"':
		var b strings.Builder
		for i := 1; i < len(v); i++ {
			c := v[i]
			switch {
			case c == '\\' && i+1 < len(v):
				i++
				switch v[i] {
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				case '\\', '"', '$':
					b.WriteByte(v[i])
				default:
					b.WriteByte('\\')
					b.WriteByte(v[i])
				}
			case c == '"':
				if rest := strings.TrimSpace(v[i+1:]); rest != "" && !strings.HasPrefix(rest, "#") {
					return "", fmt.Errorf("text after the closing quote: %q", rest)
				}
				return b.String(), nil
			default:
				b.WriteByte(c)
			}
		}
		return "", errors.New("unterminated double quote")
	}
	if i := strings.Index(v, " #"); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v), nil
}

// LoadEnvFile reads and parses path; an empty path is an empty file.
func LoadEnvFile(path string) (map[string]string, error) {
	if path == "" {
		return map[string]string{}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read GPU env file: %w", err)
	}
	m, err := ParseEnvFile(data)
	if err != nil {
		return nil, fmt.Errorf("GPU env file %s: %w", path, err)
	}
	return m, nil
}

// SplitCommand tokenises a command template as POSIX shells and Python's
// shlex.split do (github.com/kballard/go-shellquote): words split at
// unquoted blanks (space, tab, newline); '…' is literal; "…" keeps blanks
// and takes \" \\ \$ \` escapes; a backslash outside quotes escapes the
// next character. No expansion of any kind happens: the program runs
// without a shell.
func SplitCommand(s string) ([]string, error) {
	return shellquote.Split(s)
}
