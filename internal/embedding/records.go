package embedding

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
)

// FileRecord is what a family's manifest records of one file: its size,
// modification time, inode change time, inode number and SHA-256 (the
// integrity record, written by every kinflow writer) and whether it is
// synthetic. CtimeNs and Ino are 0 in records written before they were
// kept: such a record costs one hash, then holds them.
type FileRecord struct {
	Bytes     int64
	MtimeNs   int64
	CtimeNs   int64
	Ino       uint64
	SHA256    string
	Synthetic bool
	// MAC is the record's authentication code (hex; recordkey.go), empty
	// when none was written.
	MAC string
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
			CtimeNs   json.Number `json:"ctime_ns"`
			Ino       json.Number `json:"ino"`
			SHA256    any         `json:"sha256"`
			Synthetic any         `json:"synthetic"`
			MAC       any         `json:"mac"`
		}
		if json.Unmarshal(raw, &e) != nil {
			continue
		}
		r := FileRecord{Bytes: numberInt(string(e.Bytes)), MtimeNs: numberInt(string(e.MtimeNs)),
			CtimeNs: numberInt(string(e.CtimeNs)), Ino: uint64(numberInt(string(e.Ino)))}
		r.SHA256, _ = e.SHA256.(string)
		r.Synthetic, _ = e.Synthetic.(bool)
		r.MAC, _ = e.MAC.(string)
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

// strRaw reads a string without copying it when it has no escape. The
// closing quote and a backslash before it are found with bytes.IndexByte,
// not byte by byte: a manifest is mostly strings (hashes, names), and a
// plan of a large family scans tens of megabytes of them.
func (s *jscan) strRaw() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	start := s.i
	j := bytes.IndexByte(s.b[start+1:], '"')
	if j < 0 {
		return nil, false
	}
	end := start + 1 + j
	if bytes.IndexByte(s.b[start+1:end], '\\') >= 0 {
		// An escape: the first quote may be escaped; decode it all.
		str, ok := s.str()
		return []byte(str), ok
	}
	s.i = end + 1
	return s.b[start+1 : end], true
}

// tokenRaw reads a number or literal without copying it.
func (s *jscan) tokenRaw() ([]byte, bool) {
	s.ws()
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return s.b[start:s.i], s.i > start
		}
		s.i++
	}
	return s.b[start:s.i], s.i > start
}

// skip skips one value (without copying what it skips).
func (s *jscan) skip() bool {
	switch s.peek() {
	case '"':
		_, ok := s.strRaw()
		return ok
	case '{':
		s.i++
		if s.eat('}') {
			return true
		}
		for {
			if _, ok := s.strRaw(); !ok || !s.eat(':') || !s.skip() {
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
	_, ok := s.tokenRaw()
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

// objectRaw is object with the keys as byte slices (valid during field).
func (s *jscan) objectRaw(field func(key []byte) bool) bool {
	if !s.eat('{') {
		return false
	}
	if s.eat('}') {
		return true
	}
	for {
		k, ok := s.strRaw()
		if !ok || !s.eat(':') || !field(k) {
			return false
		}
		if s.eat(',') {
			continue
		}
		return s.eat('}')
	}
}

// rawRecord is one entry's record as scanned: SHA256 is the hex text, a
// slice of the document.
type rawRecord struct {
	Bytes, MtimeNs, CtimeNs int64
	Ino                     uint64
	SHA256                  []byte
	Synthetic               bool
	MAC                     []byte
}

// scanRecords calls fn for every entry of a manifest document without
// allocating per entry (sid and r.SHA256 are slices of b, valid during fn);
// ok is false when the document is not what it expects.
func scanRecords(b []byte, fn func(sid []byte, r rawRecord)) bool {
	return scanRecordsOf(b, nil, fn)
}

// scanRecordsOf is scanRecords for the entries whose sid want accepts (all
// when want is nil): any other entry is skipped with the same checks of
// its structure, its fields not decoded. A plan of 1,000 ids reads 1,000
// records of a manifest of 300,000.
func scanRecordsOf(b []byte, want func(sid []byte) bool, fn func(sid []byte, r rawRecord)) bool {
	s := &jscan{b: b}
	ok := s.object(func(key string) bool {
		if key != "entries" || s.peek() != '{' {
			return s.skip()
		}
		return s.objectRaw(func(sid []byte) bool {
			if s.peek() != '{' || (want != nil && !want(sid)) {
				return s.skip()
			}
			var r rawRecord
			ok := s.objectRaw(func(field []byte) bool {
				if c := s.peek(); (c == '"' && string(field) != "sha256" && string(field) != "mac") || c == '{' || c == '[' {
					return s.skip()
				}
				switch string(field) {
				case "bytes", "mtime_ns", "ctime_ns", "ino":
					tok, ok := s.tokenRaw()
					if !ok {
						return false
					}
					v := parseIntBytes(tok)
					switch string(field) {
					case "bytes":
						r.Bytes = v
					case "mtime_ns":
						r.MtimeNs = v
					case "ctime_ns":
						r.CtimeNs = v
					default:
						r.Ino = uint64(v)
					}
					return true
				case "sha256", "mac":
					if s.peek() != '"' {
						return s.skip()
					}
					v, ok := s.strRaw()
					if string(field) == "mac" {
						r.MAC = v
					} else {
						r.SHA256 = v
					}
					return ok
				case "synthetic":
					tok, ok := s.tokenRaw()
					r.Synthetic = string(tok) == "true"
					return ok
				}
				return s.skip()
			})
			if ok {
				fn(sid, r)
			}
			return ok
		})
	})
	if !ok {
		return false
	}
	s.ws()
	return s.i == len(s.b)
}

// parseIntBytes is numberInt without allocating for plain integers.
func parseIntBytes(tok []byte) int64 {
	var v int64
	neg := false
	for i, c := range tok {
		switch {
		case c == '-' && i == 0:
			neg = true
		case c >= '0' && c <= '9' && v < (1<<62)/10:
			v = v*10 + int64(c-'0')
		default:
			return numberInt(string(tok))
		}
	}
	if neg {
		return -v
	}
	return v
}

// scanFileRecords is the fast path of parseFileRecords; ok is false when
// the document is not what it expects.
func scanFileRecords(b []byte) (map[string]FileRecord, bool) {
	out := map[string]FileRecord{}
	ok := scanRecords(b, func(sid []byte, r rawRecord) {
		out[string(sid)] = FileRecord{Bytes: r.Bytes, MtimeNs: r.MtimeNs, CtimeNs: r.CtimeNs, Ino: r.Ino,
			SHA256: string(r.SHA256), Synthetic: r.Synthetic, MAC: string(r.MAC)}
	})
	if !ok {
		return nil, false
	}
	return out, true
}
