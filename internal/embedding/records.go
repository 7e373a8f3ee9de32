package embedding

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
)

// FileRecord is what a family's manifest records of one file: its size,
// modification time and SHA-256 (the integrity record, written by every
// kinflow writer) and whether it is synthetic.
type FileRecord struct {
	Bytes     int64
	MtimeNs   int64
	SHA256    string
	Synthetic bool
}

// Hashed reports whether the record holds a hash (older caches and the
// reference's writers record none).
func (r FileRecord) Hashed() bool { return r.SHA256 != "" }

// ReadFileRecords returns the records of dir/manifest.json by seq id; a
// missing or unreadable manifest has none. The planner reads every family's
// manifest before each stage, so the entries are read with a scanner that
// decodes only the four fields it needs (a 10,000-entry manifest in a few
// milliseconds); anything it does not expect falls back to encoding/json.
func ReadFileRecords(dir string) map[string]FileRecord {
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return map[string]FileRecord{}
	}
	return parseFileRecords(b)
}

// parseFileRecords decodes a manifest's records (see ReadFileRecords).
func parseFileRecords(b []byte) map[string]FileRecord {
	if out, ok := scanFileRecords(b); ok {
		return out
	}
	var m struct {
		Entries map[string]json.RawMessage `json:"entries"`
	}
	out := map[string]FileRecord{}
	if json.Unmarshal(b, &m) != nil {
		return out
	}
	for sid, raw := range m.Entries {
		var e struct {
			Bytes     json.Number `json:"bytes"`
			MtimeNs   json.Number `json:"mtime_ns"`
			SHA256    any         `json:"sha256"`
			Synthetic any         `json:"synthetic"`
		}
		if json.Unmarshal(raw, &e) != nil {
			continue
		}
		r := FileRecord{Bytes: numberInt(string(e.Bytes)), MtimeNs: numberInt(string(e.MtimeNs))}
		r.SHA256, _ = e.SHA256.(string)
		r.Synthetic, _ = e.Synthetic.(bool)
		out[sid] = r
	}
	return out
}

// numberInt reads a JSON number as an integer (a float is truncated; 0 when
// it is not a number).
func numberInt(tok string) int64 {
	if v, err := strconv.ParseInt(tok, 10, 64); err == nil {
		return v
	}
	if f, err := strconv.ParseFloat(tok, 64); err == nil {
		return int64(f)
	}
	return 0
}

// jscan is a minimal JSON scanner over one document.
type jscan struct {
	b []byte
	i int
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// eat consumes c (after white space) and reports whether it was there.
func (s *jscan) eat(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *jscan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// str reads a string; escapes are decoded by encoding/json.
func (s *jscan) str() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	start := s.i
	escaped := false
	for j := start + 1; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			s.i = j + 1
			if !escaped {
				return string(s.b[start+1 : j]), true
			}
			var out string
			if json.Unmarshal(s.b[start:j+1], &out) != nil {
				return "", false
			}
			return out, true
		}
	}
	return "", false
}

// token reads a number or literal.
func (s *jscan) token() (string, bool) {
	s.ws()
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return string(s.b[start:s.i]), s.i > start
		}
		s.i++
	}
	return string(s.b[start:s.i]), s.i > start
}

// skip skips one value.
func (s *jscan) skip() bool {
	switch s.peek() {
	case '"':
		_, ok := s.str()
		return ok
	case '{':
		s.i++
		if s.eat('}') {
			return true
		}
		for {
			if _, ok := s.str(); !ok || !s.eat(':') || !s.skip() {
				return false
			}
			if s.eat(',') {
				continue
			}
			return s.eat('}')
		}
	case '[':
		s.i++
		if s.eat(']') {
			return true
		}
		for {
			if !s.skip() {
				return false
			}
			if s.eat(',') {
				continue
			}
			return s.eat(']')
		}
	case 0:
		return false
	}
	_, ok := s.token()
	return ok
}

// object calls field for each key of an object, positioned at its value;
// field consumes the value.
func (s *jscan) object(field func(key string) bool) bool {
	if !s.eat('{') {
		return false
	}
	if s.eat('}') {
		return true
	}
	for {
		k, ok := s.str()
		if !ok || !s.eat(':') || !field(k) {
			return false
		}
		if s.eat(',') {
			continue
		}
		return s.eat('}')
	}
}

// scanFileRecords is the fast path of parseFileRecords; ok is false when
// the document is not what it expects.
func scanFileRecords(b []byte) (map[string]FileRecord, bool) {
	s := &jscan{b: b}
	out := map[string]FileRecord{}
	ok := s.object(func(key string) bool {
		if key != "entries" || s.peek() != '{' {
			return s.skip()
		}
		return s.object(func(sid string) bool {
			if s.peek() != '{' {
				return s.skip()
			}
			var r FileRecord
			ok := s.object(func(field string) bool {
				if c := s.peek(); (c == '"' && field != "sha256") || c == '{' || c == '[' {
					return s.skip()
				}
				switch field {
				case "bytes", "mtime_ns":
					tok, ok := s.token()
					if !ok {
						return false
					}
					if field == "bytes" {
						r.Bytes = numberInt(tok)
					} else {
						r.MtimeNs = numberInt(tok)
					}
					return true
				case "sha256":
					if s.peek() != '"' {
						return s.skip()
					}
					v, ok := s.str()
					r.SHA256 = v
					return ok
				case "synthetic":
					tok, ok := s.token()
					r.Synthetic = tok == "true"
					return ok
				}
				return s.skip()
			})
			out[sid] = r
			return ok
		})
	})
	if !ok {
		return nil, false
	}
	s.ws()
	return out, s.i == len(s.b)
}
